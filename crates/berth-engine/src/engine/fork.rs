//! Forks (copy-on-write copies of a sandbox's files as new sandboxes) and named volumes.

use std::path::PathBuf;

use berth_api::{EventKind, Forked, Snapshot, Volume};

use super::lifecycle::Operation;
use super::projects::MAX_FORKS;
use super::{Engine, now_ms};
use crate::EngineError;

impl Engine {
    /// `count` new sandboxes whose files are copy-on-write copies of `id`'s at this instant, each with its own
    /// limits and lifecycle. The instant is kept as a snapshot: every child's parent. `with_processes`: the
    /// children are restored from a checkpoint of that instant too, and continue its running programs (see
    /// `fork_processes`).
    pub async fn fork(&self, id: &str, count: u32, with_processes: bool) -> Result<Forked, EngineError> {
        if !(1..=MAX_FORKS).contains(&count) {
            return Err(EngineError::invalid(format!("count must be between 1 and {MAX_FORKS}")));
        }
        let parent = self.get(id).await?;
        let mut spec = self.spec_of(&parent.id)?;
        spec.tenant = parent.tenant.clone();
        // Its children are its tenant's: counted against its quota, checked one create at a time.
        let tenant_lock = parent.tenant.as_deref().map(|t| self.tenant_lock(t));
        let _one_tenant_create = match &tenant_lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        if let Some(t) = &parent.tenant {
            self.within_quota(t, &mut spec.clone(), u64::from(count)).await?;
        }
        self.admit_record(&parent.id, "it is not forked").await?;
        let op = Operation::Fork { processes: with_processes };
        let admitted = self.admit(&parent.id, op).await?;
        admitted.step()?;
        let live = match with_processes {
            true => Some(self.forkable(&parent.id, op, "be forked with its processes").await?),
            false => None,
        };
        let mut ids = Vec::new();
        for _ in 0..count {
            ids.push(berth_runtime::new_id().map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?);
        }
        let base = berth_runtime::new_id().map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?;
        let src = self.state_dir(&parent.id);
        let mut dsts: Vec<PathBuf> = ids.iter().map(|i| self.state_dir(i)).collect();
        dsts.push(self.snapshot_dir(&base));
        let all = dsts.clone();
        let clone = self.pool_op(move |pool| pool.clone_many(&src, &dsts));
        let (cloned, frozen) = match &live {
            Some(l) => (self.checkpointed(l, &parent.id, op, self.fork_image_dir(&base), clone).await.map(Some), true),
            None => {
                let (cloned, frozen) = self.frozen(&parent.id, op, clone).await;
                (cloned.map(|()| None), frozen)
            }
        };
        let checkpoint = match cloned {
            Ok(c) => c,
            Err(e) => {
                let _ = self.pool_op(move |pool| all.iter().try_for_each(|d| pool.remove(d))).await;
                return Err(e);
            }
        };
        let snap = Snapshot {
            id: base.clone(),
            name: None,
            sandbox_id: parent.id.clone(),
            image: parent.image.clone(),
            created_at_ms: now_ms(),
            origin: "fork".into(),
            with_processes: false,
            tenant: parent.tenant.clone(),
        };
        if let Err(e) = self.store.add_snapshot(&snap) {
            if let Some(c) = &checkpoint {
                self.drop_checkpoint(c, &[]).await;
            }
            return Err(e.into());
        }
        let now = now_ms();
        let boots = ids.iter().map(|child| {
            let mut req = spec.clone();
            req.disk_bytes = req.disk_bytes.or(self.default_disk());
            req.name = Some(format!("{}-{}", parent.name.chars().take(50).collect::<String>(), &child[..6]));
            let base = base.clone();
            let owner = parent.owner.clone();
            let checkpoint = checkpoint.as_ref();
            async move {
                let restore = match checkpoint {
                    Some(c) => self.child_image(c, child).await.map(Some),
                    None => Ok(None),
                };
                let booted = match (restore, self.apply_quota(child, req.disk_bytes).await) {
                    (Ok(restore), Ok(())) => {
                        let fresh = restore.is_none();
                        let booted = self.boot_from(child, &req, now, Some(base), owner, &mut None, restore).await;
                        // A copy of its files alone runs no desktop yet: its own is started as at create.
                        match (booted, req.desktop) {
                            (Ok(record), Some(d)) if fresh => match self.start_desktop(child, d).await {
                                Ok(()) => Ok(record),
                                Err(e) => {
                                    let _ = self.remove(child).await;
                                    Err(e)
                                }
                            },
                            (booted, _) => booted,
                        }
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
                if booted.is_err() {
                    let dir = self.state_dir(child);
                    let _ = self.pool_op(move |pool| pool.remove(&dir)).await;
                    let _ = self.store.sandbox_gone(child, "failed to start", now_ms());
                }
                booted
            }
        });
        let results = futures_util::future::join_all(boots).await;
        if let Some(c) = &checkpoint {
            self.drop_checkpoint(c, &ids).await;
        }
        let mut sandboxes = Vec::new();
        let mut errors = Vec::new();
        let mut failed = None;
        for (r, child) in results.into_iter().zip(&ids) {
            match r {
                Ok(s) => sandboxes.push(s),
                Err(e) => {
                    crate::log::warn(
                        "a fork's copy could not be started",
                        serde_json::json!({"sandbox": parent.id, "copy": child, "error": e.to_string()}),
                    );
                    errors.push(e.to_string());
                    failed = Some(e);
                }
            }
        }
        if sandboxes.is_empty() {
            // No child to be the parent of: the instant's snapshot goes too, and nothing was forked.
            let _ = self.drop_snapshot(&base).await;
            return Err(failed.unwrap_or_else(|| EngineError::Create("no fork could be started".into())));
        }
        for s in &sandboxes {
            self.journal_note(
                &s.id,
                "create",
                serde_json::json!({"fork_of": parent.id, "parent": base}),
                serde_json::json!({"id": s.id, "pid": s.pid}),
            )
            .await;
            self.events.emit(&s.id, EventKind::Created, None, None);
        }
        let ids: Vec<&String> = sandboxes.iter().map(|s| &s.id).collect();
        self.journal_note(
            &parent.id,
            "fork",
            serde_json::json!({"count": count, "with_processes": with_processes}),
            serde_json::json!({
                "ids": ids, "parent": base, "frozen": frozen, "errors": errors,
                "image_bytes": checkpoint.as_ref().map(|c| c.bytes), "checkpoint_ms": checkpoint.as_ref().map(|c| c.ms),
            }),
        )
        .await;
        self.events.emit(&parent.id, EventKind::Forked, None, None);
        Ok(Forked { parent: base, sandboxes, errors })
    }

    pub async fn create_volume(&self, name: &str) -> Result<Volume, EngineError> {
        // Volumes are made and removed one at a time with pods' registrations (see `pods`), so that a check
        // of who uses one holds until what it allowed is done.
        let _one = self.pod_state.lock.lock().await;
        let vol = self.create_volume_locked(name, None).await?;
        let tenant = super::tenancy::tenant_now();
        if tenant.is_some() {
            self.store.set_owner(crate::store::Owned::Volume, name, tenant.as_deref())?;
        }
        Ok(Volume { tenant, ..vol })
    }

    /// Make volume `name` for `owner` (see `Store::add_volume_owned`); the caller holds `PodState::lock`.
    pub(super) async fn create_volume_locked(&self, name: &str, owner: Option<&str>) -> Result<Volume, EngineError> {
        berth_runtime::spec::check_name(name).map_err(|e| EngineError::invalid(e.to_string()))?;
        let now = now_ms();
        if self.store.volumes()?.iter().any(|(v, _)| v == name) {
            return Err(EngineError::Conflict(format!("a volume named {name:?} already exists")));
        }
        // The cluster's first (where there is one): a name another node holds is not made here too.
        self.claim_volume(name).await?;
        if !self.store.add_volume_owned(name, now, owner)? {
            return Err(EngineError::Conflict(format!("a volume named {name:?} already exists")));
        }
        let dir = self.volume_dir(name);
        if let Err(e) = self.pool_op(move |pool| pool.create(&dir)).await {
            let _ = self.store.remove_volume(name);
            self.release_volume(name).await;
            return Err(e);
        }
        Ok(Volume { name: name.to_string(), created_at_ms: now, used_by: vec![], tenant: None })
    }

    /// The volumes of the caller's tenant (an operator's: every one), and who uses each.
    pub fn volumes(&self) -> Result<Vec<Volume>, EngineError> {
        let specs = self.store.specs()?;
        let pods = self.pod_volume_users()?;
        Ok(self
            .store
            .volumes()?
            .into_iter()
            .filter_map(|(name, created_at_ms)| {
                let tenant = self.owner(crate::store::Owned::Volume, &name);
                self.may_use(tenant.as_deref(), false).then_some((name, created_at_ms, tenant))
            })
            .map(|(name, created_at_ms, tenant)| {
                let used_by = specs
                    .iter()
                    .filter(|(_, s)| {
                        s["volumes"].as_array().is_some_and(|vs| vs.iter().any(|v| v["name"].as_str() == Some(&name)))
                    })
                    .map(|(id, _)| id.clone())
                    .chain(pods.iter().filter(|(v, _)| *v == name).map(|(_, p)| p.clone()))
                    .collect();
                Volume { name, created_at_ms, used_by, tenant }
            })
            .collect())
    }

    pub async fn remove_volume(&self, name: &str) -> Result<Volume, EngineError> {
        let _one = self.pod_state.lock.lock().await;
        let vol =
            self.volumes()?.into_iter().find(|v| v.name == name).ok_or_else(|| EngineError::NoVolume(name.into()))?;
        if !vol.used_by.is_empty() {
            return Err(EngineError::Conflict(format!(
                "volume {name:?} is used by {}: remove those sandboxes (and pods) first",
                vol.used_by.join(", ")
            )));
        }
        let dir = self.volume_dir(name);
        self.pool_op(move |pool| pool.remove(&dir)).await?;
        self.store.remove_volume(name)?;
        let _ = self.store.set_owner(crate::store::Owned::Volume, name, None);
        self.release_volume(name).await;
        Ok(vol)
    }
}
