//! `berth bench --hibernate`: hibernate and wake through the daemon's API of a sandbox holding 256 MiB of
//! touched memory, and the first exec after the wake, against CRIU itself dumping and restoring the same
//! program run on the host (no namespaces, no mounts to stage), round by round.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, ExecRequest, Sandbox};
use berth_client::Client;

use crate::BenchArgs;

/// 256 MiB of memory, every page written, then a marker file, then nothing.
pub(super) const HOLDER: &str =
    "import os, sys, time\nb = bytearray(os.urandom(1 << 20)) * 256\nopen(sys.argv[1], 'w').close()\ntime.sleep(1e9)\n";

pub fn bench_hibernate(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    if args.isolation == berth_api::Isolation::Gvisor {
        return crate::hibernate_gvisor::bench(socket, args);
    }
    let criu = berth_runtime::checkpoint::Criu::find(None).map_err(anyhow::Error::msg)?;
    let rounds = args.runs.clamp(1, 50);
    let (mut hib, mut wake, mut first, mut dump, mut restore) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (h, w, f) = api_round(socket, berth_api::Isolation::Namespaces)?;
        hib.push(h);
        wake.push(w);
        first.push(f);
        let (d, r) = raw_round(&criu.path)?;
        dump.push(d);
        restore.push(r);
    }
    let (hib_p50, dump_p50) = (median(&mut hib), median(&mut dump));
    let (wake_p50, restore_p50) = (median(&mut wake), median(&mut restore));
    let first_p50 = median(&mut first);
    let report = serde_json::json!({
        "rounds": rounds, "memory_mib": 256,
        "api_hibernate_ms": hib_p50, "raw_dump_ms": dump_p50, "hibernate_ratio": hib_p50 / dump_p50,
        "api_wake_ms": wake_p50, "raw_restore_ms": restore_p50, "wake_ratio": wake_p50 / restore_p50,
        "first_exec_after_wake_ms": first_p50, "criu": criu.version,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{rounds} rounds, medians; a sandbox holding 256 MiB of touched memory");
        println!(
            "  hibernate (API)        {hib_p50:8.1} ms   raw criu dump    {dump_p50:8.1} ms   {:.2}x",
            hib_p50 / dump_p50
        );
        println!(
            "  wake (API)             {wake_p50:8.1} ms   raw criu restore {restore_p50:8.1} ms   {:.2}x",
            wake_p50 / restore_p50
        );
        println!("  first exec after wake  {first_p50:8.1} ms");
    }
    Ok(0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub(super) fn median_of(v: &mut [f64]) -> f64 {
    median(v)
}

pub(super) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

pub(super) fn exec(socket: &Path, id: &str, argv: &[&str]) -> anyhow::Result<i32> {
    let req = ExecRequest { argv: argv.iter().map(|s| s.to_string()).collect(), ..ExecRequest::default() };
    let mut stream = Client::connect(socket)?.post_json_stream(&format!("/v1/sandboxes/{id}/execs"), &req)?;
    let mut code = -1;
    while let Some(line) = stream.next_line()? {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line)
            && let Some(c) = v.get("exit_code").and_then(|c| c.as_i64())
        {
            code = c as i32;
        }
    }
    Ok(code)
}

/// Start `holder` (a Python program that takes the path of a file to make once its memory is touched) in the
/// background of sandbox `id`, and wait until it says so.
pub(super) fn start_holder(socket: &Path, id: &str, holder: &str) -> anyhow::Result<()> {
    let script =
        format!("cat > /tmp/holder.py <<'EOF'\n{holder}EOF\npython3 /tmp/holder.py /tmp/ready >/dev/null 2>&1 &");
    exec(socket, id, &["sh", "-c", &script])?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while exec(socket, id, &["test", "-e", "/tmp/ready"])? != 0 {
        anyhow::ensure!(Instant::now() < deadline, "the program holding the memory did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// One sandbox behind `isolation`: hibernate, wake, first exec (ms each).
pub(super) fn api_round(socket: &Path, isolation: berth_api::Isolation) -> anyhow::Result<(f64, f64, f64)> {
    let create = CreateSandbox { isolation: Some(isolation), ..CreateSandbox::default() };
    let (status, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &create)?;
    anyhow::ensure!(status == 201 || status == 200, "create: {}", String::from_utf8_lossy(&body));
    let sb: Sandbox = serde_json::from_slice(&body)?;
    let id = sb.id;
    let result = (|| {
        start_holder(socket, &id, HOLDER)?;
        let t = Instant::now();
        let (status, body) =
            Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/hibernate"), &serde_json::json!({}))?;
        let h = ms(t);
        anyhow::ensure!(status == 200, "hibernate: {}", String::from_utf8_lossy(&body));
        let t = Instant::now();
        let (status, body) =
            Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/wake"), &serde_json::json!({}))?;
        let w = ms(t);
        anyhow::ensure!(status == 200, "wake: {}", String::from_utf8_lossy(&body));
        let t = Instant::now();
        anyhow::ensure!(exec(socket, &id, &["true"])? == 0, "exec after the wake failed");
        let f = ms(t);
        Ok((h, w, f))
    })();
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{id}"));
    result
}

/// The same program on the host: `criu dump` (which ends it) and `criu restore`, ms each.
fn raw_round(criu: &Path) -> anyhow::Result<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!("berth-bench-criu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("img"))?;
    let result = raw_round_in(criu, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn raw_round_in(criu: &Path, dir: &Path) -> anyhow::Result<(f64, f64)> {
    let ready = dir.join("ready");
    let images = dir.join("img");
    let mut child = Command::new("setsid")
        .args(["python3", "-c", HOLDER])
        .arg(&ready)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        anyhow::ensure!(Instant::now() < deadline, "the program holding the memory did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    let out = Command::new(criu)
        .args(["dump", "-t", &child.id().to_string(), "-D"])
        .arg(&images)
        .args(["--network-lock", "skip", "-o", "dump.log"])
        .output()?;
    let d = ms(t);
    let _ = child.wait();
    anyhow::ensure!(out.status.success(), "raw criu dump failed (see {}/dump.log)", images.display());
    let pidfile = dir.join("pid");
    let t = Instant::now();
    let out = Command::new(criu)
        .args(["restore", "-D"])
        .arg(&images)
        .args(["--restore-detached", "-o", "restore.log", "--pidfile"])
        .arg(&pidfile)
        .output()?;
    let r = ms(t);
    anyhow::ensure!(out.status.success(), "raw criu restore failed");
    if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    Ok((d, r))
}
