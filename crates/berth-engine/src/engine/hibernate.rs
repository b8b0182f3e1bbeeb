//! Hibernation: a sandbox's processes and memory written to disk with CRIU and its RAM released, then brought
//! back — by `wake`, or by any activity (an exec, a shell, a context run, a file call), as a paused one is.
//!
//! A hibernated sandbox is kept like a stopped one (a record, its files, no shim) plus its image under
//! `<root>/hibernate/<id>/` and its host id block, reserved so that its restored user namespace maps as it
//! did. Its session token stays valid: its processes carry it.

use std::path::PathBuf;
use std::sync::Arc;

use berth_api::{Sandbox, SandboxState};

use super::lifecycle::{self, Admit, Admitted, Found, Now, Operation};
use super::live::Live;
use super::{Engine, now_ms};
use crate::EngineError;
use crate::shim::{ShimReply, ShimRequest};
use berth_api::EventKind;

impl Engine {
    /// Where sandbox `id`'s image is while it hibernates.
    pub(crate) fn hibernate_dir(&self, id: &str) -> PathBuf {
        self.root.join("hibernate").join(id)
    }

    /// Write a running (or paused) sandbox's processes to disk and end them. `why`: `asked` or `idle`.
    pub async fn hibernate(&self, id: &str, why: &str) -> Result<Sandbox, EngineError> {
        let Admitted { found, sid, state, admit, hold: _held } = self.admit(id, Operation::Hibernate).await?;
        let (step, live) = match (admit, found) {
            (Admit::Go(step), Found::Live(live)) => (step, live),
            (Admit::Already, Found::Kept(s)) => return Ok(s),
            _ => return Err(lifecycle::cannot(&sid, state)),
        };
        let isolation = live.record.lock().await.isolation;
        // Its backend writes it: with the daemon's CRIU where it needs one (gVisor has its own checkpoint).
        let backend = berth_runtime::backend(isolation);
        if !backend.supports().hibernate {
            return Err(EngineError::Unsupported(format!("a {} sandbox cannot hibernate", backend.name())));
        }
        let criu = self.criu_for(backend)?;
        let held = match backend.supports().hibernate_holds_execs {
            false => {
                self.check_nothing_held(&live, &sid, backend.name()).await?;
                super::hibernate_execs::Held::default()
            }
            true => {
                self.check_hibernatable(&live, &sid, "hibernate", true).await?;
                // Its detached execs sleep with it (see `hibernate_execs`); any other running exec refuses. Released if
                // it fails.
                self.hold_execs(&live, &sid).await?
            }
        };
        let init_pid = live.record.lock().await.pid.unwrap_or(0);
        let dir = self.hibernate_dir(&sid);
        let _ = tokio::fs::remove_dir_all(&dir).await;
        // Images are the sandboxes' memory: only host root enters the directory that holds them.
        let parent = self.root.join("hibernate");
        tokio::fs::create_dir_all(&parent).await.map_err(EngineError::Log)?;
        tokio::fs::set_permissions(&parent, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .await
            .map_err(EngineError::Log)?;
        tokio::fs::create_dir_all(&dir).await.map_err(EngineError::Log)?;
        tokio::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .await
            .map_err(EngineError::Log)?;
        // What its runtime burned, carried over to the next one (whose cgroup counts from zero).
        let cpu_ns = self.cgroups.as_ref().and_then(|h| h.open(&sid).usage().ok()).map(|u| u.cpu_ns);
        // CRIU seizes the processes itself; frozen by a pause, they are thawed first (and paused again if the
        // hibernation fails).
        let was_paused = step.from == SandboxState::Paused;
        self.thaw_to_end(&live).await;
        // Its watches hold sockets that lead out of it: lifted first, and ended once it sleeps.
        self.lift_watches(&live).await;
        let started = std::time::Instant::now();
        let req = ShimRequest::Hibernate {
            dir: dir.clone(),
            criu: criu.as_ref().map(|c| c.path.clone()),
            criu_version: criu.as_ref().map(|c| c.version.clone()),
        };
        // Its init ends with the dump: the reaper must not take that for a sandbox that died.
        let down = self.holds.tear_down(&sid);
        let reply = self.ask_shim(&sid, req).await;
        // No longer live before the reaper may look again; hibernated, as far as anyone asking can tell, from
        // the moment it is not live (a wake asked meanwhile is refused as busy until this call is done).
        let mut hibernated = None;
        if let Ok(ShimReply::Hibernated { .. }) = reply {
            let mut record = live.record.lock().await.clone();
            step.end(&mut record);
            record.hibernated_at_ms = Some(now_ms());
            let _ = self.store.sandbox_live(&record);
            self.sandboxes.lock().await.remove(&sid);
            hibernated = Some(record);
        }
        drop(down);
        match &hibernated {
            Some(_) => self.end_watches(&live, &format!("sandbox {sid} hibernated: watch again once it is woken")),
            None => self.restore_watches(&live),
        }
        let bytes = match reply {
            Ok(ShimReply::Hibernated { bytes, .. }) => bytes,
            Ok(ShimReply::Error { message }) => {
                drop(held);
                let message = self.keep_criu_log(&sid, &dir, "dump.log", message).await;
                let _ = tokio::fs::remove_dir_all(&dir).await;
                // Paused again under this call's own hold (a pause asked for now would find it held).
                if was_paused && let Err(e) = self.pause_held(&live, "asked").await {
                    crate::log::warn(
                        "a sandbox that could not hibernate could not be paused again",
                        serde_json::json!({"sandbox": sid, "error": e.to_string()}),
                    );
                }
                return Err(EngineError::Conflict(format!(
                    "sandbox {sid} could not hibernate, and runs on as it was: {message}"
                )));
            }
            Ok(_) => return Err(EngineError::ShimGone),
            Err(e) => return Err(e),
        };
        let asleep = self.put_to_sleep(&live, &sid, &dir, held, init_pid).await;
        let record = hibernated.ok_or(EngineError::ShimGone)?;
        // A persistent sandbox's hibernation outlives a host crash: its image is on disk before the call
        // returns (an ephemeral one's need not be: it does not wake after a host restart).
        if record.persistent {
            let image = dir.clone();
            let synced = tokio::task::spawn_blocking(move || berth_runtime::checkpoint::sync_image(&image)).await;
            if let Ok(Err(e)) | Err(e) = synced.map_err(std::io::Error::other) {
                crate::log::warn(
                    "hibernation image not synced",
                    serde_json::json!({"sandbox": sid, "error": e.to_string()}),
                );
            }
        }
        let ms = started.elapsed().as_millis() as u64;
        // Written once more: the first write, made before anything else, did not stop for an error.
        self.store.sandbox_live(&record)?;
        if let Ok(mut m) = live.meter.lock() {
            self.save_meter(&sid, &mut m, cpu_ns);
        }
        live.note(
            "hibernate",
            serde_json::json!({"reason": why}),
            serde_json::json!({"image_bytes": bytes, "ms": ms, "execs_asleep": asleep}),
        );
        self.events.emit(&sid, EventKind::Hibernated, None, None);
        Ok(record)
    }

    /// A failed checkpoint's CRIU log, kept beside the sandbox's exec logs before its image directory goes
    /// (`<root>/logs/<id>/criu-failed.log`: the last failure's only, removed with the sandbox), and `message`
    /// naming it there.
    pub(super) async fn keep_criu_log(&self, sid: &str, dir: &std::path::Path, log: &str, message: String) -> String {
        let from = dir.join(log);
        let to = self.root.join("logs").join(sid).join("criu-failed.log");
        let kept = match tokio::fs::create_dir_all(self.root.join("logs").join(sid)).await {
            Ok(()) => tokio::fs::rename(&from, &to).await.is_ok(),
            Err(_) => false,
        };
        match kept {
            true => message.replace(&from.display().to_string(), &to.display().to_string()),
            false => message,
        }
    }

    /// Connections open through its previews lead out of the sandbox: neither CRIU nor gVisor can write them.
    fn check_previews_closed(live: &Live, sid: &str, doing: &str) -> Result<(), EngineError> {
        match live.previews_open.load(std::sync::atomic::Ordering::Acquire) {
            0 => Ok(()),
            n => Err(EngineError::Conflict(format!(
                "sandbox {sid} cannot {doing} while {n} connection(s) through its preview URLs are open: their \
                 sockets lead out of the sandbox and cannot be written to disk; try again once they are closed"
            ))),
        }
    }

    /// Why `live` cannot be checkpointed now, if it cannot (`doing`: what was asked, as a verb). With `holds`
    /// (hibernation) its detached execs and idle contexts sleep with it; the copies a fork makes could not take
    /// them over, so without it any running exec or code context refuses.
    pub(super) async fn check_hibernatable(
        &self,
        live: &Arc<Live>,
        sid: &str,
        doing: &str,
        holds: bool,
    ) -> Result<(), EngineError> {
        Self::check_previews_closed(live, sid, doing)?;
        let pid = live.record.lock().await.pid.unwrap_or(0);
        // An idle context sleeps with the sandbox (its interpreter is a detached exec); one running code has
        // a connection from berth open, which cannot be written to disk.
        let contexts: Vec<String> = self
            .contexts_of(sid, pid)
            .await
            .iter()
            .filter(|c| !holds || c.run.try_lock().is_err())
            .filter_map(|c| c.record.lock().ok().map(|r| r.id.clone()))
            .collect();
        if !contexts.is_empty() && holds {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid} cannot {doing} while its code contexts run code ({}): berth talks to their \
                 interpreters through connections that cannot be written to disk; wait for the runs to end or \
                 interrupt them, and try again",
                contexts.join(", ")
            )));
        }
        if !contexts.is_empty() {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid} cannot {doing} while it has code contexts ({}): their interpreters talk to berth \
                 through pipes a copy could not take over; remove them (berth context rm) and try again",
                contexts.join(", ")
            )));
        }
        let running = match holds {
            true => vec![],
            false => running_execs(live).await,
        };
        if !running.is_empty() || live.starting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid} cannot {doing} while execs or shells are running ({}): their output streams lead \
                 to berth; wait for them or kill them, and try again (processes they left in the background are \
                 fine)",
                if running.is_empty() { "one starting".into() } else { running.join(", ") }
            )));
        }
        Ok(())
    }

    /// Why a sandbox whose backend (`name`) keeps no execs asleep cannot be checkpointed now, if it cannot: a
    /// descriptor of the host's that a process inside holds (a running command's streams, a code context's
    /// connection) cannot be written to disk by such a backend (gVisor), so nothing that berth is talking to
    /// may be running.
    async fn check_nothing_held(&self, live: &Arc<Live>, sid: &str, name: &str) -> Result<(), EngineError> {
        Self::check_previews_closed(live, sid, "hibernate")?;
        let pid = live.record.lock().await.pid.unwrap_or(0);
        let contexts: Vec<String> = self
            .contexts_of(sid, pid)
            .await
            .iter()
            .filter_map(|c| c.record.lock().ok().map(|r| r.id.clone()))
            .collect();
        if !contexts.is_empty() {
            return Err(EngineError::Conflict(format!(
                "{name} sandbox {sid} cannot hibernate while it has code contexts ({}): their interpreters talk to \
                 berth through streams of the host's, which {name}'s checkpoint cannot write to disk; remove them \
                 (berth context rm) and try again",
                contexts.join(", ")
            )));
        }
        let running = running_execs(live).await;
        if !running.is_empty() || live.starting.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return Err(EngineError::Conflict(format!(
                "{name} sandbox {sid} cannot hibernate while execs or shells are running ({}), detached ones \
                 included: their streams are the host's, which {name}'s checkpoint cannot write to disk; wait for \
                 them or kill them, and try again (processes they left in the background are fine)",
                if running.is_empty() { "one starting".into() } else { running.join(", ") }
            )));
        }
        Ok(())
    }

    /// Bring a hibernated sandbox back; an awake one is returned as it is. `cause` becomes its last activity.
    pub async fn wake(&self, id: &str, cause: &str) -> Result<Sandbox, EngineError> {
        // A hibernation that has written the sandbox's state may still be finishing (its last files, its
        // guard): a call that wakes the sandbox then waits for it rather than being refused. (Woken by someone
        // else meanwhile, it is found awake.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let Admitted { found, sid, state, admit, hold: _held } = loop {
            match self.admit(id, Operation::Wake).await {
                Err(EngineError::Busy { op, .. })
                    if Some(op) == Operation::Hibernate.label() && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => break other?,
            }
        };
        let hib = match (admit, found) {
            (Admit::Go(_), Found::Kept(hib)) => hib,
            (Admit::Already, Found::Live(l)) => return Ok(l.record.lock().await.clone()),
            _ => return Err(lifecycle::cannot(&sid, state)),
        };
        let criu = self.criu_for(berth_runtime::backend(hib.isolation))?;
        let spec = self.spec_of(&hib.id)?;
        let dir = self.hibernate_dir(&hib.id);
        let started = std::time::Instant::now();
        let mut pipes = self.wake_pipes(&dir)?;
        let for_shim = std::mem::take(&mut pipes.shim);
        let woke = self
            .boot_from(
                &hib.id,
                &spec,
                hib.created_at_ms,
                hib.parent.clone(),
                hib.owner.clone(),
                &mut None,
                Some(super::create::Restore { dir: dir.clone(), criu, pipes: for_shim, fork: false }),
            )
            .await;
        let mut record = match woke {
            Ok(r) => r,
            Err(e) => {
                // Still hibernated, image and all.
                let _ = self.store.sandbox_live(&hib);
                return Err(e);
            }
        };
        // Its execs asleep go on, and its contexts are the woken init's, before anything else reaches them.
        let woken = self.resume_execs(&record.id, pipes).await;
        let ms = started.elapsed().as_millis() as u64;
        let hibernated_ms = hib.hibernated_at_ms.map(|t| now_ms().saturating_sub(t)).unwrap_or(0);
        if let Ok(live) = self.live(&record.id).await {
            {
                let mut r = live.record.lock().await;
                r.last_activity = Some(cause.to_string());
                r.last_activity_ms = now_ms();
                r.hibernated_at_ms = None;
                // The TTL of a sandbox whose clock counts only time running skips the time it slept.
                if hib.ttl_active_only {
                    r.expires_at_ms = hib.expires_at_ms.map(|t| t.saturating_add(hibernated_ms));
                } else {
                    r.expires_at_ms = hib.expires_at_ms;
                }
                self.rearm_ttl(&mut r);
                record = r.clone();
            }
            if let Ok(mut m) = live.meter.lock() {
                m.hibernated_ms += hibernated_ms;
                m.last_sample_ms = 0;
            }
            self.store.sandbox_live(&record)?;
            live.note(
                "wake",
                serde_json::json!({"cause": cause}),
                serde_json::json!({"pid": record.pid, "ms": ms, "hibernated_ms": hibernated_ms, "execs_woken": woken}),
            );
        }
        let _ = tokio::fs::remove_dir_all(&dir).await;
        self.prune_init_copies();
        self.events.emit(&record.id, EventKind::Woken, None, None);
        Ok(record)
    }

    /// The live sandbox `id`, woken first if it hibernates (activity of kind `cause`).
    pub(super) async fn live_or_wake(&self, id: &str, cause: &str) -> Result<Arc<Live>, EngineError> {
        let s = match self.find(id).await? {
            Found::Live(l) => return Ok(l),
            Found::Kept(s) => s,
        };
        match lifecycle::admit(Now { state: s.state, busy: None }, Operation::Activity) {
            Ok(Admit::First(Operation::Wake)) => {
                self.wake(&s.id, cause).await?;
                self.live(&s.id).await
            }
            Ok(_) => self.live(&s.id).await,
            Err(refusal) => Err(refusal.into_error(&s.id, s.state)),
        }
    }

    /// A hibernated sandbox removed: its image and its reserved id block go.
    pub(super) async fn forget_hibernation(&self, id: &str) {
        self.forget_asleep(id);
        let dir = self.hibernate_dir(id);
        if !dir.exists() {
            return;
        }
        // Only an image whose backend keeps a host id block reserved (not gVisor's) has one to give back.
        if let Ok(m) = berth_runtime::checkpoint::read_manifest(&dir)
            && let Some(slot) = m.reserved_slot()
        {
            let owner = berth_runtime::reservation_owner(&self.root, id);
            berth_runtime::ids::unreserve(std::path::Path::new(berth_runtime::ids::CLAIMS_DIR), slot, &owner);
        }
        let _ = tokio::fs::remove_dir_all(&dir).await;
        self.prune_init_copies();
    }

    /// The kept copies of init's binary that no image links to any more go.
    pub(super) fn prune_init_copies(&self) {
        use std::os::unix::fs::MetadataExt;
        let Ok(entries) = std::fs::read_dir(self.root.join("hibernate").join(".init")) else { return };
        for e in entries.flatten() {
            if e.metadata().is_ok_and(|m| m.nlink() == 1) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// At start, each hibernated sandbox once: an ephemeral one that hibernated before the host restarted is
    /// gone (its files were never synced: see `volatile` in the runtime's spec); the others get their id
    /// blocks reserved again (after a reboot the reservations, on a tmpfs, are gone).
    pub(super) async fn take_up_hibernated(&self) {
        let boot = berth_runtime::checkpoint::boot_id();
        for s in self.store.stopped().unwrap_or_default() {
            if s.state != SandboxState::Hibernated {
                continue;
            }
            let Ok(m) = berth_runtime::checkpoint::read_manifest(&self.hibernate_dir(&s.id)) else { continue };
            if !s.persistent && !m.boot_id.is_empty() && m.boot_id != boot {
                self.forget_hibernation(&s.id).await;
                let why = "the host restarted while it hibernated, and an ephemeral sandbox's hibernation does not \
                           outlive its host";
                self.supervisor_gone(&s.id, why, "lost").await;
                continue;
            }
            let Some(slot) = m.reserved_slot() else { continue };
            let owner = berth_runtime::reservation_owner(&self.root, &s.id);
            let _ = berth_runtime::ids::reserve(std::path::Path::new(berth_runtime::ids::CLAIMS_DIR), slot, &owner);
        }
    }
}

/// The execs (and shells) of `live` still running, as `ID (ARGV)`.
async fn running_execs(live: &Live) -> Vec<String> {
    let execs = live.execs.lock().await;
    execs
        .iter()
        .filter(|(_, e)| e.done.borrow().is_none())
        .map(|(id, e)| format!("{id} ({})", e.argv.join(" ")))
        .collect()
}

impl Engine {
    /// The daemon's CRIU, where backend `b` needs it to write or restore its sandboxes' processes; why this
    /// host cannot otherwise.
    pub(super) fn criu_for(
        &self,
        b: &dyn berth_runtime::Backend,
    ) -> Result<Option<berth_runtime::checkpoint::Criu>, EngineError> {
        if !b.supports().needs_criu {
            return Ok(None);
        }
        self.criu.clone().map(Some).map_err(EngineError::Unsupported)
    }

    /// Say once, at start, whether sandboxes can hibernate here, and if not, why.
    pub(super) fn log_criu(&self) {
        match &self.criu {
            Ok(c) => crate::log::info(
                "hibernation",
                serde_json::json!({"criu": c.path.display().to_string(), "version": c.version}),
            ),
            Err(why) => crate::log::warn("hibernation unavailable", serde_json::json!({"why": why})),
        }
    }
}
