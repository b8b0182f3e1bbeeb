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
        if r.state == SandboxState::Hibernated {
            return Err(EngineError::Conflict(format!(
                "sandbox {} is hibernated: wake it (berth wake) before changing its TTL",
                r.id
            )));
        }
        let before = r.expires_at_ms;
        r.expires_at_ms = seconds.map(|s| now_ms().saturating_add((s * 1000.0) as u64));
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

    /// The TTL of sandbox `id` ran out and its `ttl_action` is to sleep: it loses its deadline, then is
    /// hibernated (paused where that fails) or paused. One that can be neither is removed, as a TTL promises.
    pub(super) async fn sleep_at_ttl(&self, id: &str, action: TtlAction) {
        let Ok(live) = self.live(id).await else { return };
        let (state, expired_at) = {
            let mut r = live.record.lock().await;
            let at = r.expires_at_ms.take();
            self.store.sandbox_live_later(r.clone());
            (r.state, at)
        };
        let hibernated = match (action, state) {
            (TtlAction::Hibernate, SandboxState::Running | SandboxState::Paused) => {
                self.hibernate(id, "ttl").await.map_err(|e| e.to_string())
            }
            _ => Err(String::new()),
        };
        let done = match (hibernated, state) {
            (Ok(_), _) | (_, SandboxState::Hibernated) => Ok("hibernated"),
            (Err(_), SandboxState::Paused) => Ok("paused"),
            (Err(why), _) => match self.pause(id, "ttl").await {
                Ok(_) if why.is_empty() => Ok("paused"),
                Ok(_) => Ok("paused (it could not be hibernated)"),
                Err(e) => Err(e.to_string()),
            },
        };
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
                let _ = self.remove_because(id, "reaped").await;
            }
        }
    }
}
