//! `GET /v1/sandboxes/{id}/shell`: an interactive command on a terminal of the sandbox's own, over a
//! WebSocket.
//!
//! The terminal is a new pseudo-terminal of the sandbox's devpts (it shows as `/dev/pts/N` inside, owned by
//! the sandbox's root); the command runs as an exec of the sandbox (an exec id, its own cgroup, the journal,
//! `ps`, `kill`, `logs`), in a session of its own with the terminal as its controlling terminal.
//!
//! The protocol, after the upgrade:
//! - client → server, binary: keystrokes, written to the terminal as they are.
//! - client → server, text: `{"resize":{"rows":R,"cols":C}}` sets the window size (the command gets
//!   SIGWINCH). Other text messages are ignored.
//! - server → client, binary: what the terminal shows.
//! - server → client, text: `{"started":{"exec_id":"x3","pid":N}}` once the command runs, and
//!   `{"exit":{"code":N,"signal":S}}` (S null unless a signal ended it; an `error` string too when the
//!   command could not be started) when it has ended; then the server closes the socket. Clients ignore
//!   text messages they do not know.
//!
//! A client that goes away hangs the terminal up (the command's session gets SIGHUP, as when an ssh
//! connection drops); whatever still runs on it a little later is killed.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, Query, State};
use axum::response::Response;
use axum::routing::get;
use berth_api::{ErrorCode, ExecResult, FileKind};
use berth_init::protocol::{Event, Request, Winsize};
use serde::Deserialize;
use tokio::io::unix::AsyncFd;

use crate::http::Failure;
use crate::{Engine, EngineError};
use berth_engine::AttachedExec;
use berth_engine::exec_log::ExecLog;
use berth_engine::files::{FileError, SandboxFs};
use berth_engine::launch::{self, Outcome};

const DEFAULT_ROWS: u16 = 24;
const DEFAULT_COLS: u16 = 80;
const DEFAULT_TERM: &str = "xterm-256color";
/// How long the terminal's output keeps being read after the command ended (its background children may
/// still hold the terminal; what the command wrote last may still be on its way).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long a command whose client went away has to end after the hangup before it is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(2);
/// Keystrokes held for a command that is not reading them before the client's messages wait.
const MAX_PENDING: usize = 64 * 1024;
/// Largest message a client may send.
const MAX_MESSAGE: usize = 1 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellQuery {
    /// A command line, run with `/bin/sh -c`.
    cmd: Option<String>,
    rows: Option<u16>,
    cols: Option<u16>,
    term: Option<String>,
}

/// A text message from the client.
#[derive(Debug, Deserialize)]
struct Control {
    resize: Option<Size>,
}

#[derive(Debug, Deserialize)]
struct Size {
    rows: u16,
    cols: u16,
}

/// The shell's route, merged into the daemon's router.
pub fn routes() -> Router<Arc<Engine>> {
    Router::new().route("/v1/sandboxes/{id}/shell", get(shell))
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(ErrorCode::InvalidRequest, message.into())
}

async fn shell(
    State(e): State<Arc<Engine>>,
    UrlPath(id): UrlPath<String>,
    q: Result<Query<ShellQuery>, QueryRejection>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, Failure> {
    // Everything that can fail is checked before the upgrade, so it is an HTTP error with its status.
    let record = e.get(&id).await?;
    let Query(q) = q.map_err(|err| invalid(err.body_text()))?;
    let (rows, cols) = (q.rows.unwrap_or(DEFAULT_ROWS), q.cols.unwrap_or(DEFAULT_COLS));
    if rows == 0 || cols == 0 {
        return Err(invalid("rows and cols must be positive"));
    }
    let term = q.term.unwrap_or_else(|| DEFAULT_TERM.to_string());
    berth_runtime::spec::parse_env(&format!("TERM={term}")).map_err(|err| invalid(format!("term: {err}")))?;
    if q.cmd.as_ref().is_some_and(|c| c.trim().is_empty() || c.contains('\0')) {
        return Err(invalid("cmd must be a command line"));
    }
    let ws = ws.map_err(|r| invalid(format!("this route is a WebSocket: {}", r.body_text())))?;
    let Some(pid) = record.pid else {
        return Err(Failure::new(ErrorCode::Conflict, format!("sandbox {} has no running init", record.id)));
    };
    let (cmd, isolation) = (q.cmd, record.isolation);
    // A terminal opened outside is no terminal to a kernel of the sandbox's own (gVisor's): there init opens
    // one inside and copies it to a socket, which stands for the terminal's master end here.
    let at = berth_runtime::backend(isolation).supports().terminal;
    let inside = (at == berth_runtime::TerminalAt::Init).then_some(Winsize { rows, cols });
    let (argv, pty) = tokio::task::spawn_blocking(move || -> Result<_, FileError> {
        let fs = SandboxFs::open(pid, isolation)?;
        let argv: Vec<String> = match cmd {
            Some(c) => vec!["/bin/sh".into(), "-c".into(), c],
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
    .map_err(|_| Failure::new(ErrorCode::Internal, "opening a terminal failed".into()))??;
    let env = BTreeMap::from([("TERM".to_string(), term)]);
    // The shell runs after the upgrade, outside this request's task: it keeps the caller's identity, so that
    // its journal records name who opened it.
    let actor = berth_engine::actor();
    Ok(ws.max_message_size(MAX_MESSAGE).on_upgrade(move |socket| {
        berth_engine::ACTOR.scope(actor, run(e, record.id, argv, env, (pty, inside), socket))
    }))
}

async fn run(
    e: Arc<Engine>,
    sandbox: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    (pty, inside): (berth_sys::pty::Pty, Option<Winsize>),
    mut socket: WebSocket,
) {
    let berth_sys::pty::Pty { master, slave } = pty;
    let started = match inside {
        None => e.exec_attached(&sandbox, argv, env, &[slave.as_fd(), slave.as_fd(), slave.as_fd()], true, None).await,
        Some(size) => e.exec_attached(&sandbox, argv, env, &[slave.as_fd()], false, Some(size)).await,
    };
    // Only the command holds the terminal now: when it and its children are done with it, reads of the
    // master end fail, and that is the end of its output.
    drop(slave);
    let mut x = match started {
        Ok(x) => x,
        Err(err) => {
            send_exit(&mut socket, 125, None, Some(berth_runtime::error_chain(&err))).await;
            return;
        }
    };
    let pid = match &x.outcome {
        Outcome::Started(pid) => *pid,
        Outcome::Failed { code, message } => {
            let (code, message) = (*code, message.clone());
            let _ = tokio::fs::write(&x.log, b"").await;
            let _ = x.done.send(Some(result(&x, code, None, false, (0, 0), Some(message.clone()))));
            send_exit(&mut socket, code, None, Some(message)).await;
            launch::release_cgroup(x.cgroup.take(), false).await;
            return;
        }
    };
    let started = serde_json::json!({"started": {"exec_id": x.exec_id, "pid": pid}});
    let mut client = socket.send(Message::Text(started.to_string().into())).await.is_ok();
    let mut log = tokio::fs::File::create(&x.log).await.ok().map(|f| ExecLog::new(f, x.max_log));
    let master = match terminal(master) {
        Ok(m) => Some(m),
        Err(_) => {
            launch::kill_tree(&x.session, x.num, x.cgroup.as_ref());
            None
        }
    };
    let mut pump = Pump { exit: None, killed: false, total: 0, inside: inside.is_some() };
    if let Some(master) = master {
        client = pump.run(&mut x, &master, &mut socket, client, &mut log).await;
    }
    let log_dropped = match log {
        Some(log) => log.finish().await,
        None => 0,
    };
    // The client went away first: the master is closed by now (the terminal hung up). Give the command a
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
    if client {
        send_exit(&mut socket, exit_code, signal, None).await;
    }
    launch::release_cgroup(x.cgroup.take(), pump.killed).await;
}

/// The master end of the terminal, watched by the runtime.
fn terminal(master: OwnedFd) -> Result<AsyncFd<OwnedFd>, EngineError> {
    berth_sys::fd::set_nonblocking(&master, true)?;
    berth_sys::fd::watch(master).map_err(|err| EngineError::Sys(berth_sys::SysError::new("watch a terminal", err)))
}

/// Wait for the command's exit (`None` code and signal 9 when init went away).
async fn exited(events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> (Option<i32>, Option<i32>) {
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

/// Tell the client how the command ended, and close.
async fn send_exit(socket: &mut WebSocket, code: i32, signal: Option<i32>, error: Option<String>) {
    let mut exit = serde_json::json!({"code": code, "signal": signal});
    if let Some(error) = error {
        exit["error"] = serde_json::Value::String(error);
    }
    let text = serde_json::json!({ "exit": exit }).to_string();
    if socket.send(Message::Text(text.into())).await.is_ok() {
        let _ = socket.send(Message::Close(None)).await;
    }
}

/// Moves bytes between the client and the terminal until the command has ended (and its output is read)
/// or the client has gone.
struct Pump {
    exit: Option<(Option<i32>, Option<i32>)>,
    killed: bool,
    total: u64,
    /// The terminal is init's, inside the sandbox: a resize is asked of init.
    inside: bool,
}

impl Pump {
    /// Returns whether the client is still there.
    async fn run(
        &mut self,
        x: &mut AttachedExec,
        master: &AsyncFd<OwnedFd>,
        socket: &mut WebSocket,
        mut client: bool,
        log: &mut Option<ExecLog>,
    ) -> bool {
        let mut buf = vec![0u8; 16 * 1024];
        // Keystrokes not yet written: the terminal's input queue is full while the command does not read.
        let mut pending: Vec<u8> = Vec::new();
        let mut master_open = true;
        let mut kill_open = true;
        let mut drain_until: Option<tokio::time::Instant> = None;
        while client || self.exit.is_some() {
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
                            client = emit(&shown, socket, client, log).await;
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
                msg = socket.recv(), if client && pending.len() < MAX_PENDING => match msg {
                    Some(Ok(Message::Binary(keys))) => pending.extend_from_slice(&keys),
                    Some(Ok(Message::Text(text))) => {
                        if let Ok(Control { resize: Some(size) }) = serde_json::from_str(text.as_str())
                            && size.rows > 0
                            && size.cols > 0
                        {
                            if self.inside {
                                let resize = Request::Resize { id: x.num, rows: size.rows, cols: size.cols };
                                let _ = x.session.send(&resize, &[]);
                            } else {
                                let _ = berth_sys::pty::set_window_size(master.get_ref(), size.rows, size.cols);
                            }
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => client = false,
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
                client = emit(&tail, socket, client, log).await;
            }
        }
        client
    }
}

/// Terminal output to the log and (while it is there) the client; returns whether the client still is.
async fn emit(bytes: &[u8], socket: &mut WebSocket, client: bool, log: &mut Option<ExecLog>) -> bool {
    if let Some(f) = log.as_mut()
        && f.write(berth_api::Stream::Stdout, bytes).await.is_err()
    {
        *log = None;
    }
    client && socket.send(Message::Binary(Bytes::copy_from_slice(bytes))).await.is_ok()
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
