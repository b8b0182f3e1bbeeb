//! `berth bench --exec`: the round trip of `exec true` on a running sandbox, through the daemon's API (an
//! in-process client, one connection per exec, as a CLI makes) and through the `berth exec` CLI, against
//! `nsenter` joining the same sandbox's namespaces and running `true`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use berth_api::{CreateSandbox, ExecFrame, ExecRequest, Sandbox};

use crate::cli::BenchArgs;
use crate::client::Client;

pub fn bench_exec(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let sandbox: Sandbox = serde_json::from_slice(&body)?;
    let result = measure(socket, &sandbox, &args);
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sandbox.id));
    result
}

fn measure(socket: &Path, sandbox: &Sandbox, args: &BenchArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe()?;
    let pid = sandbox.pid.unwrap_or(0).to_string();
    let mut api = Vec::new();
    let mut cli = Vec::new();
    let mut nsenter = Vec::new();
    let req = ExecRequest { argv: vec!["true".into()], ..ExecRequest::default() };
    let path = format!("/v1/sandboxes/{}/execs", sandbox.id);
    for round in 0..args.warmup + args.runs {
        let t = Instant::now();
        let mut stream = Client::connect(socket)?.post_json_stream(&path, &req)?;
        let mut exited = false;
        while let Some(line) = stream.next_line()? {
            if let Ok(ExecFrame::Exit(r)) = serde_json::from_slice::<ExecFrame>(&line) {
                anyhow::ensure!(r.exit_code == 0, "exec true failed: {r:?}");
                exited = true;
            }
        }
        anyhow::ensure!(exited, "the exec stream ended without an exit frame");
        let api_ms = t.elapsed().as_secs_f64() * 1000.0;
        let cli_ms = time(Command::new(&exe).arg("--socket").arg(socket).args(["exec", &sandbox.id, "--", "true"]))?;
        let ns_ms = time(Command::new("nsenter").args(["-t", &pid, "-a", "true"]))?;
        if round >= args.warmup {
            api.push(api_ms);
            cli.push(cli_ms);
            nsenter.push(ns_ms);
        }
    }
    let (a, c, n) = (median(&mut api), median(&mut cli), median(&mut nsenter));
    if args.json {
        let v = serde_json::json!({
            "runs": args.runs, "api_median_ms": a, "cli_median_ms": c, "nsenter_median_ms": n,
            "api_over_nsenter": a / n, "cli_over_nsenter": c / n,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{} interleaved runs of each; exec true on one running sandbox\n", args.runs);
        println!("{:<28} {:>10}", "case", "median ms");
        println!("{:<28} {:>10.2}", "API (in-process client)", a);
        println!("{:<28} {:>10.2}", "berth exec (CLI process)", c);
        println!("{:<28} {:>10.2}", "nsenter -t PID -a true", n);
        println!("\nAPI / nsenter: {:.2}x   CLI / nsenter: {:.2}x", a / n, c / n);
    }
    Ok(0)
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
