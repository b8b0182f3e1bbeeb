//! The engine's side of the lifecycle: a sandbox found as it is (live, or kept without a runtime), an
//! operation admitted on it by the table and held for it, and a freeze for an operation's own work.

use std::sync::Arc;

use berth_api::{Sandbox, SandboxState as S};

use super::holds::Hold;
use super::{Admit, Operation, Step, cannot};
use crate::EngineError;
use crate::engine::Engine;
use crate::engine::live::Live;

/// A sandbox as the engine has it. (Held only for the length of a call: its record is not boxed.)
#[allow(clippy::large_enum_variant)]
pub(in crate::engine) enum Found {
    Live(Arc<Live>),
    /// Stopped or hibernated: its record in the store.
    Kept(Sandbox),
}

impl Found {
    async fn id_and_state(&self) -> (String, S) {
        match self {
            Found::Live(l) => {
                let r = l.record.lock().await;
                (r.id.clone(), r.state)
            }
            Found::Kept(s) => (s.id.clone(), s.state),
        }
    }

    /// Whether this is `before` as it was when it was found in `state`.
    async fn is_still(&self, before: &Found, state: S) -> bool {
        let same = match (self, before) {
            (Found::Live(a), Found::Live(b)) => Arc::ptr_eq(a, b),
            (Found::Kept(_), Found::Kept(_)) => true,
            _ => false,
        };
        same && self.id_and_state().await.1 == state
    }
}

/// An operation the table let through: the sandbox as it was found, the answer, and the hold (for an
/// operation that holds) that lasts as long as this does.
pub(in crate::engine) struct Admitted<'a> {
    pub found: Found,
    pub sid: String,
    /// The state it was admitted in.
    pub state: S,
    pub admit: Admit,
    pub hold: Option<Hold<'a>>,
}

impl Admitted<'_> {
    /// The step of an operation whose every admission is one.
    pub fn step(&self) -> Result<Step, EngineError> {
        match self.admit {
            Admit::Go(s) => Ok(s),
            _ => Err(cannot(&self.sid, self.state)),
        }
    }
}

impl Engine {
    /// Sandbox `id_or_name` as the engine has it: live, or kept (stopped or hibernated).
    pub(in crate::engine) async fn find(&self, id_or_name: &str) -> Result<Found, EngineError> {
        {
            let all = self.sandboxes.lock().await;
            if let Some(l) = all.get(id_or_name) {
                return Ok(Found::Live(Arc::clone(l)));
            }
            for l in all.values() {
                if l.record.lock().await.name == id_or_name {
                    return Ok(Found::Live(Arc::clone(l)));
                }
            }
        }
        match self.stopped_record(id_or_name)? {
            Some(s) => Ok(Found::Kept(s)),
            None => Err(EngineError::NoSandbox(id_or_name.to_string())),
        }
    }

    /// Admit `op` on sandbox `id_or_name` in the state it is in now: the table's answer, with the hold of an
    /// operation that holds, or why not (a state it cannot be done in, another operation holding it).
    pub(in crate::engine) async fn admit(&self, id_or_name: &str, op: Operation) -> Result<Admitted<'_>, EngineError> {
        let mut found = self.find(id_or_name).await?;
        let mut looks = 0;
        loop {
            looks += 1;
            let (sid, state) = found.id_and_state().await;
            let (admit, hold) = self.holds.admit(&sid, state, op).map_err(|r| r.into_error(&sid, state))?;
            // Looked at before it was held: an operation that held it until then may have changed it (a wake
            // that woke it, a stop that stopped it). Looked at again, under the hold.
            if hold.is_some() && looks < 3 {
                let again = self.find(&sid).await?;
                if !again.is_still(&found, state).await {
                    drop(hold);
                    found = again;
                    continue;
                }
            }
            return Ok(Admitted { found, sid, state, admit, hold });
        }
    }
}

/// A sandbox frozen for an operation's own work (a fork's or a snapshot's copy): thawed, and its marker
/// cleared, when this drops.
#[must_use = "the sandbox is thawed when this drops"]
pub(in crate::engine) struct Frozen<'a> {
    engine: &'a Engine,
    sid: String,
    cgroup: berth_runtime::cgroup::Cgroup,
}

impl Frozen<'_> {
    /// Thaw it now (as dropping it does).
    pub fn thaw(self) {}
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        // Thawed first, then the marker cleared: a daemon that dies between the two finds it thawed and thaws
        // it again. A thaw that failed keeps the marker, so that the next daemon tries again.
        if self.cgroup.thaw().is_ok() {
            let _ = self.engine.store.set_frozen_for(&self.sid, None);
        }
    }
}

impl Engine {
    /// Freeze running sandbox `sid` for `op`'s own work. The store's `frozen_for` is written first, so that a
    /// daemon that dies before the thaw leaves a marker the next one reads at the adoption, and thaws it (the
    /// table's Recover): the sandbox is left as `op` found it, running, not taken for paused. Why not, if not.
    pub(in crate::engine) fn freeze_for(&self, sid: &str, op: Operation) -> Result<Frozen<'_>, String> {
        let key = op.frozen_key().ok_or_else(|| format!("{op:?} does not freeze a sandbox for itself"))?;
        let cgroup = self.cgroups.as_ref().map(|h| h.open(sid)).ok_or("this host has no cgroup freezer")?;
        self.store.set_frozen_for(sid, Some(key)).map_err(|e| berth_runtime::error_chain(&e))?;
        // From here on, dropped on any path: thawed, and the marker cleared.
        let frozen = Frozen { engine: self, sid: sid.to_string(), cgroup };
        frozen.cgroup.freeze().map_err(|e| berth_runtime::error_chain(&e))?;
        Ok(frozen)
    }
}
