//! The init loop: wait on the control socket and on signals; start commands, reap everything, report exits.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use berth_sys::process::{self as proc, Exit};
use rustix::event::{PollFd, PollFlags};

use crate::protocol::{self, CONTROL_FD, Event, ProtocolError, Request};

mod spawn;
mod state;

use state::{State, decode_state, encode_state};

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
    /// Set where no descriptor can leave the sandbox: accepted connections wait here for the supervisor's
    /// sockets, and init relays them.
    relays: Option<crate::relay::Waiting>,
    /// The master ends of the terminals init opened for commands (request id → master), for their resizes.
    terminals: HashMap<u64, crate::terminal::Terminal>,
    /// A cgroup of the sandbox's kernel per command, where there is no host one (gVisor).
    trees: Option<crate::trees::Trees>,
    /// Commands' streams go through pipes of the sandbox's own (see [`crate::streams`]): where the
    /// supervisor's pipes could not be written to disk with the sandbox (gVisor).
    own_pipes: bool,
    /// The copies of running commands' streams (pid → copies), finished when the command ends.
    copies: HashMap<i32, Vec<crate::streams::Copy>>,
    /// What init said when it came up, said again to a supervisor that asks (see [`Request::Hello`]).
    ready: Event,
    /// Directories watched for the supervisor (request id → watch).
    watches: crate::watch::Watches,
    /// The sandbox's memory limit, held by init where its kernel has no OOM killer (gVisor).
    memory: Option<crate::memory::Guard>,
}

/// Run as PID 1 until the supervisor hangs up. Returns the process exit code.
///
/// Started as `berth init`, or as `berth init --resumed STATE` by itself after a restore (see
/// [`Request::Reexec`]), where STATE names the commands it runs and the listeners it holds.
pub fn run() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let on_stdin = args.get(2).is_some_and(|a| a == protocol::CONTROL_ON_STDIN);
    if on_stdin && !control_from_stdin() {
        return 125;
    }
    // Started so (by gVisor's runsc), init installs the sandbox's filter itself, for every command it starts
    // (no_new_privs is set already): the same policy as under namespaces, and rules that keep its own
    // namespace's processes from stopping or killing PID 1, which gVisor's kernel would let them do.
    if on_stdin && let Err(e) = berth_sys::seccomp::SeccompPolicy::gvisor_default().install() {
        eprintln!("berth init: {e}");
        return 125;
    }
    let Some(control) = berth_sys::fd::inherited(CONTROL_FD) else {
        eprintln!("berth init: no control socket on descriptor {CONTROL_FD}; init is only started by berth");
        return 125;
    };
    // The commands init starts must never hold the control socket: they could forge init's reports.
    if rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC).is_err() {
        return 125;
    }
    let resumed = match args.get(2).map(String::as_str) {
        Some("--resumed") => match decode_state(args.get(3).map_or("", String::as_str)) {
            Ok(state) => Some(state),
            Err(message) => {
                let _ = protocol::send(control.as_fd(), &Event::Rejected { message }, &[]);
                return 125;
            }
        },
        _ => None,
    };
    // Not dumpable: the code init hosts cannot read init's memory or descriptors through /proc, nor ptrace it
    // (CAP_SYS_PTRACE is not in the sandbox's bounding set). Compare CVE-2019-5736, where a container
    // overwrote the runtime binary through /proc/self/exe.
    if let Err(e) = proc::set_not_dumpable() {
        eprintln!("berth init: {e}");
        return 125;
    }
    // Landlock goes on here rather than before exec: init's own binary lives outside the sandbox's tree, so
    // the rules would forbid executing it. Nothing untrusted has run yet — or, resumed, what runs was
    // restored without any landlock domain: signals are then not scoped, or the commands started from here on
    // could not signal the ones that ran before the checkpoint (nor could init itself).
    let scope_signals = resumed.is_none();
    let landlock = match berth_sys::landlock::restrict_sandbox(&["/dev/pts", "/dev/tty", "/dev/ptmx"], scope_signals) {
        Ok(status) => status.as_str().to_string(),
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
    let ready = Event::Ready { version: env!("CARGO_PKG_VERSION").into(), landlock };
    let init = match resumed {
        Some(state) => match Init::resumed(control, state, &ready) {
            Some(init) => init,
            None => return 125,
        },
        None if on_stdin => match Init::kept(control, &ready) {
            // Held where commands have cgroups of the sandbox's kernel to count them in.
            Some(init) => {
                Init { memory: crate::memory::Guard::from_args(&args).filter(|_| init.trees.is_some()), ..init }
            }
            None => return 125,
        },
        None => match Init::fresh(control, &ready) {
            Some(init) => init,
            None => return 125,
        },
    };
    init.serve(&sigfd)
}

/// Listen on the proxy and API ports of the sandbox's loopback (a port already taken is left out).
fn bind_ports() -> Vec<(u16, std::net::TcpListener)> {
    [protocol::PROXY_PORT, protocol::API_PORT]
        .into_iter()
        .filter_map(|port| {
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))
                .and_then(|l| l.set_nonblocking(true).map(|()| (port, l)))
                .ok()
        })
        .collect()
}

/// Move the control socket from standard input to [`CONTROL_FD`], and standard input to `/dev/null`.
fn control_from_stdin() -> bool {
    let Some(stdin) = berth_sys::fd::inherited(0) else { return false };
    if berth_sys::fd::dup_onto(stdin.as_fd(), CONTROL_FD).is_err() {
        return false;
    }
    std::mem::forget(stdin);
    let Ok(null) = rustix::fs::open("/dev/null", rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()) else {
        return false;
    };
    let ok = berth_sys::fd::dup_onto(null.as_fd(), 0).is_ok();
    drop(null);
    ok
}

/// Make the control socket the supervisor keeps, in the sandbox's own network namespace, and hand it over
/// with `ready`: a socket of the host's namespace held inside would tie the sandbox to the host, and a
/// checkpoint of the sandbox could not name it. The inherited one is closed; the new one is on descriptor 3,
/// where a checkpoint finds it.
fn hand_over_control(control: OwnedFd, ready: &Event) -> Option<OwnedFd> {
    let (mine, theirs) = match berth_sys::fd::seqpacket_pair() {
        Ok(pair) => pair,
        Err(e) => {
            let _ = protocol::send(control.as_fd(), &Event::SetupFailed { message: e.to_string() }, &[]);
            return None;
        }
    };
    protocol::send(control.as_fd(), ready, &[theirs.as_fd()]).ok()?;
    drop(theirs);
    drop(control);
    berth_sys::fd::dup_onto(mine.as_fd(), CONTROL_FD).ok()?;
    drop(mine);
    let control = berth_sys::fd::inherited(CONTROL_FD)?;
    rustix::io::fcntl_setfd(&control, rustix::io::FdFlags::CLOEXEC).ok()?;
    Some(control)
}

impl Init {
    /// A new sandbox's init: bind the ports it serves, and report ready with the control socket.
    fn fresh(control: OwnedFd, ready: &Event) -> Option<Init> {
        let listeners = bind_ports();
        let control = hand_over_control(control, ready)?;
        Some(Init::with(control, listeners, HashMap::new(), ready))
    }

    fn with(
        control: OwnedFd,
        listeners: Vec<(u16, std::net::TcpListener)>,
        running: HashMap<i32, u64>,
        ready: &Event,
    ) -> Init {
        Init {
            control,
            listeners,
            running,
            relays: None,
            terminals: HashMap::new(),
            trees: None,
            own_pipes: false,
            copies: HashMap::new(),
            ready: ready.clone(),
            watches: Default::default(),
            memory: None,
        }
    }

    /// Init on a control socket it keeps (see [`protocol::CONTROL_ON_STDIN`]). The connections it accepts
    /// on the proxy and API ports are relayed (see [`Event::Connection`]): handing one over would take a
    /// descriptor out of the sandbox.
    fn kept(control: OwnedFd, ready: &Event) -> Option<Init> {
        let listeners = bind_ports();
        protocol::send(control.as_fd(), ready, &[]).ok()?;
        Some(Init {
            relays: Some(Default::default()),
            trees: crate::trees::Trees::open(),
            own_pipes: true,
            ..Init::with(control, listeners, HashMap::new(), ready)
        })
    }

    /// Init executed again by itself (see [`Request::Reexec`]): the same listeners and commands, and a new
    /// control socket (the one a restore hands over is of the host's network namespace).
    fn resumed(control: OwnedFd, state: State, ready: &Event) -> Option<Init> {
        let mut listeners = Vec::new();
        for (port, fd) in state.listeners {
            let Some(fd) = berth_sys::fd::inherited(fd).filter(|_| fd > CONTROL_FD) else { continue };
            let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
            listeners.push((port, std::net::TcpListener::from(fd)));
        }
        let control = hand_over_control(control, ready)?;
        Some(Init::with(control, listeners, state.running, ready))
    }

    /// Execute init's own binary again in place, keeping the control socket, the listeners and the
    /// commands (their processes stay init's children). Returns only on failure, with everything as it was.
    fn reexec(&self) -> String {
        use std::os::fd::AsRawFd;
        let state = State {
            running: self.running.clone(),
            listeners: self.listeners.iter().map(|(port, l)| (*port, l.as_raw_fd())).collect(),
        };
        let exe = match rustix::fs::open(
            "/proc/self/exe",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => return format!("init could not open its own binary: {e}"),
        };
        let keep = |cloexec: bool| {
            let flags = if cloexec { rustix::io::FdFlags::CLOEXEC } else { rustix::io::FdFlags::empty() };
            let _ = rustix::io::fcntl_setfd(&self.control, flags);
            for (_, l) in &self.listeners {
                let _ = rustix::io::fcntl_setfd(l, flags);
            }
        };
        keep(false);
        let err = proc::exec_fd(exe.as_fd(), &["berth", "init", "--resumed", &encode_state(&state)], &[]);
        keep(true);
        format!("init could not execute itself again: {err}")
    }

    /// The loop: requests first (a `reexec` queued before a restore is taken before anything else is done),
    /// then connections and signals.
    fn serve(mut self, sigfd: &OwnedFd) -> i32 {
        loop {
            let (control_ready, signal_ready, listeners_ready, copies_ready, watches_ready) = {
                let mut fds = vec![PollFd::new(&self.control, PollFlags::IN), PollFd::new(sigfd, PollFlags::IN)];
                for (_, l) in &self.listeners {
                    fds.push(PollFd::new(l, PollFlags::IN));
                }
                let first_copy = fds.len();
                let mut copies = Vec::new();
                for (pid, list) in &self.copies {
                    for (i, copy) in list.iter().enumerate() {
                        let (fd, flags) = copy.interest();
                        fds.push(PollFd::from_borrowed_fd(fd, flags));
                        copies.push((*pid, i));
                    }
                }
                let first_watch = fds.len();
                let mut watches = Vec::new();
                for (id, fd, flags) in self.watches.interest() {
                    fds.push(PollFd::from_borrowed_fd(fd, flags));
                    watches.push(id);
                }
                let wait = self.memory.as_ref().map(|g| {
                    let w = g.wait();
                    rustix::time::Timespec { tv_sec: w.as_secs() as i64, tv_nsec: w.subsec_nanos() as i64 }
                });
                match rustix::event::poll(&mut fds, wait.as_ref()) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return 125,
                }
                let ready = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
                let copies_ready: Vec<(i32, usize)> =
                    copies.into_iter().enumerate().filter(|(n, _)| ready(first_copy + n)).map(|(_, c)| c).collect();
                let mut watches_ready: Vec<u64> =
                    watches.into_iter().enumerate().filter(|(n, _)| ready(first_watch + n)).map(|(_, w)| w).collect();
                watches_ready.dedup();
                (ready(0), ready(1), (2..first_copy).any(ready), copies_ready, watches_ready)
            };
            self.copy_streams(copies_ready);
            self.step_watches(watches_ready);
            self.guard_memory();
            if control_ready {
                match protocol::recv::<Request>(self.control.as_fd()) {
                    Ok((req, fds)) => self.handle(req, fds),
                    Err(ProtocolError::Closed) => return self.shutdown(),
                    Err(ProtocolError::TooLarge) => {
                        let _ = self.report(&Event::Rejected { message: ProtocolError::TooLarge.to_string() });
                    }
                    Err(ProtocolError::Decode(e)) => {
                        let _ = self.report(&Event::Rejected { message: e.to_string() });
                    }
                    Err(ProtocolError::Io(_)) => return self.shutdown(),
                }
            }
            if listeners_ready {
                self.hand_over_connections();
            }
            if signal_ready {
                for sig in proc::read_signals(sigfd) {
                    if sig != libc_sig::CHLD {
                        for pid in self.running.keys() {
                            proc::kill_group(*pid, sig);
                        }
                    }
                }
                self.reap();
            }
        }
    }
}

impl Init {
    /// Step each copy of a command's stream whose descriptor is ready; one that is over goes (closing the
    /// supervisor's end).
    fn copy_streams(&mut self, ready: Vec<(i32, usize)>) {
        let mut over: Vec<(i32, usize)> = Vec::new();
        for (pid, i) in ready {
            if let Some(copy) = self.copies.get_mut(&pid).and_then(|l| l.get_mut(i))
                && !copy.step()
            {
                over.push((pid, i));
            }
        }
        // Highest index first, so that the others keep theirs.
        over.sort_by(|a, b| b.cmp(a));
        for (pid, i) in over {
            if let Some(list) = self.copies.get_mut(&pid) {
                list.remove(i);
                if list.is_empty() {
                    self.copies.remove(&pid);
                }
            }
        }
    }

    /// Step each watch with something ready; the end of one that is over is reported.
    fn step_watches(&mut self, ready: Vec<u64>) {
        for id in ready {
            if let Some(ended) = self.watches.step(id) {
                let _ = self.report(&ended);
            }
        }
    }

    /// Kill the command that holds the most memory once the sandbox is over its limit (see [`crate::memory`]).
    fn guard_memory(&mut self) {
        let (Some(guard), Some(trees)) = (self.memory.as_mut(), self.trees.as_ref()) else { return };
        if let Some(over) = guard.look(trees) {
            let _ = self.report(&Event::OverMemory { id: over.id, bytes: over.bytes, limit: over.limit });
        }
    }

    fn report(&self, ev: &Event) -> Result<(), ProtocolError> {
        protocol::send(self.control.as_fd(), ev, &[])
    }

    /// Pass every waiting connection to the supervisor; init never reads or writes them itself, unless it
    /// relays them (then it only copies their bytes).
    fn hand_over_connections(&mut self) {
        for (port, listener) in &self.listeners {
            while let Ok((conn, _)) = listener.accept() {
                let Some(relays) = self.relays.as_mut() else {
                    let fd = OwnedFd::from(conn);
                    let ev = Event::Connection { port: *port, relay: None };
                    let _ = protocol::send(self.control.as_fd(), &ev, &[fd.as_fd()]);
                    continue;
                };
                // Past the cap the connection is dropped here, which closes it.
                if let Some(relay) = relays.add(conn) {
                    let _ = protocol::send(
                        self.control.as_fd(),
                        &Event::Connection { port: *port, relay: Some(relay) },
                        &[],
                    );
                }
            }
        }
    }

    fn handle(&mut self, req: Request, fds: Vec<OwnedFd>) {
        match req {
            Request::Exec { id, argv, env, cwd, uid, gid, attached, mut join_cgroup, tty, pty } => {
                let mut fds = fds;
                for join in self.trees.as_mut().map(|t| t.join_files(id)).unwrap_or_default() {
                    fds.push(join);
                    join_cgroup += 1;
                }
                let mut copies = Vec::new();
                let spawned = match pty {
                    Some(size) => {
                        self.spawn_on_terminal(id, &argv, &env, &cwd, (uid, gid), attached, join_cgroup, size, fds)
                    }
                    None => match self.own_streams(attached, tty, fds, &mut copies) {
                        Ok(fds) => self.spawn(&argv, &env, &cwd, uid, gid, attached, join_cgroup, tty, fds),
                        Err(message) => Err((125, message)),
                    },
                };
                let ev = match spawned {
                    Ok(pid) => {
                        self.running.insert(pid, id);
                        if !copies.is_empty() {
                            self.copies.insert(pid, copies);
                        }
                        Event::Started { id, pid }
                    }
                    Err((code, message)) => {
                        copies.into_iter().for_each(crate::streams::Copy::finish);
                        if let Some(t) = self.trees.as_mut() {
                            t.release(id);
                        }
                        Event::Failed { id, code, message }
                    }
                };
                let _ = self.report(&ev);
            }
            Request::Relay { relay } => {
                let joined = match (self.relays.as_mut(), <[OwnedFd; 1]>::try_from(fds)) {
                    (Some(relays), Ok([outside])) => relays.join(relay, outside),
                    (None, _) => Err("this init relays no connections".to_string()),
                    (_, Err(fds)) => Err(format!("a relay takes one socket, not {}", fds.len())),
                };
                if let Err(message) = joined {
                    let _ = self.report(&Event::Rejected { message });
                }
            }
            Request::Connect { path } => {
                let joined = match <[OwnedFd; 1]>::try_from(fds) {
                    Ok([outside]) => crate::relay::connect(&path, outside),
                    Err(fds) => Err(format!("a connect takes one socket, not {}", fds.len())),
                };
                if let Err(message) = joined {
                    let _ = self.report(&Event::Rejected { message });
                }
            }
            Request::ConnectPort { port } => {
                let joined = match <[OwnedFd; 1]>::try_from(fds) {
                    Ok([outside]) => crate::relay::connect_port(port, outside),
                    Err(fds) => Err(format!("a connect takes one socket, not {}", fds.len())),
                };
                if let Err(message) = joined {
                    let _ = self.report(&Event::Rejected { message });
                }
            }
            Request::Resize { id, rows, cols } => {
                let resized = match self.terminals.get(&id) {
                    Some(t) => {
                        let leader = self.running.iter().find(|(_, i)| **i == id).map(|(pid, _)| *pid);
                        crate::terminal::resize(t, protocol::Winsize { rows, cols }, leader)
                    }
                    None => Err(format!("command {id} has no terminal of init's")),
                };
                if let Err(message) = resized {
                    let _ = self.report(&Event::Rejected { message });
                }
            }
            Request::Watch { id, path, recursive } => {
                let started = self.watches.start(id, &path, recursive, fds);
                let _ = self.report(&started);
            }
            Request::Flush { id } => {
                self.watches.mark_flushed(id);
                self.step_watches(vec![id]);
            }
            Request::Unwatch { id } => {
                if let Some(ended) = self.watches.end(id) {
                    let _ = self.report(&ended);
                }
            }
            Request::Hello => {
                let _ = self.report(&self.ready.clone());
            }
            Request::Reexec => {
                let message = self.reexec();
                let _ = self.report(&Event::Rejected { message });
            }
            Request::Signal { id, signal } => {
                if !(1..=64).contains(&signal) {
                    let _ = self.report(&Event::Rejected { message: format!("{signal} is not a signal number") });
                    return;
                }
                for (pid, _) in self.running.iter().filter(|(_, i)| **i == id) {
                    proc::kill_group(*pid, signal);
                }
                if let Some(t) = &self.trees {
                    t.kill(id, signal);
                }
            }
        }
    }

    /// Reap every child that has ended; report the ones that were commands.
    fn reap(&mut self) {
        while let Some((pid, exit)) = proc::reap_any() {
            // Its output is all handed on before its end is reported.
            if let Some(copies) = self.copies.remove(&pid) {
                copies.into_iter().for_each(crate::streams::Copy::finish);
            }
            if let Some(id) = self.running.remove(&pid) {
                self.terminals.remove(&id);
                if let Some(t) = self.trees.as_mut() {
                    t.release(id);
                }
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
