//! Pause and resume: a sandbox's processes frozen by its cgroup's freezer (v1 `freezer.state`, v2
//! `cgroup.freeze`), their memory kept, no CPU used; thawed exactly where they were. Any activity (an exec, a
//! shell, a code context, a file call) resumes a paused sandbox first, so a caller sees only a little latency.

use std::sync::Arc;

use berth_api::{EventKind, Sandbox, SandboxState};

use super::lifecycle::{self, Admit, Admitted, Found, Now, Operation as O};
use super::{Engine, Live, now_ms};
use crate::EngineError;

/// How long a sandbox has been paused, for the clocks that count only time running (exec and run timeouts,
/// a TTL that counts only active time).
#[derive(Debug, Default)]
pub struct PauseClock {
    /// Milliseconds paused before the current pause, and when the current pause began.
    state: std::sync::Mutex<(u64, Option<u64>)>,
}

impl PauseClock {
    /// Milliseconds paused in all, the pause going on included.
    pub fn paused_ms(&self) -> u64 {
        let Ok(s) = self.state.lock() else { return 0 };
        s.0 + s.1.map_or(0, |since| now_ms().saturating_sub(since))
    }

    /// Milliseconds of the pause going on, if one is.
    pub fn ongoing_ms(&self) -> u64 {
        self.state.lock().ok().and_then(|s| s.1).map_or(0, |since| now_ms().saturating_sub(since))
    }

    pub fn is_paused(&self) -> bool {
        self.state.lock().map(|s| s.1.is_some()).unwrap_or(false)
    }

    pub(super) fn begin(&self, at: u64) {
        if let Ok(mut s) = self.state.lock()
            && s.1.is_none()
        {
            s.1 = Some(at);
        }
    }

    /// End the pause going on; returns how long it lasted.
    pub(super) fn end(&self, at: u64) -> u64 {
        let Ok(mut s) = self.state.lock() else { return 0 };
        let Some(since) = s.1.take() else { return 0 };
        let lasted = at.saturating_sub(since);
        s.0 += lasted;
        lasted
    }
}

/// A deadline that does not run while its sandbox is paused: `started_paused_ms` is the clock's reading when
/// the timed work began. Returns how much longer to wait, or `None` once the time has run out.
pub(crate) fn remaining(
    clock: &PauseClock,
    started: tokio::time::Instant,
    started_paused_ms: u64,
    limit: std::time::Duration,
) -> Option<std::time::Duration> {
    let paused = std::time::Duration::from_millis(clock.paused_ms().saturating_sub(started_paused_ms));
    let active = started.elapsed().saturating_sub(paused);
    if clock.is_paused() {
        // Not a moment of it counts until the sandbox runs again: look again a little later.
        return Some(limit.saturating_sub(active).max(std::time::Duration::from_millis(50)));
    }
    let left = limit.saturating_sub(active);
    (!left.is_zero()).then_some(left)
}

/// Longest a resume (or an activity) waits for an operation that holds the sandbox to end.
const HELD_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a pause looks at the freezer on the daemon's own thread, without sleeping, before it hands the
/// wait to a blocking thread: a freeze of a few tasks settles well within it.
const FREEZE_SPIN: std::time::Duration = std::time::Duration::from_millis(1);

/// Freeze sandbox `sid`'s cgroup: at once in the usual case, else on a blocking thread (which waits longer,
/// and undoes and retries a freeze that does not settle).
async fn freeze(cg: berth_runtime::cgroup::Cgroup, sid: &str) -> Result<(), EngineError> {
    if cg.try_freeze(FREEZE_SPIN).unwrap_or(false) {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || cg.freeze())
        .await
        .map_err(|_| EngineError::Conflict("freezing panicked".into()))?
        .map_err(|e| EngineError::Conflict(format!("sandbox {sid} could not be paused: {e}")))
}

impl Engine {
    /// Freeze every process of a running sandbox. `why`: `asked` (a client) or `idle` (`idle_pause_seconds`).
    pub async fn pause(&self, id: &str, why: &str) -> Result<Sandbox, EngineError> {
        let Admitted { found, sid, state, admit, hold: _held } = self.admit(id, O::Pause).await?;
        match (admit, found) {
            (Admit::Go(_), Found::Live(live)) => self.pause_held(&live, why).await,
            (Admit::Already, Found::Live(live)) => Ok(live.record.lock().await.clone()),
            _ => Err(lifecycle::cannot(&sid, state)),
        }
    }

    /// Pause `live`, which its caller holds (for the pause, or for a hibernation that gave up).
    pub(super) async fn pause_held(&self, live: &Arc<Live>, why: &str) -> Result<Sandbox, EngineError> {
        let mut r = live.record.lock().await;
        let sid = r.id.clone();
        let step = match lifecycle::admit(Now { state: r.state, busy: None }, O::Pause) {
            Ok(Admit::Go(step)) => step,
            Ok(_) => return Ok(r.clone()),
            Err(refusal) => return Err(refusal.into_error(&sid, r.state)),
        };
        let Some(h) = &self.cgroups else {
            return Err(EngineError::Conflict("this host has no cgroup freezer that berth can use".into()));
        };
        freeze(h.open(&sid), &sid).await?;
        let at = now_ms();
        live.pause.begin(at);
        step.end(&mut r);
        r.paused_at_ms = Some(at);
        let record = r.clone();
        // Written after the answer, in order with every other write (queued while the record is held). The
        // frozen cgroup is itself the state of record: a restarted daemon reads it at the adoption.
        self.store.sandbox_live_later(record.clone());
        drop(r);
        live.note("pause", serde_json::json!({"reason": why}), serde_json::json!({}));
        self.events.emit(&sid, EventKind::Paused, None, None);
        self.after_pause_or_resume(live, true);
        Ok(record)
    }

    /// What a pause or resume leaves to be done after its answer: the record's write, and at a pause the
    /// sandbox's last sample (its memory, which holds still while it is paused; the meter passes it over).
    fn after_pause_or_resume(&self, live: &Arc<Live>, paused: bool) {
        let Some(engine) = self.this.get().and_then(std::sync::Weak::upgrade) else { return };
        let live = Arc::clone(live);
        tokio::spawn(async move {
            let _ = engine.store.flush();
            if paused {
                let id = live.record.lock().await.id.clone();
                engine.sample(&[(id, live)], u64::MAX).await;
            }
        });
    }

    /// Thaw a paused sandbox; a running one is left as it is. `cause` becomes its last activity.
    pub async fn resume(&self, id: &str, cause: &str) -> Result<Sandbox, EngineError> {
        let Admitted { found, sid, state, .. } = self.admit(id, O::Resume).await?;
        match found {
            Found::Live(live) => self.resume_live(&live, cause).await,
            Found::Kept(_) => Err(lifecycle::cannot(&sid, state)),
        }
    }

    pub(super) async fn resume_live(&self, live: &Arc<Live>, cause: &str) -> Result<Sandbox, EngineError> {
        // Held by an operation that keeps it frozen for its own work (a fork or snapshot of it paused), it is
        // resumed once that is done, never in the middle of it: the resume waits, and holds it in its turn.
        let (mut r, step, _hold) = loop {
            let r = live.record.lock().await;
            match self.holds.admit(&r.id, r.state, O::Resume) {
                Ok((Admit::Go(step), hold)) => break (r, step, hold),
                Ok(_) => return Ok(r.clone()),
                Err(lifecycle::Refusal::Busy(_)) => {
                    let id = r.id.clone();
                    drop(r);
                    if let Err(op) = self.holds.until_free(&id, HELD_WAIT).await {
                        return Err(lifecycle::Refusal::Busy(op).into_error(&id, SandboxState::Paused));
                    }
                }
                Err(refusal) => return Err(refusal.into_error(&r.id, r.state)),
            }
        };
        let now = now_ms();
        if let Some(h) = &self.cgroups {
            // One write, which the kernel does at once: not worth a hop to a blocking thread.
            h.open(&r.id)
                .thaw()
                .map_err(|e| EngineError::Conflict(format!("sandbox {} could not be resumed: {e}", r.id)))?;
        }
        let lasted = live.pause.end(now);
        if let Ok(mut m) = live.meter.lock() {
            m.paused_ms += lasted;
            m.resumed(now);
        }
        step.end(&mut r);
        if r.ttl_active_only {
            r.expires_at_ms = r.expires_at_ms.map(|t| t.saturating_add(lasted));
        }
        self.rearm_ttl(&mut r);
        r.last_activity_ms = now;
        r.last_activity = Some(cause.to_string());
        let record = r.clone();
        self.store.sandbox_live_later(record.clone());
        drop(r);
        live.note("resume", serde_json::json!({"cause": cause}), serde_json::json!({"paused_ms": lasted}));
        self.events.emit(&record.id, EventKind::Resumed, None, None);
        self.after_pause_or_resume(live, false);
        Ok(record)
    }

    /// Activity on a sandbox: resumed first if it is paused, and its idle clock starts again, with `cause`.
    pub(super) async fn touch(&self, live: &Arc<Live>, cause: &str) -> Result<(), EngineError> {
        let (id, state) = {
            let r = live.record.lock().await;
            (r.id.clone(), r.state)
        };
        match lifecycle::admit(Now { state, busy: None }, O::Activity) {
            Ok(Admit::First(O::Resume)) => {
                self.resume_live(live, cause).await?;
            }
            Ok(_) => {}
            Err(refusal) => return Err(refusal.into_error(&id, state)),
        }
        let mut r = live.record.lock().await;
        r.last_activity_ms = now_ms();
        r.last_activity = Some(cause.to_string());
        Ok(())
    }

    /// Activity by id (the files API's calls).
    pub async fn touch_id(&self, id: &str, cause: &str) -> Result<(), EngineError> {
        let live = self.live_or_wake(id, cause).await?;
        self.touch(&live, cause).await
    }

    /// Before a sandbox's processes are ended (stop, removal): thaw them, so that they can die (frozen tasks
    /// of a v1 freezer do not, even of SIGKILL). Done whether or not berth paused it: whatever froze it.
    pub(super) async fn thaw_to_end(&self, live: &Arc<Live>) {
        let id = live.record.lock().await.id.clone();
        if let Some(h) = &self.cgroups {
            let cg = h.open(&id);
            let _ = tokio::task::spawn_blocking(move || cg.thaw()).await;
        }
        let lasted = live.pause.end(now_ms());
        if let Ok(mut m) = live.meter.lock() {
            m.paused_ms += lasted;
        }
        let mut r = live.record.lock().await;
        r.paused_at_ms = None;
        if let Some(step) = lifecycle::step(r.state, O::Resume) {
            step.end(&mut r);
        }
    }
}
