//! `berth ls`: the daemon's sandboxes.

use std::path::Path;

use berth_api::{Sandbox, SandboxState};
use berth_client::Client;

use super::output;
use crate::cli::LsArgs;

pub fn ls(socket: &Path, args: LsArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.get("/v1/sandboxes")?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let sandboxes: Vec<Sandbox> = output::list(&body, "sandboxes")?;
    let now = output::now_ms();
    let rows: Vec<Vec<String>> = sandboxes
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.name.clone(),
                state(s.state).to_string(),
                output::age(s.created_at_ms, now),
                s.image.clone(),
                s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","),
            ]
        })
        .collect();
    output::print_table(&["ID", "NAME", "STATE", "AGE", "IMAGE", "LABELS"], &rows)?;
    Ok(0)
}

fn state(s: SandboxState) -> &'static str {
    match s {
        SandboxState::Creating => "creating",
        SandboxState::Running => "running",
        SandboxState::Paused => "paused",
        SandboxState::Hibernated => "hibernated",
        SandboxState::Stopping => "stopping",
        SandboxState::Stopped => "stopped",
        SandboxState::Gone => "gone",
    }
}
