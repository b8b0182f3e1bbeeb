//! `berth journal`: every action taken on a sandbox, and a check that the record was not altered.

use std::path::Path;

use berth_client::Client;

use super::output;
use crate::cli::JournalArgs;

pub fn journal(socket: &Path, args: JournalArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let path = format!(
        "/v1/sandboxes/{}/journal{}",
        berth_client::segment(&args.id),
        if args.verify { "?verify=true" } else { "" }
    );
    let (_, body) = client.get(&path)?;
    if args.json {
        output::print_raw(&body)?;
    }
    let value: serde_json::Value = serde_json::from_slice(&body)?;
    if args.verify {
        let ok = value["ok"].as_bool().unwrap_or(false);
        if !args.json {
            match &value["first_bad"] {
                serde_json::Value::Array(bad) if !ok => {
                    println!(
                        "journal of {} FAILS verification at record {}: {}",
                        args.id,
                        bad[0],
                        bad[1].as_str().unwrap_or("")
                    );
                }
                _ => println!("journal of {} verifies: {} records, hash chain intact", args.id, value["records"]),
            }
        }
        return Ok(if ok { 0 } else { 1 });
    }
    if !args.json {
        for r in value.as_array().into_iter().flatten() {
            println!(
                "{:>4}  {}  {:<14} {}  -> {}",
                r["seq"],
                r["time_ms"],
                r["action"].as_str().unwrap_or(""),
                r["args"],
                r["result"]
            );
        }
    }
    Ok(0)
}
