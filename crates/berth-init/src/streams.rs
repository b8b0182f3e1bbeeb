//! Commands' streams through pipes of the sandbox's own kernel, where a descriptor from outside cannot be
//! written to disk with the sandbox (gVisor: a host pipe is a host file its checkpoint refuses).
//!
//! The command gets one end of a pipe init makes; a small thread copies between the other end and the
//! supervisor's descriptor. When the command's own process ends, each copy of its output takes what is
//! already in the pipe, hands it on, and closes the supervisor's descriptor: processes it left in the
//! background then hold only a pipe of the sandbox's, which a checkpoint keeps (their later output is not
//! read, as it would not be read from the supervisor's pipe once the command is done).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;

use rustix::event::{PollFd, PollFlags};

const STACK: usize = 128 * 1024;
const BUFFER: usize = 64 * 1024;
/// At most this much is taken from the pipe once the command has ended: a background process that writes
/// without pause does not keep the copy going.
const DRAIN_MAX: usize = 4 << 20;

/// How long a command's end waits for its streams' copies to finish (a supervisor that stopped reading
/// must not stall init).
const FINISH_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// One stream's copy, stopped when the command ends.
pub struct Copy {
    stop: OwnedFd,
    done: mpsc::Receiver<()>,
}

impl Copy {
    /// The command has ended: take what is left (output), close the supervisor's descriptor, and wait for
    /// that (a little while at most).
    pub fn finish(self) {
        let _ = rustix::io::write(&self.stop, b"x");
        let _ = self.done.recv_timeout(FINISH_WITHIN);
    }
}

/// Whether `fd` is a pipe (the streams this applies to; a terminal or a socket is handed on as it is).
pub fn is_pipe(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo)
}

/// Put a pipe of the sandbox's between the command and `outside`: the end for the command, and the copy.
/// `input`: the command reads it (its stdin); otherwise the command writes it.
pub fn wrap(outside: OwnedFd, input: bool) -> Result<(OwnedFd, Copy), String> {
    let failed = |e: rustix::io::Errno| format!("make a pipe for a command's stream: {e}");
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(failed)?;
    let (stop_read, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(failed)?;
    let (theirs, from, to) = match input {
        true => (read, outside, write),
        false => (write, read, outside),
    };
    // Writes never block the copy: a reader that stopped reading must not keep it from its stop.
    rustix::fs::fcntl_setfl(&to, rustix::fs::OFlags::NONBLOCK).map_err(failed)?;
    let (tell, done) = mpsc::channel();
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            pump(&from, &to, &stop_read, !input);
            drop((from, to));
            let _ = tell.send(());
        })
        .map_err(|_| "no thread to copy a command's stream".to_string())?;
    Ok((theirs, Copy { stop, done }))
}

/// Wait until `fd` is ready for `flags`, or `stop` is readable: false when stopped (or the wait failed).
fn ready(fd: BorrowedFd<'_>, flags: PollFlags, stop: BorrowedFd<'_>) -> bool {
    loop {
        let mut fds = [PollFd::new(&fd, flags), PollFd::new(&stop, PollFlags::IN)];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) if !fds[1].revents().is_empty() => return false,
            Ok(_) if !fds[0].revents().is_empty() => return true,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// Write all of `data` to the non-blocking `to`, unless stopped or it fails.
fn write_all(to: BorrowedFd<'_>, mut data: &[u8], stop: BorrowedFd<'_>) -> bool {
    while !data.is_empty() {
        match rustix::io::write(to, data) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::AGAIN) => {
                if !ready(to, PollFlags::OUT, stop) {
                    return false;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Copy from `from` to `to` until `from` ends, a write fails, or `stop`. Output (`drain`) is copied on
/// after the stop for what is in `from` at that moment (at most [`DRAIN_MAX`]), and its writes wait for a
/// slow reader (until the reader goes); input stops at once, even in the middle of a write to a command
/// that does not read.
fn pump(from: &OwnedFd, to: &OwnedFd, stop: &OwnedFd, drain: bool) {
    // What a write that must not be cut short waits on besides its reader: nothing.
    let Ok((never, _never_written)) = rustix::pipe::pipe() else { return };
    let mut buf = vec![0u8; BUFFER];
    let (from, to, stop) = (from.as_fd(), to.as_fd(), stop.as_fd());
    let write_stop = if drain { never.as_fd() } else { stop };
    loop {
        if !ready(from, PollFlags::IN, stop) {
            break;
        }
        match rustix::io::read(from, &mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if !write_all(to, &buf[..n], write_stop) {
                    return;
                }
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(_) => return,
        }
    }
    if !drain || rustix::fs::fcntl_setfl(from, rustix::fs::OFlags::NONBLOCK).is_err() {
        return;
    }
    let mut taken = 0;
    while taken < DRAIN_MAX {
        match rustix::io::read(from, &mut buf) {
            Ok(0) => return,
            Ok(n) => {
                taken += n;
                if !write_all(to, &buf[..n], never.as_fd()) {
                    return;
                }
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn output_written_before_the_end_is_all_handed_on_and_then_the_supervisors_end_closes() {
        let (mut outside_read, outside_write) = std::io::pipe().unwrap();
        let (theirs, copy) = wrap(OwnedFd::from(outside_write), false).unwrap();
        let mut command = std::fs::File::from(theirs.try_clone().unwrap());
        let data = vec![7u8; 200 * 1024];
        let writer = std::thread::spawn(move || command.write_all(&data));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < 200 * 1024 {
            let n = outside_read.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        writer.join().unwrap().unwrap();
        // A process left behind keeps the pipe of the sandbox's (`theirs`) open; the copy still ends.
        copy.finish();
        assert_eq!(outside_read.read(&mut buf).unwrap(), 0, "the supervisor's end is closed");
        assert_eq!(got.len(), 200 * 1024);
        drop(theirs);
    }

    #[test]
    fn input_reaches_the_command_and_a_command_that_does_not_read_does_not_hold_the_copy() {
        let (outside_read, mut outside_write) = std::io::pipe().unwrap();
        let (theirs, copy) = wrap(OwnedFd::from(outside_read), true).unwrap();
        outside_write.write_all(b"hello\n").unwrap();
        let mut command = std::fs::File::from(theirs);
        let mut buf = [0u8; 6];
        command.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello\n");
        // More than the pipe holds, never read: the stop still ends the copy, which lets go of the
        // supervisor's end (the feeder's write then fails instead of waiting forever).
        let big = vec![1u8; 1 << 20];
        let feeder = std::thread::spawn(move || outside_write.write_all(&big));
        copy.finish();
        let fed = feeder.join().unwrap();
        assert_eq!(fed.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
        drop(command);
    }
}
