//! A running sandbox's host name, changed from outside: its UTS namespace joined for one call, and the files
//! that name it rewritten in its root.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::thread::{LinkNameSpaceType, ThreadNameSpaceType};

use crate::error::{Context, SysError, SysResult};

/// Set the host name of the UTS namespace of the process behind `pidfd`. The calling thread joins that
/// namespace for the call and returns to its own; if it cannot return, the error says so and the caller
/// (a single-threaded supervisor) should not go on.
pub fn set_hostname_of(pidfd: BorrowedFd<'_>, name: &str) -> SysResult<()> {
    let own = std::fs::File::open("/proc/thread-self/ns/uts").ctx(|| "open this thread's UTS namespace")?;
    rustix::thread::move_into_thread_name_spaces(pidfd, ThreadNameSpaceType::HOST_NAME_AND_NIS_DOMAIN_NAME)
        .ctx(|| "join the sandbox's UTS namespace")?;
    let set = rustix::system::sethostname(name.as_bytes()).ctx(|| format!("set the host name to {name}"));
    rustix::thread::move_into_link_name_space(own.as_fd(), Some(LinkNameSpaceType::HostNameAndNISDomainName))
        .ctx(|| "return to this thread's own UTS namespace")?;
    set
}

/// Replace the contents of the regular file at `path` (relative) under `root`, resolved as if `root` were
/// `/` (`RESOLVE_IN_ROOT`, no magic links, the last component not followed). The file must exist: nothing
/// is created, so no owner has to be chosen.
pub fn rewrite_in_root(root: BorrowedFd<'_>, path: &str, contents: &[u8]) -> SysResult<()> {
    let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let found = loop {
        match rustix::fs::openat2(root, path, flags, Mode::empty(), how) {
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            r => break r.ctx(|| format!("open {path} in the sandbox"))?,
        }
    };
    let st = rustix::fs::fstat(&found).ctx(|| format!("stat {path} in the sandbox"))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(SysError::new(format!("{path} in the sandbox is not a regular file"), rustix::io::Errno::INVAL));
    }
    // Opened for writing only once known to be a regular file: the same inode, reopened.
    let fd = rustix::fs::open(
        format!("/proc/self/fd/{}", found.as_raw_fd()),
        OFlags::WRONLY | OFlags::TRUNC | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ctx(|| format!("reopen {path} in the sandbox for writing"))?;
    let mut written = 0;
    while written < contents.len() {
        written += rustix::io::write(&fd, &contents[written..]).ctx(|| format!("write {path} in the sandbox"))?;
    }
    Ok(())
}
