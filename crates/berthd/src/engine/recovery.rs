//! After a crash: sandboxes whose supervisor is gone, and files in the pool that no sandbox owns.

use std::time::Duration;

use berth_api::{CreateSandbox, EventKind, Sandbox, SandboxState, Teardown};

use super::{Engine, journal_path, now_ms};
use crate::journal::Journal;
use crate::shim;

impl Engine {
    /// Sandboxes the database says were live but that no shim answers for: they died with their supervisor
    /// (a host crash, a killed shim). A persistent one is stopped, its files kept; an ephemeral one is lost,
    /// its files removed. Either way the database and its journal say so.
    pub(super) async fn account_for_lost(&self) {
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

    /// Sandbox `id`'s runtime ended without being asked to (`why`): a persistent sandbox becomes stopped,
    /// anything else is gone (journaled as `action`) with its files.
    pub(super) async fn supervisor_gone(&self, id: &str, why: &str, action: &str) {
        // Its session ended with its runtime: the token goes, and so do the sandboxes it made.
        let _ = self.tokens.revoke_session(id);
        for child in self.children_of(id).await {
            let _ = Box::pin(self.remove_because(&child, "owner removed")).await;
        }
        let spec: Option<CreateSandbox> =
            self.store.spec(id).ok().flatten().and_then(|v| serde_json::from_value(v).ok());
        let record: Option<Sandbox> = self.store.record(id).ok().flatten();
        match (spec, record) {
            (spec, Some(mut record)) if record.persistent || spec.as_ref().is_some_and(|s| s.persistent) => {
                record.state = SandboxState::Stopped;
                record.pid = None;
                let _ = self.store.sandbox_live(&record);
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
                self.events.emit(id, EventKind::Removed, None, None);
            }
        }
    }

    /// Files in the pool of sandboxes the database does not know (a daemon that died mid-create), unless a
    /// shim still runs them.
    async fn sweep_orphan_files(&self) {
        // Snapshots the database does not know: a daemon that died while taking one.
        let snaps: Vec<String> = self.store.snapshots().unwrap_or_default().into_iter().map(|s| s.id).collect();
        if let Ok(entries) = std::fs::read_dir(self.pool().path().join("snapshots")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if snaps.contains(&name) || young(&entry) {
                    continue;
                }
                let path = entry.path();
                let _ = self.pool_op(move |pool| pool.remove(&path)).await;
            }
        }
        let known: Vec<String> = self.store.live_ids().unwrap_or_default();
        let Ok(entries) = std::fs::read_dir(self.pool().path().join("sandboxes")) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = name.split('.').next().unwrap_or_default().to_string();
            let transient = name.contains('.');
            if (!transient && known.contains(&id)) || young(&entry) || shim::socket_path(&self.root, &id).exists() {
                continue;
            }
            let path = entry.path();
            let _ = self.pool_op(move |pool| pool.remove(&path)).await;
        }
    }
}

/// Made in the last minute: possibly still being made by someone (a clone in progress).
fn young(entry: &std::fs::DirEntry) -> bool {
    entry
        .metadata()
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|e| e < Duration::from_secs(60))
}
