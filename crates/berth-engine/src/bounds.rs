//! The default bounds on what one sandbox can take of the host: its exec logs, its journal and egress log,
//! the exec records kept of it, its connections through the egress proxy and its pending host-name lookups.
//!
//! One place holds them (set by `berth daemon` flags) and one place lists them, [`table`], which the daemon
//! logs at start and serves at `GET /v1/info` for `berth info`. A resource nothing bounds is listed too, with
//! why: what the table does not say is bounded is not.

use berth_api::Bound;

const MIB: u64 = 1 << 20;

/// The daemon's bounds. Every field has a default and a `berth daemon` flag of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes of output one exec (or shell) keeps in its log: its head and tail, the middle dropped with a
    /// marker. An exec may ask for less (`max_log_bytes`), not more.
    pub max_log_bytes: u64,
    /// Finished execs whose records (and logs) a sandbox keeps; the oldest go first. Running ones are kept.
    pub max_exec_records: usize,
    /// Bytes of one sandbox's journal. Egress records may take half; past that they are counted, not
    /// written. Past the whole, every action that would add a record is refused (nothing happens
    /// unrecorded), except those that end the sandbox's work: stop, remove, kill.
    pub max_journal_bytes: u64,
    /// Execs and shells one sandbox may have running at once (each holds daemon memory for its log).
    pub max_running_execs: usize,
    /// Connections one sandbox may have open through its egress proxy at once.
    pub max_proxy_connections: usize,
    /// Of those, connections still sending their request head (each has `head_timeout` to finish it).
    pub max_proxy_pending: usize,
    /// Host-name lookups one sandbox may have in progress at once (of the process's 64), together with the
    /// sandboxes it creates.
    pub max_lookups: usize,
    /// Memory limit of a sandbox created without `memory_bytes` (`None`: no limit of its own).
    pub default_memory_bytes: Option<u64>,
    /// Process limit of a sandbox created without `pids` (`None`: no limit of its own).
    pub default_pids: Option<u64>,
    /// Removed sandboxes whose journal, receipt, outputs and record are kept; the oldest go first.
    pub keep_removed: usize,
    /// Sandboxes of the `host` image with the default limits kept built ahead, for creates that ask for
    /// nothing else (0: none).
    pub warm: usize,
    /// The isolation of a sandbox created without one.
    pub isolation: berth_api::Isolation,
    /// Whether pods' egress policies may name special addresses (loopback, private, link-local, cloud
    /// metadata) by an exact rule or `berth.dev/egress-hosts`: a pod's author is not the node's operator, and
    /// the proxy connects from the daemon's network.
    pub pod_egress_special: bool,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_log_bytes: 16 * MIB,
            max_exec_records: 128,
            max_journal_bytes: 64 * MIB,
            max_running_execs: 64,
            max_proxy_connections: 128,
            max_proxy_pending: 32,
            max_lookups: 8,
            default_memory_bytes: Some(DEFAULT_MEMORY_BYTES),
            default_pids: Some(DEFAULT_PIDS),
            keep_removed: 1000,
            warm: 0,
            isolation: berth_api::Isolation::default(),
            pod_egress_special: false,
        }
    }
}

/// The memory limit a sandbox gets when it asks for none: enough for a compiler or a test suite, and a
/// sandbox that runs away hits its own limit (and its own OOM kill) before the host's memory runs out.
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;
/// The process limit a sandbox gets when it asks for none: a fork bomb stops there.
pub const DEFAULT_PIDS: u64 = 4096;
/// The smallest memory limit the runtime accepts.
pub const MIN_MEMORY_BYTES: u64 = 4 * MIB;

/// The most sandboxes the warm pool may keep built ahead.
pub const MAX_WARM: usize = 64;
/// The smallest exec log bound accepted (room for a head, a marker and a tail).
pub const MIN_LOG_BYTES: u64 = 1024;
/// The smallest journal bound accepted (room for a sandbox's lifecycle records).
pub const MIN_JOURNAL_BYTES: u64 = 64 * 1024;

impl Bounds {
    /// Check bounds given on the command line; a sentence naming the flag when one cannot work.
    pub fn check(&self) -> Result<(), String> {
        let at_least = |flag: &str, min: u64, got: u64| {
            if got < min { Err(format!("--{flag} must be at least {min}, not {got}")) } else { Ok(()) }
        };
        at_least("max-log-bytes", MIN_LOG_BYTES, self.max_log_bytes)?;
        at_least("max-journal-bytes", MIN_JOURNAL_BYTES, self.max_journal_bytes)?;
        at_least("max-exec-records", 1, self.max_exec_records as u64)?;
        at_least("max-running-execs", 1, self.max_running_execs as u64)?;
        at_least("max-proxy-connections", 1, self.max_proxy_connections as u64)?;
        at_least("max-proxy-pending", 1, self.max_proxy_pending as u64)?;
        at_least("max-lookups", 1, self.max_lookups as u64)?;
        at_least("keep-removed", 1, self.keep_removed as u64)?;
        if self.warm > MAX_WARM {
            return Err(format!("--warm must be at most {MAX_WARM}, not {}", self.warm));
        }
        if let Some(m) = self.default_memory_bytes {
            at_least("default-memory", MIN_MEMORY_BYTES, m)?;
        }
        if let Some(p) = self.default_pids {
            at_least("default-pids", 16, p)?;
        }
        if self.max_lookups > berth_egress::MAX_LOOKUPS {
            return Err(format!(
                "--max-lookups cannot exceed the {} lookups the whole daemon has, not {}",
                berth_egress::MAX_LOOKUPS,
                self.max_lookups
            ));
        }
        Ok(())
    }

    /// The egress records' share of the journal.
    pub fn egress_journal_bytes(&self) -> u64 {
        self.max_journal_bytes / 2
    }
}

/// A size for people: `16 MiB`, `1.5 KiB`, `900 bytes`.
pub fn size(bytes: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", MIB), ("KiB", 1 << 10)] {
        if bytes >= scale {
            let whole = bytes / scale;
            return if bytes.is_multiple_of(scale) {
                format!("{whole} {unit}")
            } else {
                format!("{:.1} {unit}", bytes as f64 / scale as f64)
            };
        }
    }
    format!("{bytes} bytes")
}

pub fn row(resource: &str, bound: String, set_by: &str, note: &str) -> Bound {
    Bound { resource: resource.into(), bound, set_by: set_by.into(), note: note.into() }
}

/// Every host resource a sandbox can consume, its bound and where it comes from. Rows for further
/// resources are added here, so that the daemon's start-up log and `berth info` list them all.
pub fn table(b: &Bounds) -> Vec<Bound> {
    vec![
        row(
            "exec log",
            format!("{} per exec or shell", size(b.max_log_bytes)),
            "berth daemon --max-log-bytes; lower per exec: max_log_bytes (berth exec --max-log-bytes)",
            "the log keeps the head and the last quarter (at most 1 MiB); a line says how many bytes were dropped \
             between them; the exec's result counts them (log_bytes_dropped)",
        ),
        row(
            "exec records",
            format!(
                "{} finished execs per sandbox (their logs at most {} together)",
                b.max_exec_records,
                size(b.max_log_bytes.saturating_mul(b.max_exec_records as u64))
            ),
            "berth daemon --max-exec-records",
            "the oldest finished exec and its log are removed when a new exec starts past it; running execs \
             are never removed; the journal keeps every exec's record",
        ),
        row(
            "journal",
            format!("{} per sandbox", size(b.max_journal_bytes)),
            "berth daemon --max-journal-bytes",
            "past it, every action that would add a record is refused (409 conflict) so that nothing happens \
             unrecorded: execs, shells, file changes, network changes, snapshots, forks, exports, starts; \
             stopping, removing and killing are still done and recorded; egress records have their own share",
        ),
        row(
            "egress log",
            format!("{} per sandbox (half the journal)", size(b.egress_journal_bytes())),
            "berth daemon --max-journal-bytes",
            "past it, attempts are counted, not written: one egress_log_full record marks the point, and an \
             egress_dropped record before the next other record says how many were left out and when",
        ),
        row(
            "proxy connections",
            format!("{} open at once per sandbox", b.max_proxy_connections),
            "berth daemon --max-proxy-connections",
            "further ones are answered 503 with X-Berth-Egress: error; reason=\"...\" and journaled",
        ),
        row(
            "proxy request heads",
            format!("{} connections sending their request head at once per sandbox, 10 s each", b.max_proxy_pending),
            "berth daemon --max-proxy-pending",
            "further ones are answered 503 and journaled; a head not complete in 10 s is answered 408",
        ),
        row(
            "sandbox connections",
            format!("{} open at once per sandbox (proxy and API together)", crate::engine::MAX_CONNECTIONS),
            "fixed",
            "further connections are closed at once",
        ),
        row(
            "host-name lookups",
            format!("{} in progress per sandbox, {} in the whole daemon", b.max_lookups, berth_egress::MAX_LOOKUPS),
            "berth daemon --max-lookups",
            "a sandbox and the sandboxes it creates share one such share; a further lookup waits for one of \
             theirs to end; a lookup that never answers keeps its place until the resolver gives up",
        ),
        row(
            "running execs",
            format!("{} execs and shells running at once per sandbox", b.max_running_execs),
            "berth daemon --max-running-execs",
            "further ones are refused (409 conflict) until one ends; each holds up to 64 KiB of buffer and its \
             log's tail (at most 1 MiB) in the daemon's memory, outside the sandbox's memory limit",
        ),
        row(
            "removed sandboxes",
            format!(
                "the newest {} removed sandboxes' journals, receipts and outputs, and as many removed pods'",
                b.keep_removed
            ),
            "berth daemon --keep-removed",
            "past it, the oldest removed sandbox's journal, receipt, copied-out outputs and record are deleted \
             (berth journal and berth receipt then answer 404 for it), and the oldest removed pod's record, \
             journal and receipt; a live sandbox's or pod's are never deleted",
        ),
        match b.default_memory_bytes {
            Some(m) => row(
                "memory",
                format!("{} per sandbox unless it asks for another limit", size(m)),
                "berth daemon --default-memory; per sandbox: berth create --memory (memory_bytes)",
                "no swap; past it the sandbox's own processes are OOM-killed, not the host's; the limit is shown \
                 as the sandbox's memory_bytes",
            ),
            None => row(
                "memory",
                "none unless asked for".into(),
                "berth daemon --default-memory; per sandbox: berth create --memory (memory_bytes)",
                "this daemon was started with --default-memory none: a sandbox created without a limit has none",
            ),
        },
        match b.default_pids {
            Some(p) => row(
                "processes",
                format!("{p} per sandbox unless it asks for another limit"),
                "berth daemon --default-pids; per sandbox: berth create --pids (pids)",
                "past it fork and clone fail with EAGAIN inside the sandbox; the limit is shown as its pids",
            ),
            None => row(
                "processes",
                "none unless asked for".into(),
                "berth daemon --default-pids; per sandbox: berth create --pids (pids)",
                "this daemon was started with --default-pids none: a sandbox created without a limit has none",
            ),
        },
        row(
            "CPU",
            "none unless asked for".into(),
            "berth create --cpus (cpus)",
            "a sandbox created without it may use every core",
        ),
        row(
            "warm pool",
            match b.warm {
                0 => "none".into(),
                n => format!("{n} sandboxes built ahead (host image, default limits)"),
            },
            "berth daemon --warm",
            "each holds a host id block, a cgroup, a shim and an init (about 0.5 MiB) and an empty volume; they \
             are in no listing, metering or budget until a create takes one, and are torn down when the daemon \
             stops",
        ),
    ]
}

/// The table as the daemon logs it at start.
pub fn log_table(b: &Bounds) {
    for r in table(b) {
        crate::log::info(
            "bound",
            serde_json::json!({"resource": r.resource, "bound": r.bound, "set_by": r.set_by, "note": r.note}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(16 << 20), "16 MiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(900), "900 bytes");
    }

    #[test]
    fn the_defaults_pass_their_own_check_and_bad_flags_are_named() {
        assert_eq!(Bounds::default().check(), Ok(()));
        let small = Bounds { max_log_bytes: 10, ..Bounds::default() };
        assert!(small.check().is_err_and(|e| e.contains("--max-log-bytes")));
        let many = Bounds { max_lookups: 65, ..Bounds::default() };
        assert!(many.check().is_err_and(|e| e.contains("--max-lookups")));
    }
}
