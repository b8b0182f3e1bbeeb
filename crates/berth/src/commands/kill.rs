//! `berth kill`: kill an exec and everything it started.

use std::path::Path;

use berth_client::Client;

use super::output;
use crate::cli::KillArgs;

pub fn kill(socket: &Path, args: KillArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let path =
        format!("/v1/sandboxes/{}/execs/{}", berth_client::segment(&args.id), berth_client::segment(&args.exec_id));
    let (_, body) = client.delete(&path)?;
    if args.json {
        output::print_raw(if body.is_empty() { b"{}" } else { &body })?;
    } else {
        println!("{}", args.exec_id);
    }
    Ok(0)
}
