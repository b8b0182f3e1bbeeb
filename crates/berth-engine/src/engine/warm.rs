//! The warm pool (`berth daemon --warm N`): sandboxes of the `host` image with the daemon's default limits,
//! built ahead so that a create which asks for nothing else skips the build.
//!
//! What a pooled sandbox is built with: its id (chosen when it is built and handed to the create that takes
//! it: its cgroup, claims, volume and socket are named after it), its own host id block, its cgroup with the
//! default limits, an empty volume with the default quota, and a host named `berth-<id>`. Nothing runs in it
//! but init, and it is used once: taken, or torn down. What only the create knows is given when it is taken:
//! its record (name, labels, TTL, owner, …), its `env`, its session token, its secrets and its egress policy
//! (all the daemon's, none in the build), its host name (renamed in place when the create names it), and its
//! quota (set again when the create asks for another). A create the pool cannot serve is built cold: another
//! image, limits or a CPU count other than the defaults, mounts, named volumes, a snapshot to start from, or
//! secrets handed over through the proxy (their certificate authority is a file of the build).
//!
//! Until it is taken a pooled sandbox has no record: it is in no listing, no metering round and no budget,
//! and its shim listens at `<root>/run/pool/<id>.sock`, where neither adoption nor the reaper look. Its
//! shim's stdin stays open in the daemon; when the daemon goes, however it goes, the shim sees it close and
//! tears the sandbox down. At shutdown the daemon tears the pool down itself, and removes the volumes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use berth_api::{CreateSandbox, Sandbox, WarmPool};

use super::{Engine, now_ms};
use crate::EngineError;
use crate::shim::{self, ShimReply, ShimRequest, ShimStart};

/// After a take, the refill waits this long: the caller's first exec comes right after its create, and on a
/// small host a build in the background would slow it.
const REFILL_DELAY: Duration = Duration::from_millis(250);
/// After a build that failed, the next try waits this long.
const RETRY_DELAY: Duration = Duration::from_secs(5);

/// What pooled sandboxes are built behind: the default isolation, if its backend can build one ahead and
/// rename it when it is taken (`supports().warm_pool`); else there is no pool.
fn pool_isolation() -> Option<berth_api::Isolation> {
    let isolation = berth_api::Isolation::default();
    berth_runtime::backend(isolation).supports().warm_pool.then_some(isolation)
}

#[derive(Default)]
pub(super) struct Warm {
    /// How many to keep ready (0: no pool).
    size: usize,
    ready: std::sync::Mutex<VecDeque<Held>>,
    /// Wakes the filler: after a take, or when the pool opens again.
    wake: Arc<tokio::sync::Notify>,
    /// Held while one is built and while the pool is emptied: emptying waits for a build under way.
    gate: tokio::sync::Mutex<()>,
    /// The pool must stay empty (the daemon is stopping, or a storage pool is being made).
    closed: AtomicBool,
    last_take_ms: AtomicU64,
    /// Taken and not yet held as live: their sockets move to `run/shims/` with the age of their build, so the
    /// reaper's adoption of old unknown sockets must leave them to the create claiming them.
    claiming: std::sync::Mutex<std::collections::HashSet<String>>,
    served: AtomicU64,
    missed: AtomicU64,
}

/// A pooled sandbox ready to be taken: its id, its quota, and its shim (whose stdin, held open here, tells
/// it that its daemon is alive).
pub(super) struct Held {
    pub(super) id: String,
    pub(super) disk: Option<u64>,
    child: tokio::process::Child,
    _stdin: tokio::process::ChildStdin,
}

impl Warm {
    pub(super) fn new(size: usize) -> Warm {
        Warm { size, ..Warm::default() }
    }

    fn len(&self) -> usize {
        self.ready.lock().map(|r| r.len()).unwrap_or(0)
    }
}

/// The pool stays empty while this is held (see [`Engine::suspend_warm`]); it fills again once dropped.
pub(crate) struct Suspended<'a> {
    warm: &'a Warm,
    _gate: tokio::sync::MutexGuard<'a, ()>,
}

impl Drop for Suspended<'_> {
    fn drop(&mut self) {
        self.warm.closed.store(false, Ordering::SeqCst);
        self.warm.wake.notify_one();
    }
}

impl Engine {
    /// The pool as `GET /v1/info` shows it.
    pub(crate) fn warm_info(&self) -> WarmPool {
        WarmPool {
            size: self.warm.size,
            ready: self.warm.len(),
            served: self.warm.served.load(Ordering::Relaxed),
            missed: self.warm.missed.load(Ordering::Relaxed),
        }
    }

    /// Keep the pool full, one build at a time, until the daemon stops.
    pub fn spawn_warm(self: &Arc<Engine>) {
        if self.warm.size == 0 || pool_isolation().is_none() {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(engine) = weak.upgrade() else { return };
                let warm = &engine.warm;
                if warm.closed.load(Ordering::SeqCst) || warm.len() >= warm.size {
                    let wake = Arc::clone(&warm.wake);
                    let woken = wake.notified();
                    drop(engine);
                    woken.await;
                    continue;
                }
                let since = Duration::from_millis(now_ms().saturating_sub(warm.last_take_ms.load(Ordering::Relaxed)));
                if since < REFILL_DELAY {
                    drop(engine);
                    tokio::time::sleep(REFILL_DELAY - since).await;
                    continue;
                }
                let gate = warm.gate.lock().await;
                if warm.closed.load(Ordering::SeqCst) {
                    continue;
                }
                match engine.build_warm().await {
                    Ok(held) => {
                        if let Ok(mut r) = warm.ready.lock() {
                            r.push_back(held);
                        }
                        drop(gate);
                    }
                    Err(e) => {
                        drop(gate);
                        crate::log::warn(
                            "cannot build a sandbox for the warm pool",
                            serde_json::json!({"error": e.to_string()}),
                        );
                        drop(engine);
                        tokio::time::sleep(RETRY_DELAY).await;
                    }
                }
            }
        });
    }

    /// Build one pooled sandbox: its volume, its quota, its shim.
    async fn build_warm(&self) -> Result<Held, EngineError> {
        let id = berth_runtime::new_id().map_err(|e| EngineError::Create(berth_runtime::error_chain(&e)))?;
        let disk = self.default_disk();
        let req = self.warm_request(&id, disk);
        let state = self.state_dir(&id);
        let dir = state.clone();
        self.pool_op(move |pool| pool.create(&dir)).await?;
        let record = self.record_of(&id, &req, now_ms(), None, None)?;
        let start = ShimStart {
            name: record.name.clone(),
            image: record.image.clone(),
            memory_bytes: req.memory_bytes,
            pids: req.pids,
            cpu_millis: None,
            mounts: Vec::new(),
            record,
            env: Default::default(),
            id: Some(id.clone()),
            state: Some(state.clone()),
            volumes: Vec::new(),
            files: Vec::new(),
            authority: None,
            pooled: true,
            restore: None,
            criu: None,
            criu_version: None,
            pipes: Vec::new(),
            fork: false,
            isolation: pool_isolation().unwrap_or_default(),
        };
        let started = match self.apply_quota(&id, disk).await {
            Ok(()) => self.start_shim(&start).await,
            Err(e) => Err(e),
        };
        match started {
            Ok((_, child, stdin)) => Ok(Held { id, disk, child, _stdin: stdin }),
            Err(e) => {
                self.sweep_runtime(&id).await;
                let _ = self.pool_op(move |pool| pool.remove(&state)).await;
                Err(e)
            }
        }
    }

    /// What a pooled sandbox is built from: the request of a create that asks for nothing but the defaults.
    fn warm_request(&self, id: &str, disk: Option<u64>) -> CreateSandbox {
        CreateSandbox {
            name: Some(format!("berth-{id}")),
            image: Some("host".into()),
            memory_bytes: self.bounds.default_memory_bytes,
            pids: self.bounds.default_pids,
            disk_bytes: disk,
            ..CreateSandbox::default()
        }
    }

    /// Whether a pooled sandbox can become what `req` asks for (its defaults filled in, its image resolved):
    /// the same build, whatever else its record, environment, credentials and policy are.
    fn warm_serves(&self, req: &CreateSandbox) -> bool {
        req.image.as_deref() == Some("host")
            && Some(req.isolation.unwrap_or_default()) == pool_isolation()
            && req.memory_bytes == self.bounds.default_memory_bytes
            && req.pids == self.bounds.default_pids
            && req.cpus.is_none()
            && req.mounts.is_empty()
            && req.volumes.is_empty()
            && req.from_snapshot.is_none()
            // Secrets in the environment only: one handed over through the proxy may need a certificate
            // authority of the sandbox's own, a file of its build.
            && req.secrets.iter().all(|s| !s.contains('@'))
    }

    /// A pooled sandbox for `req`, if the pool can serve it and has one ready. A pooled sandbox whose shim
    /// has died is discarded on the way.
    pub(super) async fn take_warm(&self, req: &CreateSandbox) -> Option<Held> {
        if self.warm.size == 0 || !self.warm_serves(req) {
            return None;
        }
        let mut dead = Vec::new();
        let taken = {
            let mut ready = self.warm.ready.lock().ok()?;
            loop {
                match ready.pop_front() {
                    Some(mut h) => match h.child.try_wait() {
                        Ok(None) => break Some(h),
                        _ => dead.push(h),
                    },
                    None => break None,
                }
            }
        };
        if let (Some(h), Ok(mut c)) = (&taken, self.warm.claiming.lock()) {
            c.insert(h.id.clone());
        }
        let counter = if taken.is_some() { &self.warm.served } else { &self.warm.missed };
        counter.fetch_add(1, Ordering::Relaxed);
        self.warm.last_take_ms.store(now_ms(), Ordering::Relaxed);
        self.warm.wake.notify_one();
        for h in dead {
            self.discard_warm(h).await;
        }
        taken
    }

    /// Put back a pooled sandbox a create took and could not use before it claimed it.
    pub(super) fn return_warm(&self, held: Held) {
        self.warm_claimed(&held.id);
        if let Ok(mut r) = self.warm.ready.lock() {
            r.push_front(held);
        }
    }

    /// The create that took sandbox `id` from the pool holds it as live now, or has given up on it.
    pub(super) fn warm_claimed(&self, id: &str) {
        if let Ok(mut c) = self.warm.claiming.lock() {
            c.remove(id);
        }
    }

    /// Whether sandbox `id` is being claimed by a create (not to be adopted meanwhile).
    pub(super) fn warm_claiming(&self, id: &str) -> bool {
        self.warm.claiming.lock().map(|c| c.contains(id)).unwrap_or(true)
    }

    /// Make a pooled sandbox the sandbox `record` describes (its id the pooled one's), with this `env` and
    /// authority. On failure it is torn down.
    pub(super) async fn claim_warm(
        &self,
        held: Held,
        record: &Sandbox,
        env: &std::collections::BTreeMap<String, String>,
        authority: &Option<(String, String)>,
    ) -> Result<Sandbox, EngineError> {
        let path = shim::pool_socket_path(&self.root, &held.id);
        let ask =
            ShimRequest::Claim { record: Box::new(record.clone()), env: env.clone(), authority: authority.clone() };
        let answer = tokio::task::spawn_blocking(move || -> Result<Sandbox, EngineError> {
            let conn = berth_sys::fd::seqpacket_connect(&path).map_err(|_| EngineError::ShimGone)?;
            let fd = std::os::fd::AsFd::as_fd(&conn);
            berth_init::protocol::send(fd, &ask, &[]).map_err(|_| EngineError::ShimGone)?;
            match berth_init::protocol::recv::<ShimReply>(fd) {
                Ok((ShimReply::Claimed { record }, _)) => Ok(*record),
                Ok((ShimReply::Error { message }, _)) => Err(EngineError::Create(message)),
                _ => Err(EngineError::ShimGone),
            }
        })
        .await
        .map_err(|_| EngineError::ShimGone)
        .and_then(|r| r);
        match answer {
            // Claimed: the shim no longer watches its stdin, which closes with `held`.
            Ok(record) => Ok(record),
            Err(e) => {
                self.discard_warm(held).await;
                Err(e)
            }
        }
    }

    /// Tear a pooled sandbox down through its shim, and remove its volume.
    pub(super) async fn discard_warm(&self, mut held: Held) {
        for path in [shim::pool_socket_path(&self.root, &held.id), shim::socket_path(&self.root, &held.id)] {
            let _ = tokio::task::spawn_blocking(move || {
                let conn = berth_sys::fd::seqpacket_connect(&path)?;
                let fd = std::os::fd::AsFd::as_fd(&conn);
                berth_init::protocol::send(fd, &ShimRequest::Destroy, &[])
                    .map_err(|e| berth_sys::SysError::new("ask the shim", std::io::Error::other(e)))?;
                let _ = berth_init::protocol::recv::<ShimReply>(fd);
                Ok::<(), berth_sys::SysError>(())
            })
            .await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), held.child.wait()).await;
        self.sweep_runtime(&held.id).await;
        let pool_socket = shim::pool_socket_path(&self.root, &held.id);
        let _ = tokio::fs::remove_file(pool_socket).await;
        let state = self.state_dir(&held.id);
        let _ = self.pool_op(move |pool| pool.remove(&state)).await;
    }

    /// Empty the pool and keep it empty (the daemon is stopping).
    pub async fn close_warm(&self) {
        self.warm.closed.store(true, Ordering::SeqCst);
        let _gate = self.warm.gate.lock().await;
        self.empty_warm().await;
    }

    /// Empty the pool and keep it empty until the guard is dropped (a storage pool is being made, which must
    /// find no volumes in the pool it replaces).
    pub(crate) async fn suspend_warm(&self) -> Suspended<'_> {
        self.warm.closed.store(true, Ordering::SeqCst);
        let gate = self.warm.gate.lock().await;
        self.empty_warm().await;
        Suspended { warm: &self.warm, _gate: gate }
    }

    async fn empty_warm(&self) {
        let all: Vec<Held> = self.warm.ready.lock().map(|mut r| r.drain(..).collect()).unwrap_or_default();
        for h in all {
            self.discard_warm(h).await;
        }
    }

    /// At start: pooled sandboxes a previous daemon left. Their shims saw it go and tear them down; wait for
    /// that (at most 10 s) before the sweep of the pool removes their volumes, and remove what sockets are left.
    pub(super) async fn await_old_warm(&self) {
        let dir = shim::pool_dir(&self.root);
        let _ = tokio::fs::create_dir_all(&dir).await;
        let _ = tokio::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).await;
        let recorded: std::collections::HashSet<String> =
            self.store.live_ids().unwrap_or_default().into_iter().collect();
        let unrecorded: Vec<String> = std::fs::read_dir(self.pool().path().join("sandboxes"))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|id| !recorded.contains(id) && berth_runtime::spec::check_id(id).is_ok())
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while unrecorded.iter().any(|id| berth_runtime::supervised(id)) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}
