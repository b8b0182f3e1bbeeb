//! `berth bench --exec`: the round trip of `exec true` on a running sandbox, through the daemon's API (an
//! in-process client, one connection per exec, as a CLI makes) and through the `berth exec` CLI, against
//! `nsenter` joining the same sandbox's namespaces and running `true`. Then the daemon's output throughput and
//! the cost of idle sandboxes (`daemon`), and the lifecycle throughput under concurrent clients.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use berth_api::{CreateSandbox, ExecRequest, Sandbox};
use berth_client::Client;

use crate::BenchArgs;
use crate::daemon::{self, DaemonBenchOpts};

pub fn bench_exec(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let opts = DaemonBenchOpts { bytes: args.bytes, idle: args.idle, daemon_pid: args.daemon_pid, pause: false };
    let daemon = daemon::find_daemon(socket, opts.daemon_pid)?;
    let client = Client::connect(socket)?;
    let create = CreateSandbox { isolation: Some(args.isolation), ..CreateSandbox::default() };
    let (_, body) = client.post_json("/v1/sandboxes", &create)?;
    let sandbox: Sandbox = serde_json::from_slice(&body)?;
    if args.isolation == berth_api::Isolation::Gvisor {
        let report = measure(socket, &sandbox, &args);
        let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sandbox.id));
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report?)?);
        }
        return Ok(0);
    }
    let result = measure(socket, &sandbox, &args).and_then(|report| {
        let output = daemon::output_throughput(socket, &sandbox, &daemon, &opts, args.json)?;
        Ok((report, output))
    });
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sandbox.id));
    let (mut report, output) = result?;
    let idle = daemon::idle_cost(socket, &daemon, &opts, args.json)?;
    if args.json {
        report["output"] = output;
        report["idle"] = idle;
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    lifecycle_load(socket, 20, 10)
}

/// `clients` threads, each creating a sandbox, running `true` in it and removing it, `rounds` times: the
/// lifecycle throughput of the daemon under concurrency.
fn lifecycle_load(socket: &Path, clients: usize, rounds: usize) -> anyhow::Result<i32> {
    let start = Instant::now();
    let first_exec = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    for _ in 0..rounds {
                        let t = Instant::now();
                        let (_, body) =
                            Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
                        let sb: Sandbox = serde_json::from_slice(&body)?;
                        let req = ExecRequest { argv: vec!["true".into()], ..ExecRequest::default() };
                        let mut stream = Client::connect(socket)?
                            .post_json_stream(&format!("/v1/sandboxes/{}/execs", sb.id), &req)?;
                        while stream.next_line()?.is_some() {}
                        if let Ok(mut v) = first_exec.lock() {
                            v.push(t.elapsed().as_secs_f64() * 1000.0);
                        }
                        Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sb.id))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a load client panicked"))??;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let mut lat = first_exec.into_inner().unwrap_or_default();
    let total = clients * rounds;
    println!(
        "\n{clients} concurrent clients x {rounds} (create, exec true, rm): {:.0} sandboxes/s; create-to-first-exec median {:.1} ms, p90 {:.1} ms",
        total as f64 / secs,
        median(&mut lat),
        lat.get(lat.len() * 9 / 10).copied().unwrap_or(0.0)
    );
    Ok(0)
}

/// The medians of the three cases, as JSON; printed as a table too unless `--json`.
fn measure(socket: &Path, sandbox: &Sandbox, args: &BenchArgs) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe()?;
    let pid = sandbox.pid.unwrap_or(0).to_string();
    let gvisor = sandbox.isolation == berth_api::Isolation::Gvisor;
    let state = berth_runtime::gvisor::root_in_supervisor().with_file_name("runsc");
    let peer = |c: &mut Command| -> anyhow::Result<f64> {
        match gvisor {
            false => time(c.args(["-t", &pid, "-a", "true"])),
            true => {
                let runsc = berth_runtime::gvisor::runsc().map_err(anyhow::Error::msg)?;
                time(
                    c.args(["-t", &pid, "-m", "--"])
                        .arg(&runsc.path)
                        .arg(format!("--root={}", state.display()))
                        .args(["exec", &sandbox.id, "true"]),
                )
            }
        }
    };
    let peer_name = if gvisor { "runsc exec (same sandbox)" } else { "nsenter -t PID -a true" };
    let mut api = Vec::new();
    let mut cli = Vec::new();
    let mut nsenter = Vec::new();
    for round in 0..args.warmup + args.runs {
        // Each case goes first in a third of the rounds: what one leaves behind (a process still being reaped
        // inside gVisor after runsc exec returns) is not always the same one's cost.
        let mut took = [0.0f64; 3];
        for k in 0..3 {
            let case = (round + k) % 3;
            took[case] = match case {
                0 => {
                    let t = Instant::now();
                    crate::first_exec::exec_true(socket, &sandbox.id)?;
                    t.elapsed().as_secs_f64() * 1000.0
                }
                1 => time(Command::new(&exe).arg("--socket").arg(socket).args(["exec", &sandbox.id, "--", "true"]))?,
                _ => peer(&mut Command::new("nsenter"))?,
            };
        }
        if round >= args.warmup {
            api.push(took[0]);
            cli.push(took[1]);
            nsenter.push(took[2]);
        }
    }
    let (a, c, n) = (median(&mut api), median(&mut cli), median(&mut nsenter));
    if !args.json {
        println!("{} interleaved runs of each; exec true on one running {} sandbox\n", args.runs, sandbox.isolation);
        println!("{:<28} {:>10}", "case", "median ms");
        println!("{:<28} {:>10.2}", "API (in-process client)", a);
        println!("{:<28} {:>10.2}", "berth exec (CLI process)", c);
        println!("{:<28} {:>10.2}", peer_name, n);
        println!("\nAPI / peer: {:.2}x   CLI / peer: {:.2}x", a / n, c / n);
    }
    Ok(serde_json::json!({
        "runs": args.runs, "isolation": sandbox.isolation, "peer": peer_name,
        "api_median_ms": a, "cli_median_ms": c, "nsenter_median_ms": n,
        "api_over_nsenter": a / n, "cli_over_nsenter": c / n,
    }))
}

fn time(cmd: &mut Command) -> anyhow::Result<f64> {
    let t = Instant::now();
    let status = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    anyhow::ensure!(status.success(), "{cmd:?} failed during the benchmark");
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
