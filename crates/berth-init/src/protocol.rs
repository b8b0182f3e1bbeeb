//! The control protocol between a supervisor and berth-init.
//!
//! One `SOCK_SEQPACKET` socket; each message is one JSON object in one packet, and may carry file
//! descriptors (a command's stdin, stdout and stderr) as SCM_RIGHTS. The supervisor sends [`Request`]s; init
//! sends [`Event`]s. Init treats every request as untrusted input and the supervisor treats every event the
//! same way: init runs inside the sandbox, where the code it hosts may have tampered with it.

use std::os::fd::{BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};

/// The descriptor number init finds its control socket on.
pub const CONTROL_FD: i32 = 3;

/// The argument (after `init`) that starts init with its control socket on standard input instead of
/// [`CONTROL_FD`]: how a runtime that cannot hand over descriptors on exec starts it (gVisor's `runsc run`
/// passes a container its standard streams only). Init then keeps that socket and sends `ready` without one:
/// under gVisor a descriptor cannot leave the sandbox.
pub const CONTROL_ON_STDIN: &str = "--control-on-stdin";

/// The largest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Where init accepts the sandbox's proxy connections, on its loopback. Each accepted connection is handed to
/// the supervisor (an [`Event::Connection`] carrying the socket), which decides where, if anywhere, it goes:
/// the sandbox itself has no network interface but `lo`.
pub const PROXY_PORT: u16 = 3128;

/// Where init accepts connections to berth's API, for the sandbox's session token: handed over the same way.
pub const API_PORT: u16 = 3129;

/// Which of a command's standard streams arrive as descriptors with an [`Request::Exec`], in order.
/// A stream that is not attached reads from or writes to `/dev/null`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Winsize {
    pub rows: u16,
    pub cols: u16,
}

/// What a supervisor asks of init.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Run a command in its own process group.
    Exec {
        id: u64,
        argv: Vec<String>,
        /// `KEY=VALUE` strings: the command's whole environment.
        env: Vec<String>,
        cwd: String,
        uid: u32,
        gid: u32,
        attached: Attached,
        /// How many descriptors follow the attached streams: files the command writes `0` to before it
        /// starts, to move itself into a cgroup of its own (so its whole tree can be killed at once).
        #[serde(default)]
        join_cgroup: usize,
        /// The attached stdin is a terminal: the command starts a session of its own with it as the
        /// controlling terminal (job control works), instead of only a process group of its own.
        #[serde(default)]
        tty: bool,
        /// Init opens a terminal of its own of this size for the command (its controlling terminal, on its
        /// stdin, stdout and stderr) and copies between the terminal and the attached stdin, a stream socket;
        /// stdout and stderr are not attached. For a sandbox where a terminal opened outside is no terminal
        /// (gVisor's kernel has its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pty: Option<Winsize>,
    },
    /// Connect to the unix socket at `path` (absolute, inside the sandbox) and copy between it and the stream
    /// socket that travels with the request, for a supervisor that cannot reach the sandbox's sockets
    /// through its files (gVisor keeps a socket its processes make in its kernel). A failed connect closes
    /// the supervisor's socket and is reported as `rejected`.
    Connect { path: String },
    /// Connect to `127.0.0.1:port` of the sandbox's own loopback and copy between it and the stream socket
    /// that travels with the request (a preview of what the sandbox serves: the sandbox has no other network
    /// interface, so berth reaches in through init). A failed connect closes the supervisor's socket and is
    /// reported as `rejected`.
    ConnectPort { port: u16 },
    /// Set the window size of the terminal init opened for command `id` (see `pty`); the process groups of
    /// its session get SIGWINCH.
    Resize { id: u64, rows: u16, cols: u16 },
    /// Send a signal to every process of a running command's process group.
    Signal { id: u64, signal: i32 },
    /// Sent once, right after init was restored from a checkpoint: init executes its own binary again,
    /// keeping its listeners and its commands, and answers with `ready`, which carries a new control socket
    /// made inside the sandbox as at start (the supervisor uses it from then on). The restore made init's memory outside the sandbox's user namespace, where no later
    /// checkpoint could reach it, and left it without its landlock domain: the new program has both back.
    Reexec,
    /// Say `ready` again, as at start: for a supervisor that has just been given init's control socket anew
    /// (a gVisor sandbox restored from its checkpoint, whose init knows nothing of it).
    Hello,
    /// Watch the directory at `path` (absolute, inside the sandbox; with `recursive`, every directory
    /// under it too) and write what changes in it, a line of JSON an event, to the stream socket that
    /// travels with the request (see `berth_init::watch` for the lines). Answered with `watching` or
    /// `failed`; the watch lasts until the supervisor closes its end or sends `unwatch`, or the directory
    /// goes, and its end is reported with `unwatched`.
    Watch { id: u64, path: String, recursive: bool },
    /// Take what the kernel has queued for watch `id` now, and after those events write the line
    /// `{"type":"flushed"}`: a supervisor that reads up to it has every change made before it asked.
    Flush { id: u64 },
    /// End watch `id` now: when `unwatched` comes, init holds nothing of it (a checkpoint finds no inotify
    /// instance and no socket from outside).
    Unwatch { id: u64 },
    /// The other end of connection `relay` (see [`Event::Connection`]): one stream socket travels with it.
    /// Init copies between the two until both sides have finished, then closes both.
    Relay { relay: u64 },
}

/// What init reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// Init is up and listening. `landlock` says whether its rules are `enforced`, `partial` (the kernel's
    /// landlock lacks some) or `unavailable`.
    Ready { version: String, landlock: String },
    /// A command started; `pid` is its pid inside the sandbox.
    Started { id: u64, pid: i32 },
    /// A command could not be started: `code` follows the shell, 127 not found, 126 not executable. Or a
    /// watch could not: `code` is an errno (2 no such directory, 20 not a directory, 22 a bad request, 28
    /// the kernel's watches used up, 7 too many directories, 24 too many watches).
    Failed { id: u64, code: i32, message: String },
    /// A command ended (its own process; children it left behind keep running until the sandbox ends).
    Exited { id: u64, code: Option<i32>, signal: Option<i32> },
    /// Command `id` was killed because the sandbox went over its memory limit (`limit` bytes) and it held the
    /// most (`bytes`); its `exited` follows. Only where init holds the limit (see `berth_init::memory`).
    OverMemory { id: u64, bytes: u64, limit: u64 },
    /// Watch `id` is in place: every change from now on is reported.
    Watching { id: u64 },
    /// Watch `id` has ended, and why; init has closed its socket.
    Unwatched { id: u64, reason: String },
    /// A request was malformed; nothing was done.
    Rejected { message: String },
    /// Sent by berth instead of `Ready` when building the sandbox failed before init could start.
    SetupFailed { message: String },
    /// A connection to the proxy or API port (`port`), accepted by init; the socket travels with the message.
    /// Where no descriptor can leave the sandbox (gVisor), none travels: `relay` numbers the connection, and
    /// the supervisor answers with a [`Request::Relay`] carrying a socket of its own, to which init then
    /// copies the connection's bytes both ways.
    Connection {
        port: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        relay: Option<u64>,
    },
}

/// Errors of the control channel.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("control socket")]
    Io(#[from] berth_sys::SysError),
    #[error("malformed control message")]
    Decode(#[from] serde_json::Error),
    #[error("the other end of the control socket closed")]
    Closed,
    #[error("a control message was larger than {MAX_MESSAGE} bytes")]
    TooLarge,
}

/// Send one message with its descriptors.
pub fn send<T: Serialize>(sock: BorrowedFd<'_>, msg: &T, fds: &[BorrowedFd<'_>]) -> Result<(), ProtocolError> {
    let bytes = serde_json::to_vec(msg)?;
    berth_sys::fd::send(sock, &bytes, fds)?;
    Ok(())
}

/// Receive one message and the descriptors it carried.
pub fn recv<T: for<'de> Deserialize<'de>>(sock: BorrowedFd<'_>) -> Result<(T, Vec<OwnedFd>), ProtocolError> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let (n, fds) = berth_sys::fd::recv(sock, &mut buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => ProtocolError::TooLarge,
        _ => ProtocolError::Io(e),
    })?;
    if n == 0 {
        return Err(ProtocolError::Closed);
    }
    Ok((serde_json::from_slice(&buf[..n])?, fds))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_reject_unknown_fields() {
        let req = Request::Signal { id: 7, signal: 15 };
        let text = serde_json::to_string(&req).unwrap();
        assert_eq!(text, r#"{"op":"signal","id":7,"signal":15}"#);
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), req);
        assert!(serde_json::from_str::<Request>(r#"{"op":"signal","id":7,"signal":15,"x":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"format_disk"}"#).is_err());
    }

    #[test]
    fn reexec_is_a_bare_request() {
        assert_eq!(serde_json::to_string(&Request::Reexec).unwrap(), r#"{"op":"reexec"}"#);
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"reexec"}"#).unwrap(), Request::Reexec);
    }

    #[test]
    fn exec_requests_default_to_no_terminal() {
        let text = r#"{"op":"exec","id":1,"argv":["sh"],"env":[],"cwd":"/","uid":0,"gid":0,"attached":{"stdin":true,"stdout":true,"stderr":true}}"#;
        let Request::Exec { tty, join_cgroup, pty, .. } = serde_json::from_str::<Request>(text).unwrap() else {
            panic!("not an exec")
        };
        assert!(!tty);
        assert_eq!(pty, None, "a terminal of init's own only when asked for");
        assert_eq!(join_cgroup, 0);
        let with = text.replace(r#""gid":0,"#, r#""gid":0,"tty":true,"#);
        assert!(matches!(serde_json::from_str::<Request>(&with).unwrap(), Request::Exec { tty: true, .. }));
    }

    #[test]
    fn messages_carry_descriptors() {
        let (a, b) = berth_sys::fd::seqpacket_pair().unwrap();
        let (r, _w) = rustix::pipe::pipe().unwrap();
        use std::os::fd::AsFd;
        send(a.as_fd(), &Event::Ready { version: "1".into(), landlock: "enforced".into() }, &[r.as_fd()]).unwrap();
        let (ev, fds): (Event, _) = recv(b.as_fd()).unwrap();
        assert_eq!(ev, Event::Ready { version: "1".into(), landlock: "enforced".into() });
        assert_eq!(fds.len(), 1);
        drop(a);
        assert!(matches!(recv::<Event>(b.as_fd()), Err(ProtocolError::Closed)));
    }
}
