//! envd's directory watching, on the engine's watch (inotify inside the sandbox, through its init): the sync
//! SDK asks (`CreateWatcher`, then `GetWatcherEvents` for what came since), the async one holds a stream
//! (`WatchDir`). berth's events map onto envd's: a rename within the watch is envd's pair, `RENAME` for the
//! old name and `CREATE` for the new one.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use berth_api::{FileKind, WatchEvent, WatchKind};
use berth_engine::{Access, Caller, DirWatch, Op};
use serde_json::{Value, json};

use super::connect::{self, code_of, err, ok};
use super::{E2b, absolute};

/// Watchers one sandbox keeps for the sync SDK: past it the oldest goes.
const MAX_WATCHERS: usize = 64;
/// How long a `WatchDir` stream waits without events before it sends a keepalive, as envd does.
const KEEPALIVE: Duration = Duration::from_secs(30);

pub(crate) struct Watcher {
    sandbox: String,
    /// When it was made, for dropping the oldest.
    made: std::time::Instant,
    watch: std::sync::Arc<tokio::sync::Mutex<Watched>>,
}

struct Watched {
    watch: DirWatch,
    /// Set once the engine's watch ended: the reason, answered to the next `GetWatcherEvents`.
    ended: Option<String>,
}

#[derive(Default)]
pub(crate) struct Watchers(std::sync::Mutex<HashMap<String, Watcher>>);

/// envd's events for one of berth's (none for `ready`, `overflow` and `end`).
fn envd_events(ev: &WatchEvent) -> Vec<Value> {
    let event = |name: &str, kind: &str| json!({"name": name, "type": kind});
    let path = ev.path.as_deref().unwrap_or("");
    match ev.kind {
        WatchKind::Create => vec![event(path, "EVENT_TYPE_CREATE")],
        WatchKind::Write => vec![event(path, "EVENT_TYPE_WRITE")],
        WatchKind::Remove => vec![event(path, "EVENT_TYPE_REMOVE")],
        WatchKind::Chmod => vec![event(path, "EVENT_TYPE_CHMOD")],
        WatchKind::Rename => {
            vec![event(ev.from.as_deref().unwrap_or(""), "EVENT_TYPE_RENAME"), event(path, "EVENT_TYPE_CREATE")]
        }
        WatchKind::Ready | WatchKind::Overflow | WatchKind::End => Vec::new(),
    }
}

/// Start the engine's watch of the request's `path` (which must be a directory), `ready` taken.
async fn start_watch(s: &E2b, key: &Caller, id: &str, m: &Value) -> Result<(String, DirWatch), Response> {
    let root = absolute(m["path"].as_str().unwrap_or(""));
    let recursive = m["recursive"].as_bool().unwrap_or(false);
    let entry = match s.run(key, Access::On(id, Op::Stat), s.engine.stat_file(id, None, &root)).await {
        Ok(f) => f,
        Err(f) => return Err(err(code_of(f.status), f.message)),
    };
    if entry.kind != FileKind::Directory {
        return Err(err("invalid_argument", format!("{root} is not a directory")));
    }
    let started = s.engine.watch_dir(id, &root, recursive, None);
    let mut watch = match s.run(key, Access::On(id, Op::Watch), started).await {
        Ok(w) => w,
        Err(f) => return Err(err(code_of(f.status), f.message)),
    };
    // `ready`: everything from here on is reported.
    let _ = watch.events.recv().await;
    Ok((root, watch))
}

pub(super) async fn create(s: &E2b, key: &Caller, id: &str, m: &Value) -> Response {
    let (_, watch) = match start_watch(s, key, id, m).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let watcher_id = berth_engine::tokens::random_hex(8).unwrap_or_default();
    let watch = std::sync::Arc::new(tokio::sync::Mutex::new(Watched { watch, ended: None }));
    let w = Watcher { sandbox: id.to_string(), made: std::time::Instant::now(), watch };
    let mut all = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
    if all.values().filter(|w| w.sandbox == id).count() >= MAX_WATCHERS
        && let Some(k) = all.iter().filter(|(_, w)| w.sandbox == id).min_by_key(|(_, w)| w.made).map(|(k, _)| k.clone())
    {
        all.remove(&k);
    }
    all.insert(watcher_id.clone(), w);
    ok(json!({"watcherId": watcher_id}))
}

/// `GetWatcherEvents`: every change made before the call and not yet reported (the engine's watch is
/// flushed first, so nothing already done is left for the next call). A watcher whose watch ended answers
/// with the reason once its last events are taken.
pub(super) async fn events(s: &E2b, id: &str, m: &Value) -> Response {
    let watcher_id = m["watcherId"].as_str().unwrap_or("").to_string();
    let found = {
        let all = s.watchers.0.lock().unwrap_or_else(|p| p.into_inner());
        all.get(&watcher_id).filter(|w| w.sandbox == id).map(|w| std::sync::Arc::clone(&w.watch))
    };
    let Some(watched) = found else {
        return err("not_found", format!("no watcher {watcher_id} in sandbox {id}"));
    };
    let mut w = watched.lock().await;
    w.watch.flush().await;
    let mut out = Vec::new();
    while w.ended.is_none() {
        match w.watch.events.try_recv() {
            Ok(ev) if ev.kind == WatchKind::End => w.ended = ev.reason,
            Ok(ev) => out.extend(envd_events(&ev)),
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => w.ended = Some("the watch ended".into()),
        }
    }
    if out.is_empty()
        && let Some(reason) = w.ended.clone()
    {
        s.watchers.0.lock().unwrap_or_else(|p| p.into_inner()).remove(&watcher_id);
        return err("not_found", reason);
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

/// `WatchDir`: a stream of events as they happen, until the client goes away or the watch ends.
pub(super) async fn stream(s: &std::sync::Arc<E2b>, key: &Caller, id: &str, m: &Value) -> Response {
    let (root, mut watch) = match start_watch(s, key, id, m).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let _ = tx.send(connect::message(json!({"start": {}}))).await;
    let id = id.to_string();
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                () = tx.closed() => return,
                got = tokio::time::timeout(KEEPALIVE, watch.events.recv()) => got,
            };
            let ev = match ev {
                Err(_quiet) => {
                    if tx.send(connect::message(json!({"keepalive": {}}))).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Some(ev)) => ev,
                Ok(None) => WatchEvent::end(format!("the watch of {root} in sandbox {id} ended")),
            };
            if ev.kind == WatchKind::End {
                let reason = ev.reason.unwrap_or_default();
                let _ = tx.send(connect::end(Some(("not_found", reason)))).await;
                return;
            }
            for e in envd_events(&ev) {
                if tx.send(connect::message(json!({"filesystem": e}))).await.is_err() {
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
    fn berths_events_map_onto_envds() {
        let ev = |kind, path: &str| WatchEvent { path: Some(path.into()), ..WatchEvent::of(kind) };
        let kinds = |e: &WatchEvent| -> Vec<(String, String)> {
            envd_events(e)
                .iter()
                .map(|v| (v["name"].as_str().unwrap_or("").into(), v["type"].as_str().unwrap_or("").into()))
                .collect()
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(kinds(&ev(WatchKind::Create, "d/new")), [pair("d/new", "EVENT_TYPE_CREATE")]);
        assert_eq!(kinds(&ev(WatchKind::Write, "a")), [pair("a", "EVENT_TYPE_WRITE")]);
        assert_eq!(kinds(&ev(WatchKind::Chmod, "a")), [pair("a", "EVENT_TYPE_CHMOD")]);
        assert_eq!(kinds(&ev(WatchKind::Remove, "gone")), [pair("gone", "EVENT_TYPE_REMOVE")]);
        let renamed = WatchEvent { from: Some("old".into()), ..ev(WatchKind::Rename, "new") };
        assert_eq!(kinds(&renamed), [pair("old", "EVENT_TYPE_RENAME"), pair("new", "EVENT_TYPE_CREATE")]);
        assert!(kinds(&WatchEvent::of(WatchKind::Overflow)).is_empty());
    }
}
