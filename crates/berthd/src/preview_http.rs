//! Previews over HTTP: the API that makes, lists and removes them, and `/preview/<sandbox>/<port>/…`, which
//! carries a request (a WebSocket upgrade included) to the server the sandbox runs on `127.0.0.1:<port>`,
//! through its init, and streams the answer back.
//!
//! The preview path is served before the API's token check: a preview has a token of its own (in the URL as
//! `berth_preview_token`, then in a cookie for that path, or in `X-Berth-Preview-Token`), or none if public.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use berth_api::{CreatePreview, ErrorCode};
use hyper_util::rt::TokioIo;

use crate::http::{ApiJson, Failure};
use berth_engine::{Engine, PreviewRefusal};

type Api = State<Arc<Engine>>;

pub fn routes() -> axum::Router<Arc<Engine>> {
    use axum::routing::{delete, get};
    axum::Router::new()
        .route("/v1/sandboxes/{id}/previews", get(list).post(create))
        .route("/v1/sandboxes/{id}/previews/{preview}", delete(remove))
}

/// Where previews are served.
const PREFIX: &str = "/preview/";
/// The query parameter and the header a preview's token comes in.
const TOKEN_PARAM: &str = "berth_preview_token";
const TOKEN_HEADER: &str = "x-berth-preview-token";

pub(crate) async fn create(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<CreatePreview>,
) -> Result<Response, Failure> {
    Ok((StatusCode::CREATED, Json(e.create_preview(&id, req).await?)).into_response())
}

pub(crate) async fn list(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.list_previews(&id).await?).into_response())
}

pub(crate) async fn remove(
    State(e): Api,
    UrlPath((id, preview)): UrlPath<(String, String)>,
) -> Result<Response, Failure> {
    e.remove_preview(&id, &preview).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A request under `/preview/`, or to a host `<port>-<id>.<domain>` when the daemon has a domain, is a
/// preview's; any other goes on to the API.
pub(crate) async fn preview_or_api(State(e): Api, req: Request, next: axum::middleware::Next) -> Response {
    let served = if req.uri().path().starts_with(PREFIX) {
        let path = req.uri().path().to_string();
        match parse(&path) {
            // The bare preview path goes to its root, so that the page's relative links resolve under it.
            Some((_, _, "")) => {
                let to = format!("{path}/{}", req.uri().query().map(|q| format!("?{q}")).unwrap_or_default());
                return (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, to)]).into_response();
            }
            Some((id, port, tail)) => {
                serve(&e, req, Target { id: id.into(), port, tail: tail.into(), by_host: false }).await
            }
            None => Err(Failure(
                ErrorCode::NotFound,
                "a preview's path is /preview/<sandbox>/<port>/…: see berth expose ls <sandbox>".into(),
            )),
        }
    } else if let Some((port, id)) = e.preview_domain().and_then(|d| host_target(&req, d)) {
        let tail = req.uri().path().to_string();
        serve(&e, req, Target { id, port, tail, by_host: true }).await
    } else {
        return next.run(req).await;
    };
    served.unwrap_or_else(IntoResponse::into_response)
}

/// What a preview request is for: sandbox `id`'s `port`, the path there, and whether it came by its host.
struct Target {
    id: String,
    port: u16,
    tail: String,
    by_host: bool,
}

/// The port and sandbox a request's host names under `domain` (`<port>-<id>.<domain>`).
pub(crate) fn host_target(req: &Request, domain: &str) -> Option<(u16, String)> {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).or(req.uri().host())?;
    let host = host.rsplit_once(':').filter(|(_, p)| p.chars().all(|c| c.is_ascii_digit())).map_or(host, |(h, _)| h);
    let label = host.to_ascii_lowercase().strip_suffix(&format!(".{domain}"))?.to_string();
    let (port, id) = label.split_once('-')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    (!id.is_empty() && !id.contains('.')).then(|| (port, id.to_string()))
}

/// The sandbox, the port and the rest of the path (with its leading `/`, if any) of a preview's path.
fn parse(path: &str) -> Option<(&str, u16, &str)> {
    let rest = path.strip_prefix(PREFIX)?;
    let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let (port, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    Some((id, port.parse().ok().filter(|p| *p > 0)?, tail))
}

/// The query without the preview's token, and the token if it was there.
fn split_query(query: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(q) = query else { return (None, None) };
    let mut token = None;
    let kept: Vec<&str> = q
        .split('&')
        .filter(|kv| match kv.strip_prefix(TOKEN_PARAM).and_then(|r| r.strip_prefix('=')) {
            Some(t) => {
                token = Some(t.to_string());
                false
            }
            None => !kv.is_empty(),
        })
        .collect();
    ((!kept.is_empty()).then(|| kept.join("&")), token)
}

fn cookie_name(id: &str, port: u16) -> String {
    format!("berth_preview_{id}_{port}")
}

/// The preview's token from the request's cookie for it.
fn cookie_token(req: &Request, name: &str) -> Option<String> {
    req.headers().get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|c| {
        c.split(';').map(str::trim).find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string))
    })
}

/// The request's cookies but berth's own (`berth_preview_…`, `berth_web`), as one header; none if none is left.
fn own_cookies(headers: &axum::http::HeaderMap) -> Option<String> {
    let kept: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|c| c.split(';').map(str::trim))
        .filter(|kv| {
            !kv.is_empty() && !kv.starts_with("berth_preview_") && !kv.starts_with(&format!("{}=", crate::web::COOKIE))
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

/// Headers that are the hop's own, not the request's (RFC 9110 7.6.1); an upgrade keeps `connection` and
/// `upgrade`, which it needs.
fn hop_by_hop(name: &header::HeaderName, upgrade: bool) -> bool {
    let n = name.as_str();
    matches!(n, "keep-alive" | "proxy-connection" | "te" | "trailer" | "transfer-encoding")
        || (!upgrade && matches!(n, "connection" | "upgrade"))
        || n == TOKEN_HEADER
}

async fn serve(e: &Arc<Engine>, req: Request, target: Target) -> Result<Response, Failure> {
    let (id, port, tail, by_host) = (target.id.as_str(), target.port, target.tail.as_str(), target.by_host);
    let (query, query_token) = split_query(req.uri().query());
    let sid = e.get(id).await.map_err(|_| not_found(id, port))?.id;
    let cookie = cookie_name(&sid, port);
    let header_token = req.headers().get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let token = query_token.clone().or(header_token).or_else(|| cookie_token(&req, &cookie));
    let preview = match e.check_preview(&sid, port, token.as_deref()) {
        Ok(p) => p,
        Err(PreviewRefusal::NotFound) => return Err(not_found(&sid, port)),
        Err(PreviewRefusal::Token) => {
            return Err(Failure(
                ErrorCode::Unauthorized,
                format!(
                    "port {port} of sandbox {sid} is previewed with a token of its own: open the URL berth expose \
                     printed (its {TOKEN_PARAM}), or send the token as X-Berth-Preview-Token"
                ),
            ));
        }
    };
    let mut response = proxy(e, req, &sid, port, tail, by_host, query, &preview).await?;
    if let Some(t) = query_token
        && let Ok(v) =
            HeaderValue::from_str(&format!("{cookie}={t}; Path=/preview/{sid}/{port}/; HttpOnly; SameSite=Lax"))
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(response)
}

/// Carry a request (a WebSocket upgrade included) to the server sandbox `sid` runs on `127.0.0.1:port`, as
/// `tail` and `query`, and stream its answer back; journaled as a request through `preview` (a preview's id,
/// or what else let it through).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn proxy(
    e: &Arc<Engine>,
    mut req: Request,
    sid: &str,
    port: u16,
    tail: &str,
    by_host: bool,
    query: Option<String>,
    preview: &str,
) -> Result<Response, Failure> {
    let method = req.method().to_string();
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (stream, open) = e.connect_port(sid, port).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| unreachable_port(sid, port, &err.to_string()))?;
    // Open while the connection serves, or, upgraded, while its two sides are joined.
    let open_while_serving = Arc::clone(&open);
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
        drop(open_while_serving);
    });
    let host = req.headers().get(header::HOST).cloned();
    let uri = format!("{tail}{}", query.map(|q| format!("?{q}")).unwrap_or_default());
    let (parts, body) = req.into_parts();
    let mut out = hyper::Request::builder().method(parts.method).uri(&uri).version(hyper::Version::HTTP_11);
    let kept = |n: &header::HeaderName| !hop_by_hop(n, upgrade) && *n != header::HOST && *n != header::COOKIE;
    for (name, value) in parts.headers.iter().filter(|(n, _)| kept(n)) {
        out = out.header(name, value);
    }
    // The server inside gets the page's own cookies, never berth's (a preview's token, a web view's login).
    if let Some(cookies) = own_cookies(&parts.headers) {
        out = out.header(header::COOKIE, cookies);
    }
    // The server inside is told it is on its own loopback (dev servers check the host), and where it was asked.
    out = out.header(header::HOST, format!("127.0.0.1:{port}"));
    if let Some(h) = host {
        out = out.header("x-forwarded-host", h);
    }
    let base = if by_host { String::new() } else { format!("/preview/{sid}/{port}") };
    if !by_host {
        out = out.header("x-forwarded-prefix", base.clone());
    }
    let out = out.body(body).map_err(|err| Failure(ErrorCode::InvalidRequest, err.to_string()))?;
    let mut answer = sender.send_request(out).await.map_err(|err| unreachable_port(sid, port, &err.to_string()))?;
    let status = answer.status();
    e.journal_preview(sid, preview, &method, tail, status.as_u16()).await;
    if status == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client) = client_upgrade
    {
        let inside = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            if let (Ok(a), Ok(b)) = (client.await, inside.await) {
                let _ = tokio::io::copy_bidirectional(&mut TokioIo::new(a), &mut TokioIo::new(b)).await;
            }
            drop(open);
        });
    }
    let (mut parts, body) = answer.into_parts();
    // Answered as this listener speaks (an HTTP/1.0 server inside would otherwise close the client's
    // connection).
    parts.version = hyper::Version::HTTP_11;
    // A switch of protocols has no body: the connection is the two sides' from here on.
    let body = match status == StatusCode::SWITCHING_PROTOCOLS {
        true => Body::empty(),
        false => Body::new(body),
    };
    let mut response = Response::from_parts(parts, body);
    guard_origin(response.headers_mut(), by_host);
    Ok(response)
}

/// Keep what a sandbox's server answers from reaching past its preview: no cookie of berth's set (or
/// replaced) by it, and, on the path form, which shares its origin with the web view and the API, no service
/// worker scoped beyond the preview's path and no clearing of the origin's data.
fn guard_origin(headers: &mut axum::http::HeaderMap, by_host: bool) {
    let cookies: Vec<HeaderValue> = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    headers.remove(header::SET_COOKIE);
    for c in cookies {
        let name = c.to_str().unwrap_or("").trim_start().to_ascii_lowercase();
        if !name.starts_with("berth_") {
            headers.append(header::SET_COOKIE, c);
        }
    }
    if !by_host {
        headers.remove("service-worker-allowed");
        headers.remove("clear-site-data");
    }
}

fn not_found(id: &str, port: u16) -> Failure {
    Failure(
        ErrorCode::NotFound,
        format!(
            "there is no preview of port {port} of sandbox {id} (it may have expired or been removed, or the \
             sandbox was): make one with berth expose {id} {port}"
        ),
    )
}

fn unreachable_port(id: &str, port: u16, why: &str) -> Failure {
    Failure(
        ErrorCode::Unavailable,
        format!("nothing answered on 127.0.0.1:{port} inside sandbox {id} ({why}): is its server running?"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_paths_name_a_sandbox_a_port_and_the_rest() {
        assert_eq!(parse("/preview/abc/8080/x/y"), Some(("abc", 8080, "/x/y")));
        assert_eq!(parse("/preview/abc/8080/"), Some(("abc", 8080, "/")));
        assert_eq!(parse("/preview/abc/8080"), Some(("abc", 8080, "")));
        assert_eq!(parse("/preview/abc/0/"), None);
        assert_eq!(parse("/preview/abc/http/"), None);
        assert_eq!(parse("/v1/sandboxes"), None);
    }

    #[test]
    fn berths_cookies_stay_out_of_the_sandbox() {
        let mut h = axum::http::HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; berth_web=secret; berth_preview_x_80=t"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(own_cookies(&h).as_deref(), Some("a=1; b=2"));
        let mut only = axum::http::HeaderMap::new();
        only.insert(header::COOKIE, HeaderValue::from_static("berth_web=secret"));
        assert_eq!(own_cookies(&only), None);
    }

    #[test]
    fn a_server_inside_cannot_set_berths_cookies_or_claim_the_origin() {
        let mut h = axum::http::HeaderMap::new();
        h.append(header::SET_COOKIE, HeaderValue::from_static("theirs=1; Path=/"));
        h.append(header::SET_COOKIE, HeaderValue::from_static("berth_web=x; Path=/v1/"));
        h.append(header::SET_COOKIE, HeaderValue::from_static("Berth_preview_a_1=y"));
        h.insert("service-worker-allowed", HeaderValue::from_static("/"));
        h.insert("clear-site-data", HeaderValue::from_static("\"*\""));
        let mut by_host = h.clone();
        guard_origin(&mut h, false);
        assert_eq!(h.get_all(header::SET_COOKIE).iter().collect::<Vec<_>>(), vec!["theirs=1; Path=/"]);
        assert!(!h.contains_key("service-worker-allowed") && !h.contains_key("clear-site-data"));
        // A host of its own is an origin of its own: what it does there is its own business.
        guard_origin(&mut by_host, true);
        assert_eq!(by_host.get_all(header::SET_COOKIE).iter().count(), 1);
        assert!(by_host.contains_key("service-worker-allowed"));
    }

    #[test]
    fn the_token_is_taken_out_of_the_query() {
        assert_eq!(split_query(Some("a=1&berth_preview_token=t&b=2")), (Some("a=1&b=2".into()), Some("t".into())));
        assert_eq!(split_query(Some("berth_preview_token=t")), (None, Some("t".into())));
        assert_eq!(split_query(Some("q=x")), (Some("q=x".into()), None));
        assert_eq!(split_query(None), (None, None));
    }
}
