//! `berth bench --fork-processes`: forks through the daemon's API of a sandbox holding 64 MiB of touched
//! memory in a running program: of its files only, with its processes into one child and into four, and the
//! first exec in a child, round by round (a new sandbox each).

use std::path::Path;
use std::time::Instant;

use berth_api::{CreateSandbox, ForkRequest, Forked, Sandbox};
use berth_client::Client;

use crate::BenchArgs;
use crate::hibernate::{exec, ms, start_holder};

/// 64 MiB of memory, every page written, then a marker file, then nothing.
const HOLDER: &str =
    "import os, sys, time\nb = bytearray(os.urandom(1 << 20)) * 64\nopen(sys.argv[1], 'w').close()\ntime.sleep(1e9)\n";

/// What one round measured (ms), and the checkpoint's size.
struct Round {
    files: f64,
    one: f64,
    four: f64,
    first_exec: f64,
    checkpoint: f64,
    image_bytes: u64,
}

pub fn bench_fork_processes(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let criu = berth_runtime::checkpoint::Criu::find(None).map_err(anyhow::Error::msg)?;
    let rounds = args.runs.clamp(1, 20);
    let mut all = vec![];
    for _ in 0..rounds {
        all.push(round(socket)?);
    }
    let med = |f: fn(&Round) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (files, one, four) = (med(|r| r.files), med(|r| r.one), med(|r| r.four));
    let (first, checkpoint) = (med(|r| r.first_exec), med(|r| r.checkpoint));
    let mib = all.last().map_or(0.0, |r| r.image_bytes as f64 / f64::from(1 << 20));
    let report = serde_json::json!({
        "rounds": rounds, "memory_mib": 64, "fork_files_ms": files, "fork_processes_1_ms": one,
        "fork_processes_4_ms": four, "checkpoint_ms": checkpoint, "first_exec_in_child_ms": first,
        "image_mib": mib, "criu": criu.version,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{rounds} rounds, medians; a sandbox holding 64 MiB of touched memory in a running program");
        println!("  fork of its files, 1 child                {files:8.1} ms");
        println!("  fork with processes, 1 child              {one:8.1} ms   (checkpoint {checkpoint:.1} ms)");
        println!("  fork with processes, 4 children           {four:8.1} ms");
        println!("  first exec in a child                     {first:8.1} ms");
        println!("  checkpoint on disk (init's binary too)     {mib:8.1} MiB");
    }
    Ok(0)
}

/// Fork `id` into `count` children (ms), which are added to `made`.
fn fork(socket: &Path, id: &str, count: u32, with_processes: bool, made: &mut Vec<String>) -> anyhow::Result<f64> {
    let req = ForkRequest { count: Some(count), with_processes };
    let t = Instant::now();
    let (status, body) = Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/fork"), &req)?;
    let took = ms(t);
    anyhow::ensure!(status == 201, "fork: {}", String::from_utf8_lossy(&body));
    let forked: Forked = serde_json::from_slice(&body)?;
    made.extend(forked.sandboxes.iter().map(|s| s.id.clone()));
    anyhow::ensure!(forked.sandboxes.len() == count as usize, "the fork made {} of {count}", forked.sandboxes.len());
    Ok(took)
}

/// The checkpoint's time and size of the last fork in `id`'s journal.
fn last_checkpoint(socket: &Path, id: &str) -> anyhow::Result<(f64, u64)> {
    let (_, body) = Client::connect(socket)?.get(&format!("/v1/sandboxes/{id}/journal"))?;
    let journal: serde_json::Value = serde_json::from_slice(&body)?;
    let last = journal.as_array().and_then(|a| a.iter().rev().find(|e| e["action"] == "fork")).cloned();
    let result = last.map(|e| e["result"].clone()).unwrap_or_default();
    Ok((result["checkpoint_ms"].as_f64().unwrap_or(0.0), result["image_bytes"].as_u64().unwrap_or(0)))
}

fn round(socket: &Path) -> anyhow::Result<Round> {
    let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let sb: Sandbox = serde_json::from_slice(&body)?;
    let id = sb.id;
    let mut made = vec![];
    let result = (|| {
        start_holder(socket, &id, HOLDER)?;
        let files = fork(socket, &id, 1, false, &mut made)?;
        let one = fork(socket, &id, 1, true, &mut made)?;
        let (checkpoint, image_bytes) = last_checkpoint(socket, &id)?;
        let child = made.last().cloned().unwrap_or_default();
        let t = Instant::now();
        anyhow::ensure!(exec(socket, &child, &["true"])? == 0, "an exec in the forked child failed");
        let first_exec = ms(t);
        anyhow::ensure!(exec(socket, &child, &["pgrep", "-f", "holder.py"])? == 0, "the child lost the program");
        let four = fork(socket, &id, 4, true, &mut made)?;
        Ok(Round { files, one, four, first_exec, checkpoint, image_bytes })
    })();
    for c in made.iter().chain([&id]) {
        let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{c}"));
    }
    result
}
