//! `berth bench --metering`: what sampling every sandbox once a second costs the daemon. Its CPU time (from
//! /proc) over a window with no sandboxes, then over the same window with `--idle` idle sandboxes; the
//! difference, per sandbox per minute, is the cost of metering them (and of the reaper's look at them, which
//! runs either way).

use std::path::Path;
use std::time::Instant;

use berth_api::{CreateSandbox, Sandbox};
use berth_client::{Client, segment};
use serde_json::json;

use crate::BenchArgs;
use crate::daemon::{clock_ticks, find_daemon, stat_field};

/// The daemon's CPU seconds over `window`.
fn cpu_over(pid: i32, window: std::time::Duration) -> anyhow::Result<(f64, f64)> {
    let ticks = || -> anyhow::Result<u64> {
        stat_field(pid, 11)
            .zip(stat_field(pid, 12))
            .map(|(u, s)| u + s)
            .ok_or_else(|| anyhow::anyhow!("cannot read the daemon's CPU time in /proc/{pid}/stat"))
    };
    let before = ticks()?;
    let t = Instant::now();
    std::thread::sleep(window);
    let after = ticks()?;
    Ok(((after.saturating_sub(before)) as f64 / clock_ticks(), t.elapsed().as_secs_f64()))
}

pub fn bench_meter(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let daemon = find_daemon(socket, args.daemon_pid)?;
    let client = Client::connect(socket)?;
    let (_, body) = client.get("/v1/sandboxes")?;
    let existing: Vec<Sandbox> = serde_json::from_slice(&body)?;
    anyhow::ensure!(existing.is_empty(), "the daemon has {} sandboxes: measure on an empty one", existing.len());
    let (base_cpu, base_s) = cpu_over(daemon.pid, args.window)?;
    let mut ids = Vec::new();
    let measured = (|| -> anyhow::Result<(f64, f64)> {
        for _ in 0..args.idle {
            let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
            ids.push(serde_json::from_slice::<Sandbox>(&body)?.id);
        }
        // Let the creates' own work end before the window opens.
        std::thread::sleep(std::time::Duration::from_secs(3));
        cpu_over(daemon.pid, args.window)
    })();
    for id in &ids {
        let _ = Client::connect(socket).and_then(|c| c.delete(&format!("/v1/sandboxes/{}", segment(id))));
    }
    let (cpu, secs) = measured?;
    let n = args.idle.max(1) as f64;
    let per_minute = |cpu: f64, secs: f64| cpu / secs * 60.0;
    let extra = (per_minute(cpu, secs) - per_minute(base_cpu, base_s)).max(0.0);
    let per_sandbox_ms = extra / n * 1000.0;
    let report = json!({
        "sandboxes": args.idle, "window_seconds": secs,
        "daemon_cpu_seconds_per_minute_empty": per_minute(base_cpu, base_s),
        "daemon_cpu_seconds_per_minute_with_sandboxes": per_minute(cpu, secs),
        "daemon_cpu_ms_per_sandbox_per_minute": per_sandbox_ms,
        "clock_tick_seconds": 1.0 / clock_ticks(),
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "daemon CPU: {:.3} s/min empty, {:.3} s/min with {} idle sandboxes over {secs:.0} s: \
             {per_sandbox_ms:.2} ms of daemon CPU per sandbox per minute",
            per_minute(base_cpu, base_s),
            per_minute(cpu, secs),
            args.idle
        );
    }
    Ok(0)
}
