//! The one piece of networking a fresh network namespace needs: bringing `lo` up.

use crate::error::{SysError, SysResult};

/// Bring the loopback interface of the current network namespace up.
pub fn loopback_up() -> SysResult<()> {
    let sock = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::DGRAM, None)
        .map_err(|e| SysError::new("open a socket to configure lo", e))?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads a properly initialised ifreq that lives across the call.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&sock), libc::SIOCSIFFLAGS, &mut req) };
    if r < 0 {
        return Err(SysError::new("bring up the loopback interface", std::io::Error::last_os_error()));
    }
    Ok(())
}
