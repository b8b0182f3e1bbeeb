//! The files API over HTTP: routes, handlers and query types onto the engine's files calls (`Engine::files`
//! and `berth_engine::files::SandboxFs`), and the bound on upload bodies held at once.

use std::io::{self, Write};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, State};
use axum::handler::Handler;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use berth_api::{ErrorCode, Extracted, MoveFile};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use berth_engine::files::{FileError, Got, MAX_FILE, Result, SandboxFs, io_err, parse_mode, parse_path};

use crate::Engine;
use crate::http::{ApiJson, Failure};

impl From<FileError> for Failure {
    fn from(e: FileError) -> Failure {
        Failure::new(e.code(), e.to_string())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathQuery {
    path: String,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or ids) instead of root.
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PutQuery {
    path: String,
    mode: Option<String>,
    #[serde(default)]
    parents: bool,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or ids) instead of root.
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    path: String,
    #[serde(default)]
    recursive: bool,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or ids) instead of root.
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MkdirQuery {
    path: String,
    mode: Option<String>,
    #[serde(default)]
    parents: bool,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or ids) instead of root.
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveQuery {
    path: String,
    #[serde(default)]
    parents: bool,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or ids) instead of root.
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchQuery {
    path: String,
    #[serde(default)]
    recursive: bool,
    /// Watch as this user of the sandbox, who must be able to list the directory.
    user: Option<String>,
    /// End the stream after this long.
    timeout_seconds: Option<f64>,
    /// End it once this many changes were reported.
    max_events: Option<u64>,
    /// End it this long after the last change, once there was one.
    quiet_seconds: Option<f64>,
}

impl WatchQuery {
    /// The bounds the query asks for: each positive, the times at most a day.
    fn limits(&self) -> Result<berth_engine::WatchLimits, Failure> {
        let seconds = |name: &str, v: Option<f64>| -> Result<Option<std::time::Duration>, Failure> {
            match v {
                None => Ok(None),
                Some(t) if t > 0.0 && t <= 86_400.0 => Ok(Some(std::time::Duration::from_secs_f64(t))),
                Some(t) => Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("{name} must be more than 0 and at most 86400 (a day), not {t}"),
                )),
            }
        };
        if self.max_events == Some(0) {
            return Err(Failure::new(ErrorCode::InvalidRequest, "max_events must be at least 1".to_string()));
        }
        Ok(berth_engine::WatchLimits {
            timeout: seconds("timeout_seconds", self.timeout_seconds)?,
            max_events: self.max_events,
            quiet: seconds("quiet_seconds", self.quiet_seconds)?,
        })
    }
}

fn query<T>(q: std::result::Result<Query<T>, QueryRejection>) -> Result<T, Failure> {
    q.map(|Query(q)| q).map_err(|e| Failure::new(ErrorCode::InvalidRequest, e.body_text()))
}

fn body(b: std::result::Result<Bytes, BytesRejection>) -> Result<Bytes, Failure> {
    b.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            Failure::new(ErrorCode::PayloadTooLarge, format!("the request body is larger than {MAX_FILE} bytes"))
        }
        _ => Failure::new(ErrorCode::InvalidRequest, e.body_text()),
    })
}

/// Run blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| Failure::new(ErrorCode::Internal, "a files task failed".to_string()))?
        .map_err(Failure::from)
}

/// The sandbox's file system, worked on as `user` when one is given.
async fn sandbox_as(e: &Engine, id: &str, user: Option<&str>) -> Result<SandboxFs, Failure> {
    Ok(e.files(id, user).await?)
}

type Api = State<Arc<Engine>>;

/// The files API's routes, merged into the daemon's router.
pub fn routes() -> Router<Arc<Engine>> {
    let upload = DefaultBodyLimit::max(MAX_FILE as usize);
    let held = axum::middleware::from_fn(hold_body);
    Router::new()
        .route(
            "/v1/sandboxes/{id}/files",
            get(get_files).put(put_file.layer(held.clone())).delete(delete_files).layer(upload),
        )
        .route("/v1/sandboxes/{id}/stat", get(stat))
        .route("/v1/sandboxes/{id}/mkdir", post(mkdir))
        .route("/v1/sandboxes/{id}/move", post(move_file))
        .route("/v1/sandboxes/{id}/watch", get(watch))
        .route("/v1/sandboxes/{id}/archive", get(get_archive).put(put_archive.layer(held)).layer(upload))
}

/// Bytes of uploaded file and tar bodies the daemon holds in memory at once, across all its listeners: an
/// upload is read whole before it is written, so without this 512 connections could make it hold 32 GiB.
pub const MAX_BODIES_IN_FLIGHT: u64 = 4 * MAX_FILE;

/// How long an upload waits for its place before it is answered 503.
const BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The daemon's budget for upload bodies, in KiB.
static IN_FLIGHT: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new((MAX_BODIES_IN_FLIGHT >> 10) as usize)));

/// Reserve an upload's body (its `Content-Length`, or the largest a body may be) in the daemon's budget
/// before it is read, and give it back when the answer is made.
async fn hold_body(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match hold(declared).await {
        Ok(place) => {
            let answer = next.run(req).await;
            drop(place);
            answer
        }
        Err(refused) => refused.into_response(),
    }
}

/// A place in the daemon's budget for an upload body of `bytes` (unknown: the largest a body may be), held
/// until it is dropped; every transport that takes uploads holds one while it holds the body.
pub(crate) async fn hold(bytes: Option<u64>) -> Result<tokio::sync::OwnedSemaphorePermit, Failure> {
    let kib = bytes.map_or(MAX_FILE, |n| n.min(MAX_FILE)).div_ceil(1024).max(1) as u32;
    match tokio::time::timeout(BODY_WAIT, Arc::clone(&IN_FLIGHT).acquire_many_owned(kib)).await {
        Ok(Ok(place)) => Ok(place),
        _ => Err(Failure::new(
            ErrorCode::Unavailable,
            format!(
                "the daemon already holds {} MiB of uploads, its most at once: try again when they are written",
                MAX_BODIES_IN_FLIGHT >> 20
            ),
        )),
    }
}

async fn get_files(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    Ok(match e.read_file(&id, q.user.as_deref(), &q.path).await? {
        Got::File(data) => ([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response(),
        Got::Dir(entries) => Json(entries).into_response(),
    })
}

async fn put_file(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PutQuery>, QueryRejection>,
    data: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let mode = parse_mode(q.mode.as_deref())?;
    parse_path(&q.path)?;
    let data = body(data)?;
    let (entry, created) = e.write_file(&id, q.user.as_deref(), &q.path, data.to_vec(), mode, q.parents).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)).into_response())
}

async fn delete_files(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    e.remove_file(&id, q.user.as_deref(), &q.path, q.recursive).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn stat(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    Ok(Json(e.stat_file(&id, q.user.as_deref(), &q.path).await?).into_response())
}

async fn mkdir(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<MkdirQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let mode = parse_mode(q.mode.as_deref())?;
    let (entry, created) = e.make_dir(&id, q.user.as_deref(), &q.path, q.parents, mode).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)).into_response())
}

async fn move_file(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<MoveFile>,
) -> Result<Response, Failure> {
    Ok(Json(e.move_file(&id, req).await?).into_response())
}

/// What changes under a directory, as NDJSON lines until the client hangs up (or the sandbox's side ends it).
async fn watch(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<WatchQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let limits = q.limits()?;
    let watch = e.watch_dir(&id, &q.path, q.recursive, q.user.as_deref()).await?;
    Ok(crate::http::ndjson(watch.bounded(limits).events))
}

async fn get_archive(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let fs = sandbox_as(&e, &id, q.user.as_deref()).await?;
    // Errors up to here get a status; after it, one ends the stream early (the client sees a cut body).
    let (fs, dir) = blocking(move || {
        let dir = fs.open_dir(&q.path)?;
        Ok((fs, dir))
    })
    .await?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks { tx: tx.clone(), buf: Vec::with_capacity(CHUNK) };
        let done = fs.write_tar(&dir, &mut out).and_then(|w| w.send().map_err(|e| io_err("send", "the archive", e)));
        if let Err(err) = done {
            let _ = tx.blocking_send(Err(io::Error::other(err.to_string())));
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/x-tar")], Body::from_stream(ReceiverStream::new(rx))).into_response())
}

async fn put_archive(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<ArchiveQuery>, QueryRejection>,
    data: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    parse_path(&q.path)?;
    let data = body(data)?;
    e.admit_record(&id, "no file is changed").await?;
    let fs = sandbox_as(&e, &id, q.user.as_deref()).await?;
    let (path, bytes) = (q.path.clone(), data.len());
    let entries = blocking(move || fs.extract_tar(&q.path, &data, q.parents)).await?;
    e.note_files(&id, "extract_archive", serde_json::json!({"path": path, "bytes": bytes, "entries": entries})).await;
    Ok(Json(Extracted { entries }).into_response())
}

const CHUNK: usize = 64 * 1024;

/// A writer that hands the response body to the HTTP server in chunks.
struct Chunks {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl Write for Chunks {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode(Some("0644")).unwrap(), Some(0o644));
        assert_eq!(parse_mode(Some("0o755")).unwrap(), Some(0o755));
        assert_eq!(parse_mode(None).unwrap(), None);
        for bad in ["", "9", "10000", "rwx"] {
            assert!(parse_mode(Some(bad)).is_err(), "{bad}");
        }
    }
}
