//! The end of `berth bench --soak`: is anything the loops made still there? Asked of the daemon (sandboxes and
//! snapshots it lists) and of the host (the data root's files, cgroups, mounts, processes), for every sandbox
//! and snapshot the loops made. A removed sandbox's journal and receipt are kept on purpose (see the API's
//! Journal section): they are counted, not reported as leftovers.

use std::collections::BTreeSet;
use std::path::Path;

use berth_api::{Sandbox, Snapshot};
use berth_client::Client;
use serde_json::{Value, json};

use crate::daemon::{Daemon, arg_value, cmdline, proc_pids};
use crate::soak::Made;

/// What the host had before the loops, where a count is all there is to compare.
pub struct Census {
    shims: usize,
}

impl Census {
    pub fn take(daemon: &Daemon) -> Census {
        Census { shims: shims(daemon).len() }
    }
}

pub struct Checked {
    pub leftovers: Vec<String>,
    pub kept: Value,
}

/// The daemon's shims: `berth --root ROOT shim` with the daemon's ROOT.
fn shims(daemon: &Daemon) -> Vec<i32> {
    proc_pids()
        .into_iter()
        .filter(|&p| {
            let argv = cmdline(p);
            argv.iter().any(|a| a == "shim") && arg_value(&argv, "--root").as_ref() == Some(&daemon.root_arg)
        })
        .collect()
}

pub fn check(socket: &Path, daemon: &Daemon, before: &Census, made: &Made) -> Checked {
    let mut left = Vec::new();
    let sandboxes: BTreeSet<&str> = made.sandboxes.iter().map(String::as_str).collect();
    let snapshots: BTreeSet<&str> = made.snapshots.iter().map(String::as_str).collect();

    match Client::connect(socket).and_then(|c| c.get("/v1/sandboxes")) {
        Ok((_, body)) => {
            let listed: Vec<Sandbox> = serde_json::from_slice(&body).unwrap_or_default();
            for s in listed.iter().filter(|s| sandboxes.contains(s.id.as_str())) {
                left.push(format!("sandbox {} is still listed ({:?})", s.id, s.state));
            }
        }
        Err(e) => left.push(format!("cannot list sandboxes: {e}")),
    }
    match Client::connect(socket).and_then(|c| c.get("/v1/snapshots")) {
        Ok((_, body)) => {
            let listed: Vec<Snapshot> = serde_json::from_slice(&body).unwrap_or_default();
            for s in listed.iter().filter(|s| snapshots.contains(s.id.as_str())) {
                left.push(format!("snapshot {} ({}) is still listed", s.id, s.origin));
            }
        }
        Err(e) => left.push(format!("cannot list snapshots: {e}")),
    }

    let root = &daemon.root;
    let mut kept = (0, 0);
    for id in &sandboxes {
        for (what, path) in [
            ("files", root.join("pool/sandboxes").join(id)),
            ("supervisor socket", root.join("run/shims").join(format!("{id}.sock"))),
            ("exec logs", root.join("logs").join(id)),
        ] {
            if path.exists() {
                left.push(format!("sandbox {id}'s {what} at {}", path.display()));
            }
        }
        kept.0 += usize::from(root.join("journal").join(format!("{id}.jsonl")).exists());
        kept.1 += usize::from(root.join("receipts").join(format!("{id}.json")).exists());
    }
    for id in &snapshots {
        let path = root.join("pool/snapshots").join(id);
        if path.exists() {
            left.push(format!("snapshot {id}'s files at {}", path.display()));
        }
    }

    if let Ok(h) = berth_runtime::cgroup::Hierarchy::detect() {
        for id in sandboxes.iter().filter(|id| h.open(id).exists()) {
            left.push(format!("sandbox {id}'s cgroup"));
        }
    }
    // Mounts, as the daemon sees them (its shims' are in their own namespaces, gone with them).
    let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", daemon.pid)).unwrap_or_default();
    for line in mountinfo.lines() {
        if let Some(id) = sandboxes.iter().chain(&snapshots).find(|id| line.contains(*id)) {
            left.push(format!("a mount of {id}: {line}"));
        }
    }
    // Processes in any sandbox's cgroup, and shims beyond those there were before.
    for pid in proc_pids() {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if let Some(id) = sandboxes.iter().find(|id| cgroup.contains(&format!("/berth/{id}"))) {
            left.push(format!("process {pid} ({}) in sandbox {id}'s cgroup", cmdline(pid).join(" ")));
        }
    }
    let now = shims(daemon);
    if now.len() > before.shims {
        left.push(format!("{} shims now, {} before the soak: {now:?}", now.len(), before.shims));
    }
    Checked { leftovers: left, kept: json!({"journals": kept.0, "receipts": kept.1}) }
}
