//! Lifecycle events: a live broadcast, and the most recent ones for clients that ask without following.

use berth_api::{EventKind, LifecycleEvent};

use super::now_ms;

pub(super) struct Events {
    pub(super) tx: tokio::sync::broadcast::Sender<LifecycleEvent>,
    pub(super) recent: std::sync::Mutex<std::collections::VecDeque<LifecycleEvent>>,
    pub(super) seq: std::sync::atomic::AtomicU64,
}

/// Events kept for `GET /v1/events` without `follow`.
const RECENT_EVENTS: usize = 1000;

impl Events {
    pub(super) fn emit(&self, sandbox: &str, kind: EventKind, exec_id: Option<String>, exit_code: Option<i32>) {
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let ev = LifecycleEvent { seq, time_ms: now_ms(), sandbox: sandbox.to_string(), kind, exec_id, exit_code };
        crate::log::info("lifecycle", serde_json::to_value(&ev).unwrap_or_default());
        if let Ok(mut r) = self.recent.lock() {
            if r.len() == RECENT_EVENTS {
                r.pop_front();
            }
            r.push_back(ev.clone());
        }
        let _ = self.tx.send(ev);
    }
}
