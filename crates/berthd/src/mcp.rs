//! `/mcp`: berth's MCP server over streamable HTTP, on every listener. Its tools call the API in-process:
//! each call is a request to the very router that serves the listener's other routes, with the MCP request's
//! `Authorization` header, so it is authenticated, scoped, journaled and answered exactly as that request
//! would be from a client.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use berth_mcp::{ApiError, Call, Reply};
use tower::ServiceExt;

/// The largest answer a tool reads from the API (a file read's bound).
const MAX_ANSWER: usize = 64 << 20;

/// The API's router, called in-process.
struct InProcess(Router);

impl berth_mcp::Api for InProcess {
    fn call(&self, call: Call) -> berth_mcp::ApiFuture {
        let router = self.0.clone();
        Box::pin(async move {
            let mut req = Request::builder().method(call.method).uri(&call.path).header(header::HOST, "berth");
            if let Some(auth) = &call.authorization {
                req = req.header(header::AUTHORIZATION, auth);
            }
            let body = match call.body {
                berth_mcp::Body::None => Body::empty(),
                berth_mcp::Body::Json(v) => {
                    req = req.header(header::CONTENT_TYPE, "application/json");
                    Body::from(serde_json::to_vec(&v).map_err(|e| ApiError::transport(e.to_string()))?)
                }
                berth_mcp::Body::Bytes(b) => Body::from(b),
            };
            let req = req.body(body).map_err(|e| ApiError::transport(format!("a request the API cannot take: {e}")))?;
            let Ok(answer) = router.oneshot(req).await;
            let status = answer.status().as_u16();
            let body = axum::body::to_bytes(answer.into_body(), MAX_ANSWER)
                .await
                .map_err(|e| ApiError::transport(format!("reading the API's answer: {e}")))?;
            if !(200..300).contains(&status) {
                return Err(ApiError::from_answer(status, &body));
            }
            Ok(Reply { status, body: body.to_vec() })
        })
    }
}

/// `api` with `/mcp` in front of it; `guard` is what every other route of `api` passes through before it is
/// routed (the token check on TCP), applied to `/mcp` too.
pub(crate) fn mount(api: Router, guard: impl FnOnce(Router) -> Router) -> Router {
    let max_body = crate::listen::bounds().max_body_bytes;
    let service = berth_mcp::http_service(Arc::new(InProcess(api.clone())), max_body);
    let mcp = Router::new().route_service("/mcp", service.map_request(scope));
    guard(mcp).fallback_service(api)
}

/// Tell the MCP server a session token's requests from others, so it lists only the tools such a token can use.
fn scope(mut req: Request) -> Request {
    let session = req.extensions().get::<crate::http::Caller>().is_some_and(|c| c.session.is_some());
    let scope = if session { berth_mcp::Scope::Session } else { berth_mcp::Scope::Full };
    req.extensions_mut().insert(scope);
    req
}
