//! Changing a sandbox's TTL while it exists: a new deadline counted from now, or none.

use berth_api::{Sandbox, SandboxState};

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
}
