//! Metering and budgets: what a sandbox has used, as the kernel and its proxy counted it, and the limits
//! on what it may use before it is ended.

use serde::{Deserialize, Serialize};

/// What a sandbox has used (`GET /v1/sandboxes/{id}/usage`, `usage` on a sandbox, in its receipt).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub id: String,
    pub name: String,
    /// CPU time of every process in the sandbox, its execs included (the cgroup's count).
    pub cpu_seconds: f64,
    /// Memory charged to it now (page cache included).
    pub memory_bytes: u64,
    /// Its memory integrated over time, sampled by the daemon.
    pub memory_gib_seconds: f64,
    /// The most memory ever charged to it (0 where the kernel does not keep it).
    pub peak_memory_bytes: u64,
    /// Bytes its writable files take in the storage pool.
    pub disk_bytes: u64,
    /// Bytes the sandbox sent through its egress proxy.
    pub egress_bytes_out: u64,
    /// Bytes it received through its egress proxy.
    pub egress_bytes_in: u64,
    /// Execs started in it (shells and code contexts' interpreters included).
    pub execs: u64,
    /// Time since it was created, less the time it was paused.
    pub running_seconds: f64,
    /// Time it spent paused.
    pub paused_seconds: f64,
    /// Time it spent hibernated (on disk, no memory held).
    #[serde(default)]
    pub hibernated_seconds: f64,
    /// Its budget.
    pub budget: Budget,
    /// What counts against its budget: its own use and that of the sandboxes it made.
    pub charged: Charged,
    pub sampled_at_ms: u64,
}

/// One point of a sandbox's recent usage (`GET /v1/sandboxes/{id}/usage/history`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsagePoint {
    pub at_ms: u64,
    /// CPU seconds burned so far (as `Usage::cpu_seconds`): the difference between two points over the time
    /// between them is the CPU it used then.
    pub cpu_seconds: f64,
    pub memory_bytes: u64,
    /// Bytes its writable files take (read at most every 30 s).
    pub disk_bytes: u64,
}

/// Limits on what a sandbox may use; at 80 % of one a warning, at 100 % it is removed. Each is optional.
/// On `POST /v1/sandboxes/{id}/budget` the limits given replace those set; the others stay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// CPU seconds (the contract form `cpu=10m`).
    pub cpu_seconds: Option<f64>,
    /// Egress bytes, both directions together (`egress=1G`).
    pub egress_bytes: Option<u64>,
    /// Running time in seconds (`wall=2h`).
    pub wall_seconds: Option<f64>,
}

/// What is counted against a budget: the sandbox's own use and that of the sandboxes it made, removed ones
/// included.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Charged {
    pub cpu_seconds: f64,
    pub egress_bytes: u64,
    pub wall_seconds: f64,
}
