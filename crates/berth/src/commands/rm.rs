//! `berth rm`: remove sandboxes, saying what removing each one took.

use std::path::Path;

use berth_api::{Sandbox, Teardown};
use berth_client::Client;

use super::output;
use crate::cli::RmArgs;
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
        let body = match client.delete(&format!("/v1/sandboxes/{}", berth_client::segment(id))) {
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
            berth_client::decode(&body)?
        };
        if args.json {
            done.push(serde_json::to_value(&teardown)?);
        } else {
            print_receipt(&teardown);
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

/// A receipt, for people: what each step did, the outputs with their digests, the leak check.
fn print_receipt(r: &Teardown) {
    println!("removed {}{}", r.id, if r.name.is_empty() { String::new() } else { format!(" ({})", r.name) });
    if !r.reason.is_empty() {
        println!("  reason: {}", r.reason);
    }
    for step in &r.steps {
        println!("  {step}");
    }
    for o in &r.outputs {
        println!("  output {} sha256:{} {} bytes -> {}", o.path, o.sha256, o.bytes, o.saved_as);
    }
    if let Some(p) = &r.patch {
        println!("  patch sha256:{} {} bytes -> {}", p.sha256, p.bytes, p.saved_as);
    }
    for what in &r.revoked {
        println!("  revoked {what}");
    }
    println!("  leak check: {}", if r.clean { "clean".to_string() } else { r.leftovers.join("; ") });
}

/// `berth receipt ID`: a removed sandbox's receipt.
pub fn receipt(socket: &Path, args: crate::cli::IdArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.get(&format!("/v1/sandboxes/{}/receipt", berth_client::segment(&args.id)))?;
    if args.json {
        output::print_raw(&body)?;
    } else {
        print_receipt(&berth_client::decode::<Teardown>(&body)?);
    }
    Ok(0)
}
