//! The HTTP API: a thin transport over the engine. Each handler extracts, calls one engine method, and maps
//! the result; errors become `{"error": {"code", "message"}}` with the code's status.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path as UrlPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use berth_api::{ApiError, CreateSandbox, ErrorBody, ErrorCode};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use crate::{Engine, EngineError};

/// An API error response.
pub struct Failure(pub(crate) ErrorCode, pub(crate) String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(ErrorBody { error: ApiError { code: self.0, message: self.1 } })).into_response()
    }
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: String) -> Failure {
        Failure(code, message)
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        Failure(e.code(), berth_runtime::error_chain(&e))
    }
}

/// JSON input whose rejections (bad syntax, wrong types, unknown fields, too large) are API errors.
///
/// A number with a zero fraction (`46.0`) is the integer it equals, as JSON Schema has it: it is read as one
/// wherever an integer is expected.
pub struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Failure;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mut value = match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(v)) => v,
            Err(JsonRejection::BytesRejection(e)) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                let max = crate::listen::bounds().max_body_bytes;
                return Err(Failure(
                    ErrorCode::PayloadTooLarge,
                    format!("the request body is larger than {max} bytes"),
                ));
            }
            Err(e) => return Err(Failure(ErrorCode::InvalidRequest, e.body_text())),
        };
        // A request body is an object: serde would also take an array of a struct's fields in order.
        if !value.is_object() {
            return Err(Failure(ErrorCode::InvalidRequest, "the request body must be a JSON object".into()));
        }
        integral_numbers(&mut value);
        serde_json::from_value(value).map(ApiJson).map_err(|e| {
            Failure(ErrorCode::InvalidRequest, format!("Failed to deserialize the JSON body into the target type: {e}"))
        })
    }
}

/// Rewrite every number with a zero fraction that fits a 64-bit integer as that integer.
fn integral_numbers(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) => {
            let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) else { return };
            // Within ±2^63, where every such float is exactly an i64 (and a u64 when not negative).
            if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                *n = serde_json::Number::from(f as u64);
            } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                *n = serde_json::Number::from(f as i64);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// Query parameters whose rejections (unknown parameters, values of the wrong type) are API errors.
pub struct ApiQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(q)) => Ok(ApiQuery(q)),
            Err(e) => Err(Failure(ErrorCode::InvalidRequest, e.body_text())),
        }
    }
}

pub(crate) type Api = State<Arc<Engine>>;

/// Every (method, path) the router answers, as `openapi.json` describes them; the tests hold the router and
/// the description to this list, so a new route goes here and into the description too.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/v1/openapi.json"),
    ("GET", "/v1/info"),
    ("GET", "/v1/sandboxes"),
    ("POST", "/v1/sandboxes"),
    ("GET", "/v1/sandboxes/{id}"),
    ("DELETE", "/v1/sandboxes/{id}"),
    ("GET", "/v1/sandboxes/{id}/execs"),
    ("POST", "/v1/sandboxes/{id}/execs"),
    ("DELETE", "/v1/sandboxes/{id}/execs/{exec}"),
    ("GET", "/v1/sandboxes/{id}/execs/{exec}/log"),
    ("POST", "/v1/sandboxes/{id}/execs/{exec}/stdin"),
    ("GET", "/v1/sandboxes/{id}/journal"),
    ("POST", "/v1/sandboxes/{id}/ttl"),
    ("GET", "/v1/sandboxes/{id}/shell"),
    ("GET", "/v1/sandboxes/{id}/files"),
    ("PUT", "/v1/sandboxes/{id}/files"),
    ("DELETE", "/v1/sandboxes/{id}/files"),
    ("GET", "/v1/sandboxes/{id}/stat"),
    ("POST", "/v1/sandboxes/{id}/mkdir"),
    ("POST", "/v1/sandboxes/{id}/move"),
    ("GET", "/v1/sandboxes/{id}/watch"),
    ("GET", "/v1/sandboxes/{id}/archive"),
    ("PUT", "/v1/sandboxes/{id}/archive"),
    ("GET", "/v1/events"),
    ("POST", "/v1/tokens"),
    ("GET", "/v1/tokens"),
    ("DELETE", "/v1/tokens/{token}"),
    ("POST", "/v1/sandboxes/{id}/stop"),
    ("POST", "/v1/sandboxes/{id}/start"),
    ("POST", "/v1/sandboxes/{id}/rebuild"),
    ("POST", "/v1/sandboxes/{id}/snapshots"),
    ("POST", "/v1/sandboxes/{id}/restore"),
    ("POST", "/v1/sandboxes/{id}/reset"),
    ("POST", "/v1/sandboxes/{id}/fork"),
    ("GET", "/v1/snapshots"),
    ("GET", "/v1/snapshots/{snapshot}"),
    ("DELETE", "/v1/snapshots/{snapshot}"),
    ("GET", "/v1/volumes"),
    ("POST", "/v1/volumes"),
    ("DELETE", "/v1/volumes/{name}"),
    ("GET", "/v1/storage"),
    ("POST", "/v1/storage"),
    ("GET", "/v1/sandboxes/{id}/diff"),
    ("POST", "/v1/sandboxes/{id}/export"),
    ("GET", "/v1/images"),
    ("POST", "/v1/images"),
    ("DELETE", "/v1/images/{name}"),
    ("GET", "/v1/sandboxes/{id}/receipt"),
    ("POST", "/v1/sandboxes/{id}/net"),
    ("GET", "/v1/sandboxes/{id}/net/log"),
    ("GET", "/v1/sandboxes/{id}/net/suggest"),
    ("GET", "/v1/pods"),
    ("POST", "/v1/pods"),
    ("GET", "/v1/pods/{id}"),
    ("DELETE", "/v1/pods/{id}"),
    ("POST", "/v1/pods/{id}/events"),
    ("POST", "/v1/pods/{id}/fork"),
    ("GET", "/v1/pods/{id}/journal"),
    ("GET", "/v1/pods/{id}/receipt"),
    ("GET", "/v1/cluster"),
    ("GET", "/v1/secrets"),
    ("PUT", "/v1/secrets/{name}"),
    ("DELETE", "/v1/secrets/{name}"),
    ("GET", "/v1/tenants"),
    ("POST", "/v1/tenants"),
    ("GET", "/v1/tenants/{name}"),
    ("DELETE", "/v1/tenants/{name}"),
    ("POST", "/v1/sandboxes/{id}/pause"),
    ("POST", "/v1/sandboxes/{id}/resume"),
    ("POST", "/v1/sandboxes/{id}/hibernate"),
    ("POST", "/v1/sandboxes/{id}/wake"),
    ("GET", "/v1/sandboxes/{id}/contexts"),
    ("POST", "/v1/sandboxes/{id}/contexts"),
    ("GET", "/v1/sandboxes/{id}/contexts/{ctx}"),
    ("DELETE", "/v1/sandboxes/{id}/contexts/{ctx}"),
    ("POST", "/v1/sandboxes/{id}/contexts/{ctx}/restart"),
    ("POST", "/v1/sandboxes/{id}/contexts/{ctx}/interrupt"),
    ("POST", "/v1/sandboxes/{id}/contexts/{ctx}/run"),
    ("GET", "/v1/sandboxes/{id}/previews"),
    ("POST", "/v1/sandboxes/{id}/previews"),
    ("DELETE", "/v1/sandboxes/{id}/previews/{preview}"),
    ("GET", "/v1/sandboxes/{id}/usage"),
    ("GET", "/v1/sandboxes/{id}/usage/history"),
    ("POST", "/v1/sandboxes/{id}/budget"),
    ("GET", "/v1/usage"),
    ("GET", "/metrics"),
    ("GET", "/v1/sandboxes/{id}/desktop"),
    ("GET", "/v1/sandboxes/{id}/desktop/screenshot"),
    ("POST", "/v1/sandboxes/{id}/desktop/actions"),
    ("POST", "/v1/sandboxes/{id}/desktop/wait"),
];

/// The API as the unix socket serves it (file-system permissions guard the socket; tokens are minted here),
/// and MCP at `/mcp`.
pub fn app(engine: Arc<Engine>) -> Router {
    let api = routes()
        .route("/v1/tokens", post(mint_token).get(list_tokens))
        .route("/v1/tokens/{token}", delete(revoke_token))
        .layer(axum::middleware::from_fn(log_request))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&engine), crate::preview_http::preview_or_api))
        .layer(axum::middleware::from_fn(crate::listen::limit_head))
        .with_state(engine);
    crate::mcp::mount(api, |mcp| {
        mcp.route_layer(axum::middleware::from_fn(log_request))
            .route_layer(axum::middleware::from_fn(crate::listen::limit_head))
    })
}

/// Log each request once it is answered: method, path (without its query), status and time taken.
async fn log_request(req: Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    berth_engine::memory::answered();
    berth_engine::log::info(
        "request",
        serde_json::json!({
            "method": method, "path": path, "status": response.status().as_u16(),
            "ms": started.elapsed().as_secs_f64() * 1000.0, "actor": berth_engine::actor(),
        }),
    );
    response
}

/// The API as the TCP listener serves it: every request needs a bearer token, and no token can be minted.
/// MCP at `/mcp` too, behind the same token check.
pub fn tcp_app(engine: Arc<Engine>) -> Router {
    let api = routes()
        .route("/v1/tokens", get(unix_only).post(unix_only))
        .route("/v1/tokens/{token}", delete(unix_only))
        .layer(axum::middleware::from_fn(log_request))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&engine), require_token))
        // A preview has a token of its own, not the API's: it is served before the API's check.
        // The web view's page and login are served before it too (its page calls the API like any client).
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&engine), crate::web::web_or_api))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&engine), crate::preview_http::preview_or_api))
        .layer(axum::middleware::from_fn(crate::listen::limit_head))
        .with_state(Arc::clone(&engine));
    crate::mcp::mount(api, |mcp| {
        mcp.route_layer(axum::middleware::from_fn(log_request))
            .route_layer(axum::middleware::from_fn_with_state(engine, require_token))
            .route_layer(axum::middleware::from_fn(crate::listen::limit_head))
    })
}

/// Who made a request that came with a token, for what serves it (see `berth_engine::Caller`).
pub(crate) use berth_engine::Caller;

async fn require_token(State(e): Api, mut req: Request, next: axum::middleware::Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| berth_engine::tokens::digest(t.trim()));
    // Without a bearer token, a web view's login (its cookie and its key) stands for the token it was opened with.
    let token = match token {
        Some(t) => Some(t),
        None => match crate::web::login_of(&e, &mut req) {
            Ok(t) => t,
            Err(refused) => return refused.into_response(),
        },
    };
    let Some(caller) = token.and_then(|t| e.caller_of_digest(&t)) else {
        return Failure(
            ErrorCode::Unauthorized,
            "this listener needs a bearer token: mint one with berth token create and send it as Authorization: Bearer"
                .into(),
        )
        .into_response();
    };
    // What a session token, a tenant's token or another narrowed one may not do is refused here, before
    // any handler runs; lists are narrowed by their handlers (`Engine::sees`).
    let allowed = caller.scope(e.allows_route(&caller, req.method().as_str(), req.uri().path())).await;
    if let Err(refused) = allowed {
        return Failure::from(refused).into_response();
    }
    req.extensions_mut().insert(caller.clone());
    caller.scope(next.run(req)).await
}

/// The token routes where they are not served: every other method on their paths is then a 405, as anywhere.
async fn unix_only() -> Failure {
    Failure(
        ErrorCode::NotFound,
        "no such route: tokens are minted, listed and revoked over the unix socket only".into(),
    )
}

async fn list_tokens(State(e): Api) -> Result<Response, Failure> {
    Ok(Json(e.tokens.list().map_err(|err| Failure::from(EngineError::Log(err)))?).into_response())
}

async fn revoke_token(State(e): Api, UrlPath(token): UrlPath<String>) -> Result<Response, Failure> {
    match e.tokens.revoke(&token).map_err(|err| Failure::from(EngineError::Log(err)))? {
        true => Ok(StatusCode::NO_CONTENT.into_response()),
        false => Err(Failure(ErrorCode::NotFound, format!("there is no token {token:?}"))),
    }
}

async fn mint_token(State(e): Api, ApiJson(req): ApiJson<berth_api::MintToken>) -> Result<Response, Failure> {
    let minted = e.mint_token(&req.name, &req.grant())?;
    Ok((StatusCode::CREATED, Json(minted)).into_response())
}

fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/healthz", get(|| async { Json(serde_json::json!({"status": "ok"})) }))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/info", get(info))
        .route("/v1/sandboxes", get(list).post(create))
        .route("/v1/sandboxes/{id}", get(inspect).delete(remove))
        .route("/v1/sandboxes/{id}/journal", get(journal))
        .route("/v1/sandboxes/{id}/ttl", post(set_ttl))
        .route("/v1/events", get(events))
        .merge(crate::exec_http::routes())
        .merge(crate::files_http::routes())
        .merge(crate::shell::routes())
        .merge(crate::projects_http::routes())
        .merge(crate::pods_http::routes())
        .merge(crate::contexts_http::routes())
        .merge(crate::desktop_http::routes())
        .merge(crate::preview_http::routes())
        .merge(crate::usage_http::routes())
        .merge(crate::tenants_http::routes())
        .fallback(|| async { Failure(ErrorCode::NotFound, "no such route".into()) })
        .layer(DefaultBodyLimit::max(crate::listen::bounds().max_body_bytes))
}

/// The daemon's version and the bounds it keeps.
async fn info(State(e): Api) -> Json<berth_api::DaemonInfo> {
    Json(e.info(crate::listen::table(&crate::listen::bounds())))
}

/// The OpenAPI 3.1 description of this API.
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], berth_api::OPENAPI).into_response()
}

/// The `Idempotency-Key` of a mutating request, scoped to its route.
pub(crate) fn idempotency_key(headers: &HeaderMap, route: &str) -> Result<Option<String>, Failure> {
    let Some(v) = headers.get("idempotency-key") else { return Ok(None) };
    match v.to_str() {
        // Scoped by caller too: one client's key never answers another's request.
        Ok(k) if !k.is_empty() && k.len() <= 200 => Ok(Some(scoped_key(route, k))),
        _ => Err(Failure(
            ErrorCode::InvalidRequest,
            "the Idempotency-Key header must be 1-200 visible characters".into(),
        )),
    }
}

/// An idempotency key as the engine keeps it: scoped to the caller (the actor) and the route.
pub(crate) fn scoped_key(route: &str, key: &str) -> String {
    format!("{} {route} {key}", berth_engine::actor())
}

/// Run an engine operation on a task of its own, started when this future is first polled: a client that
/// hangs up drops the request, never an operation half-way through (a stop, a restore, a removal). The caller's
/// identity goes with it.
pub(crate) fn detached<T, F, Fut>(e: &Arc<Engine>, op: F) -> impl std::future::Future<Output = Result<T, EngineError>>
where
    T: Send + 'static,
    F: FnOnce(Arc<Engine>) -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>> + Send + 'static,
{
    let e = Arc::clone(e);
    async move {
        let task = tokio::spawn(berth_engine::carried(op(e)));
        task.await.map_err(|_| EngineError::Storage("the operation failed unexpectedly".into()))?
    }
}

/// Run a mutating call once per idempotency key and answer with its (first) result.
pub(crate) async fn once<T: serde::Serialize>(
    e: &Engine,
    key: Option<String>,
    status: StatusCode,
    op: impl std::future::Future<Output = Result<T, EngineError>>,
) -> Result<Response, Failure> {
    let (code, body) = e
        .idempotent(key, async {
            let v = op.await?;
            Ok((status.as_u16(), serde_json::to_value(v).map_err(|err| EngineError::Log(std::io::Error::other(err)))?))
        })
        .await?;
    Ok((StatusCode::from_u16(code).unwrap_or(status), Json(body)).into_response())
}

async fn create(State(e): Api, headers: HeaderMap, ApiJson(req): ApiJson<CreateSandbox>) -> Result<Response, Failure> {
    let key = idempotency_key(&headers, "create")?;
    once(&e, key, StatusCode::CREATED, detached(&e, move |e| async move { e.create(req).await })).await
}

async fn list(State(e): Api) -> Response {
    let mut all = e.list().await;
    // A session token sees its own sandbox and its children; a tenant's token its tenant's.
    all.retain(|r| e.sees(r));
    Json(all).into_response()
}

async fn inspect(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.inspect(&id).await?).into_response())
}

async fn remove(State(e): Api, headers: HeaderMap, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    let key = idempotency_key(&headers, &format!("remove {id}"))?;
    once(&e, key, StatusCode::OK, detached(&e, move |e| async move { e.remove(&id).await })).await
}

/// A stream of frames as NDJSON, one JSON object a line (an exec's, a code run's).
pub(crate) fn ndjson<T: serde::Serialize + Send + 'static>(frames: tokio::sync::mpsc::Receiver<T>) -> Response {
    let lines = ReceiverStream::new(frames).map(|frame| {
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, Infallible>(Bytes::from(line))
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

#[derive(serde::Deserialize)]
struct EventsQuery {
    #[serde(default)]
    follow: bool,
}

/// Recent lifecycle events as JSON; with `follow`, those and every later one as server-sent events.
async fn events(State(e): Api, ApiQuery(q): ApiQuery<EventsQuery>) -> Response {
    let (mut recent, live) = e.events();
    // The stream outlives this request: it keeps the caller to judge each later event by.
    let caller = berth_engine::current_caller();
    let mut seen = Vec::new();
    for ev in recent {
        if e.sees_id(&ev.sandbox).await {
            seen.push(ev);
        }
    }
    recent = seen;
    if !q.follow {
        return Json(recent).into_response();
    }
    let to_sse = |ev: &berth_api::LifecycleEvent| {
        axum::response::sse::Event::default().event("lifecycle").json_data(ev).unwrap_or_default()
    };
    let past: Vec<Result<axum::response::sse::Event, Infallible>> = recent.iter().map(|ev| Ok(to_sse(ev))).collect();
    // A follower that falls more than the channel's capacity behind skips what it missed.
    // The receiver was subscribed before the recent list was taken: skip what the list already holds.
    let seen = recent.last().map(|ev| ev.seq).unwrap_or(0);
    let future = tokio_stream::wrappers::BroadcastStream::new(live)
        .filter_map(move |ev| ev.ok().filter(|ev| ev.seq > seen))
        .then(move |ev| {
            let (e, caller) = (Arc::clone(&e), caller.clone());
            async move { e.sees_id_as(caller.as_ref(), &ev.sandbox).await.then_some(ev) }
        })
        .filter_map(move |ev| ev.map(|ev| Ok::<_, Infallible>(to_sse(&ev))));
    let stream = tokio_stream::iter(past).chain(future);
    axum::response::sse::Sse::new(stream).keep_alive(axum::response::sse::KeepAlive::default()).into_response()
}

#[derive(serde::Deserialize)]
struct JournalQuery {
    #[serde(default)]
    verify: bool,
}

async fn journal(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiQuery(q): ApiQuery<JournalQuery>,
) -> Result<Response, Failure> {
    if q.verify {
        return Ok(Json(e.journal_verify(&id).await?).into_response());
    }
    // Streamed a line at a time: however long the journal, the daemon holds one chunk of it.
    let path = e.journal_file(&id).await?;
    let file = tokio::fs::File::open(&path).await.map_err(|err| Failure::from(EngineError::Log(err)))?.into_std().await;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        let send = |chunk: Vec<u8>| tx.blocking_send(Ok(Bytes::from(chunk))).is_ok();
        berth_engine::journal::write_array(file, 64 * 1024, send)
    });
    let body = Body::from_stream(ReceiverStream::new(rx));
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn set_ttl(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    ApiJson(req): ApiJson<berth_api::SetTtl>,
) -> Result<Response, Failure> {
    Ok(Json(e.set_ttl(&id, req.ttl_seconds).await?).into_response())
}

/// Serve the API on a unix socket until the process is stopped; reap expired sandboxes meanwhile. Every
/// listener keeps `listeners`.
pub async fn serve(
    root: &Path,
    socket: &Path,
    tcp: crate::Tcp,
    bounds: crate::Bounds,
    storage: crate::StorageOptions,
    listeners: crate::listen::Bounds,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), EngineError> {
    let io = |action: &str, e: std::io::Error| berth_sys::SysError::new(format!("{action} {}", socket.display()), e);
    if !crate::listen::set_bounds(listeners) {
        return Err(EngineError::invalid("the listeners' bounds were already set"));
    }
    let engine = Engine::open_with(root, bounds, storage).await?;
    engine.serve_sandbox_apis_with(Box::new(crate::listen::SandboxApis));
    if let Some(dir) = socket.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(|e| io("create the directory of", e))?;
    }
    let _ = tokio::fs::remove_file(socket).await;
    let listener = tokio::net::UnixListener::bind(socket).map_err(|e| io("listen on", e))?;
    std::fs::set_permissions(socket, std::os::unix::fs::PermissionsExt::from_mode(0o660))
        .map_err(|e| io("set the mode of", e))?;
    berth_engine::memory::spawn_trimmer();
    engine.spawn_meter();
    engine.spawn_warm();
    engine.spawn_reaper();
    let listen = tcp.listen;
    if let Some(domain) = tcp.domain.clone() {
        engine.set_preview_domain(domain);
    }
    if let Some(addr) = listen {
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| berth_sys::SysError::new(format!("listen on {addr}"), e))?;
        engine.set_listen_addr(tcp.local_addr().unwrap_or(addr));
        tokio::spawn(crate::listen::serve(tcp, tcp_app(Arc::clone(&engine)), "tcp", None));
    }
    if let Some(addr) = tcp.e2b_listen {
        let e2b = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| berth_sys::SysError::new(format!("listen on {addr}"), e))?;
        let app = crate::e2b::app(Arc::clone(&engine), tcp.domain.clone());
        // Under a domain, E2B's SDKs speak TLS (E2B_DOMAIN): with a certificate of berth's own authority.
        let tls = match &tcp.domain {
            Some(d) => Some(
                crate::e2b::tls::config(root, d)
                    .map_err(|e| EngineError::invalid(format!("the E2B listener's TLS: {e}")))?,
            ),
            None => None,
        };
        if tls.is_some() {
            berth_engine::log::info(
                "e2b tls",
                serde_json::json!({"ca": crate::e2b::tls::ca_path(root), "trust": "give clients this certificate \
                    (SSL_CERT_FILE, or the system's store) to reach https://api.<domain> and https://<port>-<id>.<domain>"}),
            );
        }
        tokio::spawn(crate::e2b::tls::serve(e2b, app, tls));
    }
    berth_engine::log::info(
        "listening",
        serde_json::json!({
            "socket": socket, "tcp": listen.map(|a| a.to_string()), "e2b": tcp.e2b_listen.map(|a| a.to_string()), "version": env!("CARGO_PKG_VERSION"),
            "max_connections": listeners.max_connections, "max_head_bytes": listeners.max_head_bytes,
            "head_timeout_seconds": listeners.head_timeout.as_secs_f64(), "max_body_bytes": listeners.max_body_bytes,
        }),
    );
    berth_engine::bounds::log_table(&bounds);
    // On a worker of the runtime rather than the thread that waits for the daemon: each connection's task then
    // starts on the thread that accepted it, with no other thread to wake first.
    let server = tokio::spawn(crate::listen::serve(listener, app(Arc::clone(&engine)), "unix", None));
    tokio::select! {
        _ = server => {}
        _ = shutdown => {}
    }
    // Sandboxes outlive the daemon; the warm pool does not. A teardown under way is finished first.
    engine.settle(std::time::Duration::from_secs(30)).await;
    engine.close_warm().await;
    Ok(())
}
