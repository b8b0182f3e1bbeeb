//! The HTTP routes of durable projects: stop, start, rebuild; snapshots, restore, reset, fork; volumes; the
//! storage pool.

use std::sync::Arc;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{delete, get, post};
use berth_api::{CreateSnapshot, CreateVolume, ForkRequest, ResetRequest, RestoreRequest, StorageInfo};

use crate::Engine;
use crate::http::{Api, ApiJson, Failure, detached, idempotency_key, once};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/sandboxes/{id}/stop", post(stop))
        .route("/v1/sandboxes/{id}/pause", post(pause))
        .route("/v1/sandboxes/{id}/resume", post(resume))
        .route("/v1/sandboxes/{id}/hibernate", post(hibernate))
        .route("/v1/sandboxes/{id}/wake", post(wake))
        .route("/v1/sandboxes/{id}/start", post(start))
        .route("/v1/sandboxes/{id}/rebuild", post(rebuild))
        .route("/v1/sandboxes/{id}/snapshots", post(snapshot))
        .route("/v1/sandboxes/{id}/restore", post(restore))
        .route("/v1/sandboxes/{id}/reset", post(reset))
        .route("/v1/sandboxes/{id}/fork", post(fork))
        .route("/v1/snapshots", get(snapshots))
        .route("/v1/snapshots/{snapshot}", get(get_snapshot).delete(remove_snapshot))
        .route("/v1/volumes", get(volumes).post(create_volume))
        .route("/v1/volumes/{name}", delete(remove_volume))
        .route("/v1/storage", get(storage).post(init_storage))
        .route("/v1/sandboxes/{id}/diff", get(diff))
        .route("/v1/sandboxes/{id}/export", post(export))
        .route("/v1/images", get(images).post(import_image))
        .route("/v1/images/{name}", delete(remove_image))
        .route("/v1/sandboxes/{id}/receipt", get(receipt))
        .route("/v1/secrets", get(secrets))
        .route("/v1/secrets/{name}", axum::routing::put(set_secret).delete(remove_secret))
        .route("/v1/sandboxes/{id}/net", post(net_change))
        .route("/v1/sandboxes/{id}/net/log", get(net_log))
        .route("/v1/sandboxes/{id}/net/suggest", get(net_suggest))
}

async fn net_change(
    axum::extract::State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<berth_api::NetChange>,
) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.net_change(&id, req).await }).await?).into_response())
}

async fn net_log(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.net_log(&id).await?).into_response())
}

async fn net_suggest(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.net_suggest(&id).await?).into_response())
}

async fn receipt(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.receipt(&id)?).into_response())
}

/// Calls that read or write host paths the caller names are for the unix socket's users (host root's
/// peers) only: a token on the TCP listener cannot make the daemon read or write the host's files.
pub(crate) fn local_only(what: &str) -> Result<(), Failure> {
    served_locally(what, "reads and writes paths on the daemon's host")
}

/// Refuses a call that came over TCP: `what` (the call) `because` (why only the host's operator may make it).
pub(crate) fn served_locally(what: &str, because: &str) -> Result<(), Failure> {
    if berth_engine::actor() == "local" {
        return Ok(());
    }
    Err(Failure(
        berth_api::ErrorCode::Unauthorized,
        format!("{what} {because}, so it is served on the unix socket only"),
    ))
}

async fn images(axum::extract::State(e): Api) -> Result<Response, Failure> {
    Ok(Json(e.images()?).into_response())
}

async fn remove_image(axum::extract::State(e): Api, UrlPath(name): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.remove_image(&name).await?).into_response())
}

/// The import's progress and its result, one JSON object per line.
async fn import_image(
    axum::extract::State(e): Api,
    ApiJson(req): ApiJson<berth_api::ImportImage>,
) -> Result<Response, Failure> {
    use tokio_stream::StreamExt;
    local_only("importing an image")?;
    let frames = e.import_image(req).await?;
    let lines = tokio_stream::wrappers::ReceiverStream::new(frames).map(|frame| {
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(line))
    });
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], axum::body::Body::from_stream(lines))
        .into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffQuery {
    against: Option<String>,
    /// `json` (default) or `patch`.
    format: Option<String>,
}

async fn diff(
    axum::extract::State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: Result<axum::extract::Query<DiffQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Failure> {
    let q = q.map_err(|err| Failure(berth_api::ErrorCode::InvalidRequest, err.body_text()))?.0;
    let patch = match q.format.as_deref() {
        None | Some("json") => false,
        Some("patch") => true,
        Some(other) => {
            return Err(Failure(
                berth_api::ErrorCode::InvalidRequest,
                format!("format must be json or patch, not {other:?}"),
            ));
        }
    };
    let (d, text) = e.diff(&id, q.against, patch).await?;
    match text {
        Some(t) => Ok(([(axum::http::header::CONTENT_TYPE, "text/x-diff; charset=utf-8")], t).into_response()),
        None => Ok(Json(d).into_response()),
    }
}

async fn export(
    axum::extract::State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<berth_api::ExportRequest>,
) -> Result<Response, Failure> {
    local_only("export")?;
    Ok((StatusCode::CREATED, Json(e.export(&id, req).await?)).into_response())
}

async fn pause(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.pause(&id, "asked").await }).await?).into_response())
}

async fn resume(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.resume(&id, "resume").await }).await?).into_response())
}

async fn hibernate(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.hibernate(&id, "asked").await }).await?).into_response())
}

async fn wake(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.wake(&id, "wake").await }).await?).into_response())
}

async fn stop(axum::extract::State(e): Api, h: HeaderMap, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("stop {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.stop(&id).await })).await
}

async fn start(axum::extract::State(e): Api, h: HeaderMap, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("start {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.start(&id).await })).await
}

async fn rebuild(
    axum::extract::State(e): Api,
    h: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("rebuild {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.rebuild(&id).await })).await
}

async fn snapshot(
    axum::extract::State(e): Api,
    h: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<CreateSnapshot>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("snapshot {id}"))?;
    once(
        &e,
        key,
        StatusCode::CREATED,
        detached(&e, move |e| async move { e.snapshot(&id, req.name, req.with_processes).await }),
    )
    .await
}

async fn restore(
    axum::extract::State(e): Api,
    h: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<RestoreRequest>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("restore {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.restore(&id, &req.snapshot).await })).await
}

async fn reset(
    axum::extract::State(e): Api,
    h: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<ResetRequest>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("reset {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.reset(&id, req.keep_workspace).await })).await
}

async fn fork(
    axum::extract::State(e): Api,
    h: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<ForkRequest>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&h, &format!("fork {id}"))?;
    once(
        &e,
        key,
        StatusCode::CREATED,
        detached(&e, move |e| async move { e.fork(&id, req.count.unwrap_or(1), req.with_processes).await }),
    )
    .await
}

async fn snapshots(axum::extract::State(e): Api) -> Result<Response, Failure> {
    let mut seen = Vec::new();
    for s in e.snapshots()? {
        if e.sees_snapshot(&s).await {
            seen.push(s);
        }
    }
    Ok(Json(seen).into_response())
}

async fn get_snapshot(axum::extract::State(e): Api, UrlPath(s): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.get_snapshot(&s)?).into_response())
}

async fn remove_snapshot(axum::extract::State(e): Api, UrlPath(s): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.remove_snapshot(&s).await }).await?).into_response())
}

async fn volumes(axum::extract::State(e): Api) -> Result<Response, Failure> {
    Ok(Json(e.volumes()?).into_response())
}

async fn create_volume(axum::extract::State(e): Api, ApiJson(req): ApiJson<CreateVolume>) -> Result<Response, Failure> {
    Ok((StatusCode::CREATED, Json(e.create_volume(&req.name).await?)).into_response())
}

async fn remove_volume(axum::extract::State(e): Api, UrlPath(name): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.remove_volume(&name).await?).into_response())
}

async fn storage(axum::extract::State(e): Api) -> Result<Response, Failure> {
    let pool = e.pool();
    let info = pool.info().map_err(|err| Failure::from(crate::EngineError::Storage(err.to_string())))?;
    Ok(Json(storage_info(&e, &info)).into_response())
}

fn storage_info(e: &Engine, info: &berth_storage::PoolInfo) -> StorageInfo {
    let unbounded = e.unbounded_reason();
    StorageInfo {
        mode: info.mode.to_string(),
        size_bytes: info.size_bytes,
        free_bytes: info.free_bytes,
        quotas: info.quotas,
        bounded: unbounded.is_none(),
        default_disk_bytes: if unbounded.is_none() { e.default_disk() } else { None },
        unbounded,
    }
}

async fn init_storage(
    axum::extract::State(e): Api,
    ApiJson(req): ApiJson<berth_api::InitStorage>,
) -> Result<Response, Failure> {
    local_only("making a storage pool")?;
    let info = e.init_storage(req.size_bytes).await?;
    Ok((StatusCode::CREATED, Json(storage_info(&e, &info))).into_response())
}

/// `?tenant=NAME`: the secrets of that tenant's sandboxes (an operator's choice; a tenant's token always
/// means its own).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantQuery {
    tenant: Option<String>,
}

impl TenantQuery {
    fn tenant(self) -> Option<String> {
        match berth_engine::current_caller().filter(|c| !c.grant.is_full() || c.session.is_some()) {
            Some(c) => c.grant.tenant,
            None => self.tenant,
        }
    }
}

async fn secrets(
    axum::extract::State(e): Api,
    crate::http::ApiQuery(q): crate::http::ApiQuery<TenantQuery>,
) -> Result<Response, Failure> {
    Ok(Json(e.secrets(q.tenant().as_deref())?).into_response())
}

/// The value is the raw body; it is sealed at once and never returned.
async fn set_secret(
    axum::extract::State(e): Api,
    UrlPath(name): UrlPath<String>,
    crate::http::ApiQuery(q): crate::http::ApiQuery<TenantQuery>,
    body: axum::body::Bytes,
) -> Result<Response, Failure> {
    served_locally("setting a secret", "puts a value only the host's operator may give")?;
    Ok(Json(e.set_secret(&name, &body, q.tenant().as_deref())?).into_response())
}

async fn remove_secret(
    axum::extract::State(e): Api,
    UrlPath(name): UrlPath<String>,
    crate::http::ApiQuery(q): crate::http::ApiQuery<TenantQuery>,
) -> Result<Response, Failure> {
    served_locally("removing a secret", "changes what the host's operator gave")?;
    e.remove_secret(&name, q.tenant().as_deref())?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
