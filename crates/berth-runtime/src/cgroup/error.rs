//! What can go wrong with cgroups, named after what berth was doing at the time.
//!
//! As in `berth-sys`, a message says what was being done; the kernel's answer is the error's source.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No usable cgroup layout could be worked out from the mount table (or `BERTH_CGROUP` is wrong).
    #[error("detect the cgroup hierarchy: {reason}")]
    Detect { reason: String },

    /// A controller berth needs (memory, pids, cpu, cpuacct, freezer) is not mounted or not delegated.
    #[error("cgroup controller `{name}` is not available: {detail}")]
    MissingController { name: String, detail: String },

    /// A sandbox name that cannot be used as a cgroup directory name.
    #[error("invalid cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },

    /// A limit the kernel would refuse, caught before anything is created.
    #[error("invalid limit {what} = {value}: {reason}")]
    InvalidLimit { what: &'static str, value: u64, reason: &'static str },

    /// `mkdir` of a cgroup (or of the shared `berth/` parent) failed; `AlreadyExists` for a name in use.
    #[error("create cgroup directory {}", path.display())]
    Create { path: PathBuf, source: io::Error },

    /// Writing `+cpu +memory +pids` into an ancestor's `cgroup.subtree_control` failed (cgroup v2).
    #[error("enable controllers {value:?} in {}", file.display())]
    EnableControllers { file: PathBuf, value: String, source: io::Error },

    #[error("set {} to {value:?}", file.display())]
    SetLimit { file: PathBuf, value: String, source: io::Error },

    #[error("add process {pid} to {}", path.display())]
    AddProcess { pid: i32, path: PathBuf, source: io::Error },

    /// Reading (or making sense of) a cgroup or `/proc` file failed.
    #[error("read {}", path.display())]
    Read { path: PathBuf, source: io::Error },

    /// Freezing or thawing failed; `TimedOut` when the cgroup did not reach the state in time.
    #[error("set {} to {state}", path.display())]
    Freeze { path: PathBuf, state: &'static str, source: io::Error },

    /// Killing failed: writing `cgroup.kill` (no pid) or signalling one process.
    #[error("kill the processes of {}{}", path.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Kill { path: PathBuf, pid: Option<i32>, source: io::Error },

    #[error("remove cgroup directory {}", path.display())]
    Remove { path: PathBuf, source: io::Error },

    /// Processes were still in the cgroup after berth stopped waiting for them to go.
    #[error("cgroup {} still has processes {pids:?}", path.display())]
    NotEmpty { path: PathBuf, pids: Vec<i32> },
}
