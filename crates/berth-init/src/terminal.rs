//! Terminals init opens itself, for a sandbox where one opened outside is no terminal inside (gVisor's kernel
//! has a devpts of its own, and takes a host terminal passed in for a plain file): the command gets the new
//! terminal's slave end, and init copies between its master end and the supervisor's stream socket.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use crate::protocol::Winsize;

/// A terminal init opened, by its master end.
pub struct Terminal {
    pub master: OwnedFd,
}

/// A new terminal of `size`: (master, slave).
pub fn open(size: Winsize) -> Result<(OwnedFd, OwnedFd), String> {
    let failed = |what: &str, e: rustix::io::Errno| format!("{what}: {e}");
    let master = rustix::fs::open("/dev/ptmx", OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| failed("open /dev/ptmx", e))?;
    rustix::pty::grantpt(&master).map_err(|e| failed("grant a pseudo-terminal", e))?;
    rustix::pty::unlockpt(&master).map_err(|e| failed("unlock a pseudo-terminal", e))?;
    let name = rustix::pty::ptsname(&master, Vec::new()).map_err(|e| failed("name a pseudo-terminal", e))?;
    let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| failed("open a pseudo-terminal's slave end", e))?;
    let ws = rustix::termios::Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&master, ws).map_err(|e| failed("set a terminal's window size", e))?;
    Ok((master, slave))
}

/// Set the terminal's window size and tell the command `leader` started, and the process groups of its
/// session (SIGWINCH). gVisor's kernel sends none itself, and tells nobody outside the session which group
/// is in the foreground (not on the master end, nor in `/proc`): every group of the session is told, which a
/// program in the background takes as a size it may query.
pub fn resize(t: &Terminal, size: Winsize, leader: Option<i32>) -> Result<(), String> {
    let ws = rustix::termios::Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&t.master, ws).map_err(|e| format!("set a terminal's window size: {e}"))?;
    if let Some(leader) = leader {
        signal_session(leader, SIGWINCH);
    }
    Ok(())
}

const SIGHUP: i32 = 1;
const SIGWINCH: i32 = 28;

/// Send `signal` to every process group of the session whose leader is `leader`.
fn signal_session(leader: i32, signal: i32) {
    for group in session_groups(leader) {
        berth_sys::process::kill_group(group, signal);
    }
}

/// The process groups of the session whose leader is `leader` (its own first), from `/proc`.
fn session_groups(leader: i32) -> Vec<i32> {
    let mut groups = vec![leader];
    let Ok(entries) = std::fs::read_dir("/proc") else { return groups };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the command's name, in parentheses (which may hold anything): state, ppid, pgrp, session.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(pgrp), Some(sid)) = (fields.get(2), fields.get(3)) else { continue };
        if let (Ok(pgrp), Ok(sid)) = (pgrp.parse::<i32>(), sid.parse::<i32>())
            && sid == leader
            && !groups.contains(&pgrp)
        {
            groups.push(pgrp);
        }
    }
    groups
}

/// Copy between the terminal's `master` and the supervisor's socket `outside` until the terminal hangs up
/// (every slave end closed: reads give EIO) and the supervisor has stopped writing. When the supervisor
/// stops (its client went away), the terminal hangs up on the session of the command `leader` started:
/// SIGHUP, as closing a terminal's master does (init keeps the master open for resizes, so the kernel would
/// not), to each of its process groups (which one is in the foreground cannot be told, as for `resize`).
pub fn relay(master: OwnedFd, outside: OwnedFd, leader: i32) -> Result<(), String> {
    let outside = std::os::unix::net::UnixStream::from(outside);
    let master = std::fs::File::from(master);
    let (master_in, outside_in) = match (master.try_clone(), outside.try_clone()) {
        (Ok(m), Ok(o)) => (m, o),
        _ => return Err("a terminal: out of descriptors".into()),
    };
    crate::relay::spawn_copy(outside_in, master_in, move |_| {
        signal_session(leader, SIGHUP);
        Ok(())
    })?;
    crate::relay::spawn_copy(master, outside, |o| o.shutdown(std::net::Shutdown::Write))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn a_terminal_of_its_own_is_relayed_with_its_size() {
        let (master, slave) = open(Winsize { rows: 33, cols: 111 }).unwrap();
        assert_eq!(rustix::termios::tcgetwinsize(&slave).map(|w| (w.ws_row, w.ws_col)).unwrap(), (33, 111));
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        // No command: the leader is a pid no process has (killing its group fails quietly).
        relay(master, OwnedFd::from(theirs), i32::MAX).unwrap();
        let mut slave = std::fs::File::from(slave);
        ours.write_all(b"typed\n").unwrap();
        let mut line = [0u8; 6];
        slave.read_exact(&mut line).unwrap();
        assert_eq!(&line, b"typed\n", "keystrokes reach the terminal");
        slave.write_all(b"shown").unwrap();
        drop(slave);
        let mut out = Vec::new();
        ours.read_to_end(&mut out).unwrap();
        // The terminal echoes what was typed (cooked mode, with \r\n), then the output; then it hangs up.
        let out = String::from_utf8_lossy(&out);
        assert!(out.ends_with("shown"), "{out:?}");
    }
}
