//! The HTTP routes of a sandbox's desktop: what it shows (a screenshot, its windows and pointer), the
//! actions an agent does on it, and a wait for its screen to settle.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use berth_api::{DesktopActions, ScreenSize, WaitSettled};
use serde::Deserialize;

use crate::Engine;
use crate::http::{Api, ApiJson, ApiQuery, Failure, detached, idempotency_key, once};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/sandboxes/{id}/desktop", get(inspect))
        .route("/v1/sandboxes/{id}/desktop/screenshot", get(screenshot))
        .route("/v1/sandboxes/{id}/desktop/actions", post(act))
        .route("/v1/sandboxes/{id}/desktop/wait", post(wait))
}

/// A screenshot's bounds: made smaller, its proportions kept, to fit within them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShotQuery {
    max_width: Option<u32>,
    max_height: Option<u32>,
}

async fn inspect(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.desktop(&id).await?).into_response())
}

async fn screenshot(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiQuery(q): ApiQuery<ShotQuery>,
) -> Result<Response, Failure> {
    if q.max_width == Some(0) || q.max_height == Some(0) {
        return Err(Failure(berth_api::ErrorCode::InvalidRequest, "max_width and max_height are at least 1".into()));
    }
    let max = match (q.max_width, q.max_height) {
        (None, None) => None,
        (w, h) => Some(ScreenSize { width: w.unwrap_or(u32::MAX), height: h.unwrap_or(u32::MAX) }),
    };
    let shot = e.screenshot(&id, max).await?;
    let headers = [
        (header::CONTENT_TYPE, "image/png".to_string()),
        (header::CACHE_CONTROL, "no-store".to_string()),
        (header::HeaderName::from_static("x-berth-screen"), format!("{}x{}", shot.screen.width, shot.screen.height)),
        (header::HeaderName::from_static("x-berth-size"), format!("{}x{}", shot.size.width, shot.size.height)),
    ];
    Ok((headers, shot.png).into_response())
}

async fn act(
    State(e): Api,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<DesktopActions>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&headers, &format!("desktop {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.desktop_act(&id, req).await })).await
}

async fn wait(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<WaitSettled>,
) -> Result<Response, Failure> {
    Ok(Json(e.desktop_wait(&id, req).await?).into_response())
}
