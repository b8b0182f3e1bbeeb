//! The daemon's share of `berth bench --exec`: how fast it carries an exec's output (against a plain pipe),
//! and what idle sandboxes cost (the daemon's CPU, and the memory of each sandbox's shim and init).
//!
//! Everything is read from /proc. The daemon is the process at the other end of its socket (the peer
//! credentials of a connection to it); its shims are the processes started as `berth --root ROOT shim` with
//! the daemon's ROOT; the sandboxes' inits are the shims' children.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, ExecFrame, ExecRequest, ExecResult, Sandbox};
use berth_client::{Client, segment};
use serde_json::{Value, json};

/// How long the idle sandboxes settle before the measurement, and how long it lasts.
const SETTLE: Duration = Duration::from_secs(2);
const WINDOW: Duration = Duration::from_secs(10);
/// With paused sandboxes the window is a minute: a daemon that does nothing for them shows 0 however long it
/// is watched, and a cost of a few milliseconds a minute still shows.
const PAUSED_WINDOW: Duration = Duration::from_secs(60);
const MIB: f64 = 1024.0 * 1024.0;

/// The knobs of these measurements. `berth bench` has no flags for them, so they come from the environment:
/// `BERTH_BENCH_BYTES` (output size, default 2G), `BERTH_BENCH_IDLE` (idle sandboxes, default 100) and
/// `BERTH_BENCH_DAEMON_PID` (when the daemon cannot be found by its socket).
pub struct DaemonBenchOpts {
    pub bytes: u64,
    pub idle: usize,
    pub daemon_pid: Option<i32>,
    /// Pause the idle sandboxes before measuring them, then time waking one with an exec.
    pub pause: bool,
}

/// The daemon process behind the socket.
pub struct Daemon {
    pub pid: i32,
    /// `--root` as the daemon was given it (and passes it on to its shims).
    pub root_arg: String,
    /// The same, as a path from here.
    pub root: PathBuf,
}

/// Find the daemon serving `socket`: `pid` when given, else the peer of a connection to the socket.
pub fn find_daemon(socket: &Path, pid: Option<i32>) -> anyhow::Result<Daemon> {
    let pid = match pid {
        Some(p) => p,
        None => {
            let conn = std::os::unix::net::UnixStream::connect(socket)?;
            rustix::net::sockopt::socket_peercred(&conn)?.pid.as_raw_pid()
        }
    };
    let argv = cmdline(pid);
    anyhow::ensure!(
        pid > 0 && !argv.is_empty(),
        "cannot see the daemon's process (pid {pid}) in /proc; set BERTH_BENCH_DAEMON_PID"
    );
    let root_arg = arg_value(&argv, "--root")
        .or_else(|| environ(pid, "BERTH_ROOT"))
        .unwrap_or_else(|| "/var/lib/berth".to_string());
    let mut root = PathBuf::from(&root_arg);
    if root.is_relative() {
        root = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default().join(root);
    }
    Ok(Daemon { pid, root_arg, root })
}

/// Exec `head -c BYTES /dev/zero` in `sandbox` through the API with the default output budget, read the
/// stream to its end, and compare the rate with the same bytes through a plain pipe on the host.
pub fn output_throughput(
    socket: &Path,
    sandbox: &Sandbox,
    daemon: &Daemon,
    opts: &DaemonBenchOpts,
    json: bool,
) -> anyhow::Result<Value> {
    let bytes = opts.bytes;
    let command = format!("head -c {bytes} /dev/zero");
    let pipe = format!("{command} | cat > /dev/null");
    let t = Instant::now();
    let status = Command::new("sh").args(["-c", &pipe]).stdin(Stdio::null()).status()?;
    anyhow::ensure!(status.success(), "{pipe} failed: {status}");
    let pipe_s = t.elapsed().as_secs_f64();

    let pid = daemon.pid;
    let hwm_before = status_kib(pid, "VmHWM").unwrap_or(0);
    let rss_before = status_kib(pid, "VmRSS").unwrap_or(0);
    let peak = AtomicU64::new(rss_before);
    let stop = AtomicBool::new(false);
    let req = ExecRequest {
        argv: ["head", "-c", &bytes.to_string(), "/dev/zero"].map(String::from).to_vec(),
        ..ExecRequest::default()
    };
    let path = format!("/v1/sandboxes/{}/execs", segment(&sandbox.id));
    let (result, api_s, received) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = status_kib(pid, "VmRSS") {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let out = stream_to_end(socket, &path, &req);
        stop.store(true, Ordering::Relaxed);
        out
    })?;
    anyhow::ensure!(result.exit_code == 0, "{command} failed in the sandbox: {result:?}");
    let hwm_after = status_kib(pid, "VmHWM").unwrap_or(0);
    let peak = peak.into_inner();
    let log = daemon.root.join("logs").join(&sandbox.id).join(format!("{}.log", result.exec_id));
    let log_bytes = std::fs::metadata(&log).ok().map(|m| m.len());

    let api_rate = result.output_bytes as f64 / api_s;
    let pipe_rate = bytes as f64 / pipe_s;
    if !json {
        println!("\noutput: {command} in the sandbox, default output budget, stream read to the end");
        println!("{:<28} {:>10} {:>10}", "case", "seconds", "MiB/s");
        println!("{:<28} {:>10.2} {:>10.1}", "API exec (daemon)", api_s, api_rate / MIB);
        println!("{:<28} {:>10.2} {:>10.1}", "head | cat > /dev/null", pipe_s, pipe_rate / MIB);
        println!(
            "API / pipe: {:.2}x   ({} output bytes as the daemon counted them, {:.0} bytes/s; {} bytes of frames \
             reached the client, {} dropped by the budget)",
            api_rate / pipe_rate,
            result.output_bytes,
            api_rate,
            received,
            result.bytes_dropped
        );
        println!(
            "daemon {pid} RSS: {:.1} MiB before, {:.1} MiB sampled peak; VmHWM {:.1} MiB before, {:.1} MiB after",
            rss_before as f64 / 1024.0,
            peak as f64 / 1024.0,
            hwm_before as f64 / 1024.0,
            hwm_after as f64 / 1024.0
        );
        match log_bytes {
            Some(n) => println!(
                "exec log: {} ({n} bytes): the daemon writes the full output there too, so disk speed may bound \
                 the figure",
                log.display()
            ),
            None => println!("exec log: not found at {} (the daemon's data root is not visible here)", log.display()),
        }
    }
    Ok(json!({
        "command": command, "bytes": bytes, "output_bytes": result.output_bytes,
        "bytes_dropped": result.bytes_dropped, "client_received_bytes": received,
        "api_seconds": api_s, "api_bytes_per_s": api_rate,
        "pipe_seconds": pipe_s, "pipe_bytes_per_s": pipe_rate, "api_over_pipe": api_rate / pipe_rate,
        "daemon_pid": pid, "daemon_rss_before_kib": rss_before, "daemon_rss_sampled_peak_kib": peak,
        "daemon_vmhwm_before_kib": hwm_before, "daemon_vmhwm_after_kib": hwm_after,
        "log_path": log.display().to_string(), "log_bytes": log_bytes,
    }))
}

/// POST an exec and read its NDJSON stream to the end: its result, the wall time and the bytes received.
fn stream_to_end(socket: &Path, path: &str, req: &ExecRequest) -> anyhow::Result<(ExecResult, f64, u64)> {
    let t = Instant::now();
    let mut stream = Client::connect(socket)?.post_json_stream(path, req)?;
    let mut result = None;
    let mut received = 0;
    while let Some(line) = stream.next_line()? {
        received += line.len() as u64;
        if let Ok(ExecFrame::Exit(r)) = serde_json::from_slice::<ExecFrame>(&line) {
            result = Some(r);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let result = result.ok_or_else(|| anyhow::anyhow!("the exec stream ended without an exit frame"))?;
    Ok((result, secs, received))
}

/// Create `opts.idle` sandboxes, let them settle, and measure what they and the daemon cost while idle.
/// The sandboxes are removed afterwards, whether or not the measurement worked.
pub fn idle_cost(socket: &Path, daemon: &Daemon, opts: &DaemonBenchOpts, json: bool) -> anyhow::Result<Value> {
    let mut ids = Vec::new();
    let measured = measure_idle(socket, daemon, opts, &mut ids, json);
    let mut left = Vec::new();
    for id in ids {
        let gone = Client::connect(socket)
            .and_then(|c| c.delete(&format!("/v1/sandboxes/{}", segment(&id))))
            .map(|_| ())
            .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) });
        if let Err(e) = gone {
            left.push(format!("{id} ({e})"));
        }
    }
    if !left.is_empty() {
        eprintln!("berth bench: could not remove {} idle sandboxes: {}", left.len(), left.join(", "));
    }
    measured
}

/// A kind of process, and the pids of those there are.
struct Group {
    name: &'static str,
    pids: Vec<i32>,
}

fn measure_idle(
    socket: &Path,
    daemon: &Daemon,
    opts: &DaemonBenchOpts,
    ids: &mut Vec<String>,
    json: bool,
) -> anyhow::Result<Value> {
    let n = opts.idle;
    let t = Instant::now();
    for _ in 0..n {
        let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
        let sandbox: Sandbox = serde_json::from_slice(&body)?;
        ids.push(sandbox.id);
    }
    let create_s = t.elapsed().as_secs_f64();
    if opts.pause {
        let t = Instant::now();
        for id in ids.iter() {
            Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))?;
        }
        if !json {
            println!("paused {n} sandboxes in {:.1} s", t.elapsed().as_secs_f64());
        }
    }
    std::thread::sleep(SETTLE);

    let all = proc_pids();
    let shims: Vec<i32> = all
        .iter()
        .copied()
        .filter(|&p| {
            let argv = cmdline(p);
            argv.iter().any(|a| a == "shim") && arg_value(&argv, "--root").as_ref() == Some(&daemon.root_arg)
        })
        .collect();
    let inits: Vec<i32> =
        all.iter().copied().filter(|&p| stat_field(p, 1).is_some_and(|pp| shims.contains(&(pp as i32)))).collect();
    let groups = [
        Group { name: "daemon", pids: vec![daemon.pid] },
        Group { name: "berth shim", pids: shims },
        Group { name: "sandbox init", pids: inits },
    ];
    let hz = clock_ticks();
    let before: Vec<BTreeMap<i32, u64>> = groups.iter().map(|g| cpu_ticks(&g.pids)).collect();
    let t = Instant::now();
    std::thread::sleep(if opts.pause { PAUSED_WINDOW } else { WINDOW });
    let after: Vec<BTreeMap<i32, u64>> = groups.iter().map(|g| cpu_ticks(&g.pids)).collect();
    let window_s = t.elapsed().as_secs_f64();

    let mut rows = Vec::new();
    for ((g, b), a) in groups.iter().zip(&before).zip(&after) {
        let ticks: u64 = a.iter().filter_map(|(p, t)| b.get(p).map(|t0| t.saturating_sub(*t0))).sum();
        let cpu_pct = ticks as f64 / hz / window_s * 100.0;
        let rss: Vec<u64> = g.pids.iter().filter_map(|&p| status_kib(p, "VmRSS")).collect();
        let private: Vec<u64> = g.pids.iter().filter_map(|&p| private_kib(p)).collect();
        rows.push((g.name, g.pids.len(), cpu_pct, rss, private));
    }
    let avg = |v: &[u64]| if v.is_empty() { 0.0 } else { v.iter().sum::<u64>() as f64 / v.len() as f64 };
    let total_rss: u64 = rows.iter().map(|r| r.3.iter().sum::<u64>()).sum();
    let total_private: u64 = rows.iter().map(|r| r.4.iter().sum::<u64>()).sum();
    if !json {
        println!(
            "\nidle: {n} sandboxes (created in {create_s:.1} s), {:.0} s settling, then CPU over {window_s:.1} s",
            SETTLE.as_secs_f64()
        );
        println!("{:<28} {:>6} {:>10} {:>12} {:>16}", "process", "count", "CPU %", "avg RSS MiB", "avg private MiB");
        for (name, count, cpu, rss, private) in &rows {
            println!(
                "{:<28} {:>6} {:>10.3} {:>12.2} {:>16.2}",
                name,
                count,
                cpu,
                avg(rss) / 1024.0,
                avg(private) / 1024.0
            );
        }
        println!(
            "summed RSS of daemon, shims and inits: {:.1} MiB ({:.1} MiB private); CPU % of shims and inits is their sum",
            total_rss as f64 / 1024.0,
            total_private as f64 / 1024.0
        );
    }
    let groups: Vec<Value> = rows
        .iter()
        .map(|(name, count, cpu, rss, private)| {
            json!({
                "process": name, "count": count, "cpu_percent": cpu, "avg_rss_kib": avg(rss),
                "avg_private_kib": avg(private), "private_measured": private.len(),
            })
        })
        .collect();
    let wake = if opts.pause { wake_times(socket, ids, json)? } else { Value::Null };
    Ok(json!({
        "wake": wake,
        "sandboxes": n, "create_seconds": create_s, "settle_seconds": SETTLE.as_secs_f64(),
        "window_seconds": window_s, "daemon_pid": daemon.pid, "daemon_cpu_percent": rows[0].2,
        "groups": groups, "total_rss_kib": total_rss, "total_private_kib": total_private,
    }))
}

// ---- /proc ----

pub(super) fn proc_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

pub(super) fn cmdline(pid: i32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// The value of `--name VALUE` or `--name=VALUE` (before a lone `--`).
pub(super) fn arg_value(argv: &[String], name: &str) -> Option<String> {
    let mut it = argv.iter().take_while(|a| *a != "--");
    while let Some(a) = it.next() {
        if a == name {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}

fn environ(pid: i32, name: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|&b| b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')).map(str::to_string)
    })
}

/// Field `i` of /proc/PID/stat, counting from the state (field 3 of proc(5)) as 0: 1 is the parent's pid,
/// 11 and 12 are utime and stime.
pub(super) fn stat_field(pid: i32, i: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(i)?.parse().ok()
}

/// utime + stime of each process still there.
fn cpu_ticks(pids: &[i32]) -> BTreeMap<i32, u64> {
    pids.iter().filter_map(|&p| Some((p, stat_field(p, 11)? + stat_field(p, 12)?))).collect()
}

/// A `Key:   N kB` line of /proc/PID/status.
pub(super) fn status_kib(pid: i32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    kib_field(&status, key)
}

/// Private_Clean + Private_Dirty from /proc/PID/smaps_rollup.
fn private_kib(pid: i32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    Some(kib_field(&rollup, "Private_Clean")? + kib_field(&rollup, "Private_Dirty")?)
}

pub(super) fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?.split_whitespace().next()?.parse().ok()
}

/// The unit of /proc/PID/stat's times (USER_HZ).
pub(super) fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|&hz: &f64| hz > 0.0)
        .unwrap_or(100.0)
}

/// With every other sandbox paused: `exec true` on a paused sandbox (which wakes it first), then on the same
/// sandbox awake, ten sandboxes in turn, each paused again after.
fn wake_times(socket: &Path, ids: &[String], json: bool) -> anyhow::Result<Value> {
    let exec = |id: &str| -> anyhow::Result<f64> {
        let t = Instant::now();
        let req = berth_api::ExecRequest { argv: vec!["true".into()], ..berth_api::ExecRequest::default() };
        let mut stream = Client::connect(socket)?.post_json_stream(&format!("/v1/sandboxes/{id}/execs"), &req)?;
        while stream.next_line()?.is_some() {}
        Ok(t.elapsed().as_secs_f64() * 1000.0)
    };
    let (mut woken, mut awake) = (Vec::new(), Vec::new());
    for id in ids.iter().take(10) {
        woken.push(exec(id)?);
        awake.push(exec(id)?);
        Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))?;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (w, a) = (median(&mut woken), median(&mut awake));
    if !json {
        println!(
            "exec true on a paused sandbox (woken by it), the others paused: median {w:.2} ms; on it awake: {a:.2} ms ({} runs)",
            woken.len()
        );
    }
    Ok(json!({"exec_woken_median_ms": w, "exec_awake_median_ms": a, "runs": woken.len()}))
}

/// `berth bench --density`: the idle cost of `--idle` sandboxes, paused.
pub fn density(socket: &Path, args: crate::BenchArgs) -> anyhow::Result<i32> {
    let opts = DaemonBenchOpts { bytes: 0, idle: args.idle, daemon_pid: args.daemon_pid, pause: true };
    let daemon = find_daemon(socket, opts.daemon_pid)?;
    let report = idle_cost(socket, &daemon, &opts, args.json)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(0)
}
