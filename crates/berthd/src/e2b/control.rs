//! E2B's control plane (`/v2/sandboxes`, `/sandboxes/{id}/…`), on berth's sandboxes: create maps a template
//! to an image, `timeout` to the TTL, `metadata` to labels and `envVars` to the environment; list, info,
//! kill (berth's teardown, with its receipt), set_timeout (the TTL, from now), pause, connect (resuming or
//! waking, and only ever extending the TTL) and metrics.

use std::collections::BTreeMap;

use crate::EngineError;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_api::{CreateSandbox, Network, Sandbox, SandboxState, TtlAction};
use berth_engine::{Access, Caller, Op};
use serde_json::{Value, json};

use super::{E2b, ENVD_VERSION, HOME, decode, error, rfc3339};

/// The label a sandbox's E2B template is kept in (labels starting `e2b.` are not shown as metadata).
const TEMPLATE_LABEL: &str = "e2b.template";
/// E2B's default timeout, in seconds.
const DEFAULT_TIMEOUT: f64 = 300.0;
/// The templates every berth has: the host image, with a home for `user`.
const BUILT_IN: &[&str] = &["base", "code-interpreter-v1", "code-interpreter"];

/// Who calls the control plane: the berth token its API key is (access tokens stand for it), and the caller
/// it makes.
pub(super) struct Client {
    pub key: String,
    pub caller: Caller,
}

pub(super) async fn serve(s: &E2b, req: Request) -> Response {
    let Some(key) = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim).map(str::to_string)
    else {
        return error(401, "an E2B API key is needed: set E2B_API_KEY to a token from berth token create");
    };
    let Some(caller) = s.engine.caller(&key) else { return error(401, super::NO_TOKEN) };
    let key = &Client { key, caller };
    // The API's bound on a JSON body.
    let max_body = crate::listen::bounds().max_body_bytes;
    let (method, path) = (req.method().clone(), req.uri().path().trim_end_matches('/').to_string());
    let query = req.uri().query().map(str::to_string);
    let idempotency = req.headers().get("idempotency-key").cloned();
    let body = match axum::body::to_bytes(req.into_body(), max_body).await {
        Ok(b) if b.is_empty() => Value::Null,
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(v) => v,
            Err(e) => return error(400, format!("the request body is not JSON: {e}")),
        },
        Err(_) => return error(413, format!("a request body is at most {max_body} bytes")),
    };
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (Method::POST, ["v2", "sandboxes"] | ["sandboxes"]) => create(s, key, &body, idempotency).await,
        (Method::GET, ["v2", "sandboxes"] | ["sandboxes"]) => list(s, key, query.as_deref()).await,
        (Method::GET, ["sandboxes", id]) => info(s, key, id).await,
        (Method::DELETE, ["sandboxes", id]) => kill(s, key, id).await,
        (Method::POST, ["sandboxes", id, "timeout"]) => timeout(s, key, id, &body).await,
        (Method::POST, ["sandboxes", id, "pause"]) => pause(s, key, id).await,
        (Method::POST, ["v2", "sandboxes", id, "connect"] | ["sandboxes", id, "connect" | "resume"]) => {
            connect(s, key, id, &body).await
        }
        (Method::GET, ["sandboxes", id, "metrics"]) => metrics(s, key, id, query.as_deref()).await,
        (Method::POST, ["sandboxes", id, "snapshots"]) => super::lifecycle::create_snapshot(s, key, id, &body).await,
        (Method::GET, ["snapshots"]) => super::lifecycle::list_snapshots(s, key, query.as_deref()).await,
        (Method::DELETE, ["templates", id]) => super::lifecycle::delete_template(s, key, &decode(id)).await,
        (Method::POST, ["sandboxes", id, "fork"]) => super::lifecycle::fork(s, key, id, &body).await,
        (Method::PUT, ["sandboxes", id, "network"]) => super::lifecycle::update_network(s, key, id, &body).await,
        (m, _) => {
            error(404, format!("berth's E2B API has no {m} {path}: see docs/e2b.md for what is served and what is not"))
        }
    }
}

fn template_of(s: &Sandbox) -> String {
    s.labels.get(TEMPLATE_LABEL).cloned().unwrap_or_else(|| s.image.clone())
}

fn metadata_of(s: &Sandbox) -> BTreeMap<String, String> {
    s.labels.iter().filter(|(k, _)| !k.starts_with("e2b.")).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A `Sandbox` answer (create, connect, fork).
pub(super) fn sandbox_json(s: &E2b, sb: &Sandbox, access: &str) -> Value {
    json!({
        "templateID": template_of(sb), "sandboxID": sb.id, "clientID": "berth", "alias": template_of(sb),
        "envdVersion": ENVD_VERSION, "envdAccessToken": access, "trafficAccessToken": access,
        "domain": s.domain,
    })
}

/// A `ListedSandbox` (list), and with `detail` a `SandboxDetail` (info).
fn listed_json(sb: &Sandbox, detail: bool) -> Value {
    let paused = matches!(sb.state, SandboxState::Paused | SandboxState::Hibernated);
    // No TTL: E2B has no such thing; its end is then far off.
    let end = sb.expires_at_ms.unwrap_or(sb.created_at_ms + 100 * 365 * 86_400_000);
    let cpus = sb
        .cpus
        .map(f64::ceil)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0));
    let mut v = json!({
        "templateID": template_of(sb), "alias": template_of(sb), "sandboxID": sb.id, "clientID": "berth",
        "startedAt": rfc3339(sb.created_at_ms), "endAt": rfc3339(end), "cpuCount": cpus as u64,
        "memoryMB": sb.memory_bytes.unwrap_or(0) >> 20, "diskSizeMB": sb.disk_bytes.unwrap_or(0) >> 20,
        "state": if paused { "paused" } else { "running" }, "envdVersion": ENVD_VERSION,
        "metadata": metadata_of(sb),
    });
    if detail {
        v["allowInternetAccess"] = json!(sb.network.mode.as_deref() == Some("allow_all"));
        let pauses = sb.ttl_action != berth_api::TtlAction::Remove;
        v["lifecycle"] = json!({"onTimeout": if pauses { "pause" } else { "kill" }, "autoResume": pauses});
    }
    v
}

async fn create(s: &E2b, key: &Client, body: &Value, idempotency: Option<HeaderValue>) -> Response {
    let template = body["templateID"].as_str().unwrap_or("base");
    // A template is one of berth's own, a snapshot (create_snapshot's), or an image of berth's.
    let snapshot = match BUILT_IN.contains(&template) {
        true => None,
        false => super::lifecycle::snapshot_named(s, key, template).await,
    };
    let image = match &snapshot {
        Some(snap) => snap.image.as_str(),
        None if BUILT_IN.contains(&template) => "host",
        None => template,
    };
    for refused in ["mcp", "iam", "volumeMounts"] {
        if !body[refused].is_null() {
            return error(400, format!("berth's E2B API does not take {refused:?} on create (see docs/e2b.md)"));
        }
    }
    // autoPause: the end of the timeout hibernates the sandbox (to disk; paused where it cannot be) instead
    // of removing it. Any call wakes it (autoResume), whatever autoResume says.
    let ttl_action = if body["autoPause"].as_bool() == Some(true) { TtlAction::Hibernate } else { TtlAction::Remove };
    let strings = |v: &Value, what: &str| -> Result<BTreeMap<String, String>, Response> {
        match v {
            Value::Null => Ok(BTreeMap::new()),
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| match v.as_str() {
                    Some(s) => Ok((k.clone(), s.to_string())),
                    None => Err(error(400, format!("{what} values are strings; {k} is not"))),
                })
                .collect(),
            _ => Err(error(400, format!("{what} is an object of strings"))),
        }
    };
    let mut labels = match strings(&body["metadata"], "metadata") {
        Ok(m) => m,
        Err(r) => return r,
    };
    labels.insert(TEMPLATE_LABEL.into(), template.into());
    if body["network"]["allowPublicTraffic"].as_bool() == Some(false) {
        labels.insert(super::PRIVATE_TRAFFIC.into(), "true".into());
    }
    // The environment of every command, over the user's `HOME`, `USER` and `LOGNAME`, as envd's.
    let env = match strings(&body["envVars"], "envVars") {
        Ok(m) => m,
        Err(r) => return r,
    };
    let timeout = match &body["timeout"] {
        Value::Null => DEFAULT_TIMEOUT,
        v => match v.as_f64().filter(|t| *t > 0.0) {
            Some(t) => t,
            None => return error(400, format!("timeout is a positive number of seconds, not {v}")),
        },
    };
    let network = match network(body) {
        Ok(n) => n.unwrap_or_default(),
        Err(r) => return r,
    };
    let req = CreateSandbox {
        image: Some(image.to_string()),
        ttl_seconds: Some(timeout),
        ttl_action,
        env,
        labels,
        from_snapshot: snapshot.map(|snap| snap.id),
        network,
        ..CreateSandbox::default()
    };
    // The SDK's keys are 1-255 characters; berth's 1-200: a longer one is used as its digest.
    let once = idempotency.and_then(|k| k.to_str().ok().map(str::to_string)).map(|k| match k.len() <= 200 {
        true => k,
        false => berth_engine::tokens::digest(&k),
    });
    let engine = std::sync::Arc::clone(&s.engine);
    let made = s
        .run(&key.caller, Access::Create, async move {
            let key = once.map(|k| crate::http::scoped_key("create", &k));
            let make = crate::http::detached(&engine, move |e| async move { e.create(req).await });
            let (_, made) = engine
                .idempotent(key, async {
                    let sb = make.await?;
                    Ok((201, serde_json::to_value(sb).map_err(|err| EngineError::Log(std::io::Error::other(err)))?))
                })
                .await?;
            serde_json::from_value::<Sandbox>(made).map_err(|err| EngineError::Log(std::io::Error::other(err)))
        })
        .await;
    let sb = match made {
        Ok(sb) => sb,
        Err(f) if f.status == 404 && !BUILT_IN.contains(&template) => {
            return error(
                404,
                format!(
                    "there is no template {template:?}: berth's are base and code-interpreter-v1, or an image from berth image ls"
                ),
            );
        }
        Err(f) => return f.answer(),
    };
    // The home E2B's users and SDKs expect (relative paths, the default working directory).
    let id = sb.id.as_str();
    if let Err(f) = s.run(&key.caller, Access::On(id, Op::Mkdir), s.engine.make_dir(id, None, HOME, true, None)).await {
        return f.answer();
    }
    let access = s.access_token(&sb.id, &key.key);
    (StatusCode::CREATED, axum::Json(sandbox_json(s, &sb, &access))).into_response()
}

/// berth's egress policy for E2B's network options: `allow_internet_access` (all or nothing) and
/// `network.allowOut` / `denyOut` (destinations). Without either, berth's default: no egress.
fn network(body: &Value) -> Result<Option<Network>, Response> {
    let n = &body["network"];
    if let Some(other) = n.as_object().and_then(|o| {
        o.iter().find(|(k, v)| !v.is_null() && !matches!(k.as_str(), "allowOut" | "denyOut" | "allowPublicTraffic"))
    }) {
        return Err(error(
            400,
            format!("berth's egress policy takes network.allowOut and denyOut (host rules), not network.{}", other.0),
        ));
    }
    let (allow, deny) = (
        super::string_list(&n["allowOut"], "network.allowOut")?,
        super::string_list(&n["denyOut"], "network.denyOut")?,
    );
    let mode = match body["allow_internet_access"].as_bool() {
        Some(true) => Some("allow_all"),
        Some(false) => Some("none"),
        None if !allow.is_empty() => Some("enforce"),
        None => None,
    };
    if mode.is_none() && deny.is_empty() {
        return Ok(None);
    }
    Ok(Some(Network { mode: Some(mode.unwrap_or("none").to_string()), allow, deny, ..Network::default() }))
}

/// A list query's filters: `metadata` (a query string in the parameter, its keys and values quoted once
/// more), `state`, `template`, `startedAfter`, `order`, `limit` and `nextToken`.
async fn list(s: &E2b, key: &Client, query: Option<&str>) -> Response {
    // A session token sees its own sandbox and its children; a tenant's key its tenant's.
    let listed = async {
        let mut all = s.engine.list().await;
        all.retain(|r| s.engine.sees(r));
        Ok(all)
    };
    let mut sandboxes = match s.run(&key.caller, Access::List, listed).await {
        Ok(all) => all,
        Err(f) => return f.answer(),
    };
    let param = |name: &str| super::query_param(query, name);
    let metadata: Vec<(String, String)> = param("metadata")
        .map(|m| {
            m.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (decode(&decode(k)), decode(&decode(v)))
                })
                .collect()
        })
        .unwrap_or_default();
    let states: Option<Vec<String>> = param("state").map(|s| s.split(',').map(str::to_string).collect());
    let after = match param("startedAfter") {
        Some(t) => match parse_time(&t) {
            Some(ms) => Some(ms),
            None => return error(400, format!("startedAfter is an RFC 3339 time, not {t:?}")),
        },
        None => None,
    };
    let template = param("template");
    sandboxes.retain(|sb| {
        let state = listed_json(sb, false)["state"].as_str().unwrap_or("").to_string();
        !matches!(sb.state, SandboxState::Stopped | SandboxState::Stopping | SandboxState::Gone)
            && metadata.iter().all(|(k, v)| sb.labels.get(k) == Some(v))
            && states.as_ref().is_none_or(|st| st.contains(&state))
            && after.is_none_or(|a| sb.created_at_ms >= a)
            && template.as_ref().is_none_or(|t| &template_of(sb) == t)
    });
    sandboxes.sort_by_key(|sb| (sb.created_at_ms, sb.id.clone()));
    if param("order").as_deref() != Some("asc") {
        sandboxes.reverse();
    }
    super::page(sandboxes.iter().map(|sb| listed_json(sb, false)).collect(), query)
}

/// An RFC 3339 time (`2026-12-03T18:21:52.626Z`, or with an offset), as milliseconds since the epoch.
fn parse_time(t: &str) -> Option<u64> {
    let (date, rest) = t.split_once(['T', ' '])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let split = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(split);
    let mut c = clock.split(':');
    let (h, min) = (c.next()?.parse::<i64>().ok()?, c.next()?.parse::<i64>().ok()?);
    let sec: f64 = c.next().map_or(Some(0.0), |s| s.parse().ok())?;
    let offset = match zone {
        "" | "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (oh, om) = z[1..].split_once(':').unwrap_or((&z[1..], "0"));
            sign * (oh.parse::<i64>().ok()? * 60 + om.parse::<i64>().ok()?)
        }
    };
    // Days from the civil date (the inverse of `rfc3339`).
    let (yy, mm) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 86_400 + h * 3600 + (min - offset) * 60) as f64 + sec) * 1000.0;
    (ms >= 0.0).then_some(ms as u64)
}

pub(super) async fn get(s: &E2b, key: &Client, id: &str) -> Result<Sandbox, Response> {
    match s.run(&key.caller, Access::On(id, Op::Inspect), s.engine.inspect(id)).await {
        Ok(sb) => Ok(sb),
        Err(f) if f.status == 404 => Err(error(404, format!("sandbox {id} was not found"))),
        Err(f) => Err(f.answer()),
    }
}

async fn info(s: &E2b, key: &Client, id: &str) -> Response {
    match get(s, key, id).await {
        Ok(sb) => axum::Json(listed_json(&sb, true)).into_response(),
        Err(r) => r,
    }
}

async fn kill(s: &E2b, key: &Client, id: &str) -> Response {
    let sandbox = id.to_string();
    match s.run_detached(&key.caller, Access::On(id, Op::Remove), |e| async move { e.remove(&sandbox).await }).await {
        Ok(_) => {
            s.forget(id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(f) if f.status == 404 => error(404, format!("sandbox {id} was not found")),
        Err(f) => f.answer(),
    }
}

/// Set sandbox `id`'s TTL to `seconds` from now.
pub(super) async fn set_ttl(s: &E2b, key: &Client, id: &str, seconds: f64) -> Result<Sandbox, super::Failed> {
    s.run(&key.caller, Access::On(id, Op::Ttl), s.engine.set_ttl(id, Some(seconds))).await
}

async fn timeout(s: &E2b, key: &Client, id: &str, body: &Value) -> Response {
    let Some(t) = body["timeout"].as_f64().filter(|t| *t >= 0.0) else {
        return error(400, "the body is {\"timeout\": <seconds>}");
    };
    // A timeout of 0 ends it at the next check, as E2B's does.
    let t = t.max(0.001);
    match set_ttl(s, key, id, t).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) if f.status == 404 => error(404, format!("sandbox {id} was not found")),
        Err(f) => f.answer(),
    }
}

async fn pause(s: &E2b, key: &Client, id: &str) -> Response {
    let sb = match get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    if matches!(sb.state, SandboxState::Paused | SandboxState::Hibernated) {
        return error(409, format!("sandbox {id} is already paused"));
    }
    let sandbox = sb.id.clone();
    let paused =
        s.run_detached(&key.caller, Access::On(&sb.id, Op::Pause), |e| async move { e.pause(&sandbox, "asked").await });
    match paused.await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) => f.answer(),
    }
}

async fn connect(s: &E2b, key: &Client, id: &str, body: &Value) -> Response {
    let mut sb = match get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    let mut status = StatusCode::OK;
    let wake = match sb.state {
        SandboxState::Paused => Some(Op::Resume),
        SandboxState::Hibernated => Some(Op::Wake),
        SandboxState::Stopped => Some(Op::Start),
        _ => None,
    };
    if let Some(op) = wake {
        let sandbox = sb.id.clone();
        let woken = s.run_detached(&key.caller, Access::On(&sb.id, op), move |e| async move {
            match op {
                Op::Resume => e.resume(&sandbox, "resume").await,
                Op::Wake => e.wake(&sandbox, "wake").await,
                _ => e.start(&sandbox).await,
            }
        });
        if let Err(f) = woken.await {
            return f.answer();
        }
        status = StatusCode::CREATED;
    }
    // A timeout only ever moves the end later; one that slept at its timeout (autoPause) gets it anew.
    if let Some(t) = body["timeout"].as_f64().filter(|t| *t > 0.0) {
        let wanted = berth_engine::now_ms() + (t * 1000.0) as u64;
        let slept = sb.expires_at_ms.is_none() && sb.ttl_action != berth_api::TtlAction::Remove;
        if (slept || sb.expires_at_ms.is_some_and(|at| at < wanted))
            && let Err(f) = set_ttl(s, key, &sb.id, t).await
        {
            return f.answer();
        }
    }
    if let Ok(now) = get(s, key, &sb.id).await {
        sb = now;
    }
    let access = s.access_token(&sb.id, &key.key);
    (status, axum::Json(sandbox_json(s, &sb, &access))).into_response()
}

/// The sandbox's recent usage (berth's meter keeps a point every 5 s, an hour of them), those in the
/// `start`..`end` window (Unix seconds); CPU as the share of its cores used since the point before. A
/// sandbox with no point yet gets one, now.
async fn metrics(s: &E2b, key: &Client, id: &str, query: Option<&str>) -> Response {
    let bound = |n: &str| super::query_param(query, n).map(|v| v.parse::<u64>().map_err(|_| v));
    let (start, end) = match (bound("start").transpose(), bound("end").transpose()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(v), _) | (_, Err(v)) => return error(400, format!("start and end are Unix seconds, not {v:?}")),
    };
    let sb = match get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    let history = s.engine.usage_history(&sb.id, None, None);
    let mut points = match s.run(&key.caller, Access::On(&sb.id, Op::UsageHistory), history).await {
        Ok(p) => p,
        Err(f) => return f.answer(),
    };
    if points.is_empty() {
        let u = match s.run(&key.caller, Access::On(&sb.id, Op::Usage), s.engine.usage(&sb.id)).await {
            Ok(u) => u,
            Err(f) => return f.answer(),
        };
        points.push(berth_api::UsagePoint {
            at_ms: u.sampled_at_ms,
            cpu_seconds: u.cpu_seconds,
            memory_bytes: u.memory_bytes,
            disk_bytes: u.disk_bytes,
        });
    }
    let cpus = listed_json(&sb, false)["cpuCount"].as_u64().unwrap_or(1).max(1);
    let mut before = (sb.created_at_ms, 0.0);
    let mut out = Vec::new();
    for p in points {
        let seconds = (p.at_ms.saturating_sub(before.0) as f64 / 1000.0).max(0.001);
        let pct = (100.0 * (p.cpu_seconds - before.1).max(0.0) / seconds / cpus as f64).min(100.0);
        before = (p.at_ms, p.cpu_seconds);
        let at = p.at_ms / 1000;
        if start.is_some_and(|t| at < t) || end.is_some_and(|t| at > t) {
            continue;
        }
        out.push(json!({
            "timestamp": rfc3339(p.at_ms), "timestampUnix": at, "cpuCount": cpus, "cpuUsedPct": pct,
            "memUsed": p.memory_bytes, "memTotal": sb.memory_bytes.unwrap_or(0), "memCache": 0,
            "diskUsed": p.disk_bytes, "diskTotal": sb.disk_bytes.unwrap_or(0),
        }));
    }
    axum::Json(out).into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_back() {
        assert_eq!(parse_time("2026-12-03T19:01:52.626Z"), Some(1_796_324_512_626));
        assert_eq!(parse_time("2026-12-03T20:01:52.626+01:00"), Some(1_796_324_512_626));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(rfc3339(parse_time("2000-02-29T12:00:00Z").unwrap()), "2000-02-29T12:00:00.000Z");
    }
}
