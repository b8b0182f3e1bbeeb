//! The reaper: sandboxes whose TTL or idle timeout ran out, and those whose runtime ended on its own.

use std::sync::Arc;
use std::time::Duration;

use berth_api::SandboxState;

use super::{Engine, Live, now_ms};

impl Engine {
    /// Remove every sandbox whose TTL or idle timeout has run out. Returns the ids removed.
    pub async fn reap(&self) -> Vec<String> {
        let now = now_ms();
        let all: Vec<Arc<Live>> = self.sandboxes.lock().await.values().cloned().collect();
        let mut due = Vec::new();
        let mut idle_persistent = Vec::new();
        let mut ended = Vec::new();
        let mut to_pause = Vec::new();
        let mut to_hibernate = Vec::new();
        let removing: std::collections::HashSet<String> = self.removing.lock().map(|r| r.clone()).unwrap_or_default();
        for l in all {
            let r = l.record.lock().await;
            if removing.contains(&r.id) || r.state == SandboxState::Stopping {
                continue;
            }
            if l.session.is_closed() {
                ended.push((r.id.clone(), Arc::clone(&l)));
                continue;
            }
            // A context's interpreter runs between runs too: only a run going on is activity.
            let (context_busy, interpreters) = self.context_activity(&r.id).await;
            let running = context_busy
                || l.execs.lock().await.iter().any(|(id, e)| e.done.borrow().is_none() && !interpreters.contains(id));
            // A TTL that counts only active time does not run during the pause going on (it is added back to
            // `expires_at_ms` at the resume).
            let paused_for = match (r.ttl_active_only, r.paused_at_ms) {
                (true, Some(at)) => now.saturating_sub(at),
                _ => 0,
            };
            let expired = r.expires_at_ms.is_some_and(|t| now >= t.saturating_add(paused_for));
            let idle = !running
                && r.idle_timeout_seconds
                    .is_some_and(|s| now >= r.last_activity_ms.saturating_add((s * 1000.0) as u64));
            // Hibernation after a longer idle (a paused sandbox too); not again after it failed, until the next
            // activity, and never with a code context (whose pipes cannot go to disk).
            let failed_at = l.hibernate_failed_at.load(std::sync::atomic::Ordering::Relaxed);
            let hibernate_due = !running
                && interpreters.is_empty()
                && matches!(r.state, SandboxState::Running | SandboxState::Paused)
                && failed_at < r.last_activity_ms
                && r.idle_hibernate_seconds
                    .is_some_and(|s| now >= r.last_activity_ms.saturating_add((s * 1000.0) as u64));
            let pause_due = !running
                && r.state == SandboxState::Running
                && r.idle_pause_seconds.is_some_and(|s| now >= r.last_activity_ms.saturating_add((s * 1000.0) as u64));
            if expired {
                due.push(r.id.clone());
            } else if idle && r.persistent {
                // Idle costs nothing: a persistent sandbox is stopped, its files kept, not removed.
                idle_persistent.push(r.id.clone());
            } else if idle {
                due.push(r.id.clone());
            } else if hibernate_due {
                to_hibernate.push((r.id.clone(), Arc::clone(&l)));
            } else if pause_due {
                to_pause.push(r.id.clone());
            }
        }
        // A stopped sandbox's lifetime runs out too.
        for s in self.store.stopped().unwrap_or_default() {
            if s.expires_at_ms.is_some_and(|t| now >= t) {
                due.push(s.id);
            }
        }
        for id in &due {
            let _ = self.remove_because(id, "reaped").await;
        }
        for id in &to_pause {
            let _ = self.pause(id, "idle").await;
        }
        for (id, l) in &to_hibernate {
            if let Err(e) = self.hibernate(id, "idle").await {
                l.hibernate_failed_at.store(now_ms(), std::sync::atomic::Ordering::Relaxed);
                crate::log::warn("idle hibernation failed", serde_json::json!({"sandbox": id, "error": e.to_string()}));
            }
        }
        for id in &idle_persistent {
            let _ = self.stop_because(id, "idle").await;
        }
        // A shim whose daemon died while creating it was never adopted; it is now.
        self.adopt(Some(Duration::from_secs(5))).await;
        // A sandbox whose init died (killed from outside, or its supervisor gone) ended on its own: its shim
        // tore it down; what is left is to say so.
        for (id, live) in ended {
            self.sandboxes.lock().await.remove(&id);
            drop(live);
            self.supervisor_gone(&id, "its init exited", "ended").await;
            due.push(id);
        }
        due
    }
}
