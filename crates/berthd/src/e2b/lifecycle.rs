//! E2B's snapshots and forks, on berth's: `create_snapshot` is a berth snapshot (its processes too, where
//! berth can checkpoint them), usable as a template (`Sandbox.create(snapshot_id)` starts from it);
//! `list_snapshots` and `delete_snapshot` (E2B's `DELETE /templates/{id}`) list and remove them; `fork` is
//! berth's fork, its copies continuing the source's processes where berth can.

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_api::{Isolation, Sandbox, Snapshot};
use serde_json::{Value, json};

use super::{E2b, encode, error, failed};

/// Most copies one fork makes (E2B's SDK asks for at most 20).
const MAX_FORKS: u64 = 20;

/// Whether berth can take the processes of a sandbox behind `isolation` along (a checkpoint of them while
/// they run).
fn processes_can_come(isolation: Isolation) -> bool {
    berth_runtime::backend(isolation).supports().checkpoint_running
}

/// `POST /sandboxes/{id}/snapshots` `{name?, memory?}`: `memory` (E2B's "full", its default) takes the
/// processes along; `false` ("filesystem") the files only. A name already taken is given to the new
/// snapshot, as E2B gives the name a new build.
pub(super) async fn create_snapshot(s: &E2b, key: &str, id: &str, body: &Value) -> Response {
    let sb = match super::control::get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    let name = body["name"].as_str().filter(|n| !n.is_empty());
    let with_processes = match body["memory"].as_bool() {
        Some(asked) => asked,
        None => processes_can_come(sb.isolation) && sb.state != berth_api::SandboxState::Hibernated,
    };
    let req = json!({"name": name, "with_processes": with_processes});
    let path = format!("/v1/sandboxes/{}/snapshots", encode(&sb.id));
    // The name's holder, if it is a snapshot asked for (not another snapshot's id, nor a fork's instant).
    if let Some(n) = name {
        let all: Vec<Snapshot> = s.list_of(key, "/v1/snapshots", "snapshots").await.unwrap_or_default();
        if let Some(old) = all.iter().find(|x| x.name.as_deref() == Some(n) && x.origin == "snapshot") {
            let gone = s.call(key, Method::DELETE, &format!("/v1/snapshots/{}", encode(&old.id)), None).await;
            if !gone.ok() {
                return error(
                    409,
                    format!(
                        "the name {n:?} is taken by snapshot {} and it cannot be removed: {}",
                        old.id,
                        gone.message()
                    ),
                );
            }
        }
    }
    let a = s.call(key, Method::POST, &path, Some(req)).await;
    if !a.ok() {
        return failed(&a);
    }
    match serde_json::from_slice::<Snapshot>(&a.body) {
        Ok(snap) => (StatusCode::CREATED, axum::Json(snapshot_json(&snap))).into_response(),
        Err(_) => error(500, "berth's answer was not a snapshot"),
    }
}

fn snapshot_json(snap: &Snapshot) -> Value {
    json!({"snapshotID": snap.id, "names": snap.name.iter().collect::<Vec<_>>()})
}

/// `GET /snapshots?sandboxID=&name=&limit=&nextToken=`: the snapshots asked for (not the instants forks
/// keep), newest first, in pages.
pub(super) async fn list_snapshots(s: &E2b, key: &str, query: Option<&str>) -> Response {
    let mut all: Vec<Snapshot> = match s.list_of(key, "/v1/snapshots", "snapshots").await {
        Ok(all) => all,
        Err(r) => return r,
    };
    let param = |n: &str| super::query_param(query, n);
    let (sandbox, name) = (param("sandboxID"), param("name"));
    all.retain(|snap| {
        snap.origin == "snapshot"
            && sandbox.as_ref().is_none_or(|id| &snap.sandbox_id == id)
            && name.as_ref().is_none_or(|n| &snap.id == n || snap.name.as_ref() == Some(n))
    });
    all.sort_by_key(|snap| std::cmp::Reverse((snap.created_at_ms, snap.id.clone())));
    super::page(all.iter().map(snapshot_json).collect(), query)
}

/// `DELETE /templates/{id}`: a snapshot (berth's templates themselves are images, removed with berth).
pub(super) async fn delete_template(s: &E2b, key: &str, id: &str) -> Response {
    let a = s.call(key, Method::DELETE, &format!("/v1/snapshots/{}", encode(id)), None).await;
    match a.status {
        200..=299 => StatusCode::NO_CONTENT.into_response(),
        404 => error(404, format!("there is no snapshot {id} (berth's images are removed with berth image rm)")),
        _ => failed(&a),
    }
}

/// The snapshot a create's `templateID` names, if it names one.
pub(super) async fn snapshot_named(s: &E2b, key: &str, template: &str) -> Option<Snapshot> {
    let a = s.call(key, Method::GET, &format!("/v1/snapshots/{}", encode(template)), None).await;
    if a.ok() { serde_json::from_slice(&a.body).ok() } else { None }
}

/// `POST /sandboxes/{id}/fork` `{timeout?, count?}`: berth's fork, the copies continuing the source's
/// processes where berth can take them along; each copy's timeout is `timeout` (else the source's TTL).
pub(super) async fn fork(s: &E2b, key: &str, id: &str, body: &Value) -> Response {
    let sb = match super::control::get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    let count = match &body["count"] {
        Value::Null => 1,
        v => match v.as_u64().filter(|n| (1..=MAX_FORKS).contains(n)) {
            Some(n) => n,
            None => return error(400, format!("count is a whole number from 1 to {MAX_FORKS}, not {v}")),
        },
    };
    let timeout = match &body["timeout"] {
        Value::Null => None,
        v => match v.as_f64().filter(|t| *t > 0.0) {
            Some(t) => Some(t),
            None => return error(400, format!("timeout is a positive number of seconds, not {v}")),
        },
    };
    let with_processes = processes_can_come(sb.isolation) && sb.state != berth_api::SandboxState::Hibernated;
    let req = json!({"count": count, "with_processes": with_processes});
    let a = s.call(key, Method::POST, &format!("/v1/sandboxes/{}/fork", encode(&sb.id)), Some(req)).await;
    if a.status == 404 {
        return error(404, format!("sandbox {id} was not found"));
    }
    if !a.ok() {
        return failed(&a);
    }
    let Ok(copies) = serde_json::from_value::<Vec<Sandbox>>(a.json()["sandboxes"].clone()) else {
        return error(500, "berth's answer was not a fork");
    };
    let mut results: Vec<Value> = a.json()["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| json!({"error": {"code": 500, "message": e}}))
        .collect();
    for copy in copies {
        if let Some(t) = timeout {
            let ttl = s
                .call(key, Method::POST, &format!("/v1/sandboxes/{}/ttl", copy.id), Some(json!({"ttl_seconds": t})))
                .await;
            if !ttl.ok() {
                let _ = s.call(key, Method::DELETE, &format!("/v1/sandboxes/{}", copy.id), None).await;
                results.push(json!({"error": {"code": ttl.status, "message": ttl.message()}}));
                continue;
            }
        }
        let access = s.access_token(&copy.id, key);
        results.push(json!({"sandbox": super::control::sandbox_json(s, &copy, &access)}));
    }
    (StatusCode::CREATED, axum::Json(results)).into_response()
}

/// `PUT /sandboxes/{id}/network` (`update_network`): E2B's update replaces `allowOut` and `denyOut`. On
/// berth's policy, which changes by rules allowed and denied: the new destinations are allowed or denied,
/// and those no longer allowed are denied. A deny rule taken away is refused (lifting it would allow what
/// it named), and so is a change of `allow_internet_access` (berth sets that mode at create).
pub(super) async fn update_network(s: &E2b, key: &str, id: &str, body: &Value) -> Response {
    let sb = match super::control::get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    if let Some(other) = body.as_object().and_then(|o| {
        o.iter().find(|(k, v)| !v.is_null() && !matches!(k.as_str(), "allowOut" | "denyOut" | "allow_internet_access"))
    }) {
        return error(400, format!("berth's egress policy takes allowOut and denyOut (host rules), not {}", other.0));
    }
    let (allow, deny) =
        match (super::string_list(&body["allowOut"], "allowOut"), super::string_list(&body["denyOut"], "denyOut")) {
            (Ok(a), Ok(d)) => (a, d),
            (Err(r), _) | (_, Err(r)) => return r,
        };
    let net = &sb.network;
    let all_open = net.mode.as_deref() == Some("allow_all");
    if let Some(open) = body["allow_internet_access"].as_bool().filter(|open| *open != all_open) {
        return error(
            400,
            format!(
                "berth sets allow_internet_access when a sandbox is made; this one's is {all_open}, not {open}: \
                 name destinations in allowOut instead"
            ),
        );
    }
    // A deny rule left out need not be lifted where nothing would allow what it names: under berth's
    // `enforce` only the allow rules open anything, and one named again in allowOut is allowed (below).
    // Lifting it matters only beside everything allowed, or a wildcard allow that covers it.
    let widens = all_open || allow.iter().any(|a| a.contains('*'));
    if let Some(lifted) = net.deny.iter().find(|d| !deny.contains(d) && !allow.contains(d)).filter(|_| widens) {
        return error(400, format!("berth cannot lift the deny rule {lifted} (it would allow what it names)"));
    }
    let gone: Vec<String> = net.allow.iter().filter(|a| !allow.contains(a) && !all_open).cloned().collect();
    // Allowed first, then denied (berth's order): a destination in both lists ends up denied.
    let change = json!({
        "allow": allow.iter().filter(|a| !net.allow.contains(a) || net.deny.contains(a)).filter(|a| !deny.contains(a)).collect::<Vec<_>>(),
        "deny": deny.iter().chain(gone.iter()).collect::<Vec<_>>(),
    });
    if change["allow"].as_array().is_some_and(Vec::is_empty) && change["deny"].as_array().is_some_and(Vec::is_empty) {
        return StatusCode::NO_CONTENT.into_response();
    }
    let a = s.call(key, Method::POST, &format!("/v1/sandboxes/{}/net", encode(&sb.id)), Some(change)).await;
    if a.ok() { StatusCode::NO_CONTENT.into_response() } else { failed(&a) }
}
