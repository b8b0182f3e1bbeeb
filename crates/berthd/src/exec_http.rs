//! The HTTP routes of execs: start one (streamed, or detached), list them, kill one, feed its stdin, read
//! its log (followed while it runs).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{delete, get, post};
use berth_api::ExecRequest;
use tokio_stream::wrappers::ReceiverStream;

use crate::http::{Api, ApiJson, ApiQuery, Failure, idempotency_key, ndjson, once};
use crate::{Engine, EngineError};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/sandboxes/{id}/execs", get(execs).post(exec))
        .route("/v1/sandboxes/{id}/execs/{exec}", delete(kill_exec))
        .route("/v1/sandboxes/{id}/execs/{exec}/log", get(log))
        .route("/v1/sandboxes/{id}/execs/{exec}/stdin", post(stdin))
}

async fn exec(
    State(e): Api,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<ExecRequest>,
) -> Result<Response, Failure> {
    // A retried exec does not run again: it answers with the first one's record (its output is in its log).
    if let Some(key) = idempotency_key(&headers, &format!("exec {id}"))? {
        let mut stream = None;
        let first = e
            .idempotent(Some(key), async {
                let (info, frames) = e.exec(&id, req).await?;
                stream = frames;
                Ok((201, serde_json::to_value(info).map_err(|err| EngineError::Log(std::io::Error::other(err)))?))
            })
            .await?;
        if let Some(frames) = stream {
            return Ok(ndjson(frames));
        }
        return Ok((StatusCode::from_u16(first.0).unwrap_or(StatusCode::OK), Json(first.1)).into_response());
    }
    let (info, frames) = e.exec(&id, req).await?;
    let Some(frames) = frames else { return Ok((StatusCode::CREATED, Json(info)).into_response()) };
    Ok(ndjson(frames))
}

async fn execs(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.execs(&id).await?).into_response())
}

async fn kill_exec(
    State(e): Api,
    headers: HeaderMap,
    UrlPath((id, exec)): UrlPath<(String, String)>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&headers, &format!("kill {id} {exec}"))?;
    once(&e, key, StatusCode::OK, e.kill_exec(&id, &exec)).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StdinQuery {
    #[serde(default)]
    close: bool,
}

/// Input for a running exec's open stdin: the body's bytes as they are; `close=true` closes it after them.
async fn stdin(
    State(e): Api,
    UrlPath((id, exec)): UrlPath<(String, String)>,
    ApiQuery(q): ApiQuery<StdinQuery>,
    body: Bytes,
) -> Result<Response, Failure> {
    e.send_stdin(&id, &exec, body.to_vec(), q.close).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(serde::Deserialize)]
struct LogQuery {
    #[serde(default)]
    follow: bool,
}

/// An exec's log (its output within the log's bound), streamed; with `follow`, kept open and fed until the exec ends.
async fn log(
    State(e): Api,
    UrlPath((id, exec)): UrlPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<Response, Failure> {
    let rx = log_stream(&e, &id, &exec, q.follow).await?;
    let body = Body::from_stream(ReceiverStream::new(rx));
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

/// An exec's log as chunks of bytes; with `follow`, until the exec ends (every transport that reads logs
/// reads them so).
pub(crate) async fn log_stream(
    e: &Engine,
    id: &str,
    exec: &str,
    follow: bool,
) -> Result<tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>, EngineError> {
    let path = e.log_path(id, exec).await?;
    let mut done = e.exec_done(id, exec).await?;
    let mut file = tokio::fs::File::open(&path).await.map_err(EngineError::Log)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf).await {
                Ok(0) if !follow => return,
                Ok(0) => {
                    if tx.is_closed() || done.borrow().is_some() {
                        // Ended: what it wrote before ending is read above; anything after is not its own.
                        return;
                    }
                    let _ = tokio::time::timeout(Duration::from_millis(100), done.changed()).await;
                }
                Ok(n) => {
                    if tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        return;
                    }
                }
                Err(err) => {
                    let _ = tx.send(Err(err)).await;
                    return;
                }
            }
        }
    });
    Ok(rx)
}
