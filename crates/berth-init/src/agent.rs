//! The init loop: wait on the control socket and on signals; start commands, reap everything, report exits.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use berth_sys::process::{self as proc, Exit};
use rustix::event::{PollFd, PollFlags};

use crate::protocol::{self, Attached, CONTROL_FD, Event, ProtocolError, Request};

/// Signals init takes from the outside and hands on to the commands it runs.
const FORWARDED: [i32; 6] =
    [libc_sig::TERM, libc_sig::INT, libc_sig::HUP, libc_sig::QUIT, libc_sig::USR1, libc_sig::USR2];

/// Signal numbers (Linux, every architecture berth runs on).
mod libc_sig {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const QUIT: i32 = 3;
    pub const KILL: i32 = 9;
    pub const USR1: i32 = 10;
    pub const USR2: i32 = 12;
    pub const TERM: i32 = 15;
    pub const CHLD: i32 = 17;
}

struct Init {
    control: OwnedFd,
    /// The proxy and API ports' listeners (bound before anything untrusted runs, so nothing inside can take
    /// the ports).
    listeners: Vec<(u16, std::net::TcpListener)>,
    /// Running commands: pid inside the sandbox → request id.
    running: HashMap<i32, u64>,
}

/// Run as PID 1 until the supervisor hangs up. Returns the process exit code.
pub fn run() -> i32 {
    let Some(control) = berth_sys::fd::inherited(CONTROL_FD) else {
        eprintln!("berth init: no control socket on descriptor {CONTROL_FD}; init is only started by berth");
        return 125;
    };
    // The commands init starts must never hold the control socket: they could forge init's reports.
    if rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC).is_err() {
        return 125;
    }
    // Not dumpable: the code init hosts cannot read init's memory or descriptors through /proc, nor ptrace it
    // (CAP_SYS_PTRACE is not in the sandbox's bounding set). Compare CVE-2019-5736, where a container
    // overwrote the runtime binary through /proc/self/exe.
    if let Err(e) = proc::set_not_dumpable() {
        eprintln!("berth init: {e}");
        return 125;
    }
    // Landlock goes on here rather than before exec: init's own binary lives outside the sandbox's tree, so
    // the rules would forbid executing it. Nothing untrusted has run yet.
    let landlock = match berth_sys::landlock::restrict_sandbox(&["/dev/pts", "/dev/tty", "/dev/ptmx"]) {
        Ok(status) => format!("{status:?}").to_lowercase(),
        Err(e) => {
            let _ = protocol::send(control.as_fd(), &Event::SetupFailed { message: e.to_string() }, &[]);
            return 125;
        }
    };
    let mut signals = FORWARDED.to_vec();
    signals.push(libc_sig::CHLD);
    let sigfd = match proc::signal_fd(&signals) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("berth init: {e}");
            return 125;
        }
    };
    let listeners = [protocol::PROXY_PORT, protocol::API_PORT]
        .into_iter()
        .filter_map(|port| {
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))
                .and_then(|l| l.set_nonblocking(true).map(|()| (port, l)))
                .ok()
        })
        .collect();
    // The control socket the supervisor keeps is made here, in the sandbox's own network namespace, and
    // handed over with `ready`: a socket of the host's namespace held inside would tie the sandbox to the
    // host, and a checkpoint of the sandbox could not name it. The inherited one is closed.
    let (mine, theirs) = match berth_sys::fd::seqpacket_pair() {
        Ok(pair) => pair,
        Err(e) => {
            let _ = protocol::send(control.as_fd(), &Event::SetupFailed { message: e.to_string() }, &[]);
            return 125;
        }
    };
    let ready = Event::Ready { version: env!("CARGO_PKG_VERSION").into(), landlock };
    if protocol::send(control.as_fd(), &ready, &[theirs.as_fd()]).is_err() {
        return 125;
    }
    drop(theirs);
    // On descriptor 3, where the old one was: a checkpoint of the sandbox finds it there.
    drop(control);
    if berth_sys::fd::dup_onto(mine.as_fd(), CONTROL_FD).is_err() {
        return 125;
    }
    drop(mine);
    let Some(control) = berth_sys::fd::inherited(CONTROL_FD) else { return 125 };
    if rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC).is_err() {
        return 125;
    }
    let mut init = Init { control, listeners, running: HashMap::new() };
    loop {
        let (control_ready, signal_ready, listeners_ready) = {
            let mut fds = vec![PollFd::new(&init.control, PollFlags::IN), PollFd::new(&sigfd, PollFlags::IN)];
            for (_, l) in &init.listeners {
                fds.push(PollFd::new(l, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return 125,
            }
            let ready = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
            (ready(0), ready(1), (2..fds.len()).any(ready))
        };
        if listeners_ready {
            init.hand_over_connections();
        }
        if signal_ready {
            for sig in proc::read_signals(&sigfd) {
                if sig != libc_sig::CHLD {
                    for pid in init.running.keys() {
                        proc::kill_group(*pid, sig);
                    }
                }
            }
            init.reap();
        }
        if control_ready {
            match protocol::recv::<Request>(init.control.as_fd()) {
                Ok((req, fds)) => init.handle(req, fds),
                Err(ProtocolError::Closed) => return init.shutdown(),
                Err(ProtocolError::TooLarge) => {
                    let _ = init.report(&Event::Rejected { message: ProtocolError::TooLarge.to_string() });
                }
                Err(ProtocolError::Decode(e)) => {
                    let _ = init.report(&Event::Rejected { message: e.to_string() });
                }
                Err(ProtocolError::Io(_)) => return init.shutdown(),
            }
        }
    }
}

impl Init {
    fn report(&self, ev: &Event) -> Result<(), ProtocolError> {
        protocol::send(self.control.as_fd(), ev, &[])
    }

    /// Pass every waiting connection to the supervisor; init never reads or writes them itself.
    fn hand_over_connections(&self) {
        for (port, listener) in &self.listeners {
            while let Ok((conn, _)) = listener.accept() {
                let fd = OwnedFd::from(conn);
                let _ = protocol::send(self.control.as_fd(), &Event::Connection { port: *port }, &[fd.as_fd()]);
            }
        }
    }

    fn handle(&mut self, req: Request, fds: Vec<OwnedFd>) {
        match req {
            Request::Exec { id, argv, env, cwd, uid, gid, attached, join_cgroup, tty } => {
                let ev = match self.spawn(&argv, &env, &cwd, uid, gid, attached, join_cgroup, tty, fds) {
                    Ok(pid) => {
                        self.running.insert(pid, id);
                        Event::Started { id, pid }
                    }
                    Err((code, message)) => Event::Failed { id, code, message },
                };
                let _ = self.report(&ev);
            }
            Request::Signal { id, signal } => {
                if !(1..=64).contains(&signal) {
                    let _ = self.report(&Event::Rejected { message: format!("{signal} is not a signal number") });
                    return;
                }
                for (pid, _) in self.running.iter().filter(|(_, i)| **i == id) {
                    proc::kill_group(*pid, signal);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &self,
        argv: &[String],
        env: &[String],
        cwd: &str,
        uid: u32,
        gid: u32,
        attached: Attached,
        join_cgroup: usize,
        tty: bool,
        fds: Vec<OwnedFd>,
    ) -> Result<i32, (i32, String)> {
        let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
            return Err((125, "no command given".into()));
        };
        if tty && !attached.stdin {
            return Err((125, "a command on a terminal needs the terminal attached as its stdin".into()));
        }
        let expected = [attached.stdin, attached.stdout, attached.stderr].iter().filter(|a| **a).count() + join_cgroup;
        if fds.len() != expected {
            return Err((125, format!("expected {expected} stream descriptors, got {}", fds.len())));
        }
        if let Err(e) = std::fs::create_dir_all(cwd) {
            return Err((125, format!("cannot create the working directory {cwd}: {e}")));
        }
        let mut fds = fds.into_iter();
        let streams = expected - join_cgroup;
        let mut stdio: Vec<OwnedFd> = fds.by_ref().take(streams).collect();
        let join: Vec<OwnedFd> = fds.collect();
        stdio.reverse();
        let mut stream = |on: bool| {
            if on { stdio.pop().map(Stdio::from).unwrap_or_else(Stdio::null) } else { Stdio::null() }
        };
        let mut cmd = Command::new(program);
        cmd.args(&argv[1..])
            .env_clear()
            .current_dir(cwd)
            .uid(uid)
            .gid(gid)
            .stdin(stream(attached.stdin))
            .stdout(stream(attached.stdout))
            .stderr(stream(attached.stderr));
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        // Its own process group (so that it and its children can be signalled together); on a terminal, the
        // session that setsid makes gives it one.
        if !tty {
            cmd.process_group(0);
        }
        proc::prepare_command(&mut cmd, join, tty);
        match cmd.spawn() {
            Ok(child) => Ok(child.id() as i32),
            Err(e) => Err(match e.kind() {
                std::io::ErrorKind::NotFound => (127, format!("{program}: command not found")),
                std::io::ErrorKind::PermissionDenied => (126, format!("{program}: permission denied")),
                _ => (126, format!("{program}: cannot execute: {e}")),
            }),
        }
    }

    /// Reap every child that has ended; report the ones that were commands.
    fn reap(&mut self) {
        while let Some((pid, exit)) = proc::reap_any() {
            if let Some(id) = self.running.remove(&pid) {
                let (code, signal) = match exit {
                    Exit::Code(c) => (Some(c), None),
                    Exit::Signal(s) => (None, Some(s)),
                };
                let _ = self.report(&Event::Exited { id, code, signal });
            }
        }
    }

    /// The supervisor is gone: nothing may outlive it. Returning ends PID 1, and the kernel then kills every
    /// other process in the sandbox's pid namespace.
    fn shutdown(&mut self) -> i32 {
        for pid in self.running.keys() {
            proc::kill_group(*pid, libc_sig::KILL);
        }
        0
    }
}
