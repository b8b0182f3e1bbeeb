//! `berth shell`: an interactive command on a terminal in a sandbox, over the daemon's WebSocket
//! (`GET /v1/sandboxes/{id}/shell`).
//!
//! When stdin is a terminal it goes into raw mode (every key goes to the sandbox's terminal, Ctrl-C
//! included) until the command ends, and the window size follows the local one. Otherwise stdin is sent as
//! it is; once it ends, an end-of-file key (Ctrl-D) follows, and again every quarter of a second until the
//! command ends (as every read of a pipe at its end says so), so `berth shell ID < script` ends too. (One
//! would not do: one that arrives before a shell starts its line editor is lost to it.)

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use berth_api::ErrorBody;
use berth_client::ClientError;
use rustix::event::{PollFd, PollFlags};
use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::HandshakeError;
use tungstenite::{Message, WebSocket};

use crate::cli::ShellArgs;
use crate::exit;

/// The end-of-file key of a terminal in canonical mode.
const CTRL_D: u8 = 0x04;
/// How often the end of piped input is said again.
const EOF_AGAIN: std::time::Duration = std::time::Duration::from_millis(250);

pub fn shell(socket: &Path, args: ShellArgs) -> anyhow::Result<i32> {
    let stdin = io::stdin();
    let tty = berth_sys::pty::is_terminal(stdin.as_fd());
    // SIGWINCH is read from a signalfd; it must be blocked before any thread starts (none does here).
    let winch = if tty { Some(berth_sys::pty::resize_signal_fd()?) } else { None };
    let mut query = Vec::new();
    if let Some(cmd) = &args.cmd {
        query.push(format!("cmd={}", berth_client::segment(cmd)));
    }
    if let Some(term) = &args.term {
        query.push(format!("term={}", berth_client::segment(term)));
    }
    if let Some((rows, cols)) = local_size(tty) {
        query.push(format!("rows={rows}&cols={cols}"));
    }
    let mut path = format!("/v1/sandboxes/{}/shell", berth_client::segment(&args.id));
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let mut ws = connect(socket, &path)?;
    // Raw mode only now that nothing more can fail before the session starts; the guard puts the terminal
    // back on every way out of this function.
    let _raw = if tty { Some(berth_sys::pty::raw_mode(stdin.as_fd())?) } else { None };
    let outcome = pump(&mut ws, tty, winch.as_ref());
    drop(_raw);
    let exit = outcome?;
    if let Some(error) = &exit.error {
        eprintln!("berth: {error}");
    }
    match exit.code {
        Some(code) => Ok(code),
        None => {
            eprintln!("berth: the daemon ended the shell before the command ended");
            Ok(exit::BERTH_FAILED)
        }
    }
}

/// The local terminal's size, when there is one.
fn local_size(tty: bool) -> Option<(u16, u16)> {
    if !tty {
        return None;
    }
    berth_sys::pty::window_size(io::stdin().as_fd()).or_else(|| berth_sys::pty::window_size(io::stdout().as_fd()))
}

/// Open the WebSocket; an answer other than the upgrade is the API's error.
fn connect(socket: &Path, path: &str) -> anyhow::Result<WebSocket<UnixStream>> {
    let stream = UnixStream::connect(socket).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ClientError::NoDaemon { socket: socket.to_path_buf() }
        }
        _ => ClientError::Connect { socket: socket.to_path_buf(), source: e },
    })?;
    let mut request = format!("ws://berth{path}").into_client_request()?;
    let headers = request.headers_mut();
    headers.insert("User-Agent", concat!("berth/", env!("CARGO_PKG_VERSION")).parse()?);
    if let Some(token) = std::env::var("BERTH_TOKEN").ok().filter(|t| !t.is_empty()) {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| ClientError::Invalid("BERTH_TOKEN must not contain control characters".into()))?;
        headers.insert("Authorization", value);
    }
    match tungstenite::client::client(request, stream) {
        Ok((ws, _)) => Ok(ws),
        Err(HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let status = response.status().as_u16();
            let body = response.body().as_deref().unwrap_or_default();
            Err(match serde_json::from_slice::<ErrorBody>(body) {
                Ok(e) => ClientError::Api { status, code: Some(e.error.code), message: e.error.message },
                Err(_) => ClientError::Api { status, code: None, message: format!("the daemon answered {status}") },
            }
            .into())
        }
        Err(HandshakeError::Failure(e)) => {
            Err(ClientError::Protocol(format!("the WebSocket handshake failed: {e}")).into())
        }
        Err(HandshakeError::Interrupted(_)) => {
            Err(ClientError::Protocol("the WebSocket handshake stalled".into()).into())
        }
    }
}

/// How the command ended, as the daemon said.
#[derive(Debug, Default)]
struct Exit {
    code: Option<i32>,
    error: Option<String>,
}

/// Move keystrokes to the socket and the terminal's output to stdout until the daemon closes the session.
fn pump(ws: &mut WebSocket<UnixStream>, tty: bool, winch: Option<&OwnedFd>) -> anyhow::Result<Exit> {
    let mut exit = Exit::default();
    // A descriptor of the socket to poll while `ws` owns the stream.
    let watch = ws.get_ref().try_clone()?;
    ws.get_mut().set_nonblocking(true)?;
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    let mut stdin_open = true;
    // When the end of piped input was last sent.
    let mut eof_sent: Option<std::time::Instant> = None;
    let mut buf = vec![0u8; 16 * 1024];
    // Messages may have come with the handshake's answer: read before the first wait.
    let mut closed = read_all(ws, &mut stdout, &mut exit)?;
    while !closed {
        let mut want_write = false;
        match ws.flush() {
            Ok(()) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => want_write = true,
            Err(_) if exit.code.is_some() => break,
            Err(e) => return Err(ClientError::Protocol(format!("the shell's connection failed: {e}")).into()),
        }
        let sock_flags = if want_write { PollFlags::IN | PollFlags::OUT } else { PollFlags::IN };
        let (sock_ready, stdin_ready, winch_ready) = {
            let mut fds = vec![PollFd::new(&watch, sock_flags)];
            let stdin_at = stdin_open.then(|| {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
                fds.len() - 1
            });
            let winch_at = winch.map(|w| {
                fds.push(PollFd::new(w, PollFlags::IN));
                fds.len() - 1
            });
            let timeout = eof_sent.map(|at| {
                let left = EOF_AGAIN.saturating_sub(at.elapsed());
                rustix::time::Timespec { tv_sec: 0, tv_nsec: i64::from(left.subsec_nanos()) }
            });
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io::Error::from(e).into()),
            }
            let ready = |at: Option<usize>| at.is_some_and(|i| !fds[i].revents().is_empty());
            (ready(Some(0)), ready(stdin_at), ready(winch_at))
        };
        if eof_sent.is_some_and(|at| at.elapsed() >= EOF_AGAIN) {
            queue(ws, Message::binary(vec![CTRL_D]))?;
            eof_sent = Some(std::time::Instant::now());
        }
        if winch_ready && let Some(w) = winch {
            berth_sys::process::read_signals(w);
            if let Some((rows, cols)) = local_size(tty) {
                let resize = serde_json::json!({"resize": {"rows": rows, "cols": cols}}).to_string();
                queue(ws, Message::text(resize))?;
            }
        }
        if stdin_ready {
            match rustix::io::read(&stdin, &mut buf) {
                Ok(0) | Err(rustix::io::Errno::IO) => {
                    stdin_open = false;
                    // The end of piped input is the end of the command's input too.
                    if !tty {
                        queue(ws, Message::binary(vec![CTRL_D]))?;
                        eof_sent = Some(std::time::Instant::now());
                    }
                }
                Ok(n) => queue(ws, Message::binary(buf[..n].to_vec()))?,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(io::Error::from(e).into()),
            }
        }
        if sock_ready {
            closed = read_all(ws, &mut stdout, &mut exit)?;
        }
    }
    Ok(exit)
}

/// Queue a message (it goes out with the next flush). Once the daemon has closed the session there is no one
/// to send to, and the message is dropped.
fn queue(ws: &mut WebSocket<UnixStream>, msg: Message) -> anyhow::Result<()> {
    use tungstenite::error::ProtocolError::SendAfterClosing;
    match ws.write(msg) {
        Ok(()) => Ok(()),
        Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(
            tungstenite::Error::Protocol(SendAfterClosing)
            | tungstenite::Error::ConnectionClosed
            | tungstenite::Error::AlreadyClosed,
        ) => Ok(()),
        Err(e) => Err(ClientError::Protocol(format!("the shell's connection failed: {e}")).into()),
    }
}

/// Read every message that has arrived; returns whether the session is over.
fn read_all(ws: &mut WebSocket<UnixStream>, stdout: &mut impl Write, exit: &mut Exit) -> anyhow::Result<bool> {
    loop {
        match ws.read() {
            Ok(Message::Binary(data)) => {
                stdout.write_all(&data)?;
                stdout.flush()?;
            }
            Ok(Message::Text(text)) => {
                let v: serde_json::Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                if let Some(e) = v.get("exit") {
                    exit.code = Some(
                        e["code"]
                            .as_i64()
                            .and_then(|c| i32::try_from(c).ok())
                            .or_else(|| e["signal"].as_i64().and_then(|s| i32::try_from(s).ok()).map(exit::for_signal))
                            .unwrap_or(exit::BERTH_FAILED),
                    );
                    exit.error = e["error"].as_str().map(String::from);
                }
            }
            // A close from the daemon is answered by the library on the next flush.
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => return Ok(true),
            // The daemon hung up without the closing handshake: that is the end, if it said how the command
            // ended.
            Err(_) if exit.code.is_some() => return Ok(true),
            Err(e) => return Err(ClientError::Protocol(format!("the shell's connection failed: {e}")).into()),
        }
    }
}
