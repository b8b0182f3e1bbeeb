//! Creating the sandbox's first process in new namespaces.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{SysError, SysResult};

/// Which namespaces a new process gets. The cgroup namespace is not here: it is entered later, from inside,
/// once the process has been moved into its own cgroups, so that its view is rooted there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    pub user: bool,
    pub mount: bool,
    pub pid: bool,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
}

impl Namespaces {
    pub const ALL: Namespaces = Namespaces { user: true, mount: true, pid: true, net: true, ipc: true, uts: true };
    /// A private mount namespace only (the supervisor's own view, to stage mounts in).
    pub const MOUNT: Namespaces =
        Namespaces { user: false, mount: true, pid: false, net: false, ipc: false, uts: false };
    /// None: a plain fork.
    pub const NONE: Namespaces =
        Namespaces { user: false, mount: false, pid: false, net: false, ipc: false, uts: false };

    pub(crate) fn flags(self) -> u64 {
        let mut f = 0;
        for (on, flag) in [
            (self.user, libc::CLONE_NEWUSER),
            (self.mount, libc::CLONE_NEWNS),
            (self.pid, libc::CLONE_NEWPID),
            (self.net, libc::CLONE_NEWNET),
            (self.ipc, libc::CLONE_NEWIPC),
            (self.uts, libc::CLONE_NEWUTS),
        ] {
            if on {
                f |= flag as u64;
            }
        }
        f
    }
}

/// What `spawn` returned in each of the two processes.
pub enum Forked {
    /// In the caller: the child's host pid and a pidfd for it.
    Parent { pid: i32, pidfd: OwnedFd },
    /// In the new process.
    Child,
}

/// Fork the calling process into new namespaces (fork semantics: the child continues from here).
///
/// The caller must be single-threaded: a fork copies only the calling thread, and locks held by others would
/// stay locked forever in the child. This is checked, and a multi-threaded caller gets an error.
///
/// With `into_cgroup` (a cgroup v2 directory), the child is born in that cgroup (`CLONE_INTO_CGROUP`).
pub fn spawn(ns: Namespaces, into_cgroup: Option<std::os::fd::BorrowedFd<'_>>) -> SysResult<Forked> {
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    if threads != 1 {
        return Err(SysError::new(
            format!("create a sandbox from a process with {threads} threads (it must have exactly one)"),
            std::io::ErrorKind::Unsupported,
        ));
    }
    let mut pidfd: libc::c_int = -1;
    // SAFETY: clone_args is plain old data; all-zero means no stack, no tls, no optional fields.
    let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
    args.flags = ns.flags() | libc::CLONE_PIDFD as u64;
    args.pidfd = std::ptr::addr_of_mut!(pidfd) as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    if let Some(cg) = into_cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = std::os::fd::AsRawFd::as_raw_fd(&cg) as u64;
    }
    // SAFETY: with no stack given, clone3 behaves like fork: the child runs on a copy of this stack. The
    // process has one thread (checked above), so no lock can be held by a thread that does not exist in the
    // child. `pidfd` outlives the call.
    let r =
        unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut libc::clone_args, size_of::<libc::clone_args>()) };
    match r {
        -1 => Err(SysError::new("create a process in new namespaces", std::io::Error::last_os_error())),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: pid as i32,
            // SAFETY: CLONE_PIDFD stored a fresh descriptor that nothing else owns.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        }),
    }
}

/// Leave the process immediately, without running destructors or flushing stdio that belongs to the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Create a user namespace with the given maps (`inside outside count` lines) and return a descriptor for
/// it. The namespace has no processes left once this returns; it lives as long as the descriptor, which is
/// what an idmapped mount needs.
pub fn user_namespace(uid_map: &str, gid_map: &str) -> SysResult<OwnedFd> {
    let (wait_r, wait_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| SysError::new("create a pipe", e))?;
    let ns = Namespaces { user: true, mount: false, pid: false, net: false, ipc: false, uts: false };
    match spawn(ns, None)? {
        Forked::Child => {
            drop(wait_w);
            // Hold the namespace open until the parent has a descriptor for it, then leave.
            let mut byte = [0u8; 1];
            let _ = rustix::io::read(&wait_r, &mut byte);
            exit_now(0)
        }
        Forked::Parent { pid, pidfd } => {
            drop(wait_r);
            let result = crate::process::write_maps(pid, uid_map, gid_map)
                .and_then(|()| crate::process::open_namespace(pid, "user"));
            drop(wait_w);
            crate::process::pidfd_wait(std::os::fd::AsFd::as_fd(&pidfd))?;
            result
        }
    }
}

/// `CLONE_INTO_CGROUP` from <linux/sched.h> (a 64-bit flag, clone3 only).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
