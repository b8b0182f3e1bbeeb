//! The web view: a page the daemon serves at `/` of its TCP listener to watch and stop work, and the login
//! that lets a browser use the API with a token.
//!
//! The page and its scripts are built into the daemon (no CDN, no build step): everything they show comes
//! from the public API, called by the page itself. A login (`POST /ui/login` with a token) opens a *web
//! login*: an `HttpOnly` cookie (`berth_web`, for `/v1/` only) and a key the page holds in memory (never
//! in storage, which any page of the origin can read) and sends with each call (`X-Berth-Key`, or `berth_key` in the query of a WebSocket or an event
//! stream, which cannot carry headers). The API takes the pair as it takes the token itself: a session
//! token's login sees its own sandbox and its children only, and a revoked token ends its logins.
//!
//! Why both halves: a page a sandbox serves through a path-form preview (`/preview/…`) is on the same origin
//! as the web view, so it would carry the cookie; it does not have the key. A request whose `Origin` is not
//! the listener's own is refused whatever it carries, and previews never pass the cookie on.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use berth_api::ErrorCode;

use crate::Engine;
use crate::http::Failure;
use berth_engine::logins::LIFETIME;
use berth_engine::tokens::digest;

/// The login's cookie, the header and the query parameter its key comes in.
pub(crate) const COOKIE: &str = "berth_web";
const KEY_HEADER: &str = "x-berth-key";
const KEY_PARAM: &str = "berth_key";
/// The largest login request body.
const MAX_LOGIN_BODY: usize = 4096;

/// The page and its assets: (path, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("/", "text/html; charset=utf-8", include_str!("assets/index.html")),
    ("/ui/app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("/ui/api.js", "text/javascript; charset=utf-8", include_str!("assets/api.js")),
    ("/ui/list.js", "text/javascript; charset=utf-8", include_str!("assets/list.js")),
    ("/ui/sandbox.js", "text/javascript; charset=utf-8", include_str!("assets/sandbox.js")),
    ("/ui/panels.js", "text/javascript; charset=utf-8", include_str!("assets/panels.js")),
    ("/ui/term.js", "text/javascript; charset=utf-8", include_str!("assets/term.js")),
    ("/ui/app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("/ui/icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

/// What the page may load and reach: itself only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// A cookie's value from a request's `Cookie` headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|c| {
        c.split(';').map(str::trim).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string))
    })
}

/// Whether the request came from a page of this listener's own origin, or from no page at all (no
/// `Origin`: not a browser's cross-origin request).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else { return false };
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    rest.is_some_and(|r| r.eq_ignore_ascii_case(host))
}

/// The token (by digest) a request's web login stands for: `Ok(None)` when it has no login cookie. Takes
/// `berth_key` out of the query, so that no handler sees it.
pub(crate) fn login_of(e: &Engine, req: &mut Request) -> Result<Option<String>, Failure> {
    let Some(cookie) = cookie(req.headers(), COOKIE) else { return Ok(None) };
    if !same_origin(req.headers()) {
        return Err(Failure::new(
            ErrorCode::Unauthorized,
            "this request comes from a page of another origin: the web view's login works from the web view only"
                .into(),
        ));
    }
    let mut key = req.headers().get(KEY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(q) = req.uri().query() {
        let mut kept = Vec::new();
        for kv in q.split('&') {
            match kv.strip_prefix(KEY_PARAM).and_then(|r| r.strip_prefix('=')) {
                Some(k) => key = key.or_else(|| Some(k.to_string())),
                None => kept.push(kv),
            }
        }
        let path = req.uri().path();
        let uri = if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) };
        if let Ok(uri) = uri.parse() {
            *req.uri_mut() = uri;
        }
    }
    let Some(key) = key else {
        return Err(Failure::new(
            ErrorCode::Unauthorized,
            format!("a web login's cookie needs its key too (the {KEY_HEADER} header): log in again at /"),
        ));
    };
    match e.logins.token(&cookie, &key) {
        Some(token) => Ok(Some(token)),
        None => Err(Failure::new(
            ErrorCode::Unauthorized,
            "this web login has ended (it expired, was logged out, or the daemon restarted): log in again at /".into(),
        )),
    }
}

/// The web view's own requests (`GET /`, `/ui/…`, the login and the logout) are served here, before the
/// API's token check; any other goes on.
pub(crate) async fn web_or_api(
    axum::extract::State(e): axum::extract::State<Arc<Engine>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path().to_string();
    match (req.method().clone(), path.as_str()) {
        (Method::POST, "/ui/login") => login(&e, req).await.unwrap_or_else(IntoResponse::into_response),
        (Method::POST, "/ui/logout") => logout(&e, req.headers()),
        (Method::GET | Method::HEAD, p) if p == "/" || p.starts_with("/ui/") => asset(p),
        _ => next.run(req).await,
    }
}

fn asset(path: &str) -> Response {
    let Some((_, kind, body)) = ASSETS.iter().find(|(p, _, _)| *p == path) else {
        return Failure::new(ErrorCode::NotFound, format!("the web view has no {path}")).into_response();
    };
    let mut r = Response::new(Body::from(*body));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    token: String,
}

#[derive(serde::Serialize)]
struct LoginAnswer {
    /// Sent back with each API call (`X-Berth-Key`).
    key: String,
    /// The sandbox a session token's login is for (none for an API token).
    sandbox: Option<String>,
    expires_at_ms: u64,
}

async fn login(e: &Engine, req: Request) -> Result<Response, Failure> {
    if !same_origin(req.headers()) {
        return Err(Failure::new(ErrorCode::Unauthorized, "a login must come from the web view's own page".into()));
    }
    let body = axum::body::to_bytes(req.into_body(), MAX_LOGIN_BODY)
        .await
        .map_err(|_| Failure::new(ErrorCode::PayloadTooLarge, format!("a login is at most {MAX_LOGIN_BODY} bytes")))?;
    let asked: LoginRequest = serde_json::from_slice(&body).map_err(|err| {
        Failure::new(ErrorCode::InvalidRequest, format!("a login is {{\"token\": \"berth_…\"}}: {err}"))
    })?;
    let token = digest(asked.token.trim());
    let Some((_, sandbox, _)) = e.tokens.check_digest(&token) else {
        return Err(Failure::new(
            ErrorCode::Unauthorized,
            "that is not a token of this daemon: mint one with berth token create (or use a sandbox's BERTH_TOKEN)"
                .into(),
        ));
    };
    let (cookie, key) = e.logins.open(token).map_err(|err| Failure::from(crate::EngineError::Log(err)))?;
    let expires_at_ms = berth_engine::now_ms() + LIFETIME.as_millis() as u64;
    let set = format!("{COOKIE}={cookie}; Path=/v1/; HttpOnly; SameSite=Strict; Max-Age={}", LIFETIME.as_secs());
    let mut r = axum::Json(LoginAnswer { key, sandbox, expires_at_ms }).into_response();
    if let Ok(v) = HeaderValue::from_str(&set) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(r)
}

fn logout(e: &Engine, headers: &HeaderMap) -> Response {
    if let Some(c) = cookie(headers, COOKIE) {
        e.logins.close(&c);
    }
    if let Some(k) = headers.get(KEY_HEADER).and_then(|v| v.to_str().ok()) {
        e.logins.close_by_key(k);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    let gone = format!("{COOKIE}=; Path=/v1/; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&gone) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_with_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7070"));
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://127.0.0.1:7070"));
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://8000-abc.127.0.0.1:7070"));
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
    }
}
