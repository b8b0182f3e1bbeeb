//! Making a sandbox: checking the request, preparing its files, and starting its runtime through a shim.

use berth_api::{CreateSandbox, EventKind, Sandbox};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Adopted, Engine, actor, adopt, network, now_ms, receipt};
use crate::EngineError;
use crate::shim::{self, ShimReady, ShimStart};

/// A sandbox's runtime brought up from a CRIU image instead of its image's files: the image, the CRIU to
/// restore it with, the new pipes that stand in for those whose other ends berth held (CRIU's name for each
/// old one, and the sandbox's end of its new one), and whether the image is another sandbox's (a fork with
/// its processes) rather than its own from a hibernation.
pub(super) struct Restore {
    pub dir: std::path::PathBuf,
    /// None for a gVisor sandbox's checkpoint, which runsc restores.
    pub criu: Option<berth_runtime::checkpoint::Criu>,
    pub pipes: Vec<(String, std::os::fd::OwnedFd)>,
    pub fork: bool,
}

impl Engine {
    pub async fn create(&self, mut req: CreateSandbox) -> Result<Sandbox, EngineError> {
        if let Some(name) = &req.name {
            berth_runtime::spec::check_name(name).map_err(|e| EngineError::invalid(e.to_string()))?;
            if berth_runtime::spec::check_id(name).is_ok() {
                return Err(EngineError::invalid(format!(
                    "{name:?} looks like a sandbox id: a name may not, so that an id always means one sandbox"
                )));
            }
        }
        if req.pids == Some(0) {
            return Err(EngineError::invalid(
                "pids must be at least 1: the sandbox's init is a process of its own".to_string(),
            ));
        }
        if let Some(c) = req.cpus.filter(|c| !(0.01..=1024.0).contains(c)) {
            return Err(EngineError::invalid(format!("{c} is not a CPU count: use a positive number of cores")));
        }
        for (what, v) in [
            ("ttl_seconds", req.ttl_seconds),
            ("idle_timeout_seconds", req.idle_timeout_seconds),
            ("idle_pause_seconds", req.idle_pause_seconds),
            ("idle_hibernate_seconds", req.idle_hibernate_seconds),
        ] {
            if v.is_some_and(|s| !(s > 0.0 && s <= berth_api::MAX_DURATION_SECONDS)) {
                return Err(EngineError::invalid(format!(
                    "{what} must be a positive number of seconds, at most {} (100 years)",
                    berth_api::MAX_DURATION_SECONDS
                )));
            }
        }
        super::usage::check_budget(&req.budget)?;
        let isolation = *req.isolation.get_or_insert(self.bounds.isolation);
        berth_runtime::backend(isolation)
            .available()
            .map_err(|why| EngineError::Unsupported(format!("isolation {isolation}: {why}")))?;
        for (k, v) in &req.env {
            berth_runtime::spec::check_env(k, v).map_err(|e| EngineError::invalid(e.to_string()))?;
        }
        if let Some(d) = &req.desktop {
            super::desktop::check(d, isolation)?;
            for (k, v) in super::desktop::env() {
                req.env.entry(k.into()).or_insert_with(|| v.into());
            }
        }
        let owner = actor().strip_prefix("session:").map(str::to_string);
        self.assign_tenant(&mut req)?;
        self.label_for_selector(&mut req)?;
        // A tenant's creates are checked against its quota one at a time (see `tenancy`).
        let tenant_lock = req.tenant.as_deref().map(|t| self.tenant_lock(t));
        let _one_tenant_create = match &tenant_lock {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        // Children are made one at a time: their count and their share of the owner's limits are checked
        // against the children that exist, which a concurrent create would not yet be among.
        let _one_child_at_a_time = match &owner {
            Some(_) => Some(self.child_creates.lock().await),
            None => None,
        };
        if let Some(o) = &owner {
            self.as_child(o, &mut req).await?;
        }
        // A tenant's sandbox without limits of its own gets its share of what the quota has left, at most the
        // daemon's default (see `within_quota`).
        if let Some(t) = req.tenant.clone() {
            self.within_quota(&t, &mut req, 1).await?;
        }
        // Without limits of its own, a sandbox gets the daemon's defaults (a child gets its share above).
        req.memory_bytes = req.memory_bytes.or(self.bounds.default_memory_bytes);
        req.pids = req.pids.or(self.bounds.default_pids);
        if let Some(d) = &req.desktop {
            super::desktop::check_limits(d, req.memory_bytes, req.pids)?;
        }
        self.check_volumes(&req.volumes)?;
        receipt::check_outputs(&req.outputs)?;
        network::policy_of(&req.network)?;
        self.check_secrets(&req.secrets, req.tenant.as_deref())?;
        // Without a quota of its own, a sandbox gets the daemon's default where the pool can enforce one.
        if req.disk_bytes.is_none() {
            req.disk_bytes = self.default_disk();
        }
        self.check_quota(req.disk_bytes)?;
        let parent = match &req.from_snapshot {
            Some(s) => match self.store.snapshot(s)? {
                Some(snap) if self.sees_snapshot(&snap).await => Some(snap),
                _ => return Err(EngineError::NoSnapshot(s.clone())),
            },
            None => None,
        };
        let image =
            req.image.clone().or_else(|| parent.as_ref().map(|p| p.image.clone())).unwrap_or_else(|| "host".into());
        if image != "host" {
            self.image(&image)?;
        }
        if let Some(p) = parent.as_ref().filter(|p| p.with_processes && p.image != image) {
            return Err(EngineError::invalid(format!(
                "snapshot {} holds processes that ran on the image {:?}: a sandbox made from it runs that image, \
                 not {image:?}",
                p.id, p.image
            )));
        }
        for (k, v) in self.image_env(&image) {
            req.env.entry(k).or_insert(v);
        }
        req.image = Some(image);
        // A name asked for is held before a pooled sandbox is taken, so that a name in use costs the pool none.
        let asked = match &req.name {
            Some(n) => Some(self.reserve_name(n).await?),
            None => None,
        };
        let mut warm = self.take_warm(&req).await;
        let id = match &warm {
            Some(w) => w.id.clone(),
            None => berth_runtime::new_id().map_err(|e| EngineError::Create(berth_runtime::error_chain(&e)))?,
        };
        // An unnamed sandbox is named after its id: unique as ids are, however many are created at once.
        let _name = match asked {
            Some(guard) => guard,
            None => match self.reserve_name(&format!("berth-{id}")).await {
                Ok(guard) => guard,
                Err(e) => {
                    if let Some(w) = warm {
                        self.return_warm(w);
                    }
                    return Err(e);
                }
            },
        };
        req.name.get_or_insert_with(|| format!("berth-{id}"));
        let state = self.state_dir(&id);
        let made = match (&parent, &warm) {
            (_, Some(_)) => Ok(()),
            (Some(p), None) => self.pool_clone(self.snapshot_dir(&p.id), state.clone(), false).await,
            (None, None) => {
                let dir = state.clone();
                self.pool_op(move |pool| pool.create(&dir)).await
            }
        };
        // A pooled sandbox's volume has the default quota: set again only for another.
        let made = match made {
            Ok(()) if warm.as_ref().is_none_or(|w| w.disk != req.disk_bytes) => {
                self.apply_quota(&id, req.disk_bytes).await
            }
            other => other,
        };
        // From a snapshot with processes: restored from its checkpoint, in a copy of its own.
        let made = match (made, &parent) {
            (Ok(()), Some(p)) => self.snapshot_restore(p, &id, isolation).await,
            (made, _) => made.map(|()| None),
        };
        let restored = made.as_ref().is_ok_and(|r| r.is_some());
        let parent_id = parent.map(|p| p.id);
        let booted = match made {
            Ok(restore) => {
                self.boot_from(&id, &req, now_ms(), parent_id.clone(), owner.clone(), &mut warm, restore).await
            }
            Err(e) => Err(e),
        };
        if restored {
            let _ = tokio::fs::remove_dir_all(self.hibernate_dir(&id)).await;
        }
        // Not claimed (the create failed before): torn down here, not left to notice its stdin close.
        if let Some(w) = warm {
            self.discard_warm(w).await;
        }
        self.warm_claimed(&id);
        let record = match booted {
            Ok(r) => r,
            Err(e) => {
                let state = self.state_dir(&id);
                let _ = self.pool_op(move |pool| pool.remove(&state)).await;
                let _ = self.store.sandbox_gone(&id, "failed to start", now_ms());
                return Err(e);
            }
        };
        let env_names: Vec<&String> = req.env.keys().collect();
        let args = serde_json::json!({
            "name": record.name, "image": record.image, "memory_bytes": req.memory_bytes, "pids": req.pids,
            "cpus": req.cpus, "ttl_seconds": req.ttl_seconds, "idle_timeout_seconds": req.idle_timeout_seconds,
            "labels": req.labels, "mounts": req.mounts, "env_names": env_names, "persistent": req.persistent,
            "disk_bytes": req.disk_bytes, "volumes": req.volumes, "from_snapshot": parent_id, "budget": req.budget,
        });
        if let Ok(live) = self.live(&record.id).await {
            live.note("create", args, serde_json::json!({"id": record.id, "pid": record.pid, "desktop": req.desktop}));
        }
        // Ready when its desktop is: a sandbox whose desktop cannot start is not left half made. One restored
        // with its processes has its own running.
        if let Some(d) = req.desktop.filter(|_| !restored)
            && let Err(e) = self.start_desktop(&record.id, d).await
        {
            let e = self.ended_while_starting(&record.id, e).await;
            let _ = self.remove(&record.id).await;
            return Err(e);
        }
        self.events.emit(&record.id, EventKind::Created, None, None);
        Ok(record)
    }

    /// Start the runtime of sandbox `id` (its storage ready) from `req`, and hold it as live.
    pub(crate) async fn boot(
        &self,
        id: &str,
        req: &CreateSandbox,
        created_at_ms: u64,
        parent: Option<String>,
        owner: Option<String>,
    ) -> Result<Sandbox, EngineError> {
        self.boot_from(id, req, created_at_ms, parent, owner, &mut None, None).await
    }

    /// The record a sandbox starts with.
    pub(super) fn record_of(
        &self,
        id: &str,
        req: &CreateSandbox,
        created_at_ms: u64,
        parent: Option<String>,
        owner: Option<String>,
    ) -> Result<Sandbox, EngineError> {
        let now = now_ms();
        Ok(Sandbox {
            id: id.to_string(),
            name: req.name.clone().unwrap_or_default(),
            image: req.image.clone().unwrap_or_else(|| "host".into()),
            state: super::lifecycle::INITIAL,
            created_at_ms,
            expires_at_ms: req.ttl_seconds.map(|t| created_at_ms.saturating_add((t * 1000.0) as u64)),
            idle_timeout_seconds: req.idle_timeout_seconds,
            last_activity_ms: now,
            last_activity: Some(if created_at_ms + 1000 < now { "start" } else { "create" }.into()),
            idle_pause_seconds: req.idle_pause_seconds,
            ttl_active_only: req.ttl_active_only,
            ttl_action: req.ttl_action,
            paused_at_ms: None,
            hibernated_at_ms: None,
            idle_hibernate_seconds: req.idle_hibernate_seconds,
            memory_bytes: req.memory_bytes,
            pids: req.pids,
            cpus: req.cpus,
            labels: req.labels.clone(),
            pid: None,
            landlock: None,
            persistent: req.persistent,
            disk_bytes: req.disk_bytes,
            parent,
            network: network::network_of(&network::policy_of(&req.network)?),
            owner,
            tenant: req.tenant.clone(),
            usage: None,
            isolation: req.isolation.unwrap_or_default(),
            desktop: req.desktop,
        })
    }

    /// `boot`, from a pooled sandbox (`warm`, its id `id`) when there is one, else from a shim started now
    /// (which wakes the sandbox from `restore`, an image and the CRIU to use, when given).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn boot_from(
        &self,
        id: &str,
        req: &CreateSandbox,
        created_at_ms: u64,
        parent: Option<String>,
        owner: Option<String>,
        warm: &mut Option<super::warm::Held>,
        restore: Option<Restore>,
    ) -> Result<Sandbox, EngineError> {
        let record = self.record_of(id, req, created_at_ms, parent, owner)?;
        // A session token for this run of the sandbox (its API at BERTH_API, as BERTH_TOKEN); revoked when it
        // stops or is removed. Neither it nor the proxy settings are part of the kept spec.
        let resolved = self.resolve_secrets(&req.secrets, None, req.tenant.as_deref())?;
        let token = self.tokens.mint_session(id, req.tenant.as_deref()).map_err(EngineError::Log)?;
        let mut env = req.env.clone();
        env.extend(network::session_env(id, &token.token));
        env.extend(resolved.env);
        // Secrets injected into HTTPS need the sandbox to trust its proxy's own authority.
        let (authority, files) = network::authority_for(&resolved.injections)?;
        if !files.is_empty() {
            env.extend(network::trust_env());
        }
        let volumes = req.volumes.iter().map(|v| (self.volume_dir(&v.name), v.target.clone(), v.readonly)).collect();
        let start = ShimStart {
            name: record.name.clone(),
            image: record.image.clone(),
            memory_bytes: req.memory_bytes,
            pids: req.pids,
            cpu_millis: req.cpus.map(|c| (c * 1000.0).round() as u64),
            mounts: req.mounts.clone(),
            record,
            env: env.clone(),
            id: Some(id.to_string()),
            state: Some(self.state_dir(id)),
            volumes,
            files,
            authority: authority.clone(),
            pooled: false,
            criu: restore.as_ref().and_then(|r| r.criu.as_ref()).map(|c| c.path.clone()),
            criu_version: restore.as_ref().and_then(|r| r.criu.as_ref()).map(|c| c.version.clone()),
            pipes: restore.as_ref().map(|r| r.pipes.iter().map(|(name, _)| name.clone()).collect()).unwrap_or_default(),
            fork: restore.as_ref().is_some_and(|r| r.fork),
            restore: restore.as_ref().map(|r| r.dir.clone()),
            isolation: req.isolation.unwrap_or_default(),
        };
        let pipes: Vec<std::os::fd::OwnedFd> =
            restore.map(|r| r.pipes.into_iter().map(|(_, fd)| fd).collect()).unwrap_or_default();
        // Recorded before it starts: a daemon that dies while the shim builds it finds it, and its spec, when it
        // takes the shim over.
        self.store.sandbox_live(&start.record)?;
        self.store.put_spec(id, &serde_json::to_value(req).unwrap_or_default())?;
        let spawned = match warm.take() {
            Some(w) => self.claim_warm(w, &start.record, &start.env, &start.authority).await,
            None => self.start_shim_with(&start, pipes).await.map(|(record, _, _)| record),
        };
        let started = match spawned {
            Ok(record) => adopt(&shim::socket_path(&self.root, &record.id)).await.map(|a| (record, a)),
            Err(e) => Err(e),
        };
        let (record, adopted) = match started {
            Ok(r) => r,
            Err(e) => {
                let _ = self.tokens.revoke_session(id);
                // A shim that died while building it (killed, say) leaves what it had made: its claims and
                // cgroup go now, unless some supervisor still holds them.
                self.sweep_runtime(id).await;
                return Err(e);
            }
        };
        let made =
            self.make_live(Adopted { record: record.clone(), env, authority, session: adopted.session }, &req.secrets);
        let live = match made {
            Ok(live) => live,
            Err(e) => {
                // Started but not held: it must not run on unsupervised.
                let path = shim::socket_path(&self.root, id);
                let _ = tokio::task::spawn_blocking(move || {
                    let conn = berth_sys::fd::seqpacket_connect(&path)?;
                    berth_init::protocol::send(std::os::fd::AsFd::as_fd(&conn), &shim::ShimRequest::Destroy, &[])
                        .map_err(|e| berth_sys::SysError::new("ask the shim", std::io::Error::other(e)))?;
                    let _ = berth_init::protocol::recv::<shim::ShimReply>(std::os::fd::AsFd::as_fd(&conn));
                    Ok::<(), berth_sys::SysError>(())
                })
                .await;
                let _ = self.tokens.revoke_session(id);
                return Err(e);
            }
        };
        // Its idle clocks start once it is ready: a slow build is no idle time.
        let record = {
            let mut r = live.record.lock().await;
            r.last_activity_ms = now_ms();
            r.clone()
        };
        self.store.sandbox_live(&record)?;
        self.store.put_spec(&record.id, &serde_json::to_value(req).unwrap_or_default())?;
        self.sandboxes.lock().await.insert(record.id.clone(), live);
        Ok(record)
    }

    /// Start a shim for `start` and wait for its first line; its process and stdin are the caller's.
    pub(super) async fn start_shim(
        &self,
        start: &ShimStart,
    ) -> Result<(Sandbox, tokio::process::Child, tokio::process::ChildStdin), EngineError> {
        self.start_shim_with(start, Vec::new()).await
    }

    /// [`Engine::start_shim`], handing the shim `fds` on its descriptors 3, 4, … (see `ShimStart::pipes`).
    async fn start_shim_with(
        &self,
        start: &ShimStart,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> Result<(Sandbox, tokio::process::Child, tokio::process::ChildStdin), EngineError> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        berth_sys::process::pass_fds(cmd.as_std_mut(), fds);
        let mut child = cmd
            .arg("--root")
            .arg(&self.root)
            .arg("shim")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            // Its own process group: a Ctrl-C aimed at the daemon must not take the sandboxes down.
            .process_group(0)
            .spawn()
            .map_err(EngineError::SpawnShim)?;
        // Our copies of what it was handed go: the pipes' ends are its (and the sandbox's) alone.
        drop(cmd);
        let mut line = serde_json::to_vec(start).map_err(|e| EngineError::Create(e.to_string()))?;
        line.push(b'\n');
        let mut stdin = child.stdin.take().ok_or(EngineError::ShimGone)?;
        stdin.write_all(&line).await.map_err(EngineError::SpawnShim)?;
        let stdout = child.stdout.take().ok_or(EngineError::ShimGone)?;
        let mut first = String::new();
        BufReader::new(stdout).read_line(&mut first).await.map_err(EngineError::SpawnShim)?;
        match serde_json::from_str::<ShimReady>(&first) {
            Ok(ShimReady::Ready { record }) => Ok((*record, child, stdin)),
            Ok(ShimReady::Failed { message, invalid }) => {
                let _ = child.wait().await;
                Err(if invalid { EngineError::invalid(message) } else { EngineError::Create(message) })
            }
            Err(_) => {
                let _ = child.wait().await;
                Err(EngineError::ShimGone)
            }
        }
    }
}

/// Each isolation and whether this host offers it.
pub(super) fn isolations() -> Vec<berth_api::IsolationInfo> {
    berth_runtime::backends()
        .map(|b| {
            let offered = b.available();
            berth_api::IsolationInfo {
                isolation: b.isolation(),
                available: offered.is_ok(),
                detail: offered.map(|o| o.detail).unwrap_or_else(|why| why),
            }
        })
        .collect()
}
