//! After a crash: sandboxes whose supervisor is gone, and files in the pool that no sandbox owns.

use std::collections::HashSet;
use std::time::Duration;

use berth_api::{CreateSandbox, EventKind, Sandbox, SandboxState, Teardown};

use super::lifecycle::{self, Operation};
use super::{Engine, journal_path, now_ms};
use crate::journal::Journal;

impl Engine {
    /// Sandboxes the database says were live but that no shim answers for: they died with their supervisor
    /// (a host crash, a killed shim). A persistent one is stopped, its files kept; an ephemeral one is lost,
    /// its files removed. Either way the database and its journal say so.
    pub(super) async fn account_for_lost(&self) {
        self.await_building().await;
        let adopted: Vec<String> = self.sandboxes.lock().await.keys().cloned().collect();
        let stopped: Vec<String> = self.store.stopped().unwrap_or_default().into_iter().map(|s| s.id).collect();
        for id in self.store.live_ids().unwrap_or_default() {
            if adopted.contains(&id) || stopped.contains(&id) {
                continue;
            }
            self.supervisor_gone(&id, "its supervisor was gone when the daemon started", "lost").await;
        }
        self.sweep_orphan_files().await;
    }

    /// What a dead supervisor would have removed: the sandbox's cgroup (and anything still in it) and its
    /// claims; nothing while a supervisor holds them.
    pub(super) async fn sweep_runtime(&self, id: &str) {
        if let Some(h) = &self.cgroups {
            let (root, h, sid) = (self.root.clone(), h.clone(), id.to_string());
            let _ = tokio::task::spawn_blocking(move || berth_runtime::sweep_sandbox(&root, &h, &sid)).await;
        }
        self.remove_stale_socket(id).await;
    }

    /// A shim's socket that nothing answers on any more (its shim was killed): removed, so that it is neither
    /// left behind nor taken for a supervisor. A socket a shim still answers on is left alone.
    pub(super) async fn remove_stale_socket(&self, id: &str) {
        let path = crate::shim::socket_path(&self.root, id);
        let _ = tokio::task::spawn_blocking(move || {
            if path.exists() && berth_sys::fd::seqpacket_connect(&path).is_err() {
                let _ = std::fs::remove_file(&path);
            }
        })
        .await;
    }

    /// Shims that a daemon which died had started and that are still building their sandbox: each either
    /// finishes (its socket appears and it is adopted) or, finding its daemon gone, tears the sandbox down and
    /// lets go of its claim. Wait for that (at most a minute) rather than count a sandbox being built as lost
    /// and remove its files under it.
    async fn await_building(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let adopted: HashSet<String> = self.sandboxes.lock().await.keys().cloned().collect();
            let building = self
                .store
                .live_ids()
                .unwrap_or_default()
                .into_iter()
                .any(|id| !adopted.contains(&id) && berth_runtime::supervised(&id));
            if !building || std::time::Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.adopt(None).await;
        }
    }

    /// Sandbox `id`'s runtime ended without being asked to (`why`): a persistent sandbox becomes stopped,
    /// anything else is gone (journaled as `action`) with its files.
    pub(super) async fn supervisor_gone(&self, id: &str, why: &str, action: &str) {
        // Its session ended with its runtime: the token goes, and so do the sandboxes it made.
        let _ = self.tokens.revoke_session(id);
        self.sweep_runtime(id).await;
        for child in self.children_of(id).await {
            let _ = Box::pin(self.remove_because(&child, "owner removed")).await;
        }
        let spec: Option<CreateSandbox> =
            self.store.spec(id).ok().flatten().and_then(|v| serde_json::from_value(v).ok());
        let record: Option<Sandbox> = self.store.record(id).ok().flatten();
        let persistent = record.as_ref().is_some_and(|r| r.persistent) || spec.is_some_and(|s| s.persistent);
        // A persistent one is stopped, its files kept; any other is gone.
        let lost = record.map(|r| (lifecycle::step(r.state, Operation::Lost { persistent }), r));
        match lost {
            Some((Some(step), mut record)) if step.to == SandboxState::Stopped => {
                step.end(&mut record);
                let _ = self.store.sandbox_live(&record);
                // Nothing of its runtime is left to be frozen.
                let _ = self.store.set_frozen_for(id, None);
                if let Ok(mut j) = Journal::open(&journal_path(&self.root, id)) {
                    let _ = j.append("local", "stopped", serde_json::json!({}), serde_json::json!({"reason": why}));
                }
                self.events.emit(id, EventKind::Stopped, None, None);
            }
            _ => {
                let reason = format!("{action}: {why}");
                let _ = self.store.sandbox_gone(id, &reason, now_ms());
                if let Ok(mut j) = Journal::open(&journal_path(&self.root, id)) {
                    let _ = j.append("local", action, serde_json::json!({}), serde_json::json!({"reason": reason}));
                }
                let mut t = Teardown { id: id.to_string(), ..Teardown::default() };
                self.discard_files(id, &mut t).await;
                let _ = tokio::fs::remove_file(super::usage::meter_path(&self.root, id)).await;
                self.events.emit(id, EventKind::Removed, None, None);
            }
        }
    }

    /// Whatever a daemon that died mid-operation left in the pool and the data root, found by what no record
    /// points to: it runs before the daemon serves, so nothing is being made meanwhile and every volume
    /// without a record is a leftover. Kept: every volume a record names (a persistent sandbox's files, a
    /// snapshot, a named volume). Removed: half-made clones (`.clone-*`, `.partial-*`), the files a restore or
    /// reset replaced (`<id>.new-*`), files of sandboxes that never got a record or are gone, snapshots no
    /// record knows, fork snapshots no sandbox has as its parent, named volumes without a record, and
    /// half-imported or half-removed images.
    async fn sweep_orphan_files(&self) {
        // A fork's snapshot is its children's parent; one without children (a daemon that died between the
        // snapshot and the first child's record) is nobody's.
        let parents: HashSet<String> = self.list().await.into_iter().filter_map(|s| s.parent).collect();
        for snap in self.store.snapshots().unwrap_or_default() {
            if snap.origin == "fork" && !parents.contains(&snap.id) {
                let _ = self.drop_snapshot(&snap.id).await;
            }
        }
        let snaps: HashSet<String> = self.store.snapshots().unwrap_or_default().into_iter().map(|s| s.id).collect();
        self.sweep_area("snapshots", |name| snaps.contains(name)).await;
        let sandboxes: HashSet<String> = self.store.live_ids().unwrap_or_default().into_iter().collect();
        self.sweep_area("sandboxes", |name| sandboxes.contains(name)).await;
        let volumes: Vec<String> = self.store.volumes().unwrap_or_default().into_iter().map(|(n, _)| n).collect();
        self.sweep_area("volumes", |name| volumes.iter().any(|v| v == name)).await;
        // A volume recorded by a daemon that died before making its files: made now, empty as it was.
        for name in volumes {
            let dir = self.volume_dir(&name);
            if !dir.exists() {
                let _ = self.pool_op(move |pool| pool.create(&dir)).await;
            }
        }
        self.prune_storage().await;
        // Images being imported or removed (`.import-*`, `.removing-*`) when the daemon died.
        if let Ok(entries) = std::fs::read_dir(self.root.join("images")) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with('.') {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }

    /// Remove the quota groups of volumes removed before the kernel had freed them (it keeps such a group,
    /// empty, and every stale group makes each commit a little slower). Run at start and every minute.
    pub(crate) async fn prune_storage(&self) {
        if let Ok(n) = self.pool_op(|pool| pool.prune_qgroups()).await
            && n > 0
        {
            crate::log::info("removed stale quota groups", serde_json::json!({"count": n}));
        }
    }

    /// Remove every entry of the pool's `area` whose name `keep` does not accept.
    async fn sweep_area(&self, area: &str, keep: impl Fn(&str) -> bool) {
        let Ok(entries) = std::fs::read_dir(self.pool().path().join(area)) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep(&name) {
                continue;
            }
            let path = entry.path();
            crate::log::info("removing a leftover", serde_json::json!({"path": path}));
            let _ = self.pool_op(move |pool| pool.remove(&path)).await;
        }
    }
}
