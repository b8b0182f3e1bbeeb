//! `berth bench --first-exec`: time to first exec through the API (create a sandbox, then `exec true` in it,
//! as an agent starts), cold and from a warm pool, against `bwrap … true` and `unshare … true`; and in the
//! same run the exec round trip on a running sandbox against `nsenter` into it.
//!
//! Two daemons of the bench's own, each on a data root of its own in the temporary directory (`--storage
//! none`, so both make their volumes alike): one without a pool, one with `--warm 1`. Each round times the
//! warm case on a full pool, waits for the pool to refill (so that no build in the background overlaps a
//! timed case), then the cold case and the peers, interleaved.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, DaemonInfo, ExecFrame, ExecRequest, Sandbox};
use berth_client::Client;

use crate::BenchArgs;

struct Daemon {
    root: PathBuf,
    socket: PathBuf,
    child: Child,
}

impl Daemon {
    fn start(dir: &Path, name: &str, warm: usize) -> anyhow::Result<Daemon> {
        let root = dir.join(name);
        let socket = dir.join(format!("{name}.sock"));
        let child = Command::new(std::env::current_exe()?)
            .arg("--root")
            .arg(&root)
            .arg("--socket")
            .arg(&socket)
            .args(["daemon", "--storage", "none", "--warm", &warm.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let daemon = Daemon { root, socket, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Client::connect(&daemon.socket).and_then(|c| c.get("/healthz")).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the {name} daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    fn warm(&self) -> anyhow::Result<berth_api::WarmPool> {
        let (_, body) = Client::connect(&self.socket)?.get("/v1/info")?;
        Ok(serde_json::from_slice::<DaemonInfo>(&body)?.warm)
    }

    /// Wait until the pool is full (at most 30 s).
    fn filled(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let w = self.warm()?;
            if w.ready >= w.size {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the warm pool did not refill in 30 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM (the warm pool is torn down), and wait.
    fn stop(mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `exec true` in sandbox `id` through the API; it must exit 0.
pub(super) fn exec_true(socket: &Path, id: &str) -> anyhow::Result<()> {
    let req = ExecRequest { argv: vec!["true".into()], ..ExecRequest::default() };
    let mut stream = Client::connect(socket)?.post_json_stream(&format!("/v1/sandboxes/{id}/execs"), &req)?;
    let mut exited = false;
    while let Some(line) = stream.next_line()? {
        if let Ok(ExecFrame::Exit(r)) = serde_json::from_slice::<ExecFrame>(&line) {
            anyhow::ensure!(r.exit_code == 0, "exec true failed: {r:?}");
            exited = true;
        }
    }
    anyhow::ensure!(exited, "the exec stream ended without an exit frame");
    Ok(())
}

/// Create a sandbox, then `exec true` in it: (create ms, create-to-exit ms), then remove it (untimed).
fn first_exec(socket: &Path) -> anyhow::Result<(f64, f64)> {
    let t = Instant::now();
    let (status, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    anyhow::ensure!(status == 201, "create answered {status}: {}", String::from_utf8_lossy(&body));
    let created = t.elapsed().as_secs_f64() * 1000.0;
    let sb: Sandbox = serde_json::from_slice(&body)?;
    exec_true(socket, &sb.id)?;
    let total = t.elapsed().as_secs_f64() * 1000.0;
    Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sb.id))?;
    Ok((created, total))
}

fn time(argv: &[&str]) -> anyhow::Result<f64> {
    let t = Instant::now();
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "{} failed during the benchmark", argv.join(" "));
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

fn found(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Median and p90.
fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    (at(0.5), at(0.9))
}

pub fn bench_first_exec(args: BenchArgs) -> anyhow::Result<i32> {
    let dir = std::env::temp_dir().join(format!("berth-first-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cold = Daemon::start(&dir, "cold", 0)?;
    let warm = match Daemon::start(&dir, "warm", 1) {
        Ok(w) => w,
        Err(e) => {
            cold.stop();
            return Err(e);
        }
    };
    let result = measure(&cold, &warm, &args);
    cold.stop();
    warm.stop();
    let _ = std::fs::remove_dir(&dir);
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(0)
}

fn measure(cold: &Daemon, warm: &Daemon, args: &BenchArgs) -> anyhow::Result<serde_json::Value> {
    let peers: Vec<(&str, Vec<&str>)> = [
        ("bwrap", "bwrap --unshare-all --die-with-parent --ro-bind / / true"),
        ("unshare", "unshare --user --map-root-user --mount --pid --fork --net --ipc --uts true"),
    ]
    .into_iter()
    .map(|(n, l)| (n, l.split(' ').collect::<Vec<_>>()))
    .filter(|(_, argv)| found(argv[0]))
    .collect();
    // A sandbox that stays up, for the exec round trip against nsenter into it.
    let (_, body) = Client::connect(&cold.socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let standing: Sandbox = serde_json::from_slice(&body)?;
    let pid = standing.pid.unwrap_or(0).to_string();
    let names = [
        "warm create",
        "warm first exec",
        "cold create",
        "cold first exec",
        "exec round trip (API)",
        "nsenter -a true",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len() + peers.len()];
    let mut missed = 0;
    let served_before = warm.warm()?.served;
    for round in 0..args.warmup + args.runs {
        warm.filled()?;
        let (wc, wf) = first_exec(&warm.socket)?;
        warm.filled()?;
        let (cc, cf) = first_exec(&cold.socket)?;
        let t = Instant::now();
        exec_true(&cold.socket, &standing.id)?;
        let api = t.elapsed().as_secs_f64() * 1000.0;
        let ns = time(&["nsenter", "-t", &pid, "-a", "true"])?;
        let mut row = vec![wc, wf, cc, cf, api, ns];
        for (_, argv) in &peers {
            row.push(time(argv)?);
        }
        if round >= args.warmup {
            for (i, v) in row.into_iter().enumerate() {
                times[i].push(v);
            }
        }
        let served = warm.warm()?.served - served_before;
        missed = (round as u64 + 1).saturating_sub(served);
    }
    let _ = Client::connect(&cold.socket)?.delete(&format!("/v1/sandboxes/{}", standing.id));
    let all_names: Vec<&str> = names.iter().copied().chain(peers.iter().map(|(n, _)| *n)).collect();
    let mut rows = Vec::new();
    let mut medians = std::collections::BTreeMap::new();
    println!(
        "{} interleaved rounds; daemons with --storage none; warm pool of 1, full before each warm case\n",
        args.runs
    );
    println!("{:<24} {:>10} {:>10}", "case", "median ms", "p90 ms");
    for (i, name) in all_names.iter().enumerate() {
        let (p50, p90) = stats(&mut times[i]);
        println!("{name:<24} {p50:>10.2} {p90:>10.2}");
        medians.insert(*name, p50);
        rows.push(serde_json::json!({"case": name, "median_ms": p50, "p90_ms": p90, "runs": times[i].len()}));
    }
    let m = |n: &str| medians.get(n).copied().unwrap_or(f64::NAN);
    let mut ratios = vec![
        ("warm first exec / cold first exec", m("warm first exec") / m("cold first exec")),
        ("exec round trip / nsenter", m("exec round trip (API)") / m("nsenter -a true")),
    ];
    for (peer, _) in &peers {
        ratios.push((
            if *peer == "bwrap" { "cold first exec / bwrap" } else { "cold first exec / unshare" },
            m("cold first exec") / m(peer),
        ));
        ratios.push((
            if *peer == "bwrap" { "warm first exec / bwrap" } else { "warm first exec / unshare" },
            m("warm first exec") / m(peer),
        ));
    }
    println!();
    for (what, r) in &ratios {
        println!("{what}: {r:.2}x");
    }
    println!("warm creates the pool could not serve: {missed}");
    Ok(serde_json::json!({
        "runs": args.runs, "cases": rows, "warm_missed": missed,
        "ratios": ratios.iter().map(|(k, v)| serde_json::json!({"ratio": k, "value": v})).collect::<Vec<_>>(),
    }))
}
