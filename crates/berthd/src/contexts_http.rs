//! The HTTP routes of code contexts: make, list, inspect, remove and restart them; run code in one, as a
//! stream of NDJSON frames; interrupt a run from any client.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use berth_api::{CreateContext, RunCode};

use crate::Engine;
use crate::http::{Api, ApiJson, Failure, detached, idempotency_key, ndjson, once};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/sandboxes/{id}/contexts", get(list).post(create))
        .route("/v1/sandboxes/{id}/contexts/{ctx}", get(inspect).delete(remove))
        .route("/v1/sandboxes/{id}/contexts/{ctx}/restart", post(restart))
        .route("/v1/sandboxes/{id}/contexts/{ctx}/interrupt", post(interrupt))
        .route("/v1/sandboxes/{id}/contexts/{ctx}/run", post(run))
}

async fn create(
    State(e): Api,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<CreateContext>,
) -> Result<Response, Failure> {
    let key = idempotency_key(&headers, &format!("context {id}"))?;
    once(&e, key, StatusCode::CREATED, detached(&e, move |e| async move { e.create_context(&id, req).await })).await
}

async fn list(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.list_contexts(&id).await?).into_response())
}

async fn inspect(State(e): Api, UrlPath((id, ctx)): UrlPath<(String, String)>) -> Result<Response, Failure> {
    Ok(Json(e.get_context(&id, &ctx).await?).into_response())
}

async fn remove(State(e): Api, UrlPath((id, ctx)): UrlPath<(String, String)>) -> Result<Response, Failure> {
    detached(&e, move |e| async move { e.remove_context(&id, &ctx).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn restart(State(e): Api, UrlPath((id, ctx)): UrlPath<(String, String)>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.restart_context(&id, &ctx).await }).await?).into_response())
}

async fn interrupt(State(e): Api, UrlPath((id, ctx)): UrlPath<(String, String)>) -> Result<Response, Failure> {
    Ok(Json(e.interrupt_context(&id, &ctx).await?).into_response())
}

async fn run(
    State(e): Api,
    UrlPath((id, ctx)): UrlPath<(String, String)>,
    ApiJson(req): ApiJson<RunCode>,
) -> Result<Response, Failure> {
    Ok(ndjson(e.run_context(&id, &ctx, req).await?))
}
