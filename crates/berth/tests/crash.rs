//! A daemon (and, in some rounds, a shim) SIGKILLed at a random moment of create, exec, fork, snapshot,
//! restore, reset, stop/start, rm and volume changes; restarted; at the end `berth rm --all`. Every round a
//! persistent sandbox must come back with its workspace's bytes unchanged, and at the end nothing of this
//! test's data root may be left: no volume or subvolume in the pool, no shim socket or runtime claim, no
//! cgroup, mount or process of its sandboxes.
//!
//! `BERTH_CRASH_SEED` replays a run (the seed is printed), `BERTH_CRASH_ROUNDS` sets how many rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// xorshift64*: enough to pick operations and delays, and the same for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() { None } else { Some(&items[self.below(items.len() as u64) as usize]) }
    }
}

fn list(d: &Daemon, args: &[&str]) -> Vec<Value> {
    let out = d.berth(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().cloned().unwrap_or_default()
}

fn ids(d: &Daemon) -> Vec<(String, String)> {
    list(d, &["ls", "--json"])
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["state"].as_str().unwrap().to_string()))
        .collect()
}

/// Pids whose command line mentions `needle`.
fn pids_mentioning(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if String::from_utf8_lossy(&cmd).replace('\0', " ").contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Pids in the cgroup of one of `ids`.
fn pids_in(ids: &BTreeSet<String>) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cg) = std::fs::read_to_string(entry.path().join("cgroup")) else { continue };
        if let Some(id) = ids.iter().find(|id| cg.contains(&format!("/berth/{id}"))) {
            out.push((pid, id.clone()));
        }
    }
    out
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Start `berth ARGS` in the background.
fn start(d: &Daemon, args: &[String]) -> Child {
    d.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The operation of one round, on the sandboxes and snapshots there are.
fn operation(rng: &mut Rng, d: &Daemon, keeper: &str, round: u64) -> Vec<String> {
    let sandboxes = ids(d);
    let running: Vec<String> = sandboxes.iter().filter(|(_, s)| s == "running").map(|(i, _)| i.clone()).collect();
    let stopped: Vec<String> = sandboxes.iter().filter(|(_, s)| s == "stopped").map(|(i, _)| i.clone()).collect();
    let others: Vec<String> = sandboxes.iter().map(|(i, _)| i.clone()).filter(|i| i != keeper).collect();
    let keeper_snaps: Vec<String> = list(d, &["snapshot", "ls", "--json"])
        .iter()
        .filter(|s| s["sandbox_id"] == keeper && s["origin"] == "snapshot")
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    loop {
        let op: Option<Vec<String>> = match rng.below(11) {
            0 => Some(s(&["create"])),
            1 => Some(s(&["create", "--persistent"])),
            2 => rng
                .pick(&running)
                .map(|i| s(&["exec", i, "--", "sh", "-c", "head -c 3M /dev/urandom > /workspace/scratch; sync"])),
            3 => rng.pick(&running).map(|i| s(&["fork", i, "--count", "3"])),
            4 => Some(s(&["snapshot", keeper])),
            5 => rng.pick(&keeper_snaps).map(|snap| s(&["restore", keeper, snap])),
            6 => Some(s(&["reset", keeper, "--keep-workspace"])),
            7 => rng.pick(&running).map(|i| s(&["stop", i])),
            8 => rng.pick(&stopped).map(|i| s(&["start", i])),
            9 => rng.pick(&others).map(|i| s(&["rm", i])),
            _ => Some(if round.is_multiple_of(2) {
                s(&["volume", "create", &format!("v{round}")])
            } else {
                s(&["volume", "rm", &format!("v{}", round - 1)])
            }),
        };
        if let Some(op) = op {
            return op;
        }
    }
}

#[test]
fn a_daemon_or_shim_killed_at_any_moment_leaves_nothing_behind() {
    let seed = std::env::var("BERTH_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let rounds: u64 = std::env::var("BERTH_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!(
        "crash test: seed {seed}, {rounds} rounds (BERTH_CRASH_SEED={seed} BERTH_CRASH_ROUNDS={rounds} to replay)"
    );
    let mut rng = Rng(seed);
    let mut d = Daemon::start_with(&["--default-disk", "256M"]);
    let root = d.root();
    let root_arg = format!("--root {} shim", root.display());

    let keeper = d.create(&["--persistent", "--name", "keeper"]);
    let hash = d.sh(&keeper, "head -c 1M /dev/urandom > /workspace/data && sha256sum /workspace/data");
    let mut seen: BTreeSet<String> = BTreeSet::from([keeper.clone()]);

    for round in 0..rounds {
        let op = operation(&mut rng, &d, &keeper, round);
        let delay = Duration::from_millis(rng.below(400));
        // What is killed: the daemon (half the rounds), the daemon and a shim, or a shim alone.
        // The last round kills a shim alone, so that what the running daemon cleans up is checked too.
        let (kill_daemon, kill_shim) = match if round + 1 == rounds { 3 } else { rng.below(4) } {
            0 | 1 => (true, false),
            2 => (true, true),
            _ => (false, true),
        };
        eprintln!("round {round}: {op:?}, killed after {delay:?}: daemon {kill_daemon}, a shim {kill_shim}");
        let mut client = start(&d, &op);
        std::thread::sleep(delay);
        if kill_shim && let Some(pid) = rng.pick(&pids_mentioning(&root_arg)).copied() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        if kill_daemon {
            d.kill();
            let _ = client.kill();
            let _ = client.wait();
            d.spawn();
        } else {
            // The daemon lives on: the operation ends (in failure, if its sandbox's shim was the one killed).
            let deadline = Instant::now() + Duration::from_secs(60);
            while client.try_wait().unwrap().is_none() {
                assert!(Instant::now() < deadline, "round {round} (seed {seed}): {op:?} did not end");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for (id, _) in ids(&d) {
            seen.insert(id);
        }

        // The persistent sandbox is whole: running, or stopped (its shim may have been the one killed, which
        // the daemon notices within a few reaper passes), with its workspace's bytes as they were.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Listed, unless for the instant in which the daemon moves it from running to stopped.
            let state = ids(&d).into_iter().find(|(i, _)| *i == keeper).map(|(_, s)| s);
            assert!(
                state.is_some() || Instant::now() < deadline,
                "round {round} (seed {seed}): the persistent sandbox is gone"
            );
            if state.as_deref() == Some("stopped") {
                let out = d.berth(&["start", &keeper]);
                assert!(out.status.success(), "round {round} (seed {seed}): start: {}", text(&out.stderr));
            }
            let out = d.berth(&["exec", &keeper, "--", "sha256sum", "/workspace/data"]);
            if out.status.success() {
                assert_eq!(text(&out.stdout), hash, "round {round} (seed {seed}): the workspace changed");
                break;
            }
            // Its shim died under it and the daemon has not noticed yet.
            assert!(Instant::now() < deadline, "round {round} (seed {seed}): exec: {}", text(&out.stderr));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // Everything goes: sandboxes, snapshots, volumes.
    let out = d.berth(&["rm", "--all"]);
    assert!(out.status.success(), "rm --all: {}", text(&out.stderr));
    for s in list(&d, &["snapshot", "ls", "--json"]) {
        let id = s["id"].as_str().unwrap();
        let out = d.berth(&["snapshot", "rm", id]);
        assert!(out.status.success(), "snapshot rm {id}: {}", text(&out.stderr));
    }
    for v in list(&d, &["volume", "ls", "--json"]) {
        let name = v["name"].as_str().unwrap();
        let out = d.berth(&["volume", "rm", name]);
        assert!(out.status.success(), "volume rm {name}: {}", text(&out.stderr));
    }
    assert!(ids(&d).is_empty(), "seed {seed}: sandboxes left: {:?}", ids(&d));
    // Every sandbox there ever was has a journal, kept after it is gone: those made and lost within one round
    // are checked too.
    for name in entries(&root.join("journal")) {
        if let Some(id) = name.strip_suffix(".jsonl") {
            seen.insert(id.to_string());
        }
    }
    let pool = root.join("pool");
    // Removal of a volume is done when the call returns; processes and cgroups may take a moment to go.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leftovers = leftovers(&root, &pool, &seen, &root_arg);
        if leftovers.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "seed {seed}: left behind: {leftovers:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Everything of this test's data root and sandboxes that is still there.
fn leftovers(root: &Path, pool: &Path, seen: &BTreeSet<String>, shim_arg: &str) -> Vec<String> {
    let mut found = Vec::new();
    for area in ["sandboxes", "snapshots", "volumes", "images"] {
        for name in entries(&pool.join(area)) {
            found.push(format!("pool volume {area}/{name}"));
        }
    }
    // Subvolumes anywhere in the pool, nested or hidden ones included.
    let out = Command::new("btrfs").args(["subvolume", "list", "-o"]).arg(pool).output().unwrap();
    for line in text(&out.stdout).lines().filter(|l| !l.trim().is_empty()) {
        found.push(format!("subvolume {line}"));
    }
    for name in entries(&root.join("shims")) {
        found.push(format!("shim socket {name}"));
    }
    for name in entries(&root.join("sandboxes")).into_iter().filter(|n| n.ends_with(".lock")) {
        found.push(format!("runtime claim {name}"));
    }
    for name in entries(&root.join("images")).into_iter().filter(|n| n.starts_with('.')) {
        found.push(format!("half-made image {name}"));
    }
    for id in seen {
        for controller in ["memory", "pids", "cpu", "freezer"] {
            let dir = PathBuf::from("/sys/fs/cgroup").join(controller).join("berth").join(id);
            if dir.exists() {
                found.push(format!("cgroup {}", dir.display()));
            }
        }
        let live = Path::new("/run/berth/live").join(format!("{id}.lock"));
        if live.exists() {
            found.push(format!("liveness claim {}", live.display()));
        }
    }
    for (pid, id) in pids_in(seen) {
        found.push(format!("process {pid} in sandbox {id}'s cgroup"));
    }
    for pid in pids_mentioning(shim_arg) {
        found.push(format!("shim process {pid}"));
    }
    let dir = root.parent().unwrap().to_string_lossy().into_owned();
    let pool_str = pool.to_string_lossy().into_owned();
    for line in std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines() {
        let point = line.split(' ').nth(4).unwrap_or_default();
        if point.starts_with(&dir) && point != pool_str {
            found.push(format!("mount {point}"));
        }
    }
    found
}

/// The lifecycle's crash case: a fork or a snapshot interrupted by a crash while it has its source frozen
/// leaves the source as it found it, running (not listed as paused, with nobody having paused it), and a
/// paused source is found paused.
#[test]
fn a_fork_or_snapshot_interrupted_by_a_crash_leaves_its_source_as_it_found_it() {
    // Files copied one by one (no btrfs pool): the freeze lasts as long as the copy of the many files.
    let mut d = Daemon::start_with(&["--storage", "none"]);
    let (root, pool) = (d.root(), d.root().join("pool"));
    let shim_arg = format!("--root {} shim", root.display());
    let id = d.create(&["--persistent"]);
    d.sh(&id, "mkdir /workspace/many && cd /workspace/many && seq 1 30000 | xargs touch");
    let cg = berth_runtime::cgroup::Hierarchy::detect().unwrap().open(&id);
    let frozen = || cg.is_frozen().unwrap_or(false);
    let state = |d: &Daemon| ids(d).into_iter().find(|(i, _)| *i == id).map(|(_, s)| s);
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let fork = args(&["fork", &id, "--count", "4"]);

    for command in [fork.clone(), args(&["snapshot", &id])] {
        let mut caught = false;
        for attempt in 0..10 {
            let mut client = start(&d, &command);
            let until = Instant::now() + Duration::from_secs(30);
            while !frozen() && client.try_wait().unwrap().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            d.kill();
            let _ = (client.kill(), client.wait());
            // Nothing can thaw it while no daemon runs: the crash case, established.
            caught = frozen();
            d.spawn();
            if caught {
                break;
            }
            eprintln!("{command:?}, attempt {attempt}: it finished before the kill; again");
        }
        assert!(caught, "{command:?}: no run was caught with its source frozen");
        assert_eq!(state(&d).as_deref(), Some("running"), "{command:?}: nobody paused it");
        assert!(!frozen(), "the restarted daemon thawed what {command:?} had frozen");
        let journal = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "").1;
        assert!(!journal.contains("\"pause\"") && journal.contains("\"recover\""), "{journal}");
        assert_eq!(d.sh(&id, "echo alive"), "alive\n");
        let out = d.berth(&["start", &id]);
        let said = text(&out.stderr);
        assert!(!out.status.success() && said.contains("is running: it is already started"), "{said}");
    }

    // A paused source is not frozen for the fork (it is already): found paused after the crash, and it stays so.
    assert!(d.berth(&["pause", &id]).status.success());
    let before = entries(&pool.join("sandboxes")).len();
    let mut client = start(&d, &fork);
    let until = Instant::now() + Duration::from_secs(30);
    while entries(&pool.join("sandboxes")).len() == before
        && client.try_wait().unwrap().is_none()
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    d.kill();
    let _ = (client.kill(), client.wait());
    d.spawn();
    assert_eq!(state(&d).as_deref(), Some("paused"));
    assert!(frozen(), "a paused sandbox stays frozen");

    // Nothing of the interrupted operations is left.
    let out = d.berth(&["rm", "--all"]);
    assert!(out.status.success(), "rm --all: {}", text(&out.stderr));
    for s in list(&d, &["snapshot", "ls", "--json"]) {
        let snap = s["id"].as_str().unwrap();
        assert!(d.berth(&["snapshot", "rm", snap]).status.success(), "snapshot rm {snap}");
    }
    let seen: BTreeSet<String> = entries(&root.join("journal"))
        .iter()
        .filter_map(|n| n.strip_suffix(".jsonl").map(String::from))
        .chain([id.clone()])
        .collect();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let left = leftovers(&root, &pool, &seen, &shim_arg);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < until, "left behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
