//! `berth ps`: the execs of one sandbox, running and ended.

use std::path::Path;

use berth_api::ExecInfo;
use berth_client::Client;

use super::output;
use crate::cli::PsArgs;

pub fn ps(socket: &Path, args: PsArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.get(&format!("/v1/sandboxes/{}/execs", berth_client::segment(&args.id)))?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let execs: Vec<ExecInfo> = output::list(&body, "execs")?;
    let rows: Vec<Vec<String>> = execs
        .iter()
        .map(|e| vec![e.exec_id.clone(), state(e).to_string(), exit_code(e), output::shell_words(&e.argv)])
        .collect();
    output::print_table(&["EXEC", "STATE", "EXIT", "COMMAND"], &rows)?;
    Ok(0)
}

fn state(e: &ExecInfo) -> &'static str {
    match &e.result {
        _ if e.running => "running",
        None => "ended",
        Some(r) if r.error.is_some() => "failed",
        Some(r) if r.timed_out => "timed out",
        Some(r) if r.killed => "killed",
        Some(_) => "exited",
    }
}

fn exit_code(e: &ExecInfo) -> String {
    match &e.result {
        Some(r) if !e.running => r.exit_code.to_string(),
        _ => "-".into(),
    }
}
