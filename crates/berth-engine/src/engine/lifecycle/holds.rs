//! What the daemon holds of a sandbox beside its state, in its memory: the operation under way that must not
//! overlap another (a stop, a snapshot, a fork, …), and whether its runtime is being torn down.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use berth_api::SandboxState as S;

use super::{Admit, Now, Operation, Refusal, admit};
use crate::EngineError;

#[derive(Default)]
pub(crate) struct Holds {
    /// Sandboxes in the middle of an operation that must not overlap another, and that operation.
    busy: Mutex<HashMap<String, Operation>>,
    /// Sandboxes whose runtime is being torn down (a stop, a removal, a hibernation's dump, one that ended
    /// being accounted for): not to be adopted back, reaped or metered meanwhile. Counted, as the parts of one
    /// operation may each mark it.
    down: Mutex<HashMap<String, usize>>,
    /// Told whenever a hold ends, for those who wait for one (see [`Holds::until_free`]).
    freed: tokio::sync::Notify,
}

/// A poisoned lock is taken as it is: each change to these maps is one insert or removal.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Holds a sandbox for an operation for as long as it lives.
#[must_use = "the hold ends when it is dropped"]
pub(crate) struct Hold<'a> {
    holds: &'a Holds,
    id: String,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        lock(&self.holds.busy).remove(&self.id);
        self.holds.freed.notify_waiters();
    }
}

/// Marks a sandbox's runtime as being torn down for as long as it lives.
#[must_use = "the mark ends when it is dropped"]
pub(crate) struct TearingDown<'a> {
    holds: &'a Holds,
    id: String,
}

impl Drop for TearingDown<'_> {
    fn drop(&mut self) {
        let mut down = lock(&self.holds.down);
        if let Some(n) = down.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                down.remove(&self.id);
            }
        }
    }
}

impl Holds {
    /// Admit `op` on sandbox `id` found in `state`. If it goes and it is one that holds, `id` is held for it,
    /// under the same lock as the admission, so that two holding operations cannot both go. (Not for Recover,
    /// whose admission is told the store's marker, not a hold.)
    pub(crate) fn admit(&self, id: &str, state: S, op: Operation) -> Result<(Admit, Option<Hold<'_>>), Refusal> {
        let mut busy = lock(&self.busy);
        let held = busy.get(id).copied().filter(|_| !matches!(op, Operation::Recover { .. }));
        let answer = admit(Now { state, busy: held }, op)?;
        if !matches!(answer, Admit::Go(_)) || op.label().is_none() {
            return Ok((answer, None));
        }
        busy.insert(id.to_string(), op);
        Ok((answer, Some(Hold { holds: self, id: id.to_string() })))
    }

    /// Hold `id` for `op` whatever its state (a change to a record in the store that must not meet another
    /// operation's), or say what holds it.
    pub(crate) fn hold(&self, id: &str, op: Operation) -> Result<Hold<'_>, EngineError> {
        let mut busy = lock(&self.busy);
        if let Some(now) = busy.get(id) {
            return Err(Refusal::Busy(*now).into_error(id, S::Running));
        }
        busy.insert(id.to_string(), op);
        Ok(Hold { holds: self, id: id.to_string() })
    }

    /// Wait until nothing holds `id`, for at most `within`; what still holds it then.
    pub(crate) async fn until_free(&self, id: &str, within: std::time::Duration) -> Result<(), Operation> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Listening before looking: a hold that ends between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match lock(&self.busy).get(id) {
                None => return Ok(()),
                Some(op) if tokio::time::Instant::now() >= deadline => return Err(*op),
                Some(_) => {}
            }
            let _ = tokio::time::timeout_at(deadline, freed).await;
        }
    }

    /// Mark `id`'s runtime as being torn down until the mark drops.
    pub(crate) fn tear_down(&self, id: &str) -> TearingDown<'_> {
        *lock(&self.down).entry(id.to_string()).or_default() += 1;
        TearingDown { holds: self, id: id.to_string() }
    }

    pub(crate) fn tearing_down(&self, id: &str) -> bool {
        lock(&self.down).contains_key(id)
    }

    pub(crate) fn any_tearing_down(&self) -> bool {
        !lock(&self.down).is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SNAP: Operation = Operation::Snapshot { processes: false };

    #[test]
    fn a_second_operation_on_a_held_sandbox_is_refused_until_the_first_ends() {
        let h = Holds::default();
        let (_, first) = h.admit("0123456789ab", S::Running, SNAP).unwrap();
        assert!(first.is_some());
        let err = h.admit("0123456789ab", S::Running, Operation::Restore).err().unwrap();
        assert_eq!(err, Refusal::Busy(SNAP));
        let err = err.into_error("0123456789ab", S::Running);
        assert_eq!(err.code(), berth_api::ErrorCode::Conflict);
        assert!(err.to_string().contains("busy (taking a snapshot)"), "{err}");
        assert!(h.hold("0123456789ab", Operation::Hibernate).is_err());
        // Another sandbox, and operations that take no hold, go on.
        let other = h.admit("ba9876543210", S::Running, Operation::Stop).unwrap().1;
        assert!(other.is_some());
        let (answer, none) = h.admit("0123456789ab", S::Running, Operation::Activity).unwrap();
        assert!(matches!(answer, Admit::Go(_)) && none.is_none());
        drop(first);
        assert!(h.admit("0123456789ab", S::Running, Operation::Restore).unwrap().1.is_some());
        drop(other);
    }

    #[tokio::test]
    async fn a_waiter_goes_on_once_the_hold_ends() {
        let h = std::sync::Arc::new(Holds::default());
        let (_, fork) = h.admit("0123456789ab", S::Paused, Operation::Fork { processes: false }).unwrap();
        let short = std::time::Duration::from_millis(20);
        assert_eq!(h.until_free("0123456789ab", short).await, Err(Operation::Fork { processes: false }));
        assert_eq!(h.until_free("ba9876543210", short).await, Ok(()), "another sandbox is free");
        let waiter = {
            let h = std::sync::Arc::clone(&h);
            tokio::spawn(async move { h.until_free("0123456789ab", std::time::Duration::from_secs(30)).await })
        };
        tokio::time::sleep(short).await;
        assert!(!waiter.is_finished());
        drop(fork);
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }

    #[test]
    fn a_runtime_is_torn_down_until_the_last_mark_of_it_drops() {
        let h = Holds::default();
        assert!(!h.any_tearing_down());
        let outer = h.tear_down("0123456789ab");
        let inner = h.tear_down("0123456789ab");
        drop(inner);
        assert!(h.tearing_down("0123456789ab") && !h.tearing_down("ba9876543210"));
        drop(outer);
        assert!(!h.tearing_down("0123456789ab") && !h.any_tearing_down());
    }
}
