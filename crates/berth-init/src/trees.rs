//! Commands' process trees where init has no host cgroup per command (gVisor, whose processes are not the
//! host's): a cgroup of gVisor's own kernel for each command, under init's own, which the command joins
//! before it starts. A kill then reaches what left the command's process group (`setsid`), as a host cgroup
//! does for the namespaces backend. The sandbox's root could move its processes out of them; this is about a
//! timeout or a kill reaching a whole tree, not a boundary (the sandbox's teardown ends everything).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// The controller whose hierarchy holds the commands' cgroups.
const CONTROLLER: &str = "pids";

/// Passes a kill makes over a cgroup that still has processes (a fork may land between two).
const KILL_PASSES: usize = 5;

pub struct Trees {
    base: PathBuf,
    dirs: HashMap<u64, PathBuf>,
    /// Cgroups of commands that ended with processes left behind: removed once those are gone.
    left: Vec<PathBuf>,
}

impl Trees {
    /// Init's own cgroup of the `pids` controller, if the sandbox's kernel has it mounted (where commands'
    /// cgroups are made).
    pub fn open() -> Option<Trees> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == CONTROLLER).then(|| path.trim_start_matches('/').to_string())
        })?;
        // The hierarchy may show init's cgroup as its root (a cgroup namespace) or at its path.
        let root = PathBuf::from("/sys/fs/cgroup").join(CONTROLLER);
        let base = [root.join(path), root].into_iter().find(|b| b.join("cgroup.procs").exists())?;
        Some(Trees { base, dirs: HashMap::new(), left: Vec::new() })
    }

    /// A cgroup for command `id`, and its `cgroup.procs` for the command to join (writing `0`).
    pub fn join_file(&mut self, id: u64) -> Option<OwnedFd> {
        let dir = self.base.join(format!("berth-command-{id}"));
        std::fs::create_dir(&dir).ok()?;
        let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
        match rustix::fs::open(dir.join("cgroup.procs"), flags, rustix::fs::Mode::empty()) {
            Ok(fd) => {
                self.dirs.insert(id, dir);
                Some(fd)
            }
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Send `signal` to every process in command `id`'s cgroup.
    pub fn kill(&self, id: u64, signal: i32) {
        let Some(dir) = self.dirs.get(&id) else { return };
        let passes = if signal == 9 { KILL_PASSES } else { 1 };
        for _ in 0..passes {
            let pids = procs(dir);
            if pids.is_empty() {
                return;
            }
            for pid in pids.into_iter().filter(|p| *p > 1) {
                berth_sys::process::kill_pid(pid, signal);
            }
        }
    }

    /// Command `id` ended: its cgroup goes once it is empty.
    pub fn release(&mut self, id: u64) {
        if let Some(dir) = self.dirs.remove(&id) {
            self.left.push(dir);
        }
        self.left.retain(|dir| std::fs::remove_dir(dir).is_err() && dir.exists());
    }
}

/// The processes in the cgroup at `dir`.
fn procs(dir: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}
