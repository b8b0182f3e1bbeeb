//! The bounds every listener of the API keeps (the unix socket, the TCP listener and each sandbox's API port),
//! and the loop that serves connections within them.
//!
//! - At most `max_connections` connections are served at once per listener; one more is answered 503 with an
//!   error body and closed (a sandbox's API port is also held to its sandbox's cap on connections).
//! - A request's head (request line and headers) may be at most `max_head_bytes`: over that it is answered
//!   431 with an error body; a head more than twice as large is cut off by the HTTP parser, which answers 431
//!   without a body.
//! - A head must arrive within `head_timeout` of the connection being ready for it: after it is opened, and
//!   after each answer on a kept-alive connection (so the same time bounds an idle connection). A client that
//!   sends nothing, or drips bytes, is answered 408 and the connection is closed.
//! - A JSON request body may be at most `max_body_bytes` (413); file and tar bodies have a bound of their own
//!   (`files::MAX_FILE`).

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use berth_api::{ApiError, ErrorBody, ErrorCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http::Failure;

/// Connections one listener serves at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Largest request head (request line and headers), by default.
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 << 10;
/// Time a request head has to arrive, by default.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest JSON request body, by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// What every listener of one daemon holds its connections to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_connections: usize,
    pub max_head_bytes: usize,
    pub head_timeout: Duration,
    pub max_body_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// The rows of the bounds table (`GET /v1/info`, `berth info`) for what every listener keeps.
pub fn table(b: &Bounds) -> Vec<berth_api::Bound> {
    use berth_engine::bounds::{row, size};
    vec![
        row(
            "api connections",
            format!("{} at once per listener", b.max_connections),
            "berth daemon --max-connections",
            "one more is answered 503 and closed; each sandbox's API port also holds at most 256 of its own",
        ),
        row(
            "api request head",
            size(b.max_head_bytes as u64),
            "berth daemon --max-header-size",
            "a larger request line and headers are answered 431",
        ),
        row(
            "api head-read and idle time",
            format!("{} s", b.head_timeout.as_secs_f64()),
            "berth daemon --header-timeout",
            "a client that sends no whole head in time (or sits idle between requests) is answered 408 and closed",
        ),
        row(
            "api JSON body",
            size(b.max_body_bytes as u64),
            "berth daemon --max-body-size",
            "a larger body is answered 413 and nothing is done",
        ),
        row(
            "files API body",
            size(berth_engine::files::MAX_FILE),
            "fixed",
            "a larger upload, tar stream or file read is answered 413; uploads are read whole before they are \
             written, and the daemon holds at most 256 MiB of them at once (one past it waits 10 s, then 503)",
        ),
    ]
}

static BOUNDS: OnceLock<Bounds> = OnceLock::new();

/// This daemon's bounds: those it was started with, else the defaults.
pub fn bounds() -> Bounds {
    *BOUNDS.get_or_init(Bounds::default)
}

/// Set the bounds once, before the first listener serves; false if they were already set otherwise.
pub fn set_bounds(b: Bounds) -> bool {
    *BOUNDS.get_or_init(|| b) == b
}

/// Refuse a request whose head is larger than the bound, with an error body (431).
pub(crate) async fn limit_head(req: Request, next: axum::middleware::Next) -> Response {
    let max = bounds().max_head_bytes;
    // As it came on the wire: `METHOD URI HTTP/1.1\r\n`, `name: value\r\n` per header, `\r\n`.
    let head = req.method().as_str().len()
        + req.uri().to_string().len()
        + 12
        + req.headers().iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum::<usize>()
        + 2;
    if head > max {
        return Failure::new(
            ErrorCode::HeadersTooLarge,
            format!("the request's head (request line and headers) is {head} bytes; this daemon takes at most {max}"),
        )
        .into_response();
    }
    next.run(req).await
}

/// A whole HTTP/1.1 answer with an error body, for connections answered outside the router.
fn raw_answer(code: ErrorCode, reason: &str, message: String) -> Vec<u8> {
    let body = serde_json::to_vec(&ErrorBody { error: ApiError { code, message } }).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        code.status(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Serve `app` on `listener` within this daemon's bounds until the process ends. `name` names the listener
/// in the daemon's log; `cap` overrides the connection cap (`None`: the bounds' own).
pub(crate) async fn serve<L>(mut listener: L, app: Router, name: &'static str, cap: Option<usize>)
where
    L: axum::serve::Listener,
    L::Io: AsFd,
{
    let b = bounds();
    let cap = cap.unwrap_or(b.max_connections);
    let open = Arc::new(tokio::sync::Semaphore::new(cap));
    let last_warned = Arc::new(AtomicU64::new(0));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(b.head_timeout)
        // The parser's own limits sit past the API's (twice the head bound), so a head between the two is
        // answered by `limit_head`, with an error body.
        .max_header_size(2 * b.max_head_bytes)
        .max_buf_size((2 * b.max_head_bytes).max(64 << 10));
    let http = Arc::new(http);
    loop {
        let (io, _) = listener.accept().await;
        // On TCP: each small write of a stream (an exec's frames, events) goes out at once instead of waiting
        // for the peer's delayed acknowledgement of the one before (40 ms a frame). A unix socket has no such
        // option, and says so.
        let _ = rustix::net::sockopt::set_tcp_nodelay(io.as_fd(), true);
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            warn_full(&last_warned, name, cap);
            tokio::spawn(refuse(io, cap));
            continue;
        };
        let (http, app) = (Arc::clone(&http), app.clone());
        tokio::spawn(async move {
            // A second descriptor of the connection, to answer 408 on after the parser gives up on it.
            let spare = io.as_fd().try_clone_to_owned().ok();
            let conn = http.serve_connection(TokioIo::new(io), TowerToHyperService::new(app)).with_upgrades();
            if let Err(e) = conn.await
                && e.is_timeout()
                && let Some(fd) = spare
            {
                let answer = raw_answer(
                    ErrorCode::RequestTimeout,
                    "Request Timeout",
                    format!(
                        "no whole request head arrived within {}s; the connection is closed",
                        b.head_timeout.as_secs_f64()
                    ),
                );
                let _ = std::fs::File::from(fd).write_all(&answer);
            }
            drop(permit);
        });
    }
}

/// Answer a connection past the cap with 503 and close it; what it sent meanwhile is read and dropped for a
/// moment, so that closing does not reset the connection before the client reads the answer.
async fn refuse<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut io: S, cap: usize) {
    let answer = raw_answer(
        ErrorCode::Unavailable,
        "Service Unavailable",
        format!("this listener is serving as many connections as it may ({cap}); try again when one has closed"),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        io.write_all(&answer).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        while io.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Log that a listener is full, at most once a second.
fn warn_full(last: &AtomicU64, name: &str, cap: usize) {
    let now = berth_engine::now_ms() / 1000;
    if last.swap(now, Ordering::Relaxed) != now {
        berth_engine::log::warn(
            "a listener is at its connection cap: new connections are refused (503)",
            serde_json::json!({"listener": name, "max_connections": cap}),
        );
    }
}

/// A sandbox's connections to its API port, as a listener axum can serve.
struct SandboxListener(berth_engine::ApiConnections);

impl axum::serve::Listener for SandboxListener {
    type Io = berth_engine::Counted;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.0.accept().await {
            Some(stream) => {
                let addr = stream.peer_addr().unwrap_or_else(|_| ([127, 0, 0, 1], 0).into());
                (stream, addr)
            }
            // The sandbox is gone: no more connections will come (its task is aborted with it).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(([127, 0, 0, 1], berth_init::protocol::API_PORT).into())
    }
}

/// The API as a sandbox's session token reaches it from inside: the TCP listener's (token required), held to
/// the sandbox's own cap on connections.
pub(crate) struct SandboxApis;

impl berth_engine::SandboxApi for SandboxApis {
    fn serve(
        &self,
        engine: Arc<berth_engine::Engine>,
        connections: berth_engine::ApiConnections,
    ) -> tokio::task::JoinHandle<()> {
        let app = crate::http::tcp_app(engine);
        tokio::spawn(serve(SandboxListener(connections), app, "sandbox", Some(berth_engine::MAX_CONNECTIONS)))
    }
}
