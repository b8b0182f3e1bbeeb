//! E2B's snapshots and forks, on berth's: `create_snapshot` is a berth snapshot (its processes too, where
//! berth can checkpoint them), usable as a template (`Sandbox.create(snapshot_id)` starts from it);
//! `list_snapshots` and `delete_snapshot` (E2B's `DELETE /templates/{id}`) list and remove them; `fork` is
//! berth's fork, its copies continuing the source's processes where berth can.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use berth_api::{Isolation, NetChange, Snapshot};
use berth_engine::{Access, Op};
use serde_json::{Value, json};

use super::control::Client;
use super::{E2b, error};

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
pub(super) async fn create_snapshot(s: &E2b, key: &Client, id: &str, body: &Value) -> Response {
    let sb = match super::control::get(s, key, id).await {
        Ok(sb) => sb,
        Err(r) => return r,
    };
    let name = body["name"].as_str().filter(|n| !n.is_empty());
    let with_processes = match body["memory"].as_bool() {
        Some(asked) => asked,
        None => processes_can_come(sb.isolation) && sb.state != berth_api::SandboxState::Hibernated,
    };
    // The name's holder, if it is a snapshot asked for (not another snapshot's id, nor a fork's instant).
    if let Some(n) = name {
        let all = s.run(&key.caller, Access::Snapshots, async { s.engine.snapshots() }).await.unwrap_or_default();
        if let Some(old) = all.iter().find(|x| x.name.as_deref() == Some(n) && x.origin == "snapshot")
            && let Err(gone) = remove_snapshot(s, key, &old.id).await
        {
            return error(
                409,
                format!("the name {n:?} is taken by snapshot {} and it cannot be removed: {}", old.id, gone.message),
            );
        }
    }
    let (sandbox, name) = (sb.id.clone(), name.map(str::to_string));
    let made = s.run_detached(&key.caller, Access::On(&sb.id, Op::Snapshot), move |e| async move {
        e.snapshot(&sandbox, name, with_processes).await
    });
    match made.await {
        Ok(snap) => (StatusCode::CREATED, axum::Json(snapshot_json(&snap))).into_response(),
        Err(f) => f.answer(),
    }
}

fn snapshot_json(snap: &Snapshot) -> Value {
    json!({"snapshotID": snap.id, "names": snap.name.iter().collect::<Vec<_>>()})
}

/// `GET /snapshots?sandboxID=&name=&limit=&nextToken=`: the snapshots asked for (not the instants forks
/// keep), newest first, in pages.
pub(super) async fn list_snapshots(s: &E2b, key: &Client, query: Option<&str>) -> Response {
    let mut all = match s.run(&key.caller, Access::Snapshots, async { s.engine.snapshots() }).await {
        Ok(all) => all,
        Err(f) => return f.answer(),
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
pub(super) async fn delete_template(s: &E2b, key: &Client, id: &str) -> Response {
    match remove_snapshot(s, key, id).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) if f.status == 404 => {
            error(404, format!("there is no snapshot {id} (berth's images are removed with berth image rm)"))
        }
        Err(f) => f.answer(),
    }
}

async fn remove_snapshot(s: &E2b, key: &Client, id: &str) -> Result<Snapshot, super::Failed> {
    let snapshot = id.to_string();
    s.run_detached(&key.caller, Access::RemoveSnapshot(id), |e| async move { e.remove_snapshot(&snapshot).await }).await
}

/// The snapshot a create's `templateID` names, if it names one.
pub(super) async fn snapshot_named(s: &E2b, key: &Client, template: &str) -> Option<Snapshot> {
    s.run(&key.caller, Access::Snapshot(template), async { s.engine.get_snapshot(template) }).await.ok()
}

/// `POST /sandboxes/{id}/fork` `{timeout?, count?}`: berth's fork, the copies continuing the source's
/// processes where berth can take them along; each copy's timeout is `timeout` (else the source's TTL).
pub(super) async fn fork(s: &E2b, key: &Client, id: &str, body: &Value) -> Response {
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
    let source = sb.id.clone();
    let forked = s.run_detached(&key.caller, Access::On(&sb.id, Op::Fork), move |e| async move {
        e.fork(&source, count as u32, with_processes).await
    });
    let forked = match forked.await {
        Ok(f) => f,
        Err(f) if f.status == 404 => return error(404, format!("sandbox {id} was not found")),
        Err(f) => return f.answer(),
    };
    let mut results: Vec<Value> = forked.errors.iter().map(|e| json!({"error": {"code": 500, "message": e}})).collect();
    for copy in forked.sandboxes {
        if let Some(t) = timeout
            && let Err(ttl) = super::control::set_ttl(s, key, &copy.id, t).await
        {
            let child = copy.id.clone();
            let remove = |e: std::sync::Arc<crate::Engine>| async move { e.remove(&child).await };
            let _ = s.run_detached(&key.caller, Access::On(&copy.id, Op::Remove), remove).await;
            results.push(json!({"error": {"code": ttl.status, "message": ttl.message}}));
            continue;
        }
        let access = s.access_token(&copy.id, &key.key);
        results.push(json!({"sandbox": super::control::sandbox_json(s, &copy, &access)}));
    }
    (StatusCode::CREATED, axum::Json(results)).into_response()
}

/// `PUT /sandboxes/{id}/network` (`update_network`): E2B's update replaces `allowOut` and `denyOut`. On
/// berth's policy, which changes by rules allowed and denied: the new destinations are allowed or denied,
/// and those no longer allowed are denied. A deny rule taken away is refused (lifting it would allow what
/// it named), and so is a change of `allow_internet_access` (berth sets that mode at create).
pub(super) async fn update_network(s: &E2b, key: &Client, id: &str, body: &Value) -> Response {
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
    let change = NetChange {
        allow: allow
            .iter()
            .filter(|a| !net.allow.contains(a) || net.deny.contains(a))
            .filter(|a| !deny.contains(a))
            .cloned()
            .collect(),
        deny: deny.iter().chain(gone.iter()).cloned().collect(),
    };
    if change.allow.is_empty() && change.deny.is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    let sandbox = sb.id.clone();
    let changed = s.run_detached(&key.caller, Access::On(&sb.id, Op::NetChange), |e| async move {
        e.net_change(&sandbox, change).await
    });
    match changed.await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(f) => f.answer(),
    }
}
