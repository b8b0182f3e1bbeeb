//! Cgroups for sandboxes: one cgroup per sandbox under a shared `berth/` parent, with memory, task
//! and CPU limits, usage accounting, freezing, killing and removal.
//!
//! Both layouts sit behind one interface:
//! - cgroup v2 (most hosts): `/sys/fs/cgroup/berth/<name>`, with `+cpu +memory +pids` enabled in the
//!   `cgroup.subtree_control` of the root and of `berth/`.
//! - cgroup v1 (and the "hybrid" layout, whose controller-less cgroup2 mount is ignored): the same
//!   `berth/<name>` under the root of each of the memory, pids, cpu, cpuacct and freezer hierarchies,
//!   a directory made once where controllers are co-mounted (`cpu,cpuacct`).
//!
//! [`Hierarchy::detect`] runs once at start-up; [`Hierarchy::create`] makes a sandbox's [`Cgroup`];
//! [`Hierarchy::list`] and [`Hierarchy::open`] find leftovers to clean up.

mod error;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod fake_tree_tests;
#[cfg(test)]
mod fixtures;
mod fsio;
mod handle;
mod hierarchy;
mod kill;
mod limits;
mod mountinfo;
mod name;
mod v1;
mod v2;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use error::CgroupError;
pub use handle::{Cgroup, Entry};
pub use hierarchy::Hierarchy;
pub use limits::{CPU_PERIOD_US, Limits};
pub use name::{MAX_NAME_LEN, validate_name};

/// The directory, under each hierarchy's root, that holds berth's cgroups.
pub const PARENT_DIR: &str = "berth";

/// Environment variable that forces a layout: `v1` or `v2` (`auto` or empty: detect).
pub const FORCE_ENV: &str = "BERTH_CGROUP";

/// Which cgroup layout is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

impl FromStr for Version {
    type Err = CgroupError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "v1" | "1" => Ok(Version::V1),
            "v2" | "2" => Ok(Version::V2),
            _ => Err(CgroupError::Detect { reason: format!("unknown cgroup version {s:?} (expected v1 or v2)") }),
        }
    }
}

/// What a sandbox has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time, in nanoseconds, across all its tasks.
    pub cpu_ns: u64,
    /// Memory charged to it now, in bytes (page cache included).
    pub memory_bytes: u64,
    /// The most memory ever charged to it, in bytes (0 if the kernel does not track it).
    pub peak_memory_bytes: u64,
    /// How many of its processes the kernel's OOM killer has killed.
    pub oom_kills: u64,
    /// Tasks (processes and threads) in it now.
    pub pids: u64,
}

/// What metering reads of a cgroup once a second: the three counts of [`Usage`] it needs, from three files
/// (each read costs a few tens of microseconds on a virtual machine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// CPU time, in nanoseconds, across all its tasks and nested cgroups.
    pub cpu_ns: u64,
    /// Memory charged to it now, in bytes.
    pub memory_bytes: u64,
    /// The most memory ever charged to it, in bytes (0 if the kernel does not track it).
    pub peak_memory_bytes: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn version_parses_and_prints() {
        assert_eq!("v1".parse::<Version>().unwrap(), Version::V1);
        assert_eq!("V2".parse::<Version>().unwrap(), Version::V2);
        assert_eq!("2".parse::<Version>().unwrap(), Version::V2);
        assert!("v3".parse::<Version>().is_err());
        assert_eq!(Version::V1.to_string(), "v1");
        assert_eq!(serde_json::to_string(&Version::V2).unwrap(), "\"v2\"");
    }
}
