//! Changing a sandbox's TTL while it exists: a new deadline counted from now, or none; and the end of a TTL
//! that puts its sandbox to sleep instead of removing it.

use berth_api::{Sandbox, SandboxState, TtlAction};

use super::{Engine, now_ms};
use crate::EngineError;

impl Engine {
    /// Give sandbox `id` `seconds` more to live from now (its TTL then counts from now), or, with `None`, no TTL.
    pub async fn set_ttl(&self, id: &str, seconds: Option<f64>) -> Result<Sandbox, EngineError> {
        if let Some(s) = seconds.filter(|s| !(*s > 0.0 && *s <= berth_api::MAX_DURATION_SECONDS)) {
            return Err(EngineError::invalid(format!(
                "ttl_seconds must be positive and at most {} (100 years), or null for none, not {s}",
                berth_api::MAX_DURATION_SECONDS
            )));
        }
        let live = self.live(id).await?;
        let mut r = live.record.lock().await;
        let before = r.expires_at_ms;
        r.expires_at_ms = seconds.map(|s| now_ms().saturating_add((s * 1000.0) as u64));
        // The TTL a sandbox that sleeps at its end gets again at each wake.
        if let Ok(Some(mut spec)) = self.store.spec(&r.id) {
            spec["ttl_seconds"] = serde_json::json!(seconds);
            let _ = self.store.put_spec(&r.id, &spec);
        }
        let record = r.clone();
        self.store.sandbox_live_later(record.clone());
        drop(r);
        live.note(
            "ttl",
            serde_json::json!({"ttl_seconds": seconds}),
            serde_json::json!({"expires_at_ms": record.expires_at_ms, "was": before}),
        );
        self.wake_reaper();
        Ok(record)
    }

    /// The TTL of sandbox `id` ran out and its `ttl_action` is to sleep: it is hibernated (paused where that
    /// fails) or paused, and then loses its deadline until a wake gives it its TTL again (`rearm_ttl`). One
    /// that can be neither is removed, as a TTL promises. Returns false when the sandbox was busy (a
    /// snapshot, a fork, a rebuild going on): nothing was done, and the reaper tries again soon.
    pub(super) async fn sleep_at_ttl(&self, id: &str, action: TtlAction) -> bool {
        let Ok(live) = self.live(id).await else { return true };
        let (state, expired_at) = {
            let r = live.record.lock().await;
            // Changed since the reaper looked (a new TTL, or none): nothing to do.
            match r.expires_at_ms {
                Some(t) if t <= now_ms() => (r.state, t),
                _ => return true,
            }
        };
        let busy = |e: &EngineError| matches!(e, EngineError::Busy { .. });
        let hibernated = match (action, state) {
            (TtlAction::Hibernate, SandboxState::Running | SandboxState::Paused) => {
                match self.hibernate(id, "ttl").await {
                    Err(e) if busy(&e) => return false,
                    r => r.map(|_| ()).map_err(|e| e.to_string()),
                }
            }
            _ => Err(String::new()),
        };
        let done = match (hibernated, state) {
            (Ok(()), _) | (_, SandboxState::Hibernated) => Ok("hibernated"),
            (Err(_), SandboxState::Paused) => Ok("paused"),
            (Err(why), _) => match self.pause(id, "ttl").await {
                Err(e) if busy(&e) => return false,
                Ok(_) if why.is_empty() => Ok("paused"),
                Ok(_) => Ok("paused (it could not be hibernated)"),
                Err(e) => Err(e.to_string()),
            },
        };
        // Its record as it is now: still live when paused; a hibernated one is only in the store (and is
        // held while it is changed there, so that a wake cannot come between).
        if done.is_ok() {
            if let Ok(now) = self.live(id).await {
                let mut r = now.record.lock().await;
                r.expires_at_ms = None;
                let _ = self.store.sandbox_live(&r);
            } else if let Ok(_held) = self.holds.hold(id, super::lifecycle::Operation::Hibernate)
                && let Ok(Some(mut r)) = self.stopped_record(id)
                && r.state == SandboxState::Hibernated
            {
                r.expires_at_ms = None;
                let _ = self.store.sandbox_live(&r);
            }
        }
        live.note(
            "ttl",
            serde_json::json!({"expired_at_ms": expired_at, "action": action}),
            match &done {
                Ok(how) => serde_json::json!({"slept": how}),
                Err(e) => serde_json::json!({"error": e, "then": "removed"}),
            },
        );
        match done {
            Ok(how) => crate::log::info("ttl", serde_json::json!({"sandbox": id, "slept": how})),
            Err(e) => {
                crate::log::warn("ttl sleep failed", serde_json::json!({"sandbox": id, "error": e}));
                if let Err(e) = self.remove_because(id, "reaped").await {
                    return !busy(&e);
                }
            }
        }
        true
    }

    /// A sandbox that sleeps at the end of its TTL, woken or resumed: it gets its TTL again from now (the
    /// last one it was given), when it has none or the one it had ran out while it slept.
    pub(super) fn rearm_ttl(&self, r: &mut Sandbox) {
        if r.ttl_action == TtlAction::Remove || r.expires_at_ms.is_some_and(|t| t > now_ms()) {
            return;
        }
        let ttl = self.store.spec(&r.id).ok().flatten().and_then(|spec| spec["ttl_seconds"].as_f64());
        if let Some(seconds) = ttl.filter(|s| *s > 0.0) {
            r.expires_at_ms = Some(now_ms().saturating_add((seconds * 1000.0) as u64));
        }
    }
}
