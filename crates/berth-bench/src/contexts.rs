//! `berth bench --contexts`: one step of code in a live context against the same step in a new interpreter per
//! exec, on one sandbox of a running daemon, interleaved round by round so both see the same machine.

use std::path::Path;
use std::time::Instant;

use berth_api::{Context, CreateContext, CreateSandbox, ExecRequest, RunCode, Sandbox};
use berth_client::Client;

use crate::BenchArgs;

pub fn bench_contexts(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    on_a_sandbox(socket, &args, measure)
}

/// Run `measure` on a new sandbox of the daemon at `socket`, remove the sandbox whatever happened, and print
/// the report as JSON with `--json`.
pub(super) fn on_a_sandbox(
    socket: &Path,
    args: &BenchArgs,
    measure: fn(&Path, &str, &BenchArgs) -> anyhow::Result<serde_json::Value>,
) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let sandbox: Sandbox = serde_json::from_slice(&body)?;
    let result = measure(socket, &sandbox.id, args);
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sandbox.id));
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(0)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v.get(v.len() / 2).copied().unwrap_or(0.0), v.get(v.len() * 9 / 10).copied().unwrap_or(0.0))
}

/// One run in the context, read to its end.
fn run(socket: &Path, path: &str, code: &str) -> anyhow::Result<()> {
    let req = RunCode { code: code.into(), ..RunCode::default() };
    let mut stream = Client::connect(socket)?.post_json_stream(path, &req)?;
    while stream.next_line()?.is_some() {}
    Ok(())
}

/// One exec, read to its end.
fn exec(socket: &Path, path: &str, argv: &[&str]) -> anyhow::Result<()> {
    let req = ExecRequest { argv: argv.iter().map(|s| s.to_string()).collect(), ..ExecRequest::default() };
    let mut stream = Client::connect(socket)?.post_json_stream(path, &req)?;
    while stream.next_line()?.is_some() {}
    Ok(())
}

fn measure(socket: &Path, id: &str, args: &BenchArgs) -> anyhow::Result<serde_json::Value> {
    let contexts = format!("/v1/sandboxes/{id}/contexts");
    let execs = format!("/v1/sandboxes/{id}/execs");
    let mut create = Vec::new();
    let mut ctx = None;
    for _ in 0..5 {
        let t = Instant::now();
        let (_, body) = Client::connect(socket)?.post_json(
            &contexts,
            &CreateContext { language: berth_api::ContextLanguage::Python, cwd: None, env: Default::default() },
        )?;
        create.push(ms(t));
        let c: Context = serde_json::from_slice(&body)?;
        if let Some(old) = ctx.replace(c.id) {
            Client::connect(socket)?.delete(&format!("{contexts}/{old}"))?;
        }
    }
    let ctx = ctx.ok_or_else(|| anyhow::anyhow!("no context was made"))?;
    let run_path = format!("{contexts}/{ctx}/run");
    run(socket, &run_path, "import json")?;
    let cases: [(&str, &dyn Fn() -> anyhow::Result<()>); 4] = [
        ("context: 1 + 1", &|| run(socket, &run_path, "1 + 1")),
        ("context: json.dumps (imported)", &|| run(socket, &run_path, "json.dumps([1, 2])")),
        ("exec: python3 -c 'print(1 + 1)'", &|| exec(socket, &execs, &["python3", "-c", "print(1 + 1)"])),
        ("exec: python3 -c 'import json; ...'", &|| {
            exec(socket, &execs, &["python3", "-c", "import json; print(json.dumps([1, 2]))"])
        }),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..args.warmup + args.runs {
        for (i, (_, f)) in cases.iter().enumerate() {
            let t = Instant::now();
            f()?;
            if round >= args.warmup {
                times[i].push(ms(t));
            }
        }
    }
    let (create_p50, create_p90) = stats(&mut create);
    println!("context create (python, to serving): median {create_p50:.1} ms, p90 {create_p90:.1} ms (5 runs)");
    let mut rows = Vec::new();
    for (i, (name, _)) in cases.iter().enumerate() {
        let (p50, p90) = stats(&mut times[i]);
        println!("{name:<40} median {p50:>7.2} ms   p90 {p90:>7.2} ms   ({} runs)", times[i].len());
        rows.push(serde_json::json!({"case": name, "median_ms": p50, "p90_ms": p90}));
    }
    let m = |i: usize| rows[i]["median_ms"].as_f64().unwrap_or(0.0);
    println!(
        "a step in a live context takes {:.2}x the time of a new interpreter per step ({:.2}x with an import)",
        m(0) / m(2).max(f64::EPSILON),
        m(1) / m(3).max(f64::EPSILON)
    );
    Ok(serde_json::json!({"create_median_ms": create_p50, "create_p90_ms": create_p90, "cases": rows}))
}
