//! Forks and snapshots with processes: a running sandbox checkpointed with CRIU while it runs on, its files
//! cloned in the same frozen instant, and each child (or sandbox created from the snapshot) restored from
//! that image under its own id, host id block, cgroup, state and name (the image is rewritten for it: see
//! `berth_runtime::retarget`). A fork's checkpoint goes once its children are made; a snapshot's is kept
//! beside its files (`<root>/hibernate/.snapshot-<id>`) until the snapshot is removed.
//!
//! The parent is frozen (unless a pause froze it already), CRIU dumps it with `--leave-running` and freezes
//! it again once the image is written, its files are cloned, and it is thawed: its memory and its files are
//! of one instant. Each child restores from a directory of its own holding hard links to that image, so that
//! the memory is written once whatever the count; the few files it rewrites are its own copies.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Engine;
use super::create::Restore;
use super::lifecycle::{self, Found, Operation};
use super::live::Live;
use crate::EngineError;
use crate::shim::{self, ShimReply, ShimRequest};

/// What a fork with processes holds while its children are made: the checkpoint and what restores it.
pub(super) struct Checkpoint {
    pub dir: PathBuf,
    /// Where the sandbox's backend needs it.
    pub criu: Option<berth_runtime::checkpoint::Criu>,
    pub bytes: u64,
    pub ms: u64,
}

impl Engine {
    /// Sandbox `sid`, live, if its processes can be checkpointed (`doing`: what is refused otherwise); else
    /// why not (a conflict, a sentence).
    pub(super) async fn forkable(&self, sid: &str, op: Operation, doing: &str) -> Result<Arc<Live>, EngineError> {
        let live = match self.find(sid).await? {
            Found::Live(l) => l,
            // Stopped or hibernated: the table says why not.
            Found::Kept(s) => return Err(lifecycle::refused(&s.id, s.state, op)),
        };
        let backend = berth_runtime::backend(live.record.lock().await.isolation);
        // Refused before anything is frozen or written.
        if !backend.supports().checkpoint_running {
            return Err(EngineError::Unsupported(format!(
                "sandbox {sid} cannot {doing}: a {} sandbox's running processes cannot be checkpointed (its files \
                 can: leave out --with-processes)",
                backend.name()
            )));
        }
        self.criu_for(backend)?;
        self.check_hibernatable(&live, sid, doing, false).await?;
        Ok(live)
    }

    /// Checkpoint `live` into a new image at `dir` (it runs on) and run `files` (the clone of its files) in
    /// the same frozen instant. On error nothing of the image is left and the sandbox runs on as it was.
    pub(super) async fn checkpointed(
        &self,
        live: &Arc<Live>,
        sid: &str,
        op: Operation,
        dir: PathBuf,
        files: impl Future<Output = Result<(), EngineError>>,
    ) -> Result<Checkpoint, EngineError> {
        let criu = self.criu_for(berth_runtime::backend(live.record.lock().await.isolation))?;
        if self.cgroups.is_none() {
            return Err(EngineError::Unsupported(
                "forks with processes need the sandbox's cgroup, and this host has none".into(),
            ));
        }
        private_dir(&self.root.join("hibernate")).await?;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        private_dir(&dir).await?;
        // Its watches hold sockets that lead out of it: lifted for the checkpoint, put back after.
        self.lift_watches(live).await;
        let made = self.checkpointed_unwatched(live, sid, op, (dir, criu), files).await;
        self.restore_watches(live);
        made
    }

    async fn checkpointed_unwatched(
        &self,
        live: &Arc<Live>,
        sid: &str,
        op: Operation,
        (dir, criu): (PathBuf, Option<berth_runtime::checkpoint::Criu>),
        files: impl Future<Output = Result<(), EngineError>>,
    ) -> Result<Checkpoint, EngineError> {
        // Frozen by a pause, it stays frozen; else frozen for the instant (with its marker), and thawed after.
        let state = live.record.lock().await.state;
        let frozen = match lifecycle::step(state, op).is_some_and(|s| s.effect == lifecycle::Effect::Freeze) {
            true => Some(self.freeze_for(sid, op).map_err(|e| {
                EngineError::Conflict(format!(
                    "sandbox {sid} could not be frozen for its fork, and runs on as it was: {e}"
                ))
            })?),
            false => None,
        };
        let started = std::time::Instant::now();
        let req = ShimRequest::Checkpoint {
            dir: dir.clone(),
            criu: criu.as_ref().map(|c| c.path.clone()),
            criu_version: criu.as_ref().map(|c| c.version.clone()),
        };
        let made = match self.ask_shim(sid, req).await {
            Ok(ShimReply::Checkpointed { bytes }) => {
                let ms = started.elapsed().as_millis() as u64;
                files.await.map(|()| Checkpoint { dir: dir.clone(), criu: criu.clone(), bytes, ms })
            }
            Ok(ShimReply::Error { message }) => {
                let message = self.keep_criu_log(sid, &dir, "dump.log", message).await;
                Err(EngineError::Conflict(format!(
                    "sandbox {sid} could not be forked with its processes, and runs on as it was: {message}"
                )))
            }
            Ok(_) => Err(EngineError::ShimGone),
            Err(e) => Err(e),
        };
        if let Some(f) = frozen {
            f.thaw();
        }
        if made.is_err() {
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
        made
    }

    /// Snapshot `snapshot` of sandbox `sid`: its files cloned by `clone` in a frozen instant, and its
    /// processes checkpointed in it too if `with_processes`. The clone's result, and whether it was frozen.
    pub(super) async fn snapshot_files(
        &self,
        sid: &str,
        snapshot: &str,
        with_processes: bool,
        clone: impl Future<Output = Result<(), EngineError>>,
    ) -> (Result<(), EngineError>, bool) {
        let op = Operation::Snapshot { processes: with_processes };
        if !with_processes {
            return self.frozen(sid, op, clone).await;
        }
        let live = match self.forkable(sid, op, "be snapshotted with its processes").await {
            Ok(l) => l,
            Err(e) => return (Err(e), false),
        };
        (self.checkpointed(&live, sid, op, self.snapshot_image_dir(snapshot), clone).await.map(|_| ()), true)
    }

    /// Where a fork's checkpoint is while its children are made.
    pub(super) fn fork_image_dir(&self, snapshot: &str) -> PathBuf {
        self.root.join("hibernate").join(format!(".fork-{snapshot}"))
    }

    /// Where a snapshot's checkpoint of its sandbox's processes is kept.
    pub(super) fn snapshot_image_dir(&self, snapshot: &str) -> PathBuf {
        self.root.join("hibernate").join(format!(".snapshot-{snapshot}"))
    }

    /// A snapshot's checkpoint gone with it.
    pub(super) async fn drop_snapshot_image(&self, snapshot: &str) {
        if tokio::fs::remove_dir_all(self.snapshot_image_dir(snapshot)).await.is_ok() {
            self.prune_init_copies();
        }
    }

    /// How sandbox `id` made from snapshot `snap` behind `isolation` starts: restored from its checkpoint, if
    /// it has one.
    pub(super) async fn snapshot_restore(
        &self,
        snap: &berth_api::Snapshot,
        id: &str,
        isolation: berth_api::Isolation,
    ) -> Result<Option<Restore>, EngineError> {
        if !snap.with_processes {
            return Ok(None);
        }
        let criu = self.criu_for(berth_runtime::backend(isolation))?;
        let cp = Checkpoint { dir: self.snapshot_image_dir(&snap.id), criu, bytes: 0, ms: 0 };
        self.child_image(&cp, id).await.map(Some)
    }

    /// Child `id`'s own directory of the checkpoint, to restore from.
    pub(super) async fn child_image(&self, cp: &Checkpoint, id: &str) -> Result<Restore, EngineError> {
        let dir = self.hibernate_dir(id);
        let (from, to) = (cp.dir.clone(), dir.clone());
        tokio::task::spawn_blocking(move || link_all(&from, &to))
            .await
            .map_err(|_| EngineError::Create("preparing a fork's image panicked".into()))?
            .map_err(|e| EngineError::Create(format!("prepare the image of fork {id}: {e}")))?;
        Ok(Restore { dir, criu: cp.criu.clone(), pipes: Vec::new(), fork: true })
    }

    /// The checkpoint's image gone, once its children are made. The kept copy of init's binary stays for
    /// the next checkpoint (copying it costs about as much as writing a small sandbox's memory); the next
    /// wake or removal of a hibernated sandbox prunes it if no image needs it then.
    pub(super) async fn drop_checkpoint(&self, cp: &Checkpoint, children: &[String]) {
        for id in children {
            let _ = tokio::fs::remove_dir_all(self.hibernate_dir(id)).await;
        }
        let _ = tokio::fs::remove_dir_all(&cp.dir).await;
    }

    /// At start: what forks a daemon did not finish (it died while making the children) left of their
    /// checkpoints goes: the checkpoints, and the children's copies (whose manifest names another sandbox).
    pub(super) fn sweep_fork_images(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join("hibernate")) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = name.starts_with(".fork-")
                || (!name.starts_with('.')
                    && berth_runtime::checkpoint::read_manifest(&e.path()).is_ok_and(|m| m.id != name));
            if stale {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        self.prune_init_copies();
    }

    /// One request to sandbox `sid`'s shim, and its reply.
    pub(super) async fn ask_shim(&self, sid: &str, req: ShimRequest) -> Result<ShimReply, EngineError> {
        let path = shim::socket_path(&self.root, sid);
        tokio::task::spawn_blocking(move || -> Result<ShimReply, EngineError> {
            let conn = berth_sys::fd::seqpacket_connect(&path).map_err(|_| EngineError::ShimGone)?;
            berth_init::protocol::send(conn.as_fd(), &req, &[]).map_err(|_| EngineError::ShimGone)?;
            berth_init::protocol::recv::<ShimReply>(conn.as_fd()).map(|(r, _)| r).map_err(|_| EngineError::ShimGone)
        })
        .await
        .map_err(|_| EngineError::ShimGone)?
    }
}

/// A directory only host root enters (images are the sandboxes' memory).
async fn private_dir(dir: &Path) -> Result<(), EngineError> {
    tokio::fs::create_dir_all(dir).await.map_err(EngineError::Log)?;
    tokio::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).await.map_err(EngineError::Log)
}

/// `to` (made anew, private) holding a hard link to every file of `from`.
fn link_all(from: &Path, to: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    for e in std::fs::read_dir(from)?.flatten() {
        if e.file_type()?.is_file() && e.file_name() != "dump.log" {
            std::fs::hard_link(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}
