//! The HTTP routes of pods (see `engine::pods`): the node's own calls, served on the unix socket only.

use std::sync::Arc;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use berth_api::{PodEvent, PodFork, PodRequest};

use crate::Engine;
use crate::http::{Api, ApiJson, Failure};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/pods", get(pods).post(register))
        .route("/v1/pods/{id}", get(pod).delete(remove))
        .route("/v1/pods/{id}/events", post(event))
        .route("/v1/pods/{id}/fork", post(fork))
        .route("/v1/pods/{id}/journal", get(journal))
        .route("/v1/pods/{id}/receipt", get(receipt))
        .route("/v1/cluster", get(cluster))
}

async fn cluster(axum::extract::State(e): Api) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.cluster_info().await?).into_response())
}

/// Pods name host paths and cgroups: a token on the TCP listener reaches none of them.
fn local_only() -> Result<(), Failure> {
    crate::projects_http::served_locally("each pod call", "comes from the node's own runtime shim")
}

async fn pods(axum::extract::State(e): Api) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.pods()?).into_response())
}

async fn register(axum::extract::State(e): Api, ApiJson(req): ApiJson<PodRequest>) -> Result<Response, Failure> {
    local_only()?;
    Ok((StatusCode::CREATED, Json(e.register_pod(req).await?)).into_response())
}

async fn pod(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.pod(&id)?).into_response())
}

async fn remove(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.remove_pod(&id).await?).into_response())
}

async fn event(
    axum::extract::State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(ev): ApiJson<PodEvent>,
) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.pod_event(&id, ev).await?).into_response())
}

async fn fork(
    axum::extract::State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<PodFork>,
) -> Result<Response, Failure> {
    local_only()?;
    Ok((StatusCode::CREATED, Json(e.fork_pod(&id, req).await?)).into_response())
}

async fn journal(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.pod_records(&id)?).into_response())
}

async fn receipt(axum::extract::State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    local_only()?;
    Ok(Json(e.pod_receipt(&id)?).into_response())
}
