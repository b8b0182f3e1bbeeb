//! Commands' process trees where init has no host cgroup per command (gVisor, whose processes are not the
//! host's): a cgroup of gVisor's own kernel for each command, under init's own, which the command joins
//! before it starts. A kill then reaches what left the command's process group (`setsid`), as a host cgroup
//! does for the namespaces backend. The sandbox's root could move its processes out of them; this is about a
//! timeout or a kill reaching a whole tree, not a boundary (the sandbox's teardown ends everything).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// The controller whose hierarchy holds the commands' cgroups (for their kills).
const CONTROLLER: &str = "pids";

/// The controller that counts each command's memory (gVisor's kernel counts it, and enforces no limit).
const MEMORY: &str = "memory";

/// Passes a kill makes over a cgroup that still has processes (a fork may land between two).
const KILL_PASSES: usize = 5;

pub struct Trees {
    base: PathBuf,
    dirs: HashMap<u64, PathBuf>,
    /// Init's own cgroup of the memory controller, where there is one, and each command's there.
    memory: Option<PathBuf>,
    /// Its `memory.usage_in_bytes`, kept open: a look is one read (a system call costs much more behind
    /// gVisor than on the host).
    memory_usage: Option<std::fs::File>,
    memory_dirs: HashMap<u64, PathBuf>,
    /// Cgroups of commands that ended with processes left behind: removed once those are gone.
    left: Vec<PathBuf>,
}

impl Trees {
    /// Init's own cgroup of the `pids` controller, if the sandbox's kernel has it mounted (where commands'
    /// cgroups are made).
    pub fn open() -> Option<Trees> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let base = own_cgroup(&own, CONTROLLER)?;
        let memory = own_cgroup(&own, MEMORY);
        let memory_usage = memory.as_ref().and_then(|m| std::fs::File::open(m.join("memory.usage_in_bytes")).ok());
        let memory = memory.filter(|_| memory_usage.is_some());
        Some(Trees { base, dirs: HashMap::new(), memory, memory_usage, memory_dirs: HashMap::new(), left: Vec::new() })
    }

    /// Cgroups for command `id`, and their `cgroup.procs` for the command to join (writing `0`): one of the
    /// `pids` controller, and one of `memory` where it is mounted.
    pub fn join_files(&mut self, id: u64) -> Vec<OwnedFd> {
        let name = format!("berth-command-{id}");
        let Some((dir, fd)) = make_and_open(&self.base.join(&name)) else { return Vec::new() };
        self.dirs.insert(id, dir);
        let mut fds = vec![fd];
        if let Some((dir, fd)) = self.memory.as_ref().and_then(|m| make_and_open(&m.join(&name))) {
            self.memory_dirs.insert(id, dir);
            fds.push(fd);
        }
        fds
    }

    /// What the sandbox's processes hold in memory, as its kernel counts it (none where it is not counted).
    pub fn memory_total(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 32];
        let n = self.memory_usage.as_ref()?.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
    }

    /// The running command whose processes hold the most memory, and how much.
    pub fn largest(&self) -> Option<(u64, u64)> {
        self.memory_dirs
            .iter()
            .filter_map(|(id, dir)| Some((*id, read_number(&dir.join("memory.usage_in_bytes"))?)))
            .max_by_key(|(_, bytes)| *bytes)
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

    /// Whether command `id`'s cgroup still has processes.
    pub fn holds(&self, id: u64) -> bool {
        self.dirs.get(&id).is_some_and(|d| !procs(d).is_empty())
    }

    /// Command `id` ended: its cgroup goes once it is empty.
    pub fn release(&mut self, id: u64) {
        if let Some(dir) = self.dirs.remove(&id) {
            self.left.push(dir);
        }
        if let Some(dir) = self.memory_dirs.remove(&id) {
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

/// Init's own cgroup of `controller`, as `/proc/self/cgroup` (`own`) names it, where it is mounted.
fn own_cgroup(own: &str, controller: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller).then(|| path.trim_start_matches('/').to_string())
    })?;
    // The hierarchy may show init's cgroup as its root (a cgroup namespace) or at its path.
    let root = PathBuf::from("/sys/fs/cgroup").join(controller);
    [root.join(path), root].into_iter().find(|b| b.join("cgroup.procs").exists())
}

/// Make the cgroup `dir` and open its `cgroup.procs` for writing.
fn make_and_open(dir: &std::path::Path) -> Option<(PathBuf, OwnedFd)> {
    std::fs::create_dir(dir).ok()?;
    let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
    match rustix::fs::open(dir.join("cgroup.procs"), flags, rustix::fs::Mode::empty()) {
        Ok(fd) => Some((dir.to_path_buf(), fd)),
        Err(_) => {
            let _ = std::fs::remove_dir(dir);
            None
        }
    }
}

fn read_number(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
