//! `berth rm`: remove sandboxes, saying what removing each one took.

use std::path::Path;

use berth_api::{Sandbox, Teardown};

use super::output;
use crate::cli::RmArgs;
use crate::client::{self, Client};
use crate::exit;

pub fn rm(socket: &Path, args: RmArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let ids = if args.all {
        let (_, body) = client.get("/v1/sandboxes")?;
        output::list::<Sandbox>(&body, "sandboxes")?.into_iter().map(|s| s.id).collect()
    } else {
        args.ids
    };
    let mut failed = false;
    let mut done: Vec<serde_json::Value> = Vec::new();
    for id in &ids {
        let body = match client.delete(&format!("/v1/sandboxes/{}", client::segment(id))) {
            Ok((_, body)) => body,
            // Listed a moment ago but gone now: someone else (or its TTL) removed it.
            Err(e) if args.all && e.is_not_found() => continue,
            Err(e) => {
                eprintln!("berth: {id}: {e}");
                failed = true;
                continue;
            }
        };
        // A daemon may answer 204 with nothing to say.
        let teardown: Teardown = if body.iter().all(u8::is_ascii_whitespace) {
            Teardown { id: id.clone(), ..Teardown::default() }
        } else {
            client::decode(&body)?
        };
        if args.json {
            done.push(serde_json::to_value(&teardown)?);
        } else {
            println!("removed {}", teardown.id);
            for step in &teardown.steps {
                println!("  {step}");
            }
        }
        if !teardown.leftovers.is_empty() {
            eprintln!("berth: {}: not everything was cleaned up: {}", teardown.id, teardown.leftovers.join("; "));
            failed = true;
        }
    }
    if args.json {
        println!("{}", serde_json::to_string(&done)?);
    }
    Ok(if failed { exit::BERTH_FAILED } else { 0 })
}
