//! `berth bench --soak`: many clients using one daemon at once, as agents do, for a while: each loop creates a
//! sandbox, runs ten execs (reading their output), writes files and reads them back through the files API, now
//! and then takes a snapshot and forks, and removes everything it made. Errors are counted by kind, the
//! daemon's memory is sampled from /proc while the loops run and again after it has been left idle, and at the
//! end `soak_check` looks for anything the loops left behind. Any error or leftover makes the exit code 1.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, CreateSnapshot, ExecFrame, ExecRequest, ForkRequest, Forked, Sandbox, Snapshot};
use berth_api::{StorageInfo, Stream, Teardown};
use berth_client::{Client, ClientError, segment};
use serde_json::{Value, json};

use crate::BenchArgs;
use crate::daemon::{self, status_kib};
use crate::soak_check::{self, Census};

/// Execs in each loop.
const EXECS: usize = 10;
/// Files written and read back in each loop.
const FILES: usize = 3;
/// One loop in this many snapshots and forks its sandbox.
const FORK_EVERY: u64 = 5;
/// How often the daemon's memory is read while the loops run.
const SAMPLE: Duration = Duration::from_millis(500);

/// Everything the loops made, for the check that none of it is left.
#[derive(Default)]
pub struct Made {
    pub sandboxes: Vec<String>,
    /// Snapshots asked for, and those forks made as their children's parents.
    pub snapshots: Vec<String>,
}

/// What the loops measured.
#[derive(Default)]
struct Tally {
    loops: u64,
    execs: u64,
    /// Milliseconds, by operation.
    times: BTreeMap<&'static str, Vec<f64>>,
    /// Count and first message, by kind (operation and error class).
    errors: BTreeMap<String, (u64, String)>,
}

impl Tally {
    fn error(&mut self, op: &str, e: &Failure) {
        let entry = self.errors.entry(format!("{op}: {}", e.kind)).or_insert((0, e.message.clone()));
        entry.0 += 1;
    }
}

/// The kind of failure that ends the soak: there is no daemon to talk to.
const GONE: &str = "cannot connect";

/// A failed step: its class (`HTTP 409 conflict`, `wrong output`, …) and what was said.
struct Failure {
    kind: String,
    message: String,
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        let kind = match &e {
            ClientError::Api { status, code, .. } => match code {
                Some(c) => {
                    format!("HTTP {status} {}", serde_json::to_value(c).unwrap_or_default().as_str().unwrap_or(""))
                }
                None => format!("HTTP {status}"),
            },
            ClientError::NoDaemon { .. } | ClientError::Connect { .. } => GONE.into(),
            ClientError::Io(_) => "connection lost".into(),
            ClientError::Protocol(_) => "bad answer".into(),
            ClientError::Invalid(_) => "bad request".into(),
        };
        Failure { kind, message: e.to_string() }
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Failure {
        Failure { kind: "bad answer".into(), message: e.to_string() }
    }
}

fn wrong(kind: &str, message: String) -> Failure {
    Failure { kind: kind.into(), message }
}

/// What every client shares.
struct Ctx<'a> {
    socket: &'a Path,
    deadline: Instant,
    limit: Option<u64>,
    started: AtomicU64,
    /// Set when the daemon cannot be reached any more: the loops stop rather than fail on and on.
    gone: AtomicBool,
    tally: Mutex<Tally>,
    made: Mutex<Made>,
}

impl Ctx<'_> {
    /// Time `f` as `op`; a failure is returned for the caller to count.
    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T, Failure>) -> Result<T, (&'static str, Failure)> {
        let t = Instant::now();
        let out = f().map_err(|e| (op, e))?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if let Ok(mut tally) = self.tally.lock() {
            tally.times.entry(op).or_default().push(ms);
        }
        Ok(out)
    }

    fn made_sandbox(&self, id: &str) {
        if let Ok(mut m) = self.made.lock() {
            m.sandboxes.push(id.to_string());
        }
    }

    fn made_snapshot(&self, id: &str) {
        if let Ok(mut m) = self.made.lock() {
            m.snapshots.push(id.to_string());
        }
    }

    /// Take the next loop, if the soak is not over.
    fn next_loop(&self) -> Option<u64> {
        if Instant::now() >= self.deadline || self.gone.load(Ordering::Relaxed) {
            return None;
        }
        let n = self.started.fetch_add(1, Ordering::Relaxed);
        if self.limit.is_some_and(|l| n >= l) { None } else { Some(n) }
    }
}

pub fn bench_soak(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let daemon = daemon::find_daemon(socket, args.daemon_pid)?;
    let (_, body) = Client::connect(socket)?.get("/v1/storage")?;
    let storage: StorageInfo = serde_json::from_slice(&body)?;
    let census = Census::take(&daemon);
    let pid = daemon.pid;
    let rss_start = status_kib(pid, "VmRSS").unwrap_or(0);
    let fds_start = open_fds(pid);
    let split_start = (status_kib(pid, "RssAnon"), status_kib(pid, "RssFile"));
    let ctx = Ctx {
        socket,
        deadline: Instant::now() + args.duration,
        limit: args.loops,
        started: AtomicU64::new(0),
        gone: AtomicBool::new(false),
        tally: Mutex::new(Tally::default()),
        made: Mutex::new(Made::default()),
    };
    if !args.json {
        println!(
            "soak: {} clients for {:.0} s{}, daemon {pid} (RSS {:.1} MiB), {} storage pool",
            args.clients,
            args.duration.as_secs_f64(),
            args.loops.map(|l| format!(" or {l} loops")).unwrap_or_default(),
            rss_start as f64 / 1024.0,
            storage.mode
        );
    }
    let stop = AtomicBool::new(false);
    let samples: Mutex<Vec<(f64, u64)>> = Mutex::new(vec![(0.0, rss_start)]);
    let began = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(SAMPLE);
                if let (Some(rss), Ok(mut s)) = (status_kib(pid, "VmRSS"), samples.lock()) {
                    s.push((began.elapsed().as_secs_f64(), rss));
                }
            }
        });
        let ctx = &ctx;
        let clients: Vec<_> = (0..args.clients).map(|c| scope.spawn(move || client(ctx, c))).collect();
        for c in clients {
            let _ = c.join();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let loops_s = began.elapsed().as_secs_f64();
    let rss_loops_end = status_kib(pid, "VmRSS").unwrap_or(0);
    std::thread::sleep(args.settle);
    let rss_idle = status_kib(pid, "VmRSS").unwrap_or(0);
    let fds_idle = open_fds(pid);
    let split_idle = (status_kib(pid, "RssAnon"), status_kib(pid, "RssFile"));
    let made = ctx.made.into_inner().unwrap_or_default();
    let check = soak_check::check(socket, &daemon, &census, &made);
    let tally = ctx.tally.into_inner().unwrap_or_default();
    let samples = samples.into_inner().unwrap_or_default();
    let rss_peak = samples.iter().map(|s| s.1).chain([rss_loops_end]).max().unwrap_or(0);

    let errors: u64 = tally.errors.values().map(|e| e.0).sum();
    let ops: BTreeMap<&str, Value> = tally.times.iter().map(|(op, t)| (*op, percentiles(t))).collect();
    let report = json!({
        "clients": args.clients, "duration_seconds": args.duration.as_secs_f64(), "loops_seconds": loops_s,
        "storage": storage.mode, "loops": tally.loops, "execs": tally.execs, "sandboxes": made.sandboxes.len(),
        "snapshots": made.snapshots.len(), "errors": errors,
        "errors_by_kind": tally.errors.iter().map(|(k, (n, m))| (k.clone(), json!({"count": n, "first": m})))
            .collect::<BTreeMap<_, _>>(),
        "operations_ms": ops, "leftovers": check.leftovers, "kept_by_design": check.kept,
        "daemon": {
            "pid": pid, "rss_start_kib": rss_start, "rss_peak_kib": rss_peak, "rss_loops_end_kib": rss_loops_end,
            "rss_after_idle_kib": rss_idle, "idle_seconds": args.settle.as_secs_f64(),
            "vmhwm_kib": status_kib(pid, "VmHWM"), "threads": status_kib(pid, "Threads"),
            "rss_anon_start_kib": split_start.0, "rss_file_start_kib": split_start.1,
            "rss_anon_after_idle_kib": split_idle.0, "rss_file_after_idle_kib": split_idle.1,
            "open_fds_start": fds_start, "open_fds_after_idle": fds_idle,
            "rss_samples": samples.iter().map(|(t, k)| json!([(t * 10.0).round() / 10.0, k])).collect::<Vec<_>>(),
        },
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report, &tally);
    }
    Ok(if errors == 0 && report["leftovers"].as_array().is_some_and(Vec::is_empty) { 0 } else { 1 })
}

/// One client: loops until the soak is over, each on fresh connections as an agent's requests would be.
fn client(ctx: &Ctx, c: usize) {
    let mut k = 0;
    while let Some(n) = ctx.next_loop() {
        let mut mine = Made::default();
        // Every client forks on its own schedule, each loop in FORK_EVERY of its own.
        let fork = (k + c as u64).is_multiple_of(FORK_EVERY);
        k += 1;
        let outcome = one_loop(ctx, &format!("{c}-{n}"), fork, &mut mine);
        let mut failed = outcome.err();
        // Children first, then the sandbox, then the snapshot asked for (a fork's own goes with its child).
        for id in mine.sandboxes.iter().rev() {
            let removed = ctx.timed("rm", || {
                let (_, body) = Client::connect(ctx.socket)?.delete(&format!("/v1/sandboxes/{}", segment(id)))?;
                let t: Teardown = serde_json::from_slice(&body)?;
                if t.clean {
                    Ok(())
                } else {
                    Err(wrong("left something", format!("sandbox {id}: {}", t.leftovers.join("; "))))
                }
            });
            if let Err(e) = removed {
                failed.get_or_insert(e);
            }
        }
        for id in &mine.snapshots {
            let removed = ctx.timed("rm snapshot", || {
                Client::connect(ctx.socket)?.delete(&format!("/v1/snapshots/{}", segment(id)))?;
                Ok(())
            });
            if let Err(e) = removed {
                failed.get_or_insert(e);
            }
        }
        if let Ok(mut tally) = ctx.tally.lock() {
            tally.loops += 1;
            if let Some((op, e)) = &failed {
                tally.error(op, e);
                if e.kind == GONE {
                    ctx.gone.store(true, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One agent's loop on a sandbox of its own. What it makes is put in `mine` as soon as it exists, so that it
/// is removed whatever fails after.
fn one_loop(ctx: &Ctx, tag: &str, fork: bool, mine: &mut Made) -> Result<(), (&'static str, Failure)> {
    let req = CreateSandbox { labels: [("soak".to_string(), tag.to_string())].into(), ..CreateSandbox::default() };
    let sandbox: Sandbox = ctx.timed("create", || {
        let (_, body) = Client::connect(ctx.socket)?.post_json("/v1/sandboxes", &req)?;
        Ok(serde_json::from_slice(&body)?)
    })?;
    let id = sandbox.id;
    ctx.made_sandbox(&id);
    mine.sandboxes.push(id.clone());
    let files: Vec<(String, Vec<u8>)> =
        (0..FILES).map(|i| (format!("/workspace/soak/{i}.txt"), content(tag, i))).collect();
    for j in 0..EXECS {
        if j == EXECS / 2 {
            for (path, data) in &files {
                ctx.timed("write file", || {
                    Client::connect(ctx.socket)?.put_bytes(&files_path(&id, path, "&parents=true"), data)?;
                    Ok(())
                })?;
            }
            for (path, data) in &files {
                ctx.timed("read file", || read_back(ctx, &id, path, data))?;
            }
        }
        // The second half sees the files the first wrote.
        let (script, expected) = if j < EXECS / 2 {
            (
                format!("echo {tag} {j}; echo to-stderr >&2; seq 1 {} | wc -l", 100 * (j + 1)),
                format!("{tag} {j}\n{}\n", 100 * (j + 1)),
            )
        } else {
            (
                format!("echo {tag} {j}; wc -c < {}", files[j % FILES].0),
                format!("{tag} {j}\n{}\n", files[j % FILES].1.len()),
            )
        };
        ctx.timed("exec", || exec(ctx, &id, &script, &expected))?;
        if let Ok(mut t) = ctx.tally.lock() {
            t.execs += 1;
        }
    }
    if fork {
        let snap: Snapshot = ctx.timed("snapshot", || {
            let path = format!("/v1/sandboxes/{}/snapshots", segment(&id));
            let (_, body) = Client::connect(ctx.socket)?.post_json(&path, &CreateSnapshot::default())?;
            Ok(serde_json::from_slice(&body)?)
        })?;
        ctx.made_snapshot(&snap.id);
        mine.snapshots.push(snap.id);
        let forked: Forked = ctx.timed("fork", || {
            let path = format!("/v1/sandboxes/{}/fork", segment(&id));
            let (_, body) =
                Client::connect(ctx.socket)?.post_json(&path, &ForkRequest { count: Some(1), ..Default::default() })?;
            Ok(serde_json::from_slice(&body)?)
        })?;
        ctx.made_snapshot(&forked.parent);
        for child in &forked.sandboxes {
            ctx.made_sandbox(&child.id);
            mine.sandboxes.push(child.id.clone());
        }
        for child in &forked.sandboxes {
            // The child has its parent's files, and runs.
            ctx.timed("read file", || read_back(ctx, &child.id, &files[0].0, &files[0].1))?;
            let expected = format!("{}\n", child.name);
            ctx.timed("exec", || exec(ctx, &child.id, "hostname", &expected))?;
            if let Ok(mut t) = ctx.tally.lock() {
                t.execs += 1;
            }
        }
    }
    Ok(())
}

/// Data for file `i` of loop `tag`: a few KiB, different for every file of every loop.
fn content(tag: &str, i: usize) -> Vec<u8> {
    (0..64 * (i + 1)).map(|line| format!("loop {tag} file {i} line {line:05}\n")).collect::<String>().into_bytes()
}

fn files_path(id: &str, path: &str, extra: &str) -> String {
    format!("/v1/sandboxes/{}/files?path={}{extra}", segment(id), path.replace('/', "%2F"))
}

fn read_back(ctx: &Ctx, id: &str, path: &str, data: &[u8]) -> Result<(), Failure> {
    let (_, body) = Client::connect(ctx.socket)?.get(&files_path(id, path, ""))?;
    if body == data {
        Ok(())
    } else {
        Err(wrong("wrong content", format!("{path} in {id}: {} bytes back, {} written", body.len(), data.len())))
    }
}

/// Run `sh -c script` in `id`, read its stream to the end, and check its stdout and exit code.
fn exec(ctx: &Ctx, id: &str, script: &str, expected: &str) -> Result<(), Failure> {
    let req = ExecRequest { argv: vec!["sh".into(), "-c".into(), script.into()], ..ExecRequest::default() };
    let path = format!("/v1/sandboxes/{}/execs", segment(id));
    let mut stream = Client::connect(ctx.socket)?.post_json_stream(&path, &req)?;
    let mut stdout = String::new();
    let mut result = None;
    while let Some(line) = stream.next_line()? {
        match serde_json::from_slice::<ExecFrame>(&line)? {
            ExecFrame::Output { stream: Stream::Stdout, data, .. } => stdout.push_str(&data),
            ExecFrame::Exit(r) => result = Some(r),
            _ => {}
        }
    }
    let r = result.ok_or_else(|| wrong("no exit", format!("{script:?} in {id}: the stream ended without an exit")))?;
    if r.exit_code != 0 {
        return Err(wrong("failed", format!("{script:?} in {id} exited {}: {:?}", r.exit_code, r.error)));
    }
    if stdout != expected {
        return Err(wrong("wrong output", format!("{script:?} in {id} printed {stdout:?}, not {expected:?}")));
    }
    Ok(())
}

/// Descriptors the daemon has open (a sandbox it still held after removing it would keep some).
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn percentiles(t: &[f64]) -> Value {
    let mut t = t.to_vec();
    t.sort_by(f64::total_cmp);
    let at = |q: f64| t.get(((t.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    let round = |v: f64| (v * 10.0).round() / 10.0;
    json!({"count": t.len(), "p50": round(at(0.5)), "p90": round(at(0.9)), "p99": round(at(0.99)), "max": round(at(1.0))})
}

fn print_summary(r: &Value, tally: &Tally) {
    let mib = |v: &Value| v.as_f64().unwrap_or(0.0) / 1024.0;
    println!(
        "\n{} loops in {:.0} s by {} clients: {} sandboxes (forks included), {} execs, {} snapshots (forks' included)",
        r["loops"],
        r["loops_seconds"].as_f64().unwrap_or(0.0),
        r["clients"],
        r["sandboxes"],
        r["execs"],
        r["snapshots"]
    );
    println!("\n{:<14} {:>7} {:>9} {:>9} {:>9} {:>9}", "operation", "count", "p50 ms", "p90 ms", "p99 ms", "max ms");
    for (op, p) in r["operations_ms"].as_object().into_iter().flatten() {
        println!(
            "{op:<14} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            p["count"].as_u64().unwrap_or(0),
            p["p50"].as_f64().unwrap_or(0.0),
            p["p90"].as_f64().unwrap_or(0.0),
            p["p99"].as_f64().unwrap_or(0.0),
            p["max"].as_f64().unwrap_or(0.0)
        );
    }
    let d = &r["daemon"];
    println!(
        "\ndaemon RSS: {:.1} MiB at start, {:.1} MiB peak, {:.1} MiB when the loops ended, {:.1} MiB after {:.0} s idle \
         (VmHWM {:.1} MiB, {} threads); open descriptors {} at start, {} after",
        mib(&d["rss_start_kib"]),
        mib(&d["rss_peak_kib"]),
        mib(&d["rss_loops_end_kib"]),
        mib(&d["rss_after_idle_kib"]),
        d["idle_seconds"].as_f64().unwrap_or(0.0),
        mib(&d["vmhwm_kib"]),
        d["threads"],
        d["open_fds_start"],
        d["open_fds_after_idle"]
    );
    println!(
        "  of which anonymous (heap, stacks): {:.1} MiB at start, {:.1} MiB after idle; file-backed (the binary's \
         pages): {:.1} MiB, {:.1} MiB",
        mib(&d["rss_anon_start_kib"]),
        mib(&d["rss_anon_after_idle_kib"]),
        mib(&d["rss_file_start_kib"]),
        mib(&d["rss_file_after_idle_kib"])
    );
    println!("\nerrors: {}", r["errors"]);
    for (kind, (count, first)) in &tally.errors {
        println!("  {count:>5}  {kind}: {first}");
    }
    let left = r["leftovers"].as_array().cloned().unwrap_or_default();
    println!("leftovers: {}", left.len());
    for l in &left {
        println!("  {}", l.as_str().unwrap_or_default());
    }
    for (what, n) in r["kept_by_design"].as_object().into_iter().flatten() {
        println!("kept by design: {n} {what}");
    }
}
