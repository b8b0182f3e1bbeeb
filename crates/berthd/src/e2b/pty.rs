//! envd's PTYs (`Start` with `pty`) on the engine's terminal (`Engine::open_terminal`): the command runs on a
//! pseudo-terminal of the sandbox's own, of the size asked, as an exec of the sandbox. Keystrokes
//! (`SendInput`'s `pty`) and resizes (`Update`) go to the terminal; what it shows is streamed as `data.pty`
//! and kept in the exec's log, which `Connect` follows. As with envd, a client that disconnects leaves the
//! PTY running: only its end, a kill or its timeout stop it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use base64::Engine as _;
use berth_engine::{Access, Caller, Op, TerminalEvent, TerminalInput, TerminalRequest};
use serde_json::{Value, json};

use super::E2b;
use super::connect::{self, code_of, err};
use super::envd::Proc;

/// What a PTY asks for, read from `Start`'s message by `envd`.
pub(super) struct Asked {
    pub argv: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
    pub cwd: String,
    pub user: Option<String>,
    pub rows: u16,
    pub cols: u16,
    pub config: Value,
    pub tag: Option<String>,
}

pub(super) async fn start(s: &E2b, key: &Caller, id: &str, asked: Asked, timeout_ms: Option<u64>) -> Response {
    let Asked { argv, mut env, cwd, user, rows, cols, config, tag } = asked;
    let term = env.remove("TERM").unwrap_or_else(|| "xterm-256color".to_string());
    let req = TerminalRequest { argv: Some(argv), rows, cols, term, env, user: user.clone(), workdir: Some(cwd) };
    let engine = Arc::clone(&s.engine);
    // Started as the caller, so that the journal names it.
    let opened = async move { Ok(engine.open_terminal(id, req).await?.start(Arc::clone(&engine))) };
    let terminal = match s.run(key, Access::On(id, Op::Exec), opened).await {
        Ok(t) => t,
        Err(f) => return err(code_of(f.status), f.message),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let procs = s.procs_handle();
    let (sandbox, key, engine) = (id.to_string(), key.clone(), Arc::clone(&s.engine));
    tokio::spawn(async move {
        let berth_engine::Terminal { input, mut events } = terminal;
        let b64 = base64::engine::general_purpose::STANDARD;
        let timed_out = Arc::new(AtomicBool::new(false));
        let mut pid = None;
        let mut client = true;
        while let Some(ev) = events.recv().await {
            let out = match ev {
                TerminalEvent::Started { exec_id, pid: p } => {
                    pid = Some(p);
                    if let Some(ms) = timeout_ms.filter(|ms| *ms > 0) {
                        let kill = (Arc::clone(&engine), key.clone(), sandbox.clone(), exec_id.clone());
                        tokio::spawn(deadline(kill, Duration::from_millis(ms), Arc::clone(&timed_out)));
                    }
                    let proc = Proc::on_terminal(exec_id, config.clone(), tag.clone(), input.clone());
                    procs.lock().unwrap_or_else(|e| e.into_inner()).insert((sandbox.clone(), p), proc);
                    connect::message(json!({"event": {"start": {"pid": p}}}))
                }
                TerminalEvent::Output(bytes) => {
                    connect::message(json!({"event": {"data": {"pty": b64.encode(bytes)}}}))
                }
                TerminalEvent::Exit { code, signal, error } => {
                    if let Some(p) = pid {
                        procs.lock().unwrap_or_else(|e| e.into_inner()).remove(&(sandbox.clone(), p));
                    }
                    if timed_out.load(Ordering::Acquire) {
                        let why = "the command ran past its timeout and was killed, with every process it started";
                        let _ = tx.send(connect::end(Some(("deadline_exceeded", why.into())))).await;
                    } else {
                        let killed = signal.is_some();
                        let _ = tx.send(connect::message(super::envd::end_of(code, killed, error.as_deref()))).await;
                        let _ = tx.send(connect::end(None)).await;
                    }
                    return;
                }
            };
            // A client that went away leaves the terminal running (its input is held here): its output is
            // still read, into the exec's log.
            client = client && tx.send(out).await.is_ok();
        }
        let _ = tx.send(connect::end(Some(("unavailable", "the terminal's stream ended before it did".into())))).await;
    });
    connect::stream(rx)
}

/// Kill exec `exec_id` once `after` has passed, saying it timed out.
async fn deadline(
    (engine, key, sandbox, exec_id): (Arc<berth_engine::Engine>, Caller, String, String),
    after: Duration,
    timed_out: Arc<AtomicBool>,
) {
    tokio::time::sleep(after).await;
    timed_out.store(true, Ordering::Release);
    let access = Access::On(&sandbox, Op::KillExec(&exec_id));
    let _ = Box::pin(engine.as_caller(&key, access, engine.kill_exec(&sandbox, &exec_id))).await;
}

/// Keystrokes for a PTY.
pub(super) async fn keys(terminal: &tokio::sync::mpsc::Sender<TerminalInput>, data: Vec<u8>) -> Response {
    match terminal.send(TerminalInput::Keys(data)).await {
        Ok(()) => connect::ok(json!({})),
        Err(_) => err("not_found", "the terminal has ended"),
    }
}

/// `Update`: the terminal's new size (its processes get SIGWINCH).
pub(super) async fn resize(terminal: &tokio::sync::mpsc::Sender<TerminalInput>, rows: u16, cols: u16) -> Response {
    match terminal.send(TerminalInput::Resize { rows, cols }).await {
        Ok(()) => connect::ok(json!({})),
        Err(_) => err("not_found", "the terminal has ended"),
    }
}
