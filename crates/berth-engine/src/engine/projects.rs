//! Durable projects: a sandbox's files outlive its runtime. Stop, start and rebuild; snapshots, restore and
//! reset; copy-on-write forks; named volumes. Every sandbox the daemon makes keeps its writable state in a
//! volume of the storage pool (`<pool>/sandboxes/<id>`), so all of this is a matter of cloning volumes.

use std::path::PathBuf;
use std::sync::Arc;

use berth_api::{CreateSandbox, EventKind, Sandbox, SandboxState, Snapshot, Teardown, VolumeMount};
use berth_storage::Pool;

use super::lifecycle::{self, Admit, Admitted, Found, Operation as O};
use super::{Engine, Live, actor, journal_path, now_ms};
use crate::EngineError;
use crate::journal::Journal;

/// Most sandboxes one fork makes.
pub const MAX_FORKS: u32 = 64;

/// A name held for a sandbox being made.
pub(crate) struct NameGuard<'a> {
    engine: &'a Engine,
    name: String,
}

impl Drop for NameGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut r) = self.engine.reserved_names.lock() {
            r.remove(&self.name);
        }
    }
}

fn storage_err(e: berth_storage::StorageError) -> EngineError {
    match e {
        e @ berth_storage::StorageError::QuotaUnsupported { .. } => EngineError::invalid(e.to_string()),
        e => EngineError::Storage(berth_runtime::error_chain(&e)),
    }
}

impl Engine {
    pub(crate) fn state_dir(&self, id: &str) -> PathBuf {
        self.pool().path().join("sandboxes").join(id)
    }

    pub(crate) fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.pool().path().join("snapshots").join(id)
    }

    pub(crate) fn volume_dir(&self, name: &str) -> PathBuf {
        self.pool().path().join("volumes").join(name)
    }

    /// Run a blocking pool operation off the async threads.
    pub(crate) async fn pool_op<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Pool) -> Result<T, berth_storage::StorageError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let pool = self.pool();
        tokio::task::spawn_blocking(move || op(&pool))
            .await
            .map_err(|_| EngineError::Storage("a storage operation panicked".into()))?
            .map_err(storage_err)
    }

    pub(crate) async fn pool_clone(&self, src: PathBuf, dst: PathBuf, readonly: bool) -> Result<(), EngineError> {
        self.pool_op(move |pool| pool.clone_volume(&src, &dst, readonly)).await
    }

    pub(crate) fn check_quota(&self, disk: Option<u64>) -> Result<(), EngineError> {
        match disk {
            Some(b) if b < (16 << 20) => Err(EngineError::invalid("disk_bytes must be at least 16M")),
            // The request is well formed; the host is what cannot take it.
            Some(_) if self.pool().mode() != berth_storage::Mode::Btrfs => Err(EngineError::Conflict(format!(
                "disk quotas need a btrfs storage pool and this one is {}: run `berth storage init` (the running daemon takes it up at once)",
                self.pool().mode()
            ))),
            _ => Ok(()),
        }
    }

    /// Set a sandbox's quota; without one, lift any its files inherited (a clone keeps its source's limit).
    pub(crate) async fn apply_quota(&self, id: &str, disk: Option<u64>) -> Result<(), EngineError> {
        if disk.is_none()
            && (self.pool().mode() != berth_storage::Mode::Btrfs || !self.pool().info().is_ok_and(|i| i.quotas))
        {
            return Ok(());
        }
        let dir = self.state_dir(id);
        self.pool_op(move |pool| pool.set_quota(&dir, disk)).await
    }

    pub(crate) fn check_volumes(&self, volumes: &[VolumeMount]) -> Result<(), EngineError> {
        for v in volumes {
            if !self.may_use(self.owner(crate::store::Owned::Volume, &v.name).as_deref(), false) {
                return Err(EngineError::NoVolume(v.name.clone()));
            }
        }
        let known = self.store.volumes()?;
        for v in volumes {
            if !known.iter().any(|(n, _)| *n == v.name) {
                return Err(EngineError::NoVolume(v.name.clone()));
            }
            let target =
                berth_runtime::spec::sandbox_path(&v.target).map_err(|e| EngineError::invalid(e.to_string()))?;
            berth_runtime::spec::check_target(&target).map_err(|e| EngineError::invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// Hold `name` for a sandbox being made (released when the guard drops): free among sandboxes and other
    /// creates in progress.
    ///
    /// The reservation comes first and the store is asked second: a create that finished between the two
    /// has its row in the store by then, so a name is never given twice.
    pub(crate) async fn reserve_name(&self, name: &str) -> Result<NameGuard<'_>, EngineError> {
        {
            let mut reserved = self
                .reserved_names
                .lock()
                .map_err(|_| EngineError::Conflict("the engine's state was poisoned".into()))?;
            if !reserved.insert(name.to_string()) {
                return Err(EngineError::NameBeingTaken(name.to_string()));
            }
        }
        let guard = NameGuard { engine: self, name: name.to_string() };
        self.check_name_free(name).await?;
        Ok(guard)
    }

    /// Every sandbox not removed, running or stopped, has its row: one query, not a listing, on each create.
    pub(crate) async fn check_name_free(&self, name: &str) -> Result<(), EngineError> {
        match self.store.id_named(name)? {
            Some(id) => Err(EngineError::NameTaken { name: name.to_string(), id }),
            None => Ok(()),
        }
    }

    /// A stopped sandbox's record, by id or name.
    pub(crate) fn stopped_record(&self, id_or_name: &str) -> Result<Option<Sandbox>, EngineError> {
        Ok(self.store.stopped()?.into_iter().find(|s| s.id == id_or_name || s.name == id_or_name))
    }

    pub(super) fn spec_of(&self, id: &str) -> Result<CreateSandbox, EngineError> {
        self.store
            .spec(id)?
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| EngineError::Storage(format!("the database has no spec for sandbox {id}")))
    }

    /// Remove a sandbox's files (its runtime is gone), and the snapshot of the instant it was forked if no
    /// other sandbox has it as its parent (a snapshot someone asked for stays until removed).
    pub(crate) async fn discard_files(&self, id: &str, teardown: &mut Teardown) {
        let dir = self.state_dir(id);
        match self.pool_op(move |pool| pool.remove(&dir)).await {
            Ok(()) => teardown.steps.push("removed the sandbox's files".into()),
            Err(e) => teardown.leftovers.push(format!("the sandbox's files: {e}")),
        }
        let Ok(Some(record)) = self.store.record(id) else { return };
        let Some(parent) = record.parent else { return };
        let Ok(Some(snap)) = self.store.snapshot(&parent) else { return };
        if snap.origin != "fork" {
            return;
        }
        let others = self.list().await.into_iter().any(|s| s.id != id && s.parent.as_deref() == Some(&parent));
        if !others && self.drop_snapshot(&parent).await.is_ok() {
            teardown.steps.push(format!("removed the fork snapshot {parent}, which no sandbox uses any more"));
        }
    }

    /// Journal an action: through the live sandbox's own journal handle when it has one (two handles on one
    /// journal would hand out the same sequence number twice), else through a fresh one.
    pub(super) async fn journal_note(
        &self,
        id: &str,
        action: &str,
        args: serde_json::Value,
        result: serde_json::Value,
    ) {
        if let Some(live) = self.sandboxes.lock().await.get(id).cloned() {
            live.note(action, args, result);
        } else if let Ok(mut j) = Journal::open(&journal_path(&self.root, id)) {
            let _ = j.append(&actor(), action, args, result);
        }
    }

    /// Step 2 of teardown: the sandbox's credentials stop working.
    pub(crate) async fn revoke_credentials(&self, id: &str, receipt: &mut Teardown) {
        match self.tokens.revoke_session(id) {
            Ok(ids) => {
                for t in &ids {
                    receipt.revoked.push(format!("session token {t}"));
                }
                receipt.steps.push(format!("revoked {} session token(s)", ids.len()));
            }
            Err(e) => receipt.leftovers.push(format!("the session token could not be revoked: {e}")),
        }
        // Its secrets: the proxy that injects them and the environment that holds them go with its runtime.
        for decl in self.spec_secrets(id) {
            receipt.revoked.push(format!("secret {decl}"));
        }
    }

    /// Stop a sandbox's processes and keep its files.
    pub async fn stop(&self, id: &str) -> Result<Sandbox, EngineError> {
        self.stop_because(id, "asked").await
    }

    pub(crate) async fn stop_because(&self, id: &str, why: &str) -> Result<Sandbox, EngineError> {
        let admitted = self.admit(id, O::Stop).await?;
        admitted.step()?;
        let Admitted { found, sid, hold: _held, .. } = admitted;
        match found {
            // A hibernated sandbox stops by forgetting its processes: its image goes, its files stay.
            Found::Kept(s) => self.discard_hibernation(s, why).await,
            Found::Live(live) => {
                let record = self.stop_live(&live, &sid).await?;
                self.journal_note(&sid, "stop", serde_json::json!({}), serde_json::json!({"reason": why})).await;
                Ok(record)
            }
        }
    }

    async fn stop_live(&self, live: &Arc<Live>, sid: &str) -> Result<Sandbox, EngineError> {
        let state = live.record.lock().await.state;
        let step = lifecycle::held_step(sid, state, O::Stop)?;
        let down = self.holds.tear_down(sid);
        let halted = self.halt(live, sid, step).await;
        drop(down);
        if let Err(e) = halted {
            // Its shim died, and its sandbox with it: no longer live, it is accounted for as the reaper would
            // (a persistent one is stopped, files kept), not left in neither list.
            self.supervisor_gone(sid, "its supervisor was gone when it was stopped", "lost").await;
            return Err(e);
        }
        // A stopped sandbox has no session: its token stops working (a new one comes with the next start), and
        // the sandboxes it made with it go.
        let _ = self.tokens.revoke_session(sid);
        for child in self.children_of(sid).await {
            let _ = Box::pin(self.remove_because(&child, "owner removed")).await;
        }
        let mut record = live.record.lock().await.clone();
        step.end(&mut record);
        self.store.sandbox_live(&record)?;
        self.events.emit(sid, EventKind::Stopped, None, None);
        Ok(record)
    }

    /// A hibernated sandbox stopped (the caller holds it busy): its image and its reserved id block go, its
    /// files stay.
    async fn discard_hibernation(&self, mut s: Sandbox, why: &str) -> Result<Sandbox, EngineError> {
        self.forget_hibernation(&s.id).await;
        let _ = self.tokens.revoke_session(&s.id);
        lifecycle::held_step(&s.id, s.state, O::Stop)?.end(&mut s);
        self.store.sandbox_live(&s)?;
        self.journal_note(&s.id, "stop", serde_json::json!({}), serde_json::json!({"reason": why})).await;
        self.events.emit(&s.id, EventKind::Stopped, None, None);
        Ok(s)
    }

    /// Start a stopped sandbox again on its kept files.
    pub async fn start(&self, id: &str) -> Result<Sandbox, EngineError> {
        let Admitted { found, sid, state, admit, hold: _held } = self.admit(id, O::Start).await?;
        let stopped = match (admit, found) {
            // A hibernated sandbox starts by waking.
            (Admit::Instead(O::Wake), _) => return self.wake(&sid, "start").await,
            (Admit::Go(_), Found::Kept(s)) => s,
            _ => return Err(lifecycle::cannot(&sid, state)),
        };
        self.admit_record(&stopped.id, "it is not started").await?;
        let record = self.start_stopped(&stopped).await?;
        self.journal_note(&record.id, "start", serde_json::json!({}), serde_json::json!({"pid": record.pid})).await;
        self.events.emit(&record.id, EventKind::Started, None, None);
        Ok(record)
    }

    async fn start_stopped(&self, stopped: &Sandbox) -> Result<Sandbox, EngineError> {
        let spec = self.spec_of(&stopped.id)?;
        let booted =
            self.boot(&stopped.id, &spec, stopped.created_at_ms, stopped.parent.clone(), stopped.owner.clone()).await;
        if booted.is_err() {
            // Still stopped, files and all.
            let _ = self.store.sandbox_live(stopped);
        }
        // A new runtime has no desktop running: started again as at create.
        if let (Ok(record), Some(d)) = (&booted, spec.desktop) {
            self.start_desktop(&record.id, d).await.map_err(|e| {
                EngineError::Conflict(format!("sandbox {} started, but its desktop did not: {e}", record.id))
            })?;
        }
        booted
    }

    /// A fresh runtime from the image, on the sandbox's kept files (the project survives, the runtime is
    /// disposable): stop if running, then start.
    pub async fn rebuild(&self, id: &str) -> Result<Sandbox, EngineError> {
        let record = self.get(id).await?;
        self.admit_record(&record.id, "it is not rebuilt").await?;
        let admitted = self.admit(&record.id, O::Rebuild).await?;
        admitted.step()?;
        let Admitted { found, hold: _held, .. } = admitted;
        let stopped = match found {
            Found::Live(live) => self.stop_live(&live, &record.id).await?,
            // Hibernated: its processes are given up, as a running sandbox's are.
            Found::Kept(kept) if kept.state == SandboxState::Hibernated => {
                self.discard_hibernation(kept, "rebuild").await?
            }
            Found::Kept(kept) => kept,
        };
        let started = self.start_stopped(&stopped).await?;
        self.journal_note(&started.id, "rebuild", serde_json::json!({}), serde_json::json!({"pid": started.pid})).await;
        self.events.emit(&started.id, EventKind::Started, None, None);
        Ok(started)
    }

    /// Freeze a running sandbox for the instant of `work` (a consistent copy of its files), then thaw it, as
    /// the table says of `op` (a fork's or a snapshot's). Returns `work`'s result and whether the sandbox was
    /// frozen for it (a stopped one has nothing to freeze; a paused one is frozen already, and stays so).
    pub(super) async fn frozen<T>(&self, id: &str, op: O, work: impl Future<Output = T>) -> (T, bool) {
        let Ok(live) = self.live(id).await else { return (work.await, false) };
        let state = live.record.lock().await.state;
        if !lifecycle::step(state, op).is_some_and(|s| s.effect == lifecycle::Effect::Freeze) {
            return (work.await, state == SandboxState::Paused);
        }
        // Without a freezer that works, the copy is taken without it.
        let frozen = self.freeze_for(id, op).ok();
        let out = work.await;
        let was = frozen.is_some();
        if let Some(f) = frozen {
            f.thaw();
        }
        (out, was)
    }

    /// Capture a sandbox's files (root changes and workspace) as a read-only snapshot.
    /// `with_processes`: with a checkpoint of its processes too (see `fork_processes`).
    pub async fn snapshot(
        &self,
        id: &str,
        name: Option<String>,
        with_processes: bool,
    ) -> Result<Snapshot, EngineError> {
        let record = self.get(id).await?;
        if let Some(n) = &name {
            berth_runtime::spec::check_name(n).map_err(|e| EngineError::invalid(e.to_string()))?;
            if self.store.snapshot(n)?.is_some() {
                return Err(EngineError::Conflict(format!("a snapshot named {n:?} already exists")));
            }
        }
        self.admit_record(&record.id, "no snapshot is taken").await?;
        let admitted = self.admit(&record.id, O::Snapshot { processes: with_processes }).await?;
        admitted.step()?;
        let (snap, frozen) = self.take_snapshot(&record, name, with_processes).await?;
        self.journal_note(
            &record.id,
            "snapshot",
            serde_json::json!({"name": snap.name, "with_processes": with_processes}),
            serde_json::json!({"snapshot": snap.id, "frozen": frozen}),
        )
        .await;
        self.events.emit(&record.id, EventKind::Snapshotted, None, None);
        Ok(snap)
    }

    async fn take_snapshot(
        &self,
        record: &Sandbox,
        name: Option<String>,
        with_processes: bool,
    ) -> Result<(Snapshot, bool), EngineError> {
        let sid = berth_runtime::new_id().map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?;
        let (src, dst) = (self.state_dir(&record.id), self.snapshot_dir(&sid));
        let clone = self.pool_clone(src, dst, true);
        let (cloned, frozen) = self.snapshot_files(&record.id, &sid, with_processes, clone).await;
        cloned?;
        let snap = Snapshot {
            id: sid,
            name,
            sandbox_id: record.id.clone(),
            image: record.image.clone(),
            created_at_ms: now_ms(),
            origin: "snapshot".into(),
            with_processes,
            tenant: record.tenant.clone(),
        };
        if let Err(e) = self.store.add_snapshot(&snap) {
            let _ = tokio::fs::remove_dir_all(self.snapshot_image_dir(&snap.id)).await;
            let dir = self.snapshot_dir(&snap.id);
            let _ = self.pool_op(move |pool| pool.remove(&dir)).await;
            return Err(e.into());
        }
        Ok((snap, frozen))
    }

    /// The snapshots of the caller's tenant (an operator's: every one).
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, EngineError> {
        let mut all = self.store.snapshots()?;
        all.retain(|s| self.may_use(s.tenant.as_deref(), false));
        Ok(all)
    }

    /// A snapshot of the caller's tenant, by id or name; another tenant's is as one that does not exist.
    pub fn get_snapshot(&self, id_or_name: &str) -> Result<Snapshot, EngineError> {
        match self.store.snapshot(id_or_name)? {
            Some(s) if self.may_use(s.tenant.as_deref(), false) => Ok(s),
            _ => Err(EngineError::NoSnapshot(id_or_name.to_string())),
        }
    }

    /// Remove a snapshot no sandbox has as its parent (their diffs, exports and receipts' patches need it).
    pub async fn remove_snapshot(&self, id_or_name: &str) -> Result<Snapshot, EngineError> {
        let snap = self.get_snapshot(id_or_name)?;
        let users: Vec<String> =
            self.list().await.into_iter().filter(|s| s.parent.as_deref() == Some(&snap.id)).map(|s| s.id).collect();
        if !users.is_empty() {
            return Err(EngineError::Conflict(format!(
                "snapshot {} is the parent of {}: remove those sandboxes first",
                snap.id,
                users.join(", ")
            )));
        }
        self.drop_snapshot(&snap.id).await
    }

    /// Remove a snapshot's files and record.
    pub(super) async fn drop_snapshot(&self, id: &str) -> Result<Snapshot, EngineError> {
        let snap = self.get_snapshot(id)?;
        let dir = self.snapshot_dir(&snap.id);
        self.pool_op(move |pool| pool.remove(&dir)).await?;
        self.drop_snapshot_image(&snap.id).await;
        self.store.remove_snapshot(&snap.id)?;
        Ok(snap)
    }

    /// Replace a sandbox's files with a snapshot's (stopping and starting it around the swap if it runs).
    pub async fn restore(&self, id: &str, snapshot: &str) -> Result<Sandbox, EngineError> {
        let record = self.get(id).await?;
        let snap = self.get_snapshot(snapshot)?;
        if snap.image != record.image {
            return Err(EngineError::Conflict(format!(
                "snapshot {} was taken on the image {:?} and sandbox {} runs {:?}: restore it into a sandbox made \
                 with berth create --from {} instead",
                snap.id, snap.image, record.id, record.image, snap.id
            )));
        }
        self.admit_record(&record.id, "no snapshot is restored").await?;
        let admitted = self.admit(&record.id, O::Restore).await?;
        admitted.step()?;
        let src = self.snapshot_dir(&snap.id);
        let out = self.replace_files(&record, false, move |pool, fresh| pool.clone_volume(&src, fresh, false)).await?;
        self.journal_note(&record.id, "restore", serde_json::json!({"snapshot": snap.id}), serde_json::json!({})).await;
        self.events.emit(&record.id, EventKind::Restored, None, None);
        Ok(out)
    }

    /// Return a sandbox to its image's clean state, keeping /workspace if asked.
    pub async fn reset(&self, id: &str, keep_workspace: bool) -> Result<Sandbox, EngineError> {
        let record = self.get(id).await?;
        self.admit_record(&record.id, "it is not reset").await?;
        let admitted = self.admit(&record.id, O::Reset).await?;
        admitted.step()?;
        let current = self.state_dir(&record.id);
        let out = self
            .replace_files(&record, keep_workspace, move |pool, fresh| {
                if !keep_workspace {
                    return pool.create(fresh);
                }
                pool.clone_volume(&current, fresh, false)?;
                for layer in ["upper", "overlay-work"] {
                    let dir = fresh.join(layer);
                    if dir.exists() {
                        std::fs::remove_dir_all(&dir).map_err(|source| berth_storage::StorageError::Io {
                            action: "clear the root file system changes in",
                            path: dir.clone(),
                            source,
                        })?;
                    }
                }
                Ok(())
            })
            .await?;
        self.journal_note(
            &record.id,
            "reset",
            serde_json::json!({"keep_workspace": keep_workspace}),
            serde_json::json!({}),
        )
        .await;
        self.events.emit(&record.id, EventKind::Restored, None, None);
        Ok(out)
    }

    /// Build new files with `make` beside the sandbox's, then swap them in while it is stopped: one atomic
    /// exchange of the two names, so a crash at any instant leaves the sandbox with either its old files or
    /// its new ones, never neither. `from_current`: `make` copies the current files, so it runs once the
    /// sandbox is stopped (nothing written meanwhile is lost); otherwise before, to keep the downtime short.
    async fn replace_files(
        &self,
        record: &Sandbox,
        from_current: bool,
        make: impl FnOnce(&Pool, &std::path::Path) -> Result<(), berth_storage::StorageError> + Send + 'static,
    ) -> Result<Sandbox, EngineError> {
        let current = self.state_dir(&record.id);
        // Unique: after the exchange it holds the old files, removed in the background.
        let fresh = current.with_extension(format!("new-{}", now_ms()));
        let mut made = {
            let fresh = fresh.clone();
            Some(move || self.pool_op(move |pool| make(pool, &fresh)))
        };
        if !from_current && let Some(m) = made.take() {
            m().await?;
        }
        let live = self.live(&record.id).await.ok();
        // A hibernated sandbox's processes cannot go on over other files: they are given up, and it is started
        // again on the new ones, as a running sandbox is.
        let hibernated = live.is_none() && record.state == SandboxState::Hibernated;
        if hibernated && let Err(e) = self.discard_hibernation(record.clone(), "its files were replaced").await {
            let fresh = fresh.clone();
            let _ = self.pool_op(move |pool| pool.remove(&fresh)).await;
            return Err(e);
        }
        if let Some(l) = &live
            && let Err(e) = self.stop_live(l, &record.id).await
        {
            let fresh = fresh.clone();
            let _ = self.pool_op(move |pool| pool.remove(&fresh)).await;
            return Err(e);
        }
        let prepared = match made.take() {
            Some(m) => m().await,
            None => Ok(()),
        };
        let swapped = match prepared {
            Ok(()) => {
                let (current, fresh) = (current.clone(), fresh.clone());
                self.pool_op(move |_pool| {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &current,
                        rustix::fs::CWD,
                        &fresh,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .map_err(|e| berth_storage::StorageError::Io {
                        action: "swap in the new files at",
                        path: current.clone(),
                        source: e.into(),
                    })
                })
                .await
            }
            Err(e) => Err(e),
        };
        let quota = match swapped {
            Ok(()) => self.apply_quota(&record.id, record.disk_bytes).await,
            Err(e) => Err(e),
        };
        let stopped = self.stopped_record(&record.id)?.unwrap_or_else(|| record.clone());
        let result = if live.is_some() || hibernated { self.start_stopped(&stopped).await } else { Ok(stopped) };
        // The replaced files (or, on a failure, the unused new ones) go after the sandbox is back: deleting a big
        // volume is slow and nothing waits on it.
        let pool = self.pool();
        tokio::task::spawn_blocking(move || pool.remove(&fresh));
        quota?;
        result
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_operation_on_a_busy_sandbox_is_refused_until_the_first_ends() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path()).await.unwrap();
        let first = e.holds.hold("0123456789ab", O::Snapshot { processes: false }).unwrap();
        let err = e.holds.hold("0123456789ab", O::Restore).err().unwrap();
        assert_eq!(err.code(), berth_api::ErrorCode::Conflict);
        assert!(err.to_string().contains("busy (taking a snapshot)"), "{err}");
        let other = e.holds.hold("ba9876543210", O::Stop).unwrap();
        drop(first);
        assert!(e.holds.hold("0123456789ab", O::Restore).is_ok());
        drop(other);
    }
}
