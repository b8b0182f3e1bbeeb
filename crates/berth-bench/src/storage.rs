//! `berth bench --storage`: what durable projects cost on this host's storage pool. A sandbox's workspace is
//! filled with N files of random data; then snapshot, fork (1 and 10 children), restore (twice in a row) and,
//! for reference, a plain create are timed through the daemon's API (and `berth fork` through the CLI),
//! interleaved with what one would do without berth: `cp -a` of the same workspace into the same file system,
//! as a full copy and as a copy that shares data blocks (`--reflink=always`).
//!
//! The copies are made by this process in the pool directory itself, so `--root` must be the daemon's data
//! root. Each case's sandboxes, snapshots and copies are removed right after it, outside the timed region,
//! and the file system is synced, so that no case pays for another's leftovers; whatever is left when the
//! bench stops (on an error too) is removed by a guard.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use berth_api::{
    CreateSandbox, CreateSnapshot, ExecFrame, ExecRequest, ForkRequest, Forked, RestoreRequest, Sandbox, Snapshot,
    StorageInfo,
};
use berth_client::{Client, ClientError, segment};
use serde::Serialize;

use crate::BenchArgs;

/// Directories the workspace's files are spread over: a project's files are not all in one directory, and
/// several streams of random data fill them faster than one.
const DIRS: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Snapshot,
    Fork(u32),
    Restore,
    Create,
    CliFork,
    Copy,
    Reflink,
}

struct Case {
    kind: Kind,
    name: &'static str,
    times: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct CaseResult {
    name: String,
    runs: usize,
    median_ms: f64,
    p90_ms: f64,
    min_ms: f64,
    /// This case's median over the median of `cp -a --reflink=always` (none when reflinks are unavailable).
    over_reflink_cp: Option<f64>,
    /// This case's median over the median of a full `cp -a` (`--reflink=never`).
    over_full_cp: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    mode: String,
    pool: String,
    files: u64,
    bytes: u64,
    fill_seconds: f64,
    runs: usize,
    warmup: usize,
    cases: Vec<CaseResult>,
    unavailable: Vec<String>,
}

/// Everything the bench made that still exists. The round's things go at the end of each case; `Drop`
/// removes whatever is left, the filled sandbox and its base snapshot included.
struct Made {
    socket: PathBuf,
    sandbox: Option<String>,
    base: Option<String>,
    sandboxes: Vec<String>,
    snapshots: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Made {
    fn clean(&mut self) -> anyhow::Result<()> {
        let mut failed = Vec::new();
        for id in std::mem::take(&mut self.sandboxes) {
            if let Err(e) = delete(&self.socket, &format!("/v1/sandboxes/{}", segment(&id))) {
                failed.push(format!("sandbox {id}: {e}"));
            }
        }
        for id in std::mem::take(&mut self.snapshots) {
            if let Err(e) = delete(&self.socket, &format!("/v1/snapshots/{}", segment(&id))) {
                failed.push(format!("snapshot {id}: {e}"));
            }
        }
        for dir in std::mem::take(&mut self.dirs) {
            let gone = match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dir),
                Ok(_) => std::fs::remove_file(&dir),
                Err(_) => Ok(()),
            };
            if let Err(e) = gone {
                failed.push(format!("{}: {e}", dir.display()));
            }
        }
        anyhow::ensure!(failed.is_empty(), "could not remove what the benchmark made: {}", failed.join("; "));
        Ok(())
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        self.sandboxes.extend(self.sandbox.take());
        self.snapshots.extend(self.base.take());
        if let Err(e) = self.clean() {
            eprintln!("berth bench: {e}");
        }
    }
}

/// DELETE `path`; already gone counts as done.
fn delete(socket: &Path, path: &str) -> Result<(), ClientError> {
    Client::connect(socket)?.delete(path).map(|_| ()).or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
}

/// What every case needs to know.
struct Ctx<'a> {
    root: &'a Path,
    socket: &'a Path,
    exe: PathBuf,
    pool: PathBuf,
    id: String,
    base: String,
    workspace: PathBuf,
    copies: PathBuf,
}

pub fn bench_storage(root: &Path, socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let (_, body) = Client::connect(socket)?.get("/v1/storage")?;
    let info: StorageInfo = berth_client::decode(&body)?;
    let pool = root.join("pool");
    let mut made = Made {
        socket: socket.to_path_buf(),
        sandbox: None,
        base: None,
        sandboxes: vec![],
        snapshots: vec![],
        dirs: vec![],
    };
    if !args.json {
        println!(
            "storage pool: {} at {} ({:.1} GiB, {:.1} GiB free)",
            info.mode,
            pool.display(),
            info.size_bytes as f64 / GIB,
            info.free_bytes as f64 / GIB
        );
    }

    let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &spec())?;
    let sandbox: Sandbox = berth_client::decode(&body)?;
    made.sandbox = Some(sandbox.id.clone());
    let workspace = pool.join("sandboxes").join(&sandbox.id).join("workspace");
    anyhow::ensure!(
        workspace.is_dir(),
        "the sandbox's workspace is not at {}: is --root the daemon's data root?",
        workspace.display()
    );
    let t = Instant::now();
    fill(socket, &sandbox.id, args.files, args.size)?;
    rustix::fs::syncfs(std::fs::File::open(&pool)?)?;
    let fill_seconds = t.elapsed().as_secs_f64();
    let (files, bytes) = tree_size(&workspace)?;
    if !args.json {
        println!(
            "workspace: {files} files, {:.1} MiB in {DIRS} directories (filled and synced in {fill_seconds:.1} s)",
            bytes as f64 / MIB
        );
    }
    let (_, body) =
        Client::connect(socket)?.post_json(&sandbox_path(&sandbox.id, "snapshots"), &CreateSnapshot::default())?;
    let base = berth_client::decode::<Snapshot>(&body)?.id;
    made.base = Some(base.clone());

    let copies = pool.join("volumes");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&copies)?;
    let ctx = Ctx { root, socket, exe: std::env::current_exe()?, pool, id: sandbox.id, base, workspace, copies };
    // Restore runs twice in a row: the first replaces a volume whose files the previous round's copies have
    // just read (as a build would have), the second one that nothing has read. The replaced volume is
    // removed within the request, and on btrfs that costs more the more of its inodes are cached.
    let mut cases: Vec<Case> = [
        (Kind::Snapshot, "API snapshot"),
        (Kind::Fork(1), "API fork, count 1"),
        (Kind::Fork(10), "API fork, count 10"),
        (Kind::Restore, "API restore"),
        (Kind::Restore, "API restore, repeated"),
        (Kind::Create, "API create (no clone)"),
        (Kind::CliFork, "berth fork (CLI)"),
        (Kind::Copy, "cp -a --reflink=never"),
        (Kind::Reflink, "cp -a --reflink=always"),
    ]
    .into_iter()
    .map(|(kind, name)| Case { kind, name, times: vec![] })
    .collect();
    let mut unavailable = Vec::new();
    if let Err(why) = reflink_works(&ctx, &mut made) {
        cases.retain(|c| c.kind != Kind::Reflink);
        unavailable.push(format!("cp -a --reflink=always: {why}"));
    }

    let mut n = 0;
    for round in 0..args.warmup + args.runs {
        for case in &mut cases {
            n += 1;
            let ms = run_case(case.kind, &ctx, &mut made, n)?;
            made.clean()?;
            rustix::fs::syncfs(std::fs::File::open(&ctx.pool)?)?;
            if round >= args.warmup {
                case.times.push(ms);
            }
        }
    }

    let report = Report {
        mode: info.mode,
        pool: ctx.pool.display().to_string(),
        files,
        bytes,
        fill_seconds,
        runs: args.runs,
        warmup: args.warmup,
        cases: summarise(&cases),
        unavailable,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    drop(made);
    Ok(0)
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

/// The sandbox the bench fills, and what the create case makes: persistent, as a durable project is.
fn spec() -> CreateSandbox {
    CreateSandbox { persistent: true, ..CreateSandbox::default() }
}

fn sandbox_path(id: &str, verb: &str) -> String {
    format!("/v1/sandboxes/{}/{verb}", segment(id))
}

/// `files` files of random data totalling about `size` bytes in /workspace/bench/dNN, with one stream of
/// /dev/urandom per directory cut into files by `split` (one process per directory, not one per file).
fn fill(socket: &Path, id: &str, files: u64, size: u64) -> anyhow::Result<()> {
    let files = files.max(1);
    let each = (size / files).max(1);
    let dirs = DIRS.min(files);
    let mut script = String::from("set -e\n");
    for d in 0..dirs {
        let count = files / dirs + u64::from(d < files % dirs);
        script.push_str(&format!(
            "mkdir -p /workspace/bench/d{d:02}\n( head -c {} /dev/urandom | split -d -a 7 -b {each} - \
             /workspace/bench/d{d:02}/f ) &\np{d}=$!\n",
            count * each
        ));
    }
    for d in 0..dirs {
        script.push_str(&format!("wait $p{d}\n"));
    }
    script.push_str("sync\n");
    let req = ExecRequest { argv: vec!["sh".into(), "-c".into(), script], ..ExecRequest::default() };
    let mut stream = Client::connect(socket)?.post_json_stream(&sandbox_path(id, "execs"), &req)?;
    let mut output = String::new();
    let mut result = None;
    while let Some(line) = stream.next_line()? {
        match serde_json::from_slice::<ExecFrame>(&line) {
            Ok(ExecFrame::Output { data, .. }) => output.push_str(&data),
            Ok(ExecFrame::Exit(r)) => result = Some(r),
            _ => {}
        }
    }
    let result = result.ok_or_else(|| anyhow::anyhow!("the exec that fills the workspace ended without a result"))?;
    anyhow::ensure!(result.exit_code == 0, "filling the workspace failed ({result:?}): {}", output.trim());
    Ok(())
}

/// Regular files under `dir` and their bytes: the fill is checked, not assumed.
fn tree_size(dir: &Path) -> anyhow::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                todo.push(entry.path());
            } else if meta.is_file() {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    Ok((files, bytes))
}

/// Whether `cp --reflink=always` works inside the pool (it needs a file system that shares blocks, such as
/// btrfs or XFS); the error says why not.
fn reflink_works(ctx: &Ctx, made: &mut Made) -> Result<(), String> {
    let src = ctx.copies.join(".bench-reflink-probe");
    let dst = ctx.copies.join(".bench-reflink-probe-copy");
    made.dirs.extend([src.clone(), dst.clone()]);
    let probe = std::fs::write(&src, [0u8; 4096]).map_err(|e| e.to_string()).and_then(|()| {
        let out = Command::new("cp")
            .arg("--reflink=always")
            .arg(&src)
            .arg(&dst)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run cp: {e}"))?;
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
    });
    let cleaned = made.clean().map_err(|e| e.to_string());
    probe.and(cleaned)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Run one case once and return its time; what it made is recorded in `made` for the caller to remove.
fn run_case(kind: Kind, ctx: &Ctx, made: &mut Made, n: usize) -> anyhow::Result<f64> {
    match kind {
        Kind::Snapshot => {
            let t = Instant::now();
            let (_, body) = Client::connect(ctx.socket)?
                .post_json(&sandbox_path(&ctx.id, "snapshots"), &CreateSnapshot::default())?;
            let ms = ms(t);
            made.snapshots.push(berth_client::decode::<Snapshot>(&body)?.id);
            Ok(ms)
        }
        Kind::Fork(count) => {
            let t = Instant::now();
            let (_, body) = Client::connect(ctx.socket)?
                .post_json(&sandbox_path(&ctx.id, "fork"), &ForkRequest { count: Some(count), ..Default::default() })?;
            let ms = ms(t);
            forked(made, &body, count)?;
            Ok(ms)
        }
        Kind::Restore => {
            let t = Instant::now();
            let req = RestoreRequest { snapshot: ctx.base.clone() };
            let (_, body) = Client::connect(ctx.socket)?.post_json(&sandbox_path(&ctx.id, "restore"), &req)?;
            let ms = ms(t);
            berth_client::decode::<Sandbox>(&body)?;
            Ok(ms)
        }
        Kind::Create => {
            let t = Instant::now();
            let (_, body) = Client::connect(ctx.socket)?.post_json("/v1/sandboxes", &spec())?;
            let ms = ms(t);
            made.sandboxes.push(berth_client::decode::<Sandbox>(&body)?.id);
            Ok(ms)
        }
        Kind::CliFork => {
            let t = Instant::now();
            let out = Command::new(&ctx.exe)
                .arg("--root")
                .arg(ctx.root)
                .arg("--socket")
                .arg(ctx.socket)
                .args(["fork", &ctx.id, "--json"])
                .stdin(Stdio::null())
                .output()?;
            let ms = ms(t);
            anyhow::ensure!(
                out.status.success(),
                "berth fork failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            forked(made, &out.stdout, 1)?;
            Ok(ms)
        }
        Kind::Copy | Kind::Reflink => {
            let dst = ctx.copies.join(format!(".bench-copy-{n}"));
            made.dirs.push(dst.clone());
            // GNU cp 9 shares blocks by default (`--reflink=auto`): a full copy has to be asked for.
            let reflink = if kind == Kind::Reflink { "--reflink=always" } else { "--reflink=never" };
            let t = Instant::now();
            let out = Command::new("cp")
                .args(["-a", reflink, "--no-target-directory", "--"])
                .arg(&ctx.workspace)
                .arg(&dst)
                .stdin(Stdio::null())
                .output()?;
            let ms = ms(t);
            anyhow::ensure!(
                out.status.success(),
                "cp -a {reflink} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(ms)
        }
    }
}

/// Record what a fork made: its children and the snapshot of the instant, their parent.
fn forked(made: &mut Made, body: &[u8], count: u32) -> anyhow::Result<()> {
    let forked: Forked = berth_client::decode(body)?;
    made.snapshots.push(forked.parent);
    let got = forked.sandboxes.len();
    made.sandboxes.extend(forked.sandboxes.into_iter().map(|s| s.id));
    anyhow::ensure!(got == count as usize, "the fork made {got} of {count} sandboxes");
    Ok(())
}

fn summarise(cases: &[Case]) -> Vec<CaseResult> {
    let stats = |times: &[f64]| {
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        let at = |q: f64| t.get(((t.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        (at(0.5), at(0.9), at(0.0))
    };
    let median_of = |kind| cases.iter().find(|c| c.kind == kind).map(|c| stats(&c.times).0).filter(|m| *m > 0.0);
    let (reflink, full) = (median_of(Kind::Reflink), median_of(Kind::Copy));
    cases
        .iter()
        .map(|c| {
            let (median_ms, p90_ms, min_ms) = stats(&c.times);
            CaseResult {
                name: c.name.to_string(),
                runs: c.times.len(),
                median_ms,
                p90_ms,
                min_ms,
                over_reflink_cp: reflink.map(|r| median_ms / r),
                over_full_cp: full.map(|f| median_ms / f),
            }
        })
        .collect()
}

fn print_table(report: &Report) {
    println!(
        "{} interleaved rounds ({} warm-up); each case's sandboxes, snapshots and copies are removed after it, \
         outside the timed region\n",
        report.runs, report.warmup
    );
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>14} {:>10}",
        "case", "median ms", "p90 ms", "min ms", "/ reflink cp", "/ cp -a"
    );
    let ratio = |r: Option<f64>| r.map(|r| format!("{r:.3}x")).unwrap_or_else(|| "-".into());
    for c in &report.cases {
        println!(
            "{:<26} {:>10.2} {:>10.2} {:>10.2} {:>14} {:>10}",
            c.name,
            c.median_ms,
            c.p90_ms,
            c.min_ms,
            ratio(c.over_reflink_cp),
            ratio(c.over_full_cp)
        );
    }
    let median = |name: &str| report.cases.iter().find(|c| c.name == name).map(|c| c.median_ms);
    if let (Some(snap), Some(fork), Some(create)) =
        (median("API snapshot"), median("API fork, count 1"), median("API create (no clone)"))
    {
        println!(
            "\nfork count 1 - snapshot: {:.2} ms (a fork clones twice, the child and its parent snapshot, then \
             starts the child); a plain create: {create:.2} ms",
            fork - snap
        );
    }
    for u in &report.unavailable {
        println!("unavailable: {u}");
    }
}
