//! File descriptors between processes: a message socket that carries fds (SCM_RIGHTS), and fd hygiene.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketFlags, SocketType,
};

use crate::error::{Context, SysResult};

/// Most descriptors one message may carry.
pub const MAX_FDS: usize = 40;

/// A connected pair of `SOCK_SEQPACKET` sockets: message boundaries are kept, so one `send` is one `recv`.
pub fn seqpacket_pair() -> SysResult<(OwnedFd, OwnedFd)> {
    rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .ctx(|| "create a socket pair")
}

/// Send one message, with up to [`MAX_FDS`] descriptors attached.
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> SysResult<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && (fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds))) {
        return Err(crate::SysError::new("attach descriptors to a message", std::io::ErrorKind::InvalidInput));
    }
    loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map(|_| ()).ctx(|| "send a message"),
        }
    }
}

/// Receive one message into `buf`; returns its length (0 = the peer hung up) and the descriptors it carried,
/// already close-on-exec.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.ctx(|| "receive a message")?,
        }
    };
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if got.flags.contains(rustix::net::ReturnFlags::TRUNC) {
        return Err(crate::SysError::new(
            "receive a message (it was longer than the buffer)",
            std::io::ErrorKind::InvalidData,
        ));
    }
    Ok((got.bytes, fds))
}

/// Mark every descriptor from 3 up close-on-exec, except those in `keep`, so that an `exec` carries only
/// what it was meant to.
pub fn cloexec_all_except(keep: &[RawFd]) -> SysResult<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; no memory is involved.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r != 0 {
        return Err(crate::SysError::new("mark descriptors close-on-exec", std::io::Error::last_os_error()));
    }
    for fd in keep {
        // SAFETY: the caller names descriptors it owns; clearing FD_CLOEXEC does not change ownership.
        let fd = unsafe { BorrowedFd::borrow_raw(*fd) };
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).ctx(|| "keep a descriptor across exec")?;
    }
    Ok(())
}

/// Duplicate `fd` onto the descriptor number `target` (without close-on-exec), replacing what was there.
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> SysResult<()> {
    if fd.as_raw_fd() == target {
        return rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).ctx(|| "keep a descriptor across exec");
    }
    // SAFETY: dup3 onto a fixed number; the old target (if any) is closed by the kernel atomically, and the
    // new descriptor is intentionally left unowned because it is meant to outlive us into an exec.
    let r = unsafe { libc::dup3(fd.as_raw_fd(), target, 0) };
    if r < 0 {
        return Err(crate::SysError::new(
            format!("duplicate descriptor onto {target}"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Borrow a raw descriptor number that the process was started with (such as 3 for berth's init).
///
/// Returns `None` when the number is not an open descriptor.
pub fn inherited(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl(F_GETFD) on any number is harmless; it tells whether the number is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: the descriptor is open and, by the start-up contract, ours alone to own from here on.
    Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Make a descriptor non-blocking or blocking.
pub fn set_nonblocking(fd: impl AsFd, on: bool) -> SysResult<()> {
    let fd = fd.as_fd();
    let mut flags = rustix::fs::fcntl_getfl(fd).ctx(|| "read descriptor flags")?;
    flags.set(rustix::fs::OFlags::NONBLOCK, on);
    rustix::fs::fcntl_setfl(fd, flags).ctx(|| "set descriptor flags")
}

/// Hand a descriptor (such as a terminal's master end, made non-blocking) to the current tokio runtime, to
/// wait until it is readable or writable. Panics when called outside a runtime, as tokio does.
#[cfg(feature = "tokio")]
pub fn watch(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns the `OwnedFd`, whose descriptor stays open and the same until the `AsyncFd`
    // is dropped (which deregisters it before closing it) or gives it back with `into_inner`.
    unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(std::io::Error::from)
}

/// Listen for `SOCK_SEQPACKET` connections on a unix socket at `path` (replacing a stale socket file).
pub fn seqpacket_listen(path: &std::path::Path) -> SysResult<OwnedFd> {
    let _ = std::fs::remove_file(path);
    let fd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .ctx(|| "create a socket")?;
    let addr = rustix::net::SocketAddrUnix::new(path).ctx(|| format!("use {} as a socket address", path.display()))?;
    rustix::net::bind(&fd, &addr).ctx(|| format!("listen on {}", path.display()))?;
    rustix::net::listen(&fd, 64).ctx(|| format!("listen on {}", path.display()))?;
    Ok(fd)
}

/// Accept one connection on a listening socket.
pub fn accept(listener: BorrowedFd<'_>) -> SysResult<OwnedFd> {
    rustix::net::accept_with(listener, SocketFlags::CLOEXEC).ctx(|| "accept a connection")
}

/// Connect to a `SOCK_SEQPACKET` unix socket at `path`.
pub fn seqpacket_connect(path: &std::path::Path) -> SysResult<OwnedFd> {
    let fd = rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .ctx(|| "create a socket")?;
    let addr = rustix::net::SocketAddrUnix::new(path).ctx(|| format!("use {} as a socket address", path.display()))?;
    rustix::net::connect(&fd, &addr).ctx(|| format!("connect to {}", path.display()))?;
    Ok(fd)
}
