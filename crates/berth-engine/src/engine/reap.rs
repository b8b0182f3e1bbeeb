//! The reaper: sandboxes whose TTL or idle timeout ran out, and those whose runtime ended on its own.
//!
//! It does not poll. Each pass works out when the next deadline of any sandbox falls (a TTL, an idle timeout,
//! an idle pause) and the reaper sleeps until then, or until something happens that may bring a deadline
//! nearer or end a sandbox: a lifecycle event (a create, an exec's end, a resume, a stop, …), a session whose
//! init hung up, a context run that finished. A host full of paused sandboxes without deadlines costs it
//! nothing at all; passes are at least [`MIN_GAP`] apart however many events there are.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use berth_api::SandboxState;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::lifecycle::{self, Operation as O};
use super::{Engine, Live, now_ms};

/// The least time between two passes: a burst of events makes one pass, not one each.
const MIN_GAP: Duration = Duration::from_millis(500);
/// A sandbox being removed or stopped is looked at again this soon (if it is still there, its removal failed).
const BUSY_AGAIN_MS: u64 = 1000;
/// How often the shims directory is looked at for a shim that nobody adopted (one `stat` while it is unchanged).
const SHIMS_EVERY: Duration = Duration::from_secs(2);
/// How often stale quota groups are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// How young a shim's socket may be and still belong to a create this daemon is finishing itself.
const YOUNG_SHIM: Duration = Duration::from_secs(5);

/// The shims directory as the last adoption pass saw it.
#[derive(Default)]
struct ShimsSeen {
    modified: Option<SystemTime>,
    /// Some socket was too young to adopt then: look again even if the directory is unchanged.
    young: bool,
}

impl Engine {
    /// Bring the reaper's next pass forward: something happened that may end a sandbox or move a deadline.
    pub(super) fn wake_reaper(&self) {
        self.reap_wake.notify_one();
    }

    /// Wait (at most `limit`) until no sandbox is being torn down by the daemon itself, nor has ended on its
    /// own without the reaper having seen to it yet.
    pub async fn settle(&self, limit: std::time::Duration) {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let removing = self.holds.any_tearing_down();
            let ended = self.sandboxes.lock().await.values().any(|l| l.session.is_closed());
            if !removing && !ended {
                return;
            }
            self.wake_reaper();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Wake the reaper when sandbox `live`'s init hangs up (the sandbox ended on its own).
    pub(super) fn watch_session(&self, live: &Live) {
        let (session, wake) = (Arc::clone(&live.session), Arc::clone(&self.reap_wake));
        live.keep_task(tokio::spawn(async move {
            session.closed().await;
            wake.notify_one();
        }));
    }

    /// Run the reaper for as long as the engine lives; stale quota groups are pruned every minute beside it.
    pub fn spawn_reaper(self: &Arc<Engine>) {
        let weak = Arc::downgrade(self);
        let mut events = self.events.tx.subscribe();
        let wake = Arc::clone(&self.reap_wake);
        tokio::spawn(async move {
            let start = Instant::now();
            let mut last_pass = start;
            let mut due = Some(start + MIN_GAP);
            let mut shims_at = start + SHIMS_EVERY;
            let mut prune_at = start + PRUNE_EVERY;
            let mut shims = ShimsSeen::default();
            loop {
                let until = due.map_or(shims_at, |d| d.min(shims_at)).min(prune_at);
                let stirred = tokio::select! {
                    _ = tokio::time::sleep_until(until) => false,
                    _ = wake.notified() => true,
                    got = events.recv() => match got {
                        Ok(_) | Err(RecvError::Lagged(_)) => true,
                        Err(RecvError::Closed) => return,
                    },
                };
                if stirred {
                    // As soon as the gap since the last pass allows (at once, after a quiet spell).
                    due = Some(last_pass + MIN_GAP);
                    continue;
                }
                let Some(engine) = weak.upgrade() else { return };
                let now = Instant::now();
                if due.is_some_and(|d| d <= now) {
                    let next_due_ms = engine.reap().await;
                    if engine.strays_possible(&shims) {
                        engine.adopt_strays(&mut shims).await;
                    }
                    last_pass = Instant::now();
                    due = next_due_ms.map(|t| {
                        let wait = Duration::from_millis(t.saturating_sub(now_ms()));
                        (last_pass + wait).max(last_pass + MIN_GAP)
                    });
                    shims_at = last_pass + SHIMS_EVERY;
                }
                if shims_at <= now {
                    if engine.strays_possible(&shims) {
                        engine.adopt_strays(&mut shims).await;
                    }
                    shims_at = Instant::now() + SHIMS_EVERY;
                }
                if prune_at <= now {
                    engine.prune_storage().await;
                    prune_at = Instant::now() + PRUNE_EVERY;
                }
            }
        });
    }

    /// Whether the shims directory may hold a shim nobody adopted: it changed since the last look, or a socket
    /// was too young to be adopted then.
    fn strays_possible(&self, seen: &ShimsSeen) -> bool {
        seen.young
            || std::fs::metadata(crate::shim::shims_dir(&self.root)).and_then(|m| m.modified()).ok() != seen.modified
    }

    /// A shim whose daemon died while creating it was never adopted; it is now.
    async fn adopt_strays(&self, seen: &mut ShimsSeen) {
        seen.modified = std::fs::metadata(crate::shim::shims_dir(&self.root)).and_then(|m| m.modified()).ok();
        seen.young = self.adopt(Some(YOUNG_SHIM)).await;
    }

    /// Remove every sandbox whose TTL or idle timeout has run out, pause those whose idle pause is due, stop
    /// idle persistent ones, and account for those that ended on their own. Returns when the next deadline of
    /// those left falls (ms since the epoch), if any has one.
    pub(crate) async fn reap(&self) -> Option<u64> {
        let now = now_ms();
        let all: Vec<Arc<Live>> = self.sandboxes.lock().await.values().cloned().collect();
        let mut due = Vec::new();
        let mut idle_persistent = Vec::new();
        let mut ended = Vec::new();
        let mut to_pause = Vec::new();
        let mut to_hibernate = Vec::new();
        let mut to_sleep = Vec::new();
        let mut next: Option<u64> = None;
        let mut soon = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        for l in all {
            let r = l.record.lock().await;
            if self.holds.tearing_down(&r.id) || r.state == SandboxState::Stopping {
                soon(now + BUSY_AGAIN_MS);
                continue;
            }
            if l.session.is_closed() {
                ended.push((r.id.clone(), Arc::clone(&l)));
                continue;
            }
            // A context's interpreter runs between runs too: only a run going on is activity.
            let (context_busy, interpreters) = self.context_activity(&r.id).await;
            let running = context_busy
                || l.previews_open.load(std::sync::atomic::Ordering::Acquire) > 0
                || l.execs.lock().await.iter().any(|(id, e)| e.done.borrow().is_none() && !interpreters.contains(id));
            // A TTL that counts only active time does not run during the pause going on (it is added back to
            // `expires_at_ms` at the resume): no deadline until then.
            let paused_for = match (r.ttl_active_only, r.paused_at_ms) {
                (true, Some(at)) => Some(now.saturating_sub(at)),
                _ => None,
            };
            let expires = r.expires_at_ms.map(|t| (t, t.saturating_add(paused_for.unwrap_or(0))));
            let expired = expires.is_some_and(|(_, t)| now >= t);
            let after_idle = |s: Option<f64>| s.map(|s| r.last_activity_ms.saturating_add((s * 1000.0) as u64));
            // Nothing counts as idle while something runs; its end is an event, which brings a pass.
            let idle_at = after_idle(r.idle_timeout_seconds).filter(|_| !running);
            let pause_at = after_idle(r.idle_pause_seconds).filter(|_| !running && lifecycle::goes(r.state, O::Pause));
            let idle = idle_at.is_some_and(|t| now >= t);
            // Hibernation after a longer idle (a paused sandbox too); not again after it failed, until the next
            // activity. Idle code contexts sleep with it.
            let failed_at = l.hibernate_failed_at.load(std::sync::atomic::Ordering::Relaxed);
            let hibernate_at = after_idle(r.idle_hibernate_seconds)
                .filter(|_| !running && lifecycle::goes(r.state, O::Hibernate) && failed_at < r.last_activity_ms);
            if expired && r.ttl_action != berth_api::TtlAction::Remove {
                to_sleep.push((r.id.clone(), r.ttl_action));
            } else if expired {
                due.push(r.id.clone());
            } else if idle && r.persistent {
                // Idle costs nothing: a persistent sandbox is stopped, its files kept, not removed.
                idle_persistent.push(r.id.clone());
            } else if idle {
                due.push(r.id.clone());
            } else if hibernate_at.is_some_and(|t| now >= t) {
                to_hibernate.push((r.id.clone(), Arc::clone(&l)));
            } else if pause_at.is_some_and(|t| now >= t) {
                to_pause.push(r.id.clone());
            } else {
                for t in [expires.filter(|_| paused_for.is_none()).map(|(t, _)| t), idle_at, pause_at, hibernate_at]
                    .into_iter()
                    .flatten()
                {
                    soon(t);
                }
            }
        }
        // A stopped sandbox's lifetime runs out too (one that would sleep at its end sleeps already).
        for s in self.store.stopped().unwrap_or_default() {
            match s.expires_at_ms {
                Some(_) if s.ttl_action != berth_api::TtlAction::Remove => {}
                Some(t) if now >= t => due.push(s.id),
                Some(t) => soon(t),
                None => {}
            }
        }
        for id in &due {
            let _ = self.remove_because(id, "reaped").await;
        }
        for (id, action) in &to_sleep {
            if !self.sleep_at_ttl(id, *action).await {
                let again = now + BUSY_AGAIN_MS;
                next = Some(next.map_or(again, |n| n.min(again)));
            }
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
        // A sandbox whose init died (killed from outside, or its supervisor gone) ended on its own: its shim
        // tore it down; what is left is to say so.
        for (id, live) in ended {
            // Held as being torn down until its files are gone: a daemon told to stop meanwhile waits for it.
            let _down = self.holds.tear_down(&id);
            self.sandboxes.lock().await.remove(&id);
            drop(live);
            self.supervisor_gone(&id, "its init exited", "ended").await;
        }
        next
    }
}
