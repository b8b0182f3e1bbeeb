//! Pseudo-terminals: a new one in a sandbox's own devpts, opened from outside it; window sizes; raw mode
//! for the terminal a client runs in.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::{OptionalActions, Termios, Winsize};

use crate::error::{Context, SysError, SysResult};

/// The device number of `/dev/ptmx` and of every devpts instance's `ptmx` node: major 5, minor 2.
const PTMX: (u32, u32) = (5, 2);

/// Both ends of a new pseudo-terminal.
#[derive(Debug)]
pub struct Pty {
    /// The end the terminal's user reads the output from and writes keystrokes to.
    pub master: OwnedFd,
    /// The terminal itself, for the command's standard streams.
    pub slave: OwnedFd,
}

/// Open a new pseudo-terminal in the devpts instance behind `dev/ptmx` under `root`, a directory descriptor
/// (such as `/proc/<init>/root`, so that the terminal belongs to that sandbox and shows there as
/// `/dev/pts/N`). The path is resolved inside `root` (`RESOLVE_IN_ROOT`, no magic links), and what it names
/// must be the ptmx character device before it is opened for I/O, so a sandbox that rearranged its `/dev`
/// cannot make the caller open some other file. The slave end comes from the master itself (`TIOCGPTPEER`),
/// never by name.
///
/// The new terminal belongs to the calling thread's file-system uid; a caller outside the sandbox first
/// acts as the sandbox's root (see [`crate::fsids::act_as`]).
pub fn open_in(root: BorrowedFd<'_>) -> SysResult<Pty> {
    let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    let path = loop {
        // EAGAIN: a rename raced the walk; the kernel asks for another try.
        match rustix::fs::openat2(root, "dev/ptmx", OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), how) {
            Err(rustix::io::Errno::AGAIN) if tries < 16 => tries += 1,
            r => break r.ctx(|| "find the sandbox's /dev/ptmx")?,
        }
    };
    let st = rustix::fs::fstat(&path).ctx(|| "stat the sandbox's /dev/ptmx")?;
    let rdev = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    if FileType::from_raw_mode(st.st_mode) != FileType::CharacterDevice || rdev != PTMX {
        return Err(SysError::new(
            "open the sandbox's /dev/ptmx (it is not the pseudo-terminal multiplexer)",
            std::io::ErrorKind::InvalidData,
        ));
    }
    // Reopening the O_PATH descriptor opens the very inode that was checked.
    let master = rustix::fs::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&path)),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ctx(|| "open the sandbox's /dev/ptmx")?;
    rustix::pty::unlockpt(&master).ctx(|| "unlock a pseudo-terminal")?;
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
        .ctx(|| "open a pseudo-terminal's slave end")?;
    Ok(Pty { master, slave })
}

/// Set a terminal's window size (on either end of a pseudo-terminal); its foreground process group gets
/// SIGWINCH.
pub fn set_window_size(fd: impl AsFd, rows: u16, cols: u16) -> SysResult<()> {
    let size = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(fd, size).ctx(|| "set a terminal's window size")
}

/// A terminal's window size as (rows, columns), when `fd` is a terminal that has one.
pub fn window_size(fd: impl AsFd) -> Option<(u16, u16)> {
    rustix::termios::tcgetwinsize(fd).ok().filter(|w| w.ws_row > 0 && w.ws_col > 0).map(|w| (w.ws_row, w.ws_col))
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: impl AsFd) -> bool {
    rustix::termios::isatty(fd)
}

/// A signalfd that reads SIGWINCH (the terminal's window changed size). Like [`crate::process::signal_fd`],
/// it blocks the signal for the calling thread: call it before starting threads, which inherit the mask.
pub fn resize_signal_fd() -> SysResult<OwnedFd> {
    crate::process::signal_fd(&[libc::SIGWINCH])
}

/// A terminal in raw mode (no echo, no line editing, no signals from keys, no output processing) until this
/// is dropped, when its previous settings come back.
#[derive(Debug)]
pub struct RawMode {
    fd: OwnedFd,
    saved: Termios,
}

/// Put the terminal `fd` into raw mode until the returned guard is dropped.
pub fn raw_mode(fd: BorrowedFd<'_>) -> SysResult<RawMode> {
    let saved = rustix::termios::tcgetattr(fd).ctx(|| "read the terminal's settings")?;
    let fd = rustix::io::fcntl_dupfd_cloexec(fd, 3).ctx(|| "keep the terminal open")?;
    let mut raw = saved.clone();
    raw.make_raw();
    rustix::termios::tcsetattr(&fd, OptionalActions::Flush, &raw).ctx(|| "put the terminal in raw mode")?;
    Ok(RawMode { fd, saved })
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(&self.fd, OptionalActions::Drain, &self.saved);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_from_a_root_directory_has_a_slave_with_the_size_set_on_the_master() {
        let root = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let pty = open_in(root.as_fd()).unwrap();
        set_window_size(&pty.master, 33, 111).unwrap();
        assert_eq!(window_size(&pty.slave), Some((33, 111)));
        assert!(is_terminal(&pty.slave));
        rustix::io::write(&pty.slave, b"hi").unwrap();
        let mut buf = [0u8; 8];
        let n = rustix::io::read(&pty.master, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
    }

    #[test]
    fn anything_but_the_ptmx_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("dev")).unwrap();
        std::fs::write(dir.path().join("dev/ptmx"), b"not a device").unwrap();
        let root =
            rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        assert!(open_in(root.as_fd()).is_err());
        // An absolute symbolic link is resolved inside the root, not on the host.
        std::fs::remove_file(dir.path().join("dev/ptmx")).unwrap();
        std::os::unix::fs::symlink("/dev/ptmx", dir.path().join("dev/ptmx")).unwrap();
        assert!(open_in(root.as_fd()).is_err());
    }
}
