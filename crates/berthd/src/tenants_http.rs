//! `/v1/tenants`: operators make tenants (with their quotas) and remove them over the unix socket; any
//! token may read the tenants it belongs to (an operator's, every one), with what each holds now.

use axum::Json;
use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_api::CreateTenant;
use berth_engine::{Engine, EngineError};
use std::sync::Arc;

use crate::http::{Api, ApiJson, Failure};
use crate::projects_http::served_locally;

pub(crate) fn routes() -> Router<Arc<Engine>> {
    Router::new().route("/v1/tenants", get(list).post(put)).route("/v1/tenants/{name}", get(one).delete(remove))
}

/// Make a tenant (201), or give one a new quota (200).
async fn put(State(e): Api, ApiJson(req): ApiJson<CreateTenant>) -> Result<Response, Failure> {
    served_locally("making a tenant", "sets what a team may use, which is the host's operator's to decide")?;
    let existed = e.tenant(&req.name).await.is_ok();
    let tenant = e.put_tenant(req).await?;
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(tenant)).into_response())
}

async fn list(State(e): Api) -> Result<Response, Failure> {
    Ok(Json(e.tenants().await?).into_response())
}

async fn one(State(e): Api, UrlPath(name): UrlPath<String>) -> Result<Response, Failure> {
    let mine = berth_engine::current_caller().and_then(|c| c.grant.tenant);
    if mine.as_ref().is_some_and(|m| *m != name) {
        return Err(EngineError::NoTenant(name).into());
    }
    Ok(Json(e.tenant(&name).await?).into_response())
}

async fn remove(State(e): Api, UrlPath(name): UrlPath<String>) -> Result<Response, Failure> {
    served_locally("removing a tenant", "revokes a team's tokens, which is the host's operator's to decide")?;
    e.remove_tenant(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
