//! An E2B-compatible listener (`berth daemon --e2b-listen ADDR:PORT`): the control plane, envd (port 49983)
//! and the code interpreter (port 49999) as the unmodified E2B SDKs speak them, on one port, translated to
//! berth's own API.
//!
//! Every request is carried out as typed calls of the engine, as the caller its berth token makes
//! (`berth_engine::Caller`): each is allowed by `Engine::allows` with the rules the API applies to the same
//! token, journaled as the caller's, and held to the API's bounds, as it would be from any client. The control plane takes the token as `X-API-Key` (the SDK's `E2B_API_KEY`). Sandbox
//! traffic carries no API key: create and connect answer with an access token for the sandbox
//! (`envdAccessToken`, also `trafficAccessToken`), which stands for the key that made it, held in memory by
//! its digest (a restarted daemon gives a new one at the next `connect`).
//!
//! Which sandbox and port a request is for comes from the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers
//! (the SDK's `E2B_SANDBOX_URL`), or from a host `<port>-<id>.<domain>` with `--domain`.

// Its helpers return the HTTP answer a request gets when they cannot go on: an early answer, not an error
// carried up through layers, so its size does not matter.
#![allow(clippy::result_large_err)]

mod connect;
mod control;
mod envd;
mod files;
mod interpreter;
mod lifecycle;
mod pty;
pub(crate) mod tls;
mod users;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::{Engine, EngineError};
use berth_engine::tokens::{digest, random_hex};
use berth_engine::{Access as Allowed, Caller};

/// envd's port, the code interpreter's, and the envd version berth answers as (what it implements).
pub(crate) const ENVD_PORT: u16 = 49983;
pub(crate) const INTERPRETER_PORT: u16 = 49999;
pub(crate) const ENVD_VERSION: &str = "0.5.7";
/// The home and working directory E2B's SDKs and users expect.
pub(crate) const HOME: &str = "/home/user";

pub(crate) struct E2b {
    engine: Arc<Engine>,
    domain: Option<String>,
    /// Access tokens (by digest) → the sandbox and the berth token they stand for.
    access: Mutex<HashMap<String, Access>>,
    /// Processes started through envd, by sandbox and pid: their exec and how they were asked for.
    procs: Arc<Mutex<HashMap<(String, i32), envd::Proc>>>,
    /// Each sandbox's default code context of each language.
    defaults: Mutex<HashMap<(String, String), String>>,
    /// Directory watchers (envd's `CreateWatcher`).
    watchers: watch::Watchers,
    /// The sandboxes whose `/etc/passwd` was seen to have E2B's `user` (see `users`): only a yes is kept.
    has_user: Mutex<HashMap<String, bool>>,
    /// Seals access tokens, so that they still open after a restart (`None`: the secrets' key cannot be
    /// had, and access tokens last as long as the daemon).
    vault: Option<berth_secrets::Vault>,
}

#[derive(Clone)]
struct Access {
    sandbox: String,
    key: String,
    made: std::time::Instant,
}

/// What access tokens are sealed as (see `berth_secrets::Vault::seal_token`).
const ACCESS_LABEL: &str = "e2b-access";

/// The listener's router.
pub fn app(engine: Arc<Engine>, domain: Option<String>) -> Router {
    let state = Arc::new(E2b {
        domain,
        access: Mutex::new(HashMap::new()),
        procs: Arc::new(Mutex::new(HashMap::new())),
        defaults: Mutex::new(HashMap::new()),
        watchers: watch::Watchers::default(),
        has_user: Mutex::new(HashMap::new()),
        vault: match engine.vault() {
            Ok(v) => Some(v),
            Err(e) => {
                berth_engine::log::warn(
                    "e2b access tokens",
                    json!({"error": e.to_string(), "then": "they last only as long as the daemon runs"}),
                );
                None
            }
        },
        engine,
    });
    Router::new().fallback(dispatch).with_state(state)
}

async fn dispatch(State(s): State<Arc<E2b>>, req: Request) -> Response {
    match target(&req, s.domain.as_deref()) {
        // Each on the heap: their futures hold the engine's.
        Some((id, ENVD_PORT)) => Box::pin(envd::serve(&s, &id, req)).await,
        Some((id, INTERPRETER_PORT)) => Box::pin(interpreter::serve(&s, &id, req)).await,
        Some((id, port)) => user_port(&s, &id, port, req).await,
        None => Box::pin(control::serve(&s, req)).await,
    }
}

/// A port the sandbox serves (`sandbox.get_host(port)`): public, as E2B's are, unless the sandbox was made
/// with `network.allow_public_traffic: false`, which asks for its traffic token (`e2b-traffic-access-token`).
async fn user_port(s: &E2b, id: &str, port: u16, req: Request) -> Response {
    let Ok(sb) = s.engine.get(id).await else {
        let body = json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502});
        return (StatusCode::BAD_GATEWAY, axum::Json(body)).into_response();
    };
    if sb.labels.get(PRIVATE_TRAFFIC).is_some_and(|v| v == "true") && s.key_for(&sb.id, req.headers()).is_none() {
        return error(
            403,
            format!("port {port} of sandbox {} takes its traffic access token (e2b-traffic-access-token)", sb.id),
        );
    }
    let by_host = !req.headers().contains_key("e2b-sandbox-id");
    let tail = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    match crate::preview_http::proxy(&s.engine, req, &sb.id, port, &tail, by_host, query, "e2b").await {
        Ok(r) => r,
        Err(_) => envd::not_open(&sb.id, port),
    }
}

/// The label that marks a sandbox made with `allow_public_traffic: false`.
pub(crate) const PRIVATE_TRAFFIC: &str = "e2b.private_traffic";

/// The sandbox and port a request is for, if it is sandbox traffic.
fn target(req: &Request, domain: Option<&str>) -> Option<(String, u16)> {
    let h = req.headers();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let (Some(id), Some(port)) = (text("e2b-sandbox-id"), text("e2b-sandbox-port")) {
        return Some((id.to_string(), port.parse().ok()?));
    }
    // The same host form as previews': `<port>-<id>.<domain>`.
    crate::preview_http::host_target(req, domain?).map(|(port, id)| (id, port))
}

/// What an unknown (or revoked) key gets.
pub(crate) const NO_TOKEN: &str =
    "this listener needs a bearer token: mint one with berth token create and send it as Authorization: Bearer";

/// An engine call that failed, as the listener answers it: the status of its error's code, and its sentence.
#[derive(Debug)]
pub(crate) struct Failed {
    pub status: u16,
    pub message: String,
}

impl From<EngineError> for Failed {
    fn from(e: EngineError) -> Failed {
        Failed { status: e.code().status(), message: berth_runtime::error_chain(&e) }
    }
}

impl From<crate::http::Failure> for Failed {
    fn from(f: crate::http::Failure) -> Failed {
        Failed { status: f.0.status(), message: f.1 }
    }
}

impl Failed {
    /// The status as envd would answer a file call: berth's 409 for what the user may not do is a 403.
    pub fn file_status(&self) -> u16 {
        if self.status == 409 && self.message.contains("Permission denied") { 403 } else { self.status }
    }

    /// As a control-plane error.
    pub fn answer(&self) -> Response {
        error(self.status, self.message.clone())
    }
}

impl E2b {
    /// Run engine call `op` as `caller`, once it is allowed `access` (journaled as the caller's, refused as it
    /// would be from any client).
    pub(crate) async fn run<T>(
        &self,
        caller: &Caller,
        access: Allowed<'_>,
        op: impl std::future::Future<Output = Result<T, EngineError>>,
    ) -> Result<T, Failed> {
        // On the heap: the engine's futures are large, and a request's task nests several.
        Box::pin(self.engine.as_caller(caller, access, Box::pin(op))).await.map_err(Failed::from)
    }

    /// The same, with `op` on a task of its own: a client that hangs up never stops it half-way.
    pub(crate) async fn run_detached<T, F, Fut>(&self, caller: &Caller, access: Allowed<'_>, op: F) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Engine>) -> Fut,
        Fut: std::future::Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        self.run(caller, access, crate::http::detached(&self.engine, op)).await
    }

    /// The caller a sandbox request's access token stands for, if it is one for this sandbox and its berth
    /// token is still valid.
    pub(crate) fn caller_for(&self, sandbox: &str, headers: &HeaderMap) -> Option<Caller> {
        self.key_for(sandbox, headers).and_then(|key| self.engine.caller(&key))
    }

    /// A new access token for sandbox `sandbox`, standing for berth token `key`: the two sealed with the
    /// daemon's secrets key (it opens after a restart too, and says nothing to its holder), or where that key
    /// cannot be had, a random one the daemon remembers while it runs.
    pub(crate) fn access_token(&self, sandbox: &str, key: &str) -> String {
        let sealed =
            self.vault.as_ref().and_then(|v| v.seal_token(ACCESS_LABEL, format!("{sandbox}\n{key}").as_bytes()).ok());
        let token = match sealed {
            Some(bytes) => format!("e2b_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)),
            None => format!("e2b_{}", random_hex(24).unwrap_or_default()),
        };
        self.remember(&token, sandbox, key);
        token
    }

    /// Keep an access token's meaning at hand: a few per sandbox (each connect makes one), the oldest dropped
    /// first (a sealed one opens again when it comes back).
    fn remember(&self, token: &str, sandbox: &str, key: &str) {
        let mut all = self.access.lock().unwrap_or_else(|p| p.into_inner());
        let mine: Vec<String> = all.iter().filter(|(_, a)| a.sandbox == sandbox).map(|(d, _)| d.clone()).collect();
        if mine.len() >= 8 {
            let oldest = mine.iter().min_by_key(|d| all[*d].made).cloned();
            if let Some(d) = oldest {
                all.remove(&d);
            }
        }
        let made = std::time::Instant::now();
        all.insert(digest(token), Access { sandbox: sandbox.to_string(), key: key.to_string(), made });
    }

    /// The berth token a sandbox request's access token stands for, if it is one for this sandbox.
    pub(crate) fn key_for(&self, sandbox: &str, headers: &HeaderMap) -> Option<String> {
        ["x-access-token", "e2b-traffic-access-token"].iter().find_map(|name| {
            let token = headers.get(*name)?.to_str().ok()?;
            let known = self.access.lock().unwrap_or_else(|p| p.into_inner()).get(&digest(token)).cloned();
            if let Some(a) = known {
                return (a.sandbox == sandbox).then_some(a.key);
            }
            let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.strip_prefix("e2b_")?).ok()?;
            let opened = self.vault.as_ref()?.open_token(ACCESS_LABEL, &sealed)?;
            let (for_sandbox, key) = std::str::from_utf8(&opened).ok()?.split_once('\n')?;
            if for_sandbox != sandbox {
                return None;
            }
            self.remember(token, sandbox, key);
            Some(key.to_string())
        })
    }

    /// Forget a removed sandbox's access tokens and processes.
    pub(crate) fn forget(&self, sandbox: &str) {
        self.access.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, a| a.sandbox != sandbox);
        self.procs.lock().unwrap_or_else(|p| p.into_inner()).retain(|(s, _), _| s != sandbox);
        self.defaults.lock().unwrap_or_else(|p| p.into_inner()).retain(|(s, _), _| s != sandbox);
        self.watchers.forget(sandbox);
        self.has_user.lock().unwrap_or_else(|p| p.into_inner()).remove(sandbox);
    }
}

/// A list of strings in a body (`what` names it in the error), or none.
pub(crate) fn string_list(v: &Value, what: &str) -> Result<Vec<String>, Response> {
    let bad = || error(400, format!("{what} is a list of strings"));
    match v {
        Value::Null => Ok(vec![]),
        Value::Array(a) => a.iter().map(|r| r.as_str().map(str::to_string).ok_or_else(bad)).collect(),
        _ => Err(bad()),
    }
}

/// One page of a list (`limit` items from `nextToken`, an index), with `x-next-token` when more follow.
pub(crate) fn page(items: Vec<Value>, query: Option<&str>) -> Response {
    let start: usize = query_param(query, "nextToken").and_then(|t| t.parse().ok()).unwrap_or(0);
    let limit = match query_param(query, "limit") {
        Some(l) => match l.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return error(400, format!("limit is a positive whole number, not {l:?}")),
        },
        None => usize::MAX,
    };
    let next = start.saturating_add(limit);
    let more = next < items.len();
    let mut r = axum::Json(items.into_iter().skip(start).take(limit).collect::<Vec<_>>()).into_response();
    if more && let Ok(v) = HeaderValue::from_str(&next.to_string()) {
        r.headers_mut().insert("x-next-token", v);
    }
    r
}

/// A control-plane error as the SDK parses it: `{"code": <status>, "message": "…"}`.
pub(crate) fn error(status: u16, message: impl Into<String>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (code, axum::Json(json!({"code": status, "message": message.into()}))).into_response();
    // A failure the SDK must not replay on its own (a create that failed may have done part of its work).
    if status >= 500 {
        r.headers_mut().insert("should-retry", HeaderValue::from_static("false"));
    }
    r
}

pub(crate) use berth_api::rfc3339;

/// A path as E2B users give it: relative ones are in the home directory.
pub(crate) fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() {
        HOME.to_string()
    } else {
        format!("{HOME}/{path}")
    }
}

/// A query string's value, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

/// Percent-decoding (`+` as a space, as forms have it); a `%` not followed by two hex digits is kept.
pub(crate) fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex(i + 1), hex(i + 2)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_324_512_626), "2026-12-03T19:01:52.626Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn queries_are_decoded() {
        assert_eq!(query_param(Some("a=1&path=%2Fhome%2Fuser%2Fa%20b"), "path").as_deref(), Some("/home/user/a b"));
        assert_eq!(query_param(Some("x=%zz&y=%4"), "x").as_deref(), Some("%zz"));
        assert_eq!(query_param(Some("x=%zz&y=%4"), "y").as_deref(), Some("%4"));
        assert_eq!(absolute("a.txt"), "/home/user/a.txt");
    }
}
