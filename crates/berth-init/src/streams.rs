//! Commands' streams through pipes of the sandbox's own kernel, where a descriptor from outside cannot be
//! written to disk with the sandbox (gVisor: a host pipe is a host file its checkpoint refuses).
//!
//! The command gets one end of a pipe init makes; init's own loop copies between the other end and the
//! supervisor's descriptor, both non-blocking, as it serves everything else (no thread: in gVisor's kernel
//! each hop between two tasks is dear, and threads made an exec a third slower). When the command's own
//! process ends, each copy of its output takes what is already in the pipe, hands it on, and closes the
//! supervisor's descriptor: processes it left in the background then hold only a pipe of the sandbox's,
//! which a checkpoint keeps (their later output is not read, as it would not be read from the supervisor's
//! pipe once the command is done).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

const BUFFER: usize = 64 * 1024;
/// At most this much is taken from the pipe once the command has ended: a background process that writes
/// without pause does not keep the copy going.
const DRAIN_MAX: usize = 4 << 20;
/// How long a command's end waits for a supervisor that does not read to take the rest of its output.
const FINISH_WITHIN: Duration = Duration::from_secs(2);
/// Reads and writes one copy makes before the loop turns to the others.
const STEPS: usize = 16;

/// One stream's copy: `from` to `to`, with what was read and not yet written.
pub struct Copy {
    from: OwnedFd,
    to: OwnedFd,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The command's output (drained at its end), not its input.
    output: bool,
    /// Bytes read so far.
    read: usize,
}

/// Whether `fd` is a pipe (the streams this applies to; a terminal or a socket is handed on as it is).
pub fn is_pipe(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo)
}

/// Put a pipe of the sandbox's between the command and `outside`: the end for the command, and the copy.
/// `input`: the command reads it (its stdin); otherwise the command writes it.
pub fn wrap(outside: OwnedFd, input: bool) -> Result<(OwnedFd, Copy), String> {
    let failed = |e: Errno| format!("make a pipe for a command's stream: {e}");
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(failed)?;
    let (theirs, from, to) = match input {
        true => (read, outside, write),
        false => (write, read, outside),
    };
    // Init's ends only: the supervisor's and the command's keep their own modes.
    for fd in [&from, &to] {
        rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(failed)?;
    }
    Ok((theirs, Copy { from, to, buf: vec![0; BUFFER], start: 0, end: 0, output: !input, read: 0 }))
}

impl Copy {
    /// What the copy waits for: `from` to have something, or `to` to take what is pending.
    pub fn interest(&self) -> (BorrowedFd<'_>, PollFlags) {
        match self.start < self.end {
            true => (self.to.as_fd(), PollFlags::OUT),
            false => (self.from.as_fd(), PollFlags::IN),
        }
    }

    /// Move what can be moved without waiting: false once the copy is over (the end of `from`, or an
    /// error: a reader gone).
    pub fn step(&mut self) -> bool {
        for _ in 0..STEPS {
            match self.move_some() {
                Ok(true) => {}
                Ok(false) => return false,
                Err(Errno::AGAIN) => return true,
                Err(Errno::INTR) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// One write of what is pending, or one read when nothing is: `Ok(false)` at the end of `from`.
    fn move_some(&mut self) -> Result<bool, Errno> {
        if self.start < self.end {
            self.start += rustix::io::write(&self.to, &self.buf[self.start..self.end])?;
            return Ok(true);
        }
        let n = rustix::io::read(&self.from, &mut self.buf)?;
        (self.start, self.end, self.read) = (0, n, self.read + n);
        Ok(n > 0)
    }

    /// The command has ended. Output: hand on what is in the pipe now (at most [`DRAIN_MAX`], waiting at
    /// most [`FINISH_WITHIN`] for a supervisor that does not read). Both ends are closed after.
    pub fn finish(mut self) {
        if !self.output {
            return;
        }
        let deadline = Instant::now() + FINISH_WITHIN;
        let limit = self.read.saturating_add(DRAIN_MAX);
        while self.read < limit || self.start < self.end {
            match self.move_some() {
                Ok(true) => {}
                Ok(false) => return,
                Err(Errno::INTR) => {}
                // Nothing more in the pipe (a background process still holds it): done.
                Err(Errno::AGAIN) if self.start >= self.end => return,
                Err(Errno::AGAIN) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !writable(self.to.as_fd(), left) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }
}

/// Whether `fd` became writable within `limit`.
fn writable(fd: BorrowedFd<'_>, limit: Duration) -> bool {
    let ts = rustix::time::Timespec { tv_sec: limit.as_secs() as i64, tv_nsec: limit.subsec_nanos() as i64 };
    let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
    matches!(rustix::event::poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Drive `copy` as init's loop does until `until` says stop, or the copy is over.
    fn drive(copy: &mut Copy, mut until: impl FnMut() -> bool) -> bool {
        while !until() {
            let (fd, flags) = copy.interest();
            let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
            let ts = rustix::time::Timespec { tv_sec: 5, tv_nsec: 0 };
            rustix::event::poll(&mut fds, Some(&ts)).unwrap();
            if !copy.step() {
                return false;
            }
        }
        true
    }

    #[test]
    fn output_written_before_the_end_is_all_handed_on_and_then_the_supervisors_end_closes() {
        let (mut outside_read, outside_write) = std::io::pipe().unwrap();
        let (theirs, mut copy) = wrap(OwnedFd::from(outside_write), false).unwrap();
        let mut command = std::fs::File::from(theirs.try_clone().unwrap());
        let data = vec![7u8; 200 * 1024];
        let writer = std::thread::spawn(move || command.write_all(&data));
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            outside_read.read_to_end(&mut got).unwrap();
            got.len()
        });
        let mut wrote = false;
        assert!(drive(&mut copy, || {
            wrote = wrote || writer.is_finished();
            wrote
        }));
        // A process left behind keeps the pipe of the sandbox's (`theirs`) open; the copy still ends, with
        // everything written before.
        copy.finish();
        assert_eq!(reader.join().unwrap(), 200 * 1024, "all of it, then the supervisor's end is closed");
        drop(theirs);
    }

    #[test]
    fn input_reaches_the_command_and_ends_with_the_supervisors() {
        let (outside_read, mut outside_write) = std::io::pipe().unwrap();
        let (theirs, mut copy) = wrap(OwnedFd::from(outside_read), true).unwrap();
        outside_write.write_all(b"hello\n").unwrap();
        drop(outside_write);
        assert!(!drive(&mut copy, || false), "the copy ends with its input");
        let mut command = std::fs::File::from(theirs);
        let mut got = String::new();
        drop(copy);
        command.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello\n");
    }
}
