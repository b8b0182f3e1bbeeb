//! envd's directory watching, on berth's files API: a watcher keeps what a directory (and, recursive, what
//! under it) held when last looked at, and reports what was created, written, had its mode changed or was
//! removed since. The sync SDK asks (`CreateWatcher`, then `GetWatcherEvents`); the async one holds a stream
//! (`WatchDir`), looked at every quarter second. A change made and undone between two looks is not seen.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use berth_api::FileKind;
use berth_engine::files::Got;
use berth_engine::{Access, Caller, Op};
use serde_json::{Value, json};

use super::connect::{self, code_of, err, ok};
use super::{E2b, absolute};

/// Most entries one watch follows.
const MAX_ENTRIES: usize = 10_000;
/// How often a `WatchDir` stream looks again.
const EVERY: Duration = Duration::from_millis(250);

/// What a watcher saw: each path under its root (relative), with its kind, size, modification time and mode.
type Seen = BTreeMap<String, (FileKind, u64, i64, u32)>;

pub(crate) struct Watcher {
    sandbox: String,
    key: Caller,
    root: String,
    recursive: bool,
    seen: Seen,
}

#[derive(Default)]
pub(crate) struct Watchers(std::sync::Mutex<HashMap<String, Watcher>>);

/// What is under `root` now.
async fn look(s: &E2b, key: &Caller, id: &str, root: &str, recursive: bool) -> Result<Seen, Response> {
    let mut seen = Seen::new();
    let mut todo = vec![String::new()];
    while let Some(rel) = todo.pop() {
        let dir = if rel.is_empty() { root.to_string() } else { format!("{}/{rel}", root.trim_end_matches('/')) };
        let files = match s.run(key, Access::On(id, Op::ReadFile), s.engine.read_file(id, None, &dir)).await {
            Ok(Got::Dir(files)) => files,
            Ok(Got::File(_)) => Vec::new(),
            // A directory removed between the listing above and this one: what was in it is gone.
            Err(f) if f.status == 404 && !rel.is_empty() => continue,
            Err(f) => return Err(err(code_of(f.status), f.message)),
        };
        for f in files {
            let path = if rel.is_empty() { f.name.clone() } else { format!("{rel}/{}", f.name) };
            if recursive && f.kind == FileKind::Directory {
                todo.push(path.clone());
            }
            seen.insert(path, (f.kind, f.size, f.mtime_ms, f.mode));
            if seen.len() > MAX_ENTRIES {
                return Err(err(
                    "resource_exhausted",
                    format!("{root} holds more than {MAX_ENTRIES} entries to watch"),
                ));
            }
        }
    }
    Ok(seen)
}

/// The events between two looks, in path order.
fn changes(before: &Seen, now: &Seen) -> Vec<Value> {
    let event = |name: &str, kind: &str| json!({"name": name, "type": kind});
    let mut out = Vec::new();
    for (path, (kind, size, mtime, mode)) in now {
        match before.get(path) {
            None => out.push(event(path, "EVENT_TYPE_CREATE")),
            Some((k, s, m, md)) => {
                if *k != FileKind::Directory && (k != kind || s != size || m != mtime) {
                    out.push(event(path, "EVENT_TYPE_WRITE"));
                }
                if md != mode {
                    out.push(event(path, "EVENT_TYPE_CHMOD"));
                }
            }
        }
    }
    for path in before.keys().filter(|p| !now.contains_key(*p)) {
        out.push(event(path, "EVENT_TYPE_REMOVE"));
    }
    out
}

async fn start_look(s: &E2b, key: &Caller, id: &str, m: &Value) -> Result<(String, bool, Seen), Response> {
    let root = absolute(m["path"].as_str().unwrap_or(""));
    let recursive = m["recursive"].as_bool().unwrap_or(false);
    let entry = match s.run(key, Access::On(id, Op::Stat), s.engine.stat_file(id, None, &root)).await {
        Ok(f) => f,
        Err(f) => return Err(err(code_of(f.status), f.message)),
    };
    if entry.kind != FileKind::Directory {
        return Err(err("invalid_argument", format!("{root} is not a directory")));
    }
    let seen = look(s, key, id, &root, recursive).await?;
    Ok((root, recursive, seen))
}

pub(super) async fn create(s: &E2b, key: &Caller, id: &str, m: &Value) -> Response {
    let (root, recursive, seen) = match start_look(s, key, id, m).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let watcher_id = berth_engine::tokens::random_hex(8).unwrap_or_default();
    let w = Watcher { sandbox: id.to_string(), key: key.clone(), root, recursive, seen };
    let mut all = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
    // At most 64 per sandbox: the oldest (by id order, which is random) is dropped first.
    if all.values().filter(|w| w.sandbox == id).count() >= 64
        && let Some(k) = all.iter().find(|(_, w)| w.sandbox == id).map(|(k, _)| k.clone())
    {
        all.remove(&k);
    }
    all.insert(watcher_id.clone(), w);
    ok(json!({"watcherId": watcher_id}))
}

pub(super) async fn events(s: &E2b, id: &str, m: &Value) -> Response {
    let watcher_id = m["watcherId"].as_str().unwrap_or("").to_string();
    let found = {
        let all = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
        all.get(&watcher_id)
            .filter(|w| w.sandbox == id)
            .map(|w| (w.key.clone(), w.root.clone(), w.recursive, w.seen.clone()))
    };
    let Some((key, root, recursive, before)) = found else {
        return err("not_found", format!("no watcher {watcher_id} in sandbox {id}"));
    };
    let now = match look(s, &key, id, &root, recursive).await {
        Ok(n) => n,
        Err(r) => return r,
    };
    let out = changes(&before, &now);
    if let Some(w) = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&watcher_id) {
        w.seen = now;
    }
    ok(json!({"events": out}))
}

pub(super) fn remove(s: &E2b, id: &str, m: &Value) -> Response {
    let watcher_id = m["watcherId"].as_str().unwrap_or("");
    let mut all = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
    match all.get(watcher_id).is_some_and(|w| w.sandbox == id) {
        true => {
            all.remove(watcher_id);
            ok(json!({}))
        }
        false => err("not_found", format!("no watcher {watcher_id} in sandbox {id}")),
    }
}

impl Watchers {
    pub(crate) fn forget(&self, sandbox: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, w| w.sandbox != sandbox);
    }
}

/// `WatchDir`: a stream of events as they are seen, until the client goes away or the sandbox does.
pub(super) async fn stream(s: &std::sync::Arc<E2b>, key: &Caller, id: &str, m: &Value) -> Response {
    let (root, recursive, mut before) = match start_look(s, key, id, m).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let _ = tx.send(connect::message(json!({"start": {}}))).await;
    let looker = std::sync::Arc::clone(s);
    let (key, id) = (key.clone(), id.to_string());
    tokio::spawn(async move {
        let mut quiet = 0u32;
        loop {
            tokio::time::sleep(EVERY).await;
            if tx.is_closed() {
                return;
            }
            let now = match look(&looker, &key, &id, &root, recursive).await {
                Ok(n) => n,
                Err(_) => {
                    let _ = tx.send(connect::end(Some(("not_found", format!("{root} in sandbox {id} is gone"))))).await;
                    return;
                }
            };
            let out = changes(&before, &now);
            before = now;
            quiet = if out.is_empty() { quiet + 1 } else { 0 };
            for e in out {
                if tx.send(connect::message(json!({"filesystem": e}))).await.is_err() {
                    return;
                }
            }
            // A keepalive after a while without events, as envd sends.
            if quiet >= 120 {
                quiet = 0;
                if tx.send(connect::message(json!({"keepalive": {}}))).await.is_err() {
                    return;
                }
            }
        }
    });
    connect::stream(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_are_compared_into_events() {
        let mut before = Seen::new();
        before.insert("a".into(), (FileKind::File, 1, 10, 0o644));
        before.insert("gone".into(), (FileKind::File, 1, 10, 0o644));
        before.insert("d".into(), (FileKind::Directory, 4096, 10, 0o755));
        let mut now = before.clone();
        now.remove("gone");
        now.insert("a".into(), (FileKind::File, 2, 11, 0o600));
        now.insert("d".into(), (FileKind::Directory, 4096, 12, 0o755));
        now.insert("d/new".into(), (FileKind::File, 0, 12, 0o644));
        let kinds: Vec<(String, String)> = changes(&before, &now)
            .iter()
            .map(|e| (e["name"].as_str().unwrap_or("").to_string(), e["type"].as_str().unwrap_or("").to_string()))
            .collect();
        let want = [
            ("a", "EVENT_TYPE_WRITE"),
            ("a", "EVENT_TYPE_CHMOD"),
            ("d/new", "EVENT_TYPE_CREATE"),
            ("gone", "EVENT_TYPE_REMOVE"),
        ];
        assert_eq!(kinds, want.map(|(a, b)| (a.to_string(), b.to_string())));
    }
}
