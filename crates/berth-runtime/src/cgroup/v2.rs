//! cgroup v2: one unified tree; `berth/<name>` under its root, with the cpu, memory and pids
//! controllers enabled down to it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fsio::{self, Fs};
use super::limits::{self, Limits};
use super::mountinfo::Mount;
use super::{CgroupError, Counters, Usage};

/// Where a pure-v2 host mounts the tree.
pub(crate) const DEFAULT_ROOT: &str = "/sys/fs/cgroup";

/// The controllers berth enables for its cgroups.
pub(crate) const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// The cgroup2 mount to use: the one on /sys/fs/cgroup, else a mount of the whole tree, else any.
pub(crate) fn find_root(mounts: &[Mount]) -> Option<PathBuf> {
    let v2 = || mounts.iter().filter(|m| m.is_v2());
    v2().rfind(|m| m.mount_point == Path::new(DEFAULT_ROOT))
        .or_else(|| v2().find(|m| m.is_whole()))
        .or_else(|| v2().next())
        .map(|m| m.mount_point.clone())
}

/// Make sure new cgroups under `root/<parent>/` (`berth/`, or a nested parent) get the controllers:
/// they must be available at the root, and are enabled in the `cgroup.subtree_control` of the root,
/// then of each level of the parent (made if missing).
pub(crate) fn prepare(root: &Path, parent: &Path, fs: Fs) -> Result<(), CgroupError> {
    require(&root.join("cgroup.controllers"))?;
    enable(root)?;
    // Every level down to the parent hands the controllers on.
    let mut dir = root.to_path_buf();
    for part in parent.components() {
        dir.push(part);
        fsio::ensure_dir(fs, &dir)?;
        enable(&dir)?;
    }
    Ok(())
}

/// Fail with the first of [`CONTROLLERS`] not listed in a `cgroup.controllers` file.
fn require(file: &Path) -> Result<(), CgroupError> {
    let text = fsio::read(file)?;
    let available: Vec<&str> = text.split_whitespace().collect();
    match CONTROLLERS.iter().find(|c| !available.contains(c)) {
        Some(missing) => Err(CgroupError::MissingController {
            name: (*missing).to_owned(),
            detail: format!("not listed in {}", file.display()),
        }),
        None => Ok(()),
    }
}

/// The `cgroup.subtree_control` value that enables whichever of [`CONTROLLERS`] `current` lacks;
/// empty when none is missing.
pub(crate) fn subtree_value(current: &str) -> String {
    let enabled: Vec<&str> = current.split_whitespace().collect();
    let missing: Vec<String> = CONTROLLERS.iter().filter(|c| !enabled.contains(c)).map(|c| format!("+{c}")).collect();
    missing.join(" ")
}

fn enable(dir: &Path) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.subtree_control");
    let value = subtree_value(&fsio::read(&file)?);
    if value.is_empty() {
        return Ok(());
    }
    fsio::write(&file, &value).map_err(|source| CgroupError::EnableControllers { file, value, source })
}

/// Write the limits into a new cgroup's directory. Returns warnings worth passing on.
pub(crate) fn configure(dir: &Path, limits: &Limits) -> Result<Vec<String>, CgroupError> {
    let mut warnings = Vec::new();
    // Delegation worked only if the kernel lists the controllers as available here.
    require(&dir.join("cgroup.controllers"))?;
    if let Some(bytes) = limits.memory_bytes {
        fsio::set(dir, "memory.max", &bytes.to_string())?;
        // Absent when swap accounting is off.
        if dir.join("memory.swap.max").exists() {
            fsio::set(dir, "memory.swap.max", "0")?;
        } else {
            warnings.push(format!(
                "swap accounting is off (no memory.swap.max in {}): the sandbox's memory may be swapped",
                dir.display()
            ));
        }
    }
    if let Some(pids) = limits.pids {
        fsio::set(dir, "pids.max", &pids.to_string())?;
    }
    if let Some(millis) = limits.cpu_millis {
        fsio::set(dir, "cpu.max", &limits::cpu_max(millis)?)?;
    }
    Ok(warnings)
}

pub(crate) fn usage(dir: &Path) -> Result<Usage, CgroupError> {
    let events = fsio::read(&dir.join("memory.events"))?;
    Ok(Usage {
        cpu_ns: fsio::read_keyed(&dir.join("cpu.stat"), "usage_usec")?.saturating_mul(1000),
        memory_bytes: fsio::read_u64(&dir.join("memory.current"))?,
        // memory.peak came with Linux 5.19.
        peak_memory_bytes: fsio::read_u64_or_zero(&dir.join("memory.peak"))?,
        oom_kills: fsio::keyed(&events, "oom_kill").unwrap_or(0),
        pids: fsio::read_u64(&dir.join("pids.current"))?,
    })
}

pub(crate) fn oom_kills(dir: &Path) -> Result<u64, CgroupError> {
    // Counted in the cgroup of the process killed and in each above it.
    Ok(fsio::keyed(&fsio::read(&dir.join("memory.events"))?, "oom_kill").unwrap_or(0))
}

pub(crate) fn counters(dir: &Path) -> Result<Counters, CgroupError> {
    Ok(Counters {
        cpu_ns: fsio::read_keyed(&dir.join("cpu.stat"), "usage_usec")?.saturating_mul(1000),
        memory_bytes: fsio::read_u64(&dir.join("memory.current"))?,
        peak_memory_bytes: fsio::read_u64_or_zero(&dir.join("memory.peak"))?,
    })
}

pub(crate) fn freeze(dir: &Path, within: Duration) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.freeze");
    let failed = |source| CgroupError::Freeze { path: path.clone(), state: "1", source };
    fsio::write(&path, "1").map_err(failed)?;
    // Freezing is asynchronous: cgroup.events says "frozen 1" once every task has stopped.
    let events = dir.join("cgroup.events");
    if fsio::wait_for(within, || frozen(&events))? {
        Ok(())
    } else {
        Err(failed(fsio::timed_out("cgroup.events did not say \"frozen 1\" in time")))
    }
}

/// Ask for a freeze and look at it without sleeping for at most `spin`: whether it settled.
pub(crate) fn try_freeze(dir: &Path, spin: Duration) -> Result<bool, CgroupError> {
    let path = dir.join("cgroup.freeze");
    fsio::write(&path, "1").map_err(|source| CgroupError::Freeze { path: path.clone(), state: "1", source })?;
    let events = dir.join("cgroup.events");
    fsio::spin_for(spin, || frozen(&events))
}

/// Whether `cgroup.events` says every task is frozen.
pub(crate) fn frozen(events: &Path) -> Result<bool, CgroupError> {
    Ok(fsio::keyed(&fsio::read(events)?, "frozen") == Some(1))
}

pub(crate) fn thaw(dir: &Path) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.freeze");
    fsio::write(&path, "0").map_err(|source| CgroupError::Freeze { path: path.clone(), state: "0", source })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::fs;

    use super::super::fixtures::{self, read_trimmed};
    use super::super::mountinfo;
    use super::*;

    #[test]
    fn root_prefers_sys_fs_cgroup() {
        let mounts = mountinfo::parse(fixtures::PURE_V2);
        assert_eq!(find_root(&mounts).unwrap(), Path::new("/sys/fs/cgroup"));
        let mounts = mountinfo::parse(fixtures::HYBRID);
        assert_eq!(find_root(&mounts).unwrap(), Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(find_root(&mountinfo::parse(fixtures::COMOUNTED)), None);
    }

    #[test]
    fn subtree_control_gets_only_what_is_missing() {
        assert_eq!(subtree_value(""), "+cpu +memory +pids");
        assert_eq!(subtree_value("cpuset memory\n"), "+cpu +pids");
        assert_eq!(subtree_value("cpu io memory pids\n"), "");
    }

    #[test]
    fn prepare_enables_controllers_in_root_and_parent() {
        let tree = fixtures::FakeV2::new("cpuset cpu io memory hugetlb pids rdma misc");
        prepare(tree.root(), Path::new("berth"), tree.fs()).unwrap();
        assert_eq!(read_trimmed(&tree.root().join("cgroup.subtree_control")), "+cpu +memory +pids");
        let parent = tree.root().join("berth");
        assert_eq!(read_trimmed(&parent.join("cgroup.controllers")), "cpu memory pids");
        assert_eq!(read_trimmed(&parent.join("cgroup.subtree_control")), "+cpu +memory +pids");

        // Already enabled: nothing is written (the fake would otherwise show the "+" form).
        fs::write(tree.root().join("cgroup.subtree_control"), "cpu memory pids\n").unwrap();
        fs::write(parent.join("cgroup.subtree_control"), "cpu memory pids\n").unwrap();
        prepare(tree.root(), Path::new("berth"), tree.fs()).unwrap();
        assert_eq!(read_trimmed(&tree.root().join("cgroup.subtree_control")), "cpu memory pids");
    }

    #[test]
    fn a_nested_parent_hands_the_controllers_on_at_every_level() {
        let tree = fixtures::FakeV2::new("cpu io memory pids");
        prepare(tree.root(), Path::new("kubepods/burstable/pod1"), tree.fs()).unwrap();
        let mut dir = tree.root().to_path_buf();
        for level in ["kubepods", "burstable", "pod1"] {
            dir.push(level);
            assert_eq!(read_trimmed(&dir.join("cgroup.subtree_control")), "+cpu +memory +pids", "{}", dir.display());
        }
    }

    #[test]
    fn prepare_needs_the_controllers_at_the_root() {
        let tree = fixtures::FakeV2::new("cpu io memory");
        let err = prepare(tree.root(), Path::new("berth"), tree.fs()).unwrap_err();
        assert!(matches!(&err, CgroupError::MissingController { name, .. } if name == "pids"), "{err}");
        assert!(!tree.root().join("berth").exists());
    }

    #[test]
    fn configure_writes_every_limit() {
        let tree = fixtures::FakeV2::new("cpu memory pids");
        let dir = tree.leaf("sb");
        let limits = Limits { memory_bytes: Some(256 << 20), pids: Some(64), cpu_millis: Some(1500) };
        let warnings = configure(&dir, &limits).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(read_trimmed(&dir.join("memory.max")), "268435456");
        assert_eq!(read_trimmed(&dir.join("memory.swap.max")), "0");
        assert_eq!(read_trimmed(&dir.join("pids.max")), "64");
        assert_eq!(read_trimmed(&dir.join("cpu.max")), "150000 100000");
    }

    #[test]
    fn configure_without_swap_file_or_limits() {
        let tree = fixtures::FakeV2::new("cpu memory pids");
        let dir = tree.leaf("sb");
        assert!(configure(&dir, &Limits::default()).unwrap().is_empty());
        assert_eq!(read_trimmed(&dir.join("memory.max")), "max");
        assert_eq!(read_trimmed(&dir.join("cpu.max")), "max 100000");

        fs::remove_file(dir.join("memory.swap.max")).unwrap();
        let warnings = configure(&dir, &Limits { memory_bytes: Some(4096), ..Limits::default() }).unwrap();
        assert_eq!(warnings.len(), 1);
        assert_eq!(read_trimmed(&dir.join("memory.max")), "4096");
    }

    #[test]
    fn usage_reads_the_v2_files() {
        let tree = fixtures::FakeV2::new("cpu memory pids");
        let dir = tree.leaf("sb");
        fs::write(dir.join("cpu.stat"), "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n").unwrap();
        fs::write(dir.join("memory.current"), "8192\n").unwrap();
        fs::write(dir.join("memory.peak"), "16384\n").unwrap();
        fs::write(dir.join("memory.events"), "low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n").unwrap();
        fs::write(dir.join("pids.current"), "3\n").unwrap();
        let usage = usage(&dir).unwrap();
        let expected = Usage { cpu_ns: 2_500_000, memory_bytes: 8192, peak_memory_bytes: 16384, oom_kills: 1, pids: 3 };
        assert_eq!(usage, expected);
        assert_eq!(oom_kills(&dir).unwrap(), 1);

        assert_eq!(
            counters(&dir).unwrap(),
            Counters { cpu_ns: 2_500_000, memory_bytes: 8192, peak_memory_bytes: 16384 }
        );

        fs::remove_file(dir.join("memory.peak")).unwrap();
        assert_eq!(super::usage(&dir).unwrap().peak_memory_bytes, 0);
        assert_eq!(counters(&dir).unwrap().peak_memory_bytes, 0, "no memory.peak before Linux 5.19");
        fs::write(dir.join("pids.current"), "lots\n").unwrap();
        assert!(matches!(super::usage(&dir), Err(CgroupError::Read { .. })));
    }

    #[test]
    fn freeze_waits_for_events_and_thaw_clears() {
        let tree = fixtures::FakeV2::new("cpu memory pids");
        let dir = tree.leaf("sb");
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 1\n").unwrap();
        freeze(&dir, Duration::from_secs(5)).unwrap();
        assert_eq!(read_trimmed(&dir.join("cgroup.freeze")), "1");
        thaw(&dir).unwrap();
        assert_eq!(read_trimmed(&dir.join("cgroup.freeze")), "0");
        // Asked, not yet settled: the spin gives up and leaves it asked.
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        assert!(!try_freeze(&dir, Duration::from_micros(200)).unwrap());
        assert_eq!(read_trimmed(&dir.join("cgroup.freeze")), "1");
        assert!(!frozen(&dir.join("cgroup.events")).unwrap());
        fs::write(dir.join("cgroup.events"), "populated 1\nfrozen 1\n").unwrap();
        assert!(try_freeze(&dir, Duration::ZERO).unwrap());
        fs::remove_file(dir.join("cgroup.freeze")).unwrap();
        assert!(matches!(freeze(&dir, Duration::from_millis(50)), Err(CgroupError::Freeze { .. })));
    }
}
