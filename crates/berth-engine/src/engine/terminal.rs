//! A command on a terminal of the sandbox's own, as an engine operation: what the WebSocket shell (and any
//! other transport with a terminal to offer) drives through two channels, keystrokes and resizes in, what the
//! terminal shows and how the command ended out.
//!
//! The terminal is a new pseudo-terminal of the sandbox's devpts (it shows as `/dev/pts/N` inside, owned by
//! the sandbox's root), or, where the sandbox's kernel is not the host's, one init opens inside and copies to
//! a socket that stands for its master end here. The command runs as an exec of the sandbox (an exec id, its
//! own cgroup, the journal, `ps`, `kill`, `logs`), in a session of its own with the terminal as its
//! controlling terminal. A caller that goes away (drops its input) hangs the terminal up: the command's
//! session gets SIGHUP, as when an ssh connection drops, and whatever still runs on it a little later is
//! killed.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use berth_api::{ExecResult, FileKind};
use berth_init::protocol::{Event, Request, Winsize};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::attach::TerminalOn;
use super::{AttachedExec, Engine};
use crate::EngineError;
use crate::exec_log::ExecLog;
use crate::files::{FileError, SandboxFs};
use crate::launch::{self, Outcome};
use crate::sleep_until;

/// How long the terminal's output keeps being read after the command ended (its background children may
/// still hold the terminal; what the command wrote last may still be on its way).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long a command whose caller went away has to end after the hangup before it is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// The most one read of the terminal takes.
const READ_CHUNK: usize = 16 * 1024;
/// Keystrokes held for a command that is not reading them before the caller's input waits.
const MAX_PENDING: usize = 64 * 1024;

/// What to run on a terminal, and the terminal's first size and type.
#[derive(Debug, Clone)]
pub struct TerminalRequest {
    /// The command; none: the sandbox's login shell (`/bin/bash -l` where there is one, else `/bin/sh`).
    pub argv: Option<Vec<String>>,
    pub rows: u16,
    pub cols: u16,
    /// `TERM` for the command.
    pub term: String,
    /// More of the command's environment.
    pub env: BTreeMap<String, String>,
    /// Run as this user of the sandbox (see `ExecRequest::user`); root when none.
    pub user: Option<String>,
    /// Where it starts; the user's home (or /workspace) when none.
    pub workdir: Option<String>,
}

/// What a caller sends a terminal.
#[derive(Debug)]
pub enum TerminalInput {
    Keys(Vec<u8>),
    /// A new window size (the command gets SIGWINCH); a zero side is ignored.
    Resize {
        rows: u16,
        cols: u16,
    },
}

/// What a terminal sends its caller, in order: `Started` (unless the command could not start), its output,
/// then `Exit`.
#[derive(Debug)]
pub enum TerminalEvent {
    Started {
        exec_id: String,
        pid: i32,
    },
    Output(Vec<u8>),
    /// How it ended: `error` when it could not be started.
    Exit {
        code: i32,
        signal: Option<i32>,
        error: Option<String>,
    },
}

/// A terminal opened and not yet started: everything that can be refused has been checked.
pub struct OpenTerminal {
    sandbox: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    /// Who it runs as, and where.
    who: super::attach::Who,
    pty: berth_sys::pty::Pty,
    /// The size init opens the terminal with, when it is init's.
    inside: Option<Winsize>,
}

/// A running terminal's two ends. Dropping `input` is the caller going away.
pub struct Terminal {
    pub input: mpsc::Sender<TerminalInput>,
    pub events: mpsc::Receiver<TerminalEvent>,
}

impl Engine {
    /// Open a terminal for `req` in sandbox `id`, checking everything that can be refused, before a
    /// transport commits to it (a WebSocket's upgrade, say); `start` runs the command.
    pub async fn open_terminal(&self, id: &str, req: TerminalRequest) -> Result<OpenTerminal, EngineError> {
        let record = self.get(id).await?;
        if req.rows == 0 || req.cols == 0 {
            return Err(EngineError::invalid("rows and cols must be positive"));
        }
        berth_runtime::spec::parse_env(&format!("TERM={}", req.term))
            .map_err(|err| EngineError::invalid(format!("term: {err}")))?;
        if req.argv.as_ref().is_some_and(|a| a.first().is_none_or(String::is_empty)) {
            return Err(EngineError::invalid("argv must name a command"));
        }
        let workdir = req
            .workdir
            .as_deref()
            .map(berth_runtime::spec::sandbox_path)
            .transpose()
            .map_err(|e| EngineError::invalid(e.to_string()))?;
        let user = req.user.as_deref().map(super::users::parse).transpose()?;
        let Some(pid) = record.pid else {
            return Err(EngineError::Conflict(format!("sandbox {} has no running init", record.id)));
        };
        let account = match &user {
            Some(spec) => Some(super::users::account(pid, record.isolation, spec).await?),
            None => None,
        };
        let who = super::attach::Who::new(account, workdir);
        let isolation = record.isolation;
        let (rows, cols) = (req.rows, req.cols);
        // A terminal opened outside is no terminal to a kernel of the sandbox's own (gVisor's): there init opens
        // one inside and copies it to a socket, which stands for the terminal's master end here.
        let at = berth_runtime::backend(isolation).supports().terminal;
        let inside = (at == berth_runtime::TerminalAt::Init).then_some(Winsize { rows, cols });
        let asked = req.argv;
        let (argv, pty) = tokio::task::spawn_blocking(move || -> Result<_, FileError> {
            let fs = SandboxFs::open(pid, isolation)?;
            let argv: Vec<String> = match asked {
                Some(argv) => argv,
                None if fs.stat("/bin/bash").is_ok_and(|b| b.kind == FileKind::File && b.mode & 0o111 != 0) => {
                    vec!["/bin/bash".into(), "-l".into()]
                }
                None => vec!["/bin/sh".into()],
            };
            if inside.is_some() {
                let (master, slave) = std::os::unix::net::UnixStream::pair()
                    .map_err(|e| FileError::Internal(format!("make a terminal's socket: {e}")))?;
                return Ok((argv, berth_sys::pty::Pty { master: master.into(), slave: slave.into() }));
            }
            let pty = fs.open_terminal()?;
            berth_sys::pty::set_window_size(&pty.master, rows, cols)
                .map_err(|err| FileError::Internal(berth_runtime::error_chain(&err)))?;
            Ok((argv, pty))
        })
        .await
        .map_err(|_| FileError::Internal("opening a terminal failed".into()))??;
        let mut env = req.env;
        env.insert("TERM".to_string(), req.term);
        Ok(OpenTerminal { sandbox: record.id, argv, env, who, pty, inside })
    }
}

impl OpenTerminal {
    /// Start the command on the terminal; its I/O runs in a task of its own until it has ended and its
    /// output is read, or its caller has gone.
    pub fn start(self, engine: Arc<Engine>) -> Terminal {
        let (input, input_rx) = mpsc::channel(64);
        let (events_tx, events) = mpsc::channel(16);
        tokio::spawn(crate::carried(run(engine, self, input_rx, events_tx)));
        Terminal { input, events }
    }
}

async fn run(
    e: Arc<Engine>,
    t: OpenTerminal,
    mut input: mpsc::Receiver<TerminalInput>,
    events: mpsc::Sender<TerminalEvent>,
) {
    let OpenTerminal { sandbox, argv, env, who, pty, inside } = t;
    let berth_sys::pty::Pty { master, slave } = pty;
    let started = match inside {
        None => {
            let stdio = [slave.as_fd(), slave.as_fd(), slave.as_fd()];
            e.exec_attached(&sandbox, argv, env, &who, &stdio, TerminalOn::Given).await
        }
        Some(size) => e.exec_attached(&sandbox, argv, env, &who, &[slave.as_fd()], TerminalOn::Init(size)).await,
    };
    // Only the command holds the terminal now: when it and its children are done with it, reads of the
    // master end fail, and that is the end of its output.
    drop(slave);
    let mut x = match started {
        Ok(x) => x,
        Err(err) => {
            let _ = events.send(exit(125, None, Some(berth_runtime::error_chain(&err)))).await;
            return;
        }
    };
    let pid = match &x.outcome {
        Outcome::Started(pid) => *pid,
        Outcome::Failed { code, message } => {
            let (code, message) = (*code, message.clone());
            let _ = tokio::fs::write(&x.log, b"").await;
            let _ = x.done.send(Some(result(&x, code, None, false, (0, 0), Some(message.clone()))));
            let _ = events.send(exit(code, None, Some(message))).await;
            launch::release_cgroup(x.cgroup.take(), false).await;
            return;
        }
    };
    let caller = events.send(TerminalEvent::Started { exec_id: x.exec_id.clone(), pid }).await.is_ok();
    let mut log = tokio::fs::File::create(&x.log).await.ok().map(|f| ExecLog::new(f, x.max_log));
    let master = match watched(master) {
        Ok(m) => Some(m),
        Err(_) => {
            launch::kill_tree(&x.session, x.num, x.cgroup.as_ref());
            None
        }
    };
    let mut pump = Pump { exit: None, killed: false, total: 0, inside: inside.is_some(), caller };
    if let Some(master) = master {
        pump.run(&mut x, &master, &mut input, &events, &mut log).await;
    }
    let log_dropped = match log {
        Some(log) => log.finish().await,
        None => 0,
    };
    // The caller went away first: the master is closed by now (the terminal hung up). Give the command a
    // moment to take the hint, then kill what is left.
    if pump.exit.is_none() {
        pump.exit = tokio::time::timeout(HANGUP_GRACE, exited(&mut x.events)).await.ok();
    }
    if pump.exit.is_none() {
        pump.killed = true;
        launch::kill_tree(&x.session, x.num, x.cgroup.as_ref());
        pump.exit = tokio::time::timeout(Duration::from_secs(10), exited(&mut x.events)).await.ok();
    }
    x.session.unregister(x.num);
    let (code, signal) = pump.exit.unwrap_or((None, Some(9)));
    let exit_code = launch::exit_code(code, signal);
    let _ = x.done.send(Some(result(&x, exit_code, signal, pump.killed, (pump.total, log_dropped), None)));
    if pump.caller {
        let _ = events.send(exit(exit_code, signal, None)).await;
    }
    launch::release_cgroup(x.cgroup.take(), pump.killed).await;
}

fn exit(code: i32, signal: Option<i32>, error: Option<String>) -> TerminalEvent {
    TerminalEvent::Exit { code, signal, error }
}

/// The master end of the terminal, watched by the runtime.
fn watched(master: OwnedFd) -> Result<AsyncFd<OwnedFd>, EngineError> {
    berth_sys::fd::set_nonblocking(&master, true)?;
    berth_sys::fd::watch(master).map_err(|err| EngineError::Sys(berth_sys::SysError::new("watch a terminal", err)))
}

/// Wait for the command's exit (`None` code and signal 9 when init went away).
async fn exited(events: &mut mpsc::UnboundedReceiver<Event>) -> (Option<i32>, Option<i32>) {
    loop {
        match events.recv().await {
            Some(Event::Exited { code, signal, .. }) => return (code, signal),
            Some(_) => {}
            None => return (None, Some(9)),
        }
    }
}

fn result(
    x: &AttachedExec,
    exit_code: i32,
    signal: Option<i32>,
    killed: bool,
    (output_bytes, log_bytes_dropped): (u64, u64),
    error: Option<String>,
) -> ExecResult {
    ExecResult {
        exec_id: x.exec_id.clone(),
        exit_code,
        signal,
        duration_ms: x.started_at.elapsed().as_millis() as u64,
        timed_out: false,
        killed,
        bytes_dropped: 0,
        output_bytes,
        log_bytes_dropped,
        oom_killed: launch::OomCount::killed(x.oom.as_ref()),
        error,
    }
}

/// Moves bytes between the caller and the terminal until the command has ended (and its output is read) or
/// the caller has gone.
struct Pump {
    exit: Option<(Option<i32>, Option<i32>)>,
    killed: bool,
    total: u64,
    /// The terminal is init's, inside the sandbox: a resize is asked of init.
    inside: bool,
    /// Whether the caller is still there.
    caller: bool,
}

impl Pump {
    async fn run(
        &mut self,
        x: &mut AttachedExec,
        master: &AsyncFd<OwnedFd>,
        input: &mut mpsc::Receiver<TerminalInput>,
        events: &mpsc::Sender<TerminalEvent>,
        log: &mut Option<ExecLog>,
    ) {
        let mut buf = vec![0u8; READ_CHUNK];
        // Keystrokes not yet written: the terminal's input queue is full while the command does not read.
        let mut pending: Vec<u8> = Vec::new();
        let mut master_open = true;
        let mut kill_open = true;
        let mut drain_until: Option<tokio::time::Instant> = None;
        while self.caller || self.exit.is_some() {
            if self.exit.is_some() {
                if !master_open {
                    break;
                }
                drain_until.get_or_insert_with(|| tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            tokio::select! {
                ready = master.readable(), if master_open => {
                    let Ok(mut guard) = ready else { master_open = false; continue };
                    match guard.try_io(|fd| rustix::io::read(fd.get_ref(), &mut buf).map_err(std::io::Error::from)) {
                        Err(_would_block) => {}
                        // EIO: nothing holds the terminal any more.
                        Ok(Ok(0) | Err(_)) => master_open = false,
                        Ok(Ok(n)) => {
                            self.total += n as u64;
                            let shown = match x.redactor.as_mut() {
                                Some(r) => r.push(&buf[..n]),
                                None => buf[..n].to_vec(),
                            };
                            self.emit(shown, events, log).await;
                        }
                    }
                }
                ready = master.writable(), if master_open && !pending.is_empty() => {
                    let Ok(mut guard) = ready else { master_open = false; continue };
                    match guard.try_io(|fd| rustix::io::write(fd.get_ref(), &pending).map_err(std::io::Error::from)) {
                        Err(_would_block) => {}
                        Ok(Ok(n)) => {
                            pending.drain(..n);
                        }
                        Ok(Err(_)) => pending.clear(),
                    }
                }
                got = input.recv(), if self.caller && pending.len() < MAX_PENDING => match got {
                    Some(TerminalInput::Keys(keys)) => pending.extend_from_slice(&keys),
                    Some(TerminalInput::Resize { rows, cols }) if rows > 0 && cols > 0 => {
                        if self.inside {
                            let _ = x.session.send(&Request::Resize { id: x.num, rows, cols }, &[]);
                        } else {
                            let _ = berth_sys::pty::set_window_size(master.get_ref(), rows, cols);
                        }
                    }
                    Some(TerminalInput::Resize { .. }) => {}
                    None => self.caller = false,
                },
                ev = x.events.recv(), if self.exit.is_none() => match ev {
                    Some(Event::Exited { code, signal, .. }) => self.exit = Some((code, signal)),
                    Some(_) => {}
                    None => self.exit = Some((None, Some(9))),
                },
                changed = x.kill.changed(), if kill_open && !self.killed && self.exit.is_none() => {
                    if changed.is_err() {
                        kill_open = false;
                    } else if *x.kill.borrow() {
                        self.killed = true;
                        launch::kill_tree(&x.session, x.num, x.cgroup.as_ref());
                    }
                }
                _ = sleep_until(drain_until), if drain_until.is_some() => break,
            }
        }
        // What the redactor held back (a possible start of a secret) is released, redacted, at the end.
        if let Some(r) = x.redactor.as_mut() {
            let tail = r.finish();
            if !tail.is_empty() {
                self.emit(tail, events, log).await;
            }
        }
    }

    /// Terminal output to the log and (while it is there) the caller.
    async fn emit(&mut self, bytes: Vec<u8>, events: &mpsc::Sender<TerminalEvent>, log: &mut Option<ExecLog>) {
        // Less than a full read means the command paused: the log is made current (for `logs` and followers,
        // such as a client that connects to the terminal again); output flat out is written in big blocks.
        if let Some(f) = log.as_mut()
            && (f.write(berth_api::Stream::Stdout, &bytes).await.is_err()
                || (bytes.len() < READ_CHUNK && f.flush().await.is_err()))
        {
            *log = None;
        }
        self.caller = self.caller && events.send(TerminalEvent::Output(bytes)).await.is_ok();
    }
}
