//! cgroup v1: one hierarchy per controller (some perhaps co-mounted, like `cpu,cpuacct`), with
//! `berth/<name>` made under the root of each.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fsio::{self, Fs};
use super::limits::{self, CPU_PERIOD_US, Limits};
use super::mountinfo::Mount;
use super::{CgroupError, Counters, Usage};

/// The controllers berth uses on v1.
pub(crate) const CONTROLLERS: [&str; 5] = ["memory", "pids", "cpu", "cpuacct", "freezer"];

/// One path per controller: where its hierarchy is mounted, or a cgroup's directory in it.
/// Co-mounted controllers have equal paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dirs {
    pub memory: PathBuf,
    pub pids: PathBuf,
    pub cpu: PathBuf,
    pub cpuacct: PathBuf,
    pub freezer: PathBuf,
}

impl Dirs {
    /// The hierarchy roots, from the mount table. Each controller must be mounted; of several
    /// mounts of one hierarchy, a mount of its whole tree is preferred.
    pub(crate) fn find_roots(mounts: &[Mount]) -> Result<Dirs, CgroupError> {
        let root = |controller: &str| {
            let mut found = mounts.iter().filter(|m| m.is_v1_with(controller));
            let first = found.clone().next();
            found.find(|m| m.is_whole()).or(first).map(|m| m.mount_point.clone()).ok_or_else(|| {
                CgroupError::MissingController {
                    name: controller.to_owned(),
                    detail: "no cgroup v1 hierarchy with it is mounted (see /proc/self/mountinfo)".to_owned(),
                }
            })
        };
        Ok(Dirs {
            memory: root("memory")?,
            pids: root("pids")?,
            cpu: root("cpu")?,
            cpuacct: root("cpuacct")?,
            freezer: root("freezer")?,
        })
    }

    /// The same relative path under each.
    pub(crate) fn join(&self, rel: &Path) -> Dirs {
        Dirs {
            memory: self.memory.join(rel),
            pids: self.pids.join(rel),
            cpu: self.cpu.join(rel),
            cpuacct: self.cpuacct.join(rel),
            freezer: self.freezer.join(rel),
        }
    }

    /// Each path once, in controller order.
    pub(crate) fn distinct(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::with_capacity(CONTROLLERS.len());
        for p in [&self.memory, &self.pids, &self.cpu, &self.cpuacct, &self.freezer] {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// Make the parent (`berth/`, or a nested one) in every hierarchy that lacks it.
pub(crate) fn prepare(roots: &Dirs, parent: &Path, fs: Fs) -> Result<(), CgroupError> {
    for parent in roots.join(parent).distinct() {
        fsio::ensure_dir(fs, &parent)?;
    }
    Ok(())
}

/// Write the limits into a new cgroup's directories. Returns warnings worth passing on.
pub(crate) fn configure(dirs: &Dirs, limits: &Limits) -> Result<Vec<String>, CgroupError> {
    let mut warnings = Vec::new();
    if let Some(bytes) = limits.memory_bytes {
        let value = bytes.to_string();
        // memory+swap at the same value: no swap at all. The file is there only with swap accounting. The
        // memory limit may never exceed memory+swap's, so a raise goes to memory+swap first, a cut second.
        if dirs.memory.join("memory.memsw.limit_in_bytes").exists() {
            let raise = fsio::read_u64(&dirs.memory.join("memory.memsw.limit_in_bytes")).is_ok_and(|now| bytes > now);
            let order = if raise {
                ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]
            } else {
                ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            };
            for file in order {
                fsio::set(&dirs.memory, file, &value)?;
            }
        } else {
            fsio::set(&dirs.memory, "memory.limit_in_bytes", &value)?;
            fsio::set(&dirs.memory, "memory.swappiness", "0")?;
            warnings.push(format!(
                "swap accounting is off (no memory.memsw.limit_in_bytes in {}): set memory.swappiness=0 \
                 instead, which keeps the sandbox out of swap but does not account swap",
                dirs.memory.display()
            ));
        }
    }
    // The kernel's OOM killer must act at the limit. A new cgroup inherits oom_kill_disable from
    // its parent; write it only when set, since writing the file is deprecated and logs a warning.
    let oom_control = dirs.memory.join("memory.oom_control");
    if fsio::keyed(&fsio::read(&oom_control)?, "oom_kill_disable") == Some(1) {
        fsio::set(&dirs.memory, "memory.oom_control", "0")?;
    }
    if let Some(pids) = limits.pids {
        fsio::set(&dirs.pids, "pids.max", &pids.to_string())?;
    }
    if let Some(millis) = limits.cpu_millis {
        fsio::set(&dirs.cpu, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
        fsio::set(&dirs.cpu, "cpu.cfs_quota_us", &limits::cpu_quota_us(millis)?.to_string())?;
    }
    Ok(warnings)
}

pub(crate) fn usage(dirs: &Dirs) -> Result<Usage, CgroupError> {
    let oom_control = fsio::read(&dirs.memory.join("memory.oom_control"))?;
    Ok(Usage {
        cpu_ns: fsio::read_u64(&dirs.cpuacct.join("cpuacct.usage"))?,
        memory_bytes: fsio::read_u64(&dirs.memory.join("memory.usage_in_bytes"))?,
        peak_memory_bytes: fsio::read_u64(&dirs.memory.join("memory.max_usage_in_bytes"))?,
        // The "oom_kill" line came with Linux 4.13.
        oom_kills: fsio::keyed(&oom_control, "oom_kill").unwrap_or(0),
        pids: fsio::read_u64(&dirs.pids.join("pids.current"))?,
    })
}

pub(crate) fn oom_kills(dirs: &Dirs) -> Result<u64, CgroupError> {
    // Counted in the cgroup of the process killed, which v1 does not add to its parents': the cgroup's own
    // count and every cgroup's below it (a runtime may have put the process the killer chose in one).
    let oom_control = fsio::read(&dirs.memory.join("memory.oom_control"))?;
    let mut total = fsio::keyed(&oom_control, "oom_kill").unwrap_or(0);
    let mut todo = vec![dirs.memory.clone()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let below = e.path();
                if let Ok(c) = fsio::read(&below.join("memory.oom_control")) {
                    total += fsio::keyed(&c, "oom_kill").unwrap_or(0);
                }
                todo.push(below);
            }
        }
    }
    Ok(total)
}

pub(crate) fn counters(dirs: &Dirs) -> Result<Counters, CgroupError> {
    Ok(Counters {
        cpu_ns: fsio::read_u64(&dirs.cpuacct.join("cpuacct.usage"))?,
        memory_bytes: fsio::read_u64(&dirs.memory.join("memory.usage_in_bytes"))?,
        peak_memory_bytes: fsio::read_u64(&dirs.memory.join("memory.max_usage_in_bytes"))?,
    })
}

pub(crate) fn freeze(freezer: &Path, within: Duration) -> Result<(), CgroupError> {
    let path = freezer.join("freezer.state");
    let failed = |source| CgroupError::Freeze { path: path.clone(), state: "FROZEN", source };
    fsio::write(&path, "FROZEN").map_err(failed)?;
    // FREEZING until every task has stopped.
    if fsio::wait_for(within, || frozen(&path))? {
        Ok(())
    } else {
        Err(failed(fsio::timed_out("tasks still freezing")))
    }
}

/// Ask for a freeze and look at it without sleeping for at most `spin`: whether it settled.
pub(crate) fn try_freeze(freezer: &Path, spin: Duration) -> Result<bool, CgroupError> {
    let path = freezer.join("freezer.state");
    fsio::write(&path, "FROZEN").map_err(|source| CgroupError::Freeze {
        path: path.clone(),
        state: "FROZEN",
        source,
    })?;
    fsio::spin_for(spin, || frozen(&path))
}

/// Whether `freezer.state` says every task is frozen (`FREEZING` is not yet).
pub(crate) fn frozen(state: &Path) -> Result<bool, CgroupError> {
    Ok(fsio::read(state)?.trim() == "FROZEN")
}

pub(crate) fn thaw(freezer: &Path) -> Result<(), CgroupError> {
    let path = freezer.join("freezer.state");
    fsio::write(&path, "THAWED").map_err(|source| CgroupError::Freeze { path: path.clone(), state: "THAWED", source })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::fixtures::{COMOUNTED, HYBRID};
    use super::super::mountinfo;
    use super::*;

    #[test]
    fn roots_of_separate_hierarchies() {
        let roots = Dirs::find_roots(&mountinfo::parse(HYBRID)).unwrap();
        assert_eq!(roots.memory, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(roots.cpu, Path::new("/sys/fs/cgroup/cpu"));
        assert_eq!(roots.cpuacct, Path::new("/sys/fs/cgroup/cpuacct"));
        assert_eq!(roots.distinct().len(), 5);
        let dirs = roots.join(Path::new("berth/sb1"));
        assert_eq!(dirs.pids, Path::new("/sys/fs/cgroup/pids/berth/sb1"));
    }

    #[test]
    fn comounted_cpu_and_cpuacct_share_a_directory() {
        let roots = Dirs::find_roots(&mountinfo::parse(COMOUNTED)).unwrap();
        assert_eq!(roots.cpu, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(roots.cpu, roots.cpuacct);
        let distinct = roots.join(Path::new("berth/x")).distinct();
        assert_eq!(distinct.len(), 4);
        assert_eq!(distinct[2], Path::new("/sys/fs/cgroup/cpu,cpuacct/berth/x"));
    }

    #[test]
    fn a_whole_mount_wins_over_a_bind_of_a_subtree() {
        let bind = "50 1 0:32 /process_api /mnt/mem rw - cgroup cgroup rw,memory\n";
        let roots = Dirs::find_roots(&mountinfo::parse(&format!("{bind}{HYBRID}"))).unwrap();
        assert_eq!(roots.memory, Path::new("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn every_controller_must_be_mounted() {
        let text: String = HYBRID.lines().filter(|l| !l.ends_with("rw,pids")).map(|l| format!("{l}\n")).collect();
        let err = Dirs::find_roots(&mountinfo::parse(&text)).unwrap_err();
        assert!(matches!(&err, CgroupError::MissingController { name, .. } if name == "pids"), "{err}");
        assert!(err.to_string().contains("`pids` is not available"), "{err}");
    }
}
