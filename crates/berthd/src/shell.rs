//! `GET /v1/sandboxes/{id}/shell`: an interactive command on a terminal of the sandbox's own, over a
//! WebSocket: a translation onto the engine's terminal (`Engine::open_terminal`, `OpenTerminal::start`).
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
//! A client that goes away hangs the terminal up (see the engine's `terminal`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, Query, State};
use axum::response::Response;
use axum::routing::get;
use berth_api::ErrorCode;
use berth_engine::{Terminal, TerminalEvent, TerminalInput, TerminalRequest};
use serde::Deserialize;

use crate::Engine;
use crate::http::Failure;

const DEFAULT_ROWS: u16 = 24;
const DEFAULT_COLS: u16 = 80;
const DEFAULT_TERM: &str = "xterm-256color";
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
    e.get(&id).await?;
    let Query(q) = q.map_err(|err| invalid(err.body_text()))?;
    if q.cmd.as_ref().is_some_and(|c| c.trim().is_empty() || c.contains('\0')) {
        return Err(invalid("cmd must be a command line"));
    }
    let req = TerminalRequest {
        argv: q.cmd.map(|c| vec!["/bin/sh".into(), "-c".into(), c]),
        rows: q.rows.unwrap_or(DEFAULT_ROWS),
        cols: q.cols.unwrap_or(DEFAULT_COLS),
        term: q.term.unwrap_or_else(|| DEFAULT_TERM.to_string()),
        env: BTreeMap::new(),
        user: None,
        workdir: None,
    };
    if req.rows == 0 || req.cols == 0 {
        return Err(invalid("rows and cols must be positive"));
    }
    let ws = ws.map_err(|r| invalid(format!("this route is a WebSocket: {}", r.body_text())))?;
    let terminal = e.open_terminal(&id, req).await?;
    // The shell runs after the upgrade, outside this request's task: it keeps the caller's identity, so that
    // its journal records name who opened it.
    let caller = berth_engine::Carried::now();
    Ok(ws
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| caller.run(async move { relay(terminal.start(e), socket).await })))
}

/// Carry the client's keystrokes and resizes to the terminal and what it shows back, until it has ended;
/// a client that goes away drops the terminal's input, which hangs it up.
async fn relay(terminal: Terminal, mut socket: WebSocket) {
    let Terminal { input, mut events } = terminal;
    let mut input = Some(input);
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(TerminalEvent::Started { exec_id, pid }) => {
                    let started = serde_json::json!({"started": {"exec_id": exec_id, "pid": pid}});
                    if socket.send(Message::Text(started.to_string().into())).await.is_err() {
                        input = None;
                    }
                }
                Some(TerminalEvent::Output(bytes)) => {
                    if socket.send(Message::Binary(Bytes::from(bytes))).await.is_err() {
                        input = None;
                    }
                }
                Some(TerminalEvent::Exit { code, signal, error }) => {
                    send_exit(&mut socket, code, signal, error).await;
                    return;
                }
                None => return,
            },
            msg = socket.recv(), if input.is_some() => {
                let Some(tx) = input.as_ref() else { continue };
                let sent = match msg {
                    Some(Ok(Message::Binary(keys))) => tx.send(TerminalInput::Keys(keys.to_vec())).await.is_ok(),
                    Some(Ok(Message::Text(text))) => match serde_json::from_str(text.as_str()) {
                        Ok(Control { resize: Some(Size { rows, cols }) }) => {
                            tx.send(TerminalInput::Resize { rows, cols }).await.is_ok()
                        }
                        _ => true,
                    },
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => true,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => false,
                };
                if !sent {
                    input = None;
                }
            }
        }
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
