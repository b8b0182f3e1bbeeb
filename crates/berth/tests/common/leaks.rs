//! What a stopped daemon may not leave on the host once its sandboxes are removed: each checked for that
//! daemon alone (tests run in parallel in one process), by its data root and the ids of its sandboxes.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;

/// Everything of the daemon with data root `root` that is still on the host: claims, state, shims, cgroups
/// and mounts. Empty when it cleaned up after itself.
pub fn daemon_leftovers(root: &Path) -> Vec<String> {
    let mut left = Vec::new();
    // Each sandbox's claim and files, and the shims' sockets.
    for dir in ["sandboxes", "pool/sandboxes", "run/shims", "run/pool"] {
        for name in names_in(&root.join(dir)) {
            left.push(format!("{dir}/{name}"));
        }
    }
    let ids = sandbox_ids(root);
    // Live claims are host-wide, named after the sandbox.
    for name in names_in(Path::new("/run/berth/live")) {
        if ids.iter().any(|id| name.starts_with(id.as_str())) {
            left.push(format!("the live claim /run/berth/live/{name}"));
        }
    }
    // Host id blocks kept for one of its sandboxes (`ROOT/ID`).
    let owner = format!("{}/", root.display());
    for name in names_in(Path::new("/run/berth/ids")).into_iter().filter(|n| n.ends_with(".reserved")) {
        let path = Path::new("/run/berth/ids").join(&name);
        if std::fs::read_to_string(&path).is_ok_and(|o| o.trim().starts_with(&owner)) {
            left.push(format!("the id block reservation {}", path.display()));
        }
    }
    for cg in super::berth_cgroups() {
        let name = cg.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if ids.iter().any(|id| name.starts_with(id.as_str())) {
            left.push(format!("the cgroup {}", cg.display()));
        }
    }
    // Shims and anything else started with this root on its command line.
    let root_arg = root.display().to_string();
    for (pid, cmdline) in processes() {
        if cmdline.split(' ').any(|a| a == root_arg || a.starts_with(&owner)) {
            left.push(format!("the process {pid}: {cmdline}"));
        }
    }
    // Mounts under the root, but for the storage pool itself (unmounted by whoever set it up).
    let pool = root.join("pool");
    for m in mounts_under(root) {
        if Path::new(&m) != pool {
            left.push(format!("the mount {m}"));
        }
    }
    left
}

/// What a daemon keeps on purpose after its sandboxes are removed, as it listed them before it stopped.
#[derive(Debug, Default)]
pub struct Kept {
    pub snapshots: Vec<String>,
    pub fork_snapshots: Vec<String>,
    pub volumes: Vec<String>,
}

/// Snapshots' and volumes' files in the storage pool that the daemon does not list: made and never recorded,
/// or recorded as removed and still there.
pub fn storage_leftovers(root: &Path, kept: &Kept) -> Vec<String> {
    let mut left = Vec::new();
    for (area, known) in [("snapshots", &kept.snapshots), ("volumes", &kept.volumes)] {
        for name in names_in(&root.join("pool").join(area)) {
            if !known.contains(&name) {
                left.push(format!("pool/{area}/{name}"));
            }
        }
    }
    // Checkpoints: a sandbox's (named by its id), and a kept snapshot's (`.snapshot-ID`); a fork's
    // (`.fork-ID`) goes once its children are made. `.init/` is a cache, not a leak: the copy of init's
    // binary that checkpoints restore from, one per build of berth, kept for the next checkpoint.
    let hibernate = root.join("hibernate");
    for name in names_in(&hibernate) {
        let kept_snapshot = name.strip_prefix(".snapshot-").is_some_and(|id| kept.snapshots.iter().any(|k| k == id));
        if name == ".init" || kept_snapshot {
            continue;
        }
        left.push(format!("hibernate/{name}"));
    }
    left
}

/// Mount points under `dir`, from this process's mount table (one on `dir` itself is a test's own: a data root on a tmpfs).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    mounts_in("/proc/self/mountinfo", dir)
}

/// Mount points under `dir` in the mount table `table` (a process's `/proc/PID/mountinfo`).
pub fn mounts_in(table: &str, dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string(table).unwrap_or_default();
    let dir = dir.display().to_string();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&format!("{dir}/")))
        .collect()
}

/// The ids of every sandbox the daemon has had: its journals, receipts, claims and files.
fn sandbox_ids(root: &Path) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for dir in ["journal", "receipts", "sandboxes", "pool/sandboxes", "run/shims", "outputs", "logs"] {
        for name in names_in(&root.join(dir)) {
            let id: String = name.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            if id.len() == 12 {
                ids.insert(id);
            }
        }
    }
    ids
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Every host process with its command line (arguments joined by spaces).
fn processes() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            out.push((pid, String::from_utf8_lossy(&cmdline).trim_end_matches('\0').replace('\0', " ")));
        }
    }
    out
}
