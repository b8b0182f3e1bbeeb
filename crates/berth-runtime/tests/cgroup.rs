//! The cgroup module against this host's real cgroups (v1 on the development machine, v2 on most
//! hosts). Needs root and a usable hierarchy: without them these tests fail and say why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use berth_runtime::cgroup::{Cgroup, CgroupError, Hierarchy, Limits, Version};

fn hierarchy() -> Hierarchy {
    assert!(
        rustix::process::geteuid().is_root(),
        "the cgroup integration tests create cgroups under /sys/fs/cgroup and must run as root"
    );
    Hierarchy::detect()
        .unwrap_or_else(|e| panic!("no usable cgroup hierarchy on this host: {}", berth_runtime::error_chain(&e)))
}

/// A name no other test (or test run) uses.
fn unique(tag: &str) -> String {
    format!("it-{}-{tag}", std::process::id())
}

/// Kills everything in the cgroup and removes it when the test ends, however it ends.
struct Cleanup(Cgroup);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.0.kill_all();
        let _ = self.0.remove();
    }
}

fn create(h: &Hierarchy, name: &str, limits: &Limits) -> Cleanup {
    let cg =
        h.create(name, limits).unwrap_or_else(|e| panic!("create cgroup {name}: {}", berth_runtime::error_chain(&e)));
    Cleanup(cg)
}

/// A child process, killed and reaped when the test ends.
struct Proc(Child);

impl Proc {
    fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sh -c SCRIPT`, held until [`release`] so it can be put in a cgroup first.
fn gated(script: &str) -> (Proc, ChildStdin) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("read _ && {script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sh");
    let stdin = child.stdin.take().expect("stdin");
    (Proc(child), stdin)
}

fn release(mut stdin: ChildStdin) {
    stdin.write_all(b"go\n").expect("release the child");
}

/// A control file's content, from whichever of the cgroup's directories has it.
fn control(cg: &Cgroup, file: &str) -> String {
    let path = cg.paths().iter().map(|d| d.join(file)).find(|p| p.exists());
    let path = path.unwrap_or_else(|| panic!("no {file} in {:?}", cg.paths()));
    fs::read_to_string(path).unwrap().trim().to_owned()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn lifecycle_limits_procs_usage_freeze_kill_remove() {
    let h = hierarchy();
    let name = unique("life");
    let limits = Limits { memory_bytes: Some(64 << 20), pids: Some(32), cpu_millis: Some(500) };
    let guard = create(&h, &name, &limits);
    let cg = &guard.0;

    assert_eq!(cg.version(), h.version());
    assert!(cg.exists());
    for dir in cg.paths() {
        assert!(dir.is_dir() && dir.ends_with(format!("berth/{name}")), "{}", dir.display());
    }
    match h.version() {
        Version::V1 => {
            assert_eq!(control(cg, "memory.limit_in_bytes"), "67108864");
            if cg.paths().iter().any(|d| d.join("memory.memsw.limit_in_bytes").exists()) {
                assert_eq!(control(cg, "memory.memsw.limit_in_bytes"), "67108864");
            } else {
                assert_eq!(control(cg, "memory.swappiness"), "0");
                assert!(!cg.warnings().is_empty());
            }
            assert!(control(cg, "memory.oom_control").contains("oom_kill_disable 0"));
            assert_eq!(control(cg, "pids.max"), "32");
            assert_eq!(control(cg, "cpu.cfs_period_us"), "100000");
            assert_eq!(control(cg, "cpu.cfs_quota_us"), "50000");
        }
        Version::V2 => {
            assert_eq!(control(cg, "memory.max"), "67108864");
            if cg.paths()[0].join("memory.swap.max").exists() {
                assert_eq!(control(cg, "memory.swap.max"), "0");
            } else {
                // Without swap accounting the limit cannot cover swap, and the user must be told so.
                assert!(cg.warnings().iter().any(|w| w.contains("memory.swap.max")), "{:?}", cg.warnings());
            }
            assert_eq!(control(cg, "pids.max"), "32");
            assert_eq!(control(cg, "cpu.max"), "50000 100000");
        }
    }
    assert!(h.list().contains(&name), "{:?}", h.list());

    let mut child = Proc(Command::new("sleep").arg("30").spawn().expect("spawn sleep"));
    let pid = child.pid();
    cg.add_process(pid).unwrap();
    assert_eq!(cg.procs().unwrap(), [pid]);
    let membership = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(membership.contains(&format!("/berth/{name}\n")), "{membership}");

    let usage = cg.usage().unwrap();
    assert_eq!(usage.pids, 1, "{usage:?}");
    assert_eq!(usage.oom_kills, 0, "{usage:?}");
    assert!(usage.peak_memory_bytes >= usage.memory_bytes, "{usage:?}");

    cg.freeze().unwrap();
    match h.version() {
        Version::V1 => assert_eq!(control(cg, "freezer.state"), "FROZEN"),
        Version::V2 => assert!(control(cg, "cgroup.events").contains("frozen 1")),
    }
    cg.thaw().unwrap();
    match h.version() {
        Version::V1 => assert_eq!(control(cg, "freezer.state"), "THAWED"),
        Version::V2 => assert_eq!(control(cg, "cgroup.freeze"), "0"),
    }

    cg.kill_all().unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(sigkill()), "{status:?}");
    assert!(cg.procs().unwrap().is_empty());

    cg.remove().unwrap();
    assert!(!cg.exists());
    for dir in cg.paths() {
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
    cg.remove().expect("removing again is fine");
    assert!(!h.list().contains(&name));
}

fn sigkill() -> i32 {
    rustix::process::Signal::KILL.as_raw()
}

#[test]
fn invalid_names_are_refused() {
    let h = hierarchy();
    let long = "x".repeat(65);
    for bad in ["", ".", "..", "../escape", "a/b", "with space", "semi;colon", long.as_str()] {
        match h.create(bad, &Limits::default()) {
            Err(CgroupError::InvalidName { name, reason }) => {
                assert_eq!(name, bad);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("{bad:?}: expected InvalidName, got {other}"),
            Ok(cg) => {
                let _ = cg.remove();
                panic!("{bad:?} was accepted")
            }
        }
        let cg = h.open(bad);
        assert!(!cg.exists() && cg.paths().is_empty());
        assert!(matches!(cg.remove(), Err(CgroupError::InvalidName { .. })));
    }
    for parent in h.parent_dirs() {
        assert!(!parent.join("with space").exists());
    }
}

#[test]
fn a_name_in_use_is_refused_and_the_first_cgroup_kept() {
    let h = hierarchy();
    let name = unique("dup");
    let first = create(&h, &name, &Limits::default());
    match h.create(&name, &Limits { pids: Some(5), ..Limits::default() }) {
        Err(CgroupError::Create { source, .. }) => assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists),
        Err(other) => panic!("expected Create, got {other}"),
        Ok(_) => panic!("a second cgroup with the same name was created"),
    }
    assert!(first.0.exists());
    assert_eq!(control(&first.0, "pids.max"), "max");
}

#[test]
fn a_leftover_is_listed_opened_and_removed() {
    let h = hierarchy();
    let name = unique("leftover");
    let made = create(&h, &name, &Limits::default());
    let paths = made.0.paths().to_vec();
    std::mem::forget(made); // as if berth had crashed

    assert!(h.list().contains(&name));
    let cg = h.open(&name);
    assert_eq!(cg.paths(), paths);
    let cleanup = Cleanup(cg.clone());
    assert!(cg.exists());
    cg.kill_all().unwrap();
    cg.remove().unwrap();
    assert!(!cg.exists());
    drop(cleanup);
}

/// How many of the cgroup's processes are `sleep`.
fn sleepers(cg: &Cgroup) -> usize {
    let comm = |pid: &i32| fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    cg.procs().unwrap().iter().filter(|pid| comm(pid).trim() == "sleep").count()
}

#[test]
fn pids_limit_holds_and_every_process_is_killed() {
    let h = hierarchy();
    let name = unique("pids");
    let guard = create(&h, &name, &Limits { pids: Some(5), ..Limits::default() });
    let cg = &guard.0;
    let (mut shell, stdin) = gated("for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done; wait");
    cg.add_process(shell.pid()).unwrap();
    release(stdin);

    // The shell and four sleeps fit; the fifth fork fails (dash then gives up, bash keeps retrying).
    wait_until("four sleeps are in the cgroup", || sleepers(cg) == 4);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sleepers(cg), 4);
    let usage = cg.usage().unwrap();
    assert!(usage.pids <= 5, "{usage:?}");

    // The sleeps are not our children; whatever reaps them, they must all be gone.
    cg.kill_all().unwrap();
    assert!(cg.procs().unwrap().is_empty());
    shell.0.wait().unwrap();
    wait_until("no task is left", || cg.usage().unwrap().pids == 0);
    cg.remove().unwrap();
    assert!(!cg.exists());
}

#[test]
fn memory_limit_brings_the_oom_killer() {
    let h = hierarchy();
    let name = unique("oom");
    let guard = create(&h, &name, &Limits { memory_bytes: Some(16 << 20), ..Limits::default() });
    let cg = &guard.0;
    // dd fills a 64 MiB buffer: four times the limit, and no swap to go to.
    let (mut hog, stdin) = gated("exec dd if=/dev/zero of=/dev/null bs=64M count=1");
    cg.add_process(hog.pid()).unwrap();
    release(stdin);

    let status = hog.0.wait().unwrap();
    assert_eq!(status.signal(), Some(sigkill()), "the hog was not OOM-killed: {status:?}");
    let usage = cg.usage().unwrap();
    assert!(usage.oom_kills >= 1, "{usage:?}");
    assert!(usage.peak_memory_bytes > 8 << 20, "{usage:?}");
    assert!(usage.peak_memory_bytes <= 16 << 20, "{usage:?}");
    cg.remove().unwrap();
}

#[test]
fn cpu_time_is_accounted() {
    let h = hierarchy();
    let name = unique("cpu");
    let guard = create(&h, &name, &Limits { cpu_millis: Some(1000), ..Limits::default() });
    let cg = &guard.0;
    let (mut busy, stdin) = gated("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done");
    cg.add_process(busy.pid()).unwrap();
    release(stdin);
    assert!(busy.0.wait().unwrap().success());
    let usage = cg.usage().unwrap();
    assert!(usage.cpu_ns > 1_000_000, "{usage:?}");
    assert_eq!(usage.pids, 0);
    cg.remove().unwrap();
}
