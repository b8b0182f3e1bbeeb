//! The engine: every sandbox on this host and every command the API offers on them. The daemon's transports
//! (the HTTP API and MCP through it, the E2B listener, the web view, previews) call these methods and
//! nothing else.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_api::{CreateSandbox, EventKind, LifecycleEvent, Sandbox, SandboxState, Teardown};
use tokio::sync::Mutex;

use crate::EngineError;
use crate::journal::Journal;
use crate::session::Session;
use crate::shim::{self, ShimReply, ShimRequest};

mod access;
mod attach;
mod changes;
mod cluster;
mod context_run;
pub mod contexts;
mod create;
pub mod desktop;
mod events;
mod execs;
mod files;
mod fork;
mod fork_processes;
mod hibernate;
mod images;
pub(crate) mod lifecycle;
mod live;
mod network;
mod pod_egress;
mod pods;
mod previews;
pub use previews::Refusal as PreviewRefusal;
mod hibernate_execs;
pub mod pause;
mod projects;
mod reap;
mod receipt;
mod recovery;
mod retain;
mod secrets;
mod sessions;
mod storage;
mod tenancy;
mod terminal;
mod ttl;
mod usage;
pub mod users;
mod warm;
mod watch;

pub use access::{Access, Caller, Op};
pub(crate) use attach::AttachedExec;
use events::Events;
pub use live::{ACTOR, Carried, actor, carried, current_caller, journal_path};
use live::{ExecEntry, Live};
pub use network::{ApiConnections, Counted, MAX_CONNECTIONS, SandboxApi};
pub use storage::{DEFAULT_DISK, StorageChoice, StorageOptions};
pub use terminal::{OpenTerminal, Terminal, TerminalEvent, TerminalInput, TerminalRequest};
pub use watch::{DirWatch, MAX_WATCHES, WatchLimits};

pub struct Engine {
    root: PathBuf,
    exe: PathBuf,
    sandboxes: Mutex<HashMap<String, Arc<Live>>>,
    /// Serialises calls made with an `Idempotency-Key` (their results are in the store).
    idempotent: Mutex<()>,
    /// What the daemon holds of live pods besides their records: locks, journals, proxies (see `pods`).
    pod_state: pods::PodState,
    /// The cluster's shared database, when the daemon has one (see `cluster`).
    cluster: std::sync::OnceLock<Arc<crate::cluster::Cluster>>,
    events: Arc<Events>,
    pub tokens: crate::tokens::Tokens,
    store: Arc<crate::store::Store>,
    /// The host's cgroup layout, for each exec's own cgroup (None: execs are killed by process group only).
    cgroups: Option<berth_runtime::cgroup::Hierarchy>,
    /// Where sandboxes' files, snapshots and volumes live (replaced when `berth storage init` makes a pool).
    pool: std::sync::RwLock<Arc<berth_storage::Pool>>,
    /// How sandboxes' files are bounded.
    storage: StorageOptions,
    /// Why sandboxes' files are not bounded, when they are not.
    storage_note: std::sync::RwLock<Option<String>>,
    /// Sandboxes held by an operation that must not overlap another (stop, snapshot, restore, …), and those
    /// whose runtime is being torn down (see `lifecycle`).
    holds: lifecycle::Holds,
    /// Names of sandboxes being created: taken before the create, so two at once cannot both have one.
    reserved_names: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Held while a session token creates a child (see `create`).
    child_creates: Mutex<()>,
    /// Held while a tenant with a quota creates a sandbox, one lock a tenant (see `tenancy`).
    tenant_creates: std::sync::Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Tenants whose egress quota is used up, and the sentence their proxies refuse with.
    egress_closed: std::sync::Mutex<HashMap<String, String>>,
    /// The host-name lookup shares of sandboxes at the top of their owners, each shared with the sandboxes
    /// they made (see `network::lookup_share_of`).
    lookup_shares: std::sync::Mutex<HashMap<String, std::sync::Weak<tokio::sync::Semaphore>>>,
    /// The engine itself, for the tasks that serve a sandbox's API connections.
    this: std::sync::OnceLock<std::sync::Weak<Engine>>,
    /// What one sandbox may take of the host (see `bounds`).
    pub(crate) bounds: crate::bounds::Bounds,
    /// Sandboxes' code contexts (see `contexts`).
    contexts: contexts::Contexts,
    /// Metering rounds run, and sandboxes removed for passing their budget (see `usage`).
    samples: std::sync::atomic::AtomicU64,
    budget_removals: std::sync::atomic::AtomicU64,
    /// The CRIU hibernation uses, or why there is none (said once, at start).
    criu: Result<berth_runtime::checkpoint::Criu, String>,
    /// Sandboxes built ahead (see `warm`).
    warm: warm::Warm,
    /// Brings the reaper's next pass forward (see `reap`).
    reap_wake: Arc<tokio::sync::Notify>,
    /// The execs asleep in hibernated sandboxes, as far as this daemon holds them (see `hibernate_execs`).
    asleep: hibernate_execs::Kept,
    /// Preview URLs of sandboxes' ports (see `previews`).
    previews: previews::Previews,
    /// The web view's open logins (see `logins`).
    pub logins: crate::logins::Logins,
    /// What serves each sandbox's own API port (see `network::SandboxApi`).
    sandbox_api: std::sync::OnceLock<Box<dyn network::SandboxApi>>,
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Engine {
    /// Open the engine on a data root as it is (default bounds, no pool made): adopt the sandboxes whose shims
    /// survived a previous daemon.
    pub async fn open(root: &Path) -> Result<Arc<Engine>, EngineError> {
        Engine::open_with(root, crate::bounds::Bounds::default(), StorageOptions::as_is()).await
    }

    /// Open the engine on a data root with these bounds, making a storage pool as `storage` says.
    pub async fn open_with(
        root: &Path,
        bounds: crate::bounds::Bounds,
        storage: StorageOptions,
    ) -> Result<Arc<Engine>, EngineError> {
        bounds.check().map_err(EngineError::invalid)?;
        let exe = std::env::current_exe().map_err(EngineError::SpawnShim)?;
        // Logs, journals and shim sockets are the sandboxes' business and root's: nobody else may read them.
        for dir in [shim::shims_dir(root), root.join("logs"), root.join("journal"), root.join("pods")] {
            tokio::fs::create_dir_all(&dir).await.map_err(EngineError::Log)?;
            tokio::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .await
                .map_err(EngineError::Log)?;
        }
        // Before anything is served: a node that cannot reach its cluster's database does not start.
        let cluster = match &storage.cluster {
            Some(c) => {
                let shared = crate::cluster::Cluster::connect(&c.db, &c.node).await.map_err(|e| {
                    EngineError::Unsupported(format!("--cluster-db: cannot use the cluster's database: {e}"))
                })?;
                crate::log::info("cluster", serde_json::json!({"node": c.node, "database": "connected"}));
                Some(Arc::new(shared))
            }
            None => None,
        };
        let store = Arc::new(crate::store::Store::open(root)?);
        let (pool, storage_note) = storage::open_pool(root, &storage)?;
        let engine = Arc::new(Engine {
            root: root.to_path_buf(),
            exe,
            sandboxes: Mutex::new(HashMap::new()),
            idempotent: Mutex::new(()),
            pod_state: pods::PodState::default(),
            cluster: cluster.map(std::sync::OnceLock::from).unwrap_or_default(),
            tokens: crate::tokens::Tokens::new(Arc::clone(&store)),
            store,
            cgroups: berth_runtime::cgroup::Hierarchy::detect().ok(),
            pool: std::sync::RwLock::new(Arc::new(pool)),
            storage,
            storage_note: std::sync::RwLock::new(storage_note),
            holds: lifecycle::Holds::default(),
            this: std::sync::OnceLock::new(),
            reserved_names: std::sync::Mutex::new(std::collections::HashSet::new()),
            child_creates: Mutex::new(()),
            tenant_creates: std::sync::Mutex::new(HashMap::new()),
            egress_closed: std::sync::Mutex::new(HashMap::new()),
            lookup_shares: std::sync::Mutex::new(HashMap::new()),
            bounds,
            contexts: contexts::Contexts::default(),
            samples: std::sync::atomic::AtomicU64::new(0),
            budget_removals: std::sync::atomic::AtomicU64::new(0),
            criu: berth_runtime::checkpoint::Criu::find(None),
            warm: warm::Warm::new(bounds.warm),
            reap_wake: Arc::default(),
            asleep: hibernate_execs::Kept::default(),
            previews: previews::Previews::default(),
            logins: crate::logins::Logins::default(),
            sandbox_api: std::sync::OnceLock::new(),
            events: Arc::new(Events {
                tx: tokio::sync::broadcast::channel(1024).0,
                recent: std::sync::Mutex::new(std::collections::VecDeque::new()),
                seq: std::sync::atomic::AtomicU64::new(0),
            }),
        });
        let _ = engine.this.set(Arc::downgrade(&engine));
        engine.private_dirs();
        engine.log_storage();
        engine.log_criu();
        engine.load_previews();
        engine.take_up_hibernated().await;
        engine.sweep_fork_images();
        engine.adopt_all().await;
        engine.reattach_pods().await;
        engine.await_old_warm().await;
        engine.account_for_lost().await;
        Ok(engine)
    }

    async fn adopt_all(&self) {
        self.adopt(None).await;
    }

    /// Adopt the shims in the shims directory that this daemon does not know. With `min_age`, only sockets
    /// at least that old: a younger one may belong to a create this daemon is finishing itself. Returns
    /// whether a socket was left for being younger.
    async fn adopt(&self, min_age: Option<Duration>) -> bool {
        let mut young_left = false;
        let Ok(mut dir) = tokio::fs::read_dir(shim::shims_dir(&self.root)).await else { return false };
        while let Ok(Some(entry)) = dir.next_entry().await {
            let path = entry.path();
            let Some(id) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
            if self.holds.tearing_down(&id) || self.warm_claiming(&id) || self.sandboxes.lock().await.contains_key(&id)
            {
                continue;
            }
            if let Some(age) = min_age {
                let young = entry
                    .metadata()
                    .await
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_none_or(|e| e < age);
                if young {
                    young_left = true;
                    continue;
                }
            }
            match adopt(&path).await {
                Ok(mut a) => {
                    // The policy as last changed (the shim knows it as it was at start).
                    if let Some(net) = self.store.record(&a.record.id).ok().flatten().map(|r| r.network) {
                        a.record.network = net;
                    }
                    let decls = self.spec_secrets(&a.record.id);
                    let record = a.record.clone();
                    let kept = self.store.record(&record.id).ok().flatten();
                    let state = kept.as_ref().map_or(record.state, |k| k.state);
                    let paused_at = kept.filter(|k| k.state == SandboxState::Paused).and_then(|k| k.paused_at_ms);
                    // The freezer says whether it is frozen (a pause's record may not have been written yet), and
                    // the store whether a fork or a snapshot froze it for its own work (its daemon died before
                    // the thaw).
                    let cg = self.cgroups.as_ref().map(|h| h.open(&record.id));
                    let frozen = cg.as_ref().is_some_and(|c| c.is_frozen().unwrap_or(false));
                    let marker = self.store.frozen_for(&record.id).ok().flatten();
                    let marked_by = marker.as_deref().and_then(lifecycle::Operation::from_frozen_key);
                    let Ok(live) = self.make_live(a, &decls) else { continue };
                    let now = lifecycle::Now { state, busy: marked_by };
                    let (record, thawed) = {
                        let mut r = live.record.lock().await;
                        let mut thawed = false;
                        if let Ok(lifecycle::Admit::Go(step)) =
                            lifecycle::admit(now, lifecycle::Operation::Recover { frozen })
                        {
                            // Not paused, whatever the record says: a freeze left by the operation that made it
                            // (or half done) is undone.
                            if step.effect == lifecycle::Effect::Thaw
                                && let Some(c) = &cg
                            {
                                thawed = c.thaw().is_ok() && frozen;
                            }
                            step.end(&mut r);
                            // Paused by a client or its idle clock: it stays paused until something wakes it.
                            if step.to == SandboxState::Paused {
                                let at = paused_at.unwrap_or_else(now_ms);
                                live.pause.begin(at);
                                r.paused_at_ms = Some(at);
                            }
                        }
                        (r.clone(), thawed)
                    };
                    if let Some(key) = &marker {
                        live.note(
                            "recover",
                            serde_json::json!({"frozen_for": key}),
                            serde_json::json!({"thawed": thawed, "state": lifecycle::name(record.state)}),
                        );
                        let _ = self.store.set_frozen_for(&record.id, None);
                    }
                    live.note("adopt", serde_json::json!({}), serde_json::json!({"pid": record.pid}));
                    let _ = self.store.sandbox_live(&record);
                    self.events.emit(&record.id, EventKind::Adopted, None, None);
                    self.sandboxes.lock().await.insert(record.id.clone(), live);
                }
                // Its shim is gone, and its sandbox with it: the socket file is all that is left.
                Err(_) => {
                    let _ = tokio::fs::remove_file(&path).await;
                }
            }
        }
        young_left
    }

    /// The live sandbox `id_or_name`, for a Change (anything asked of it that does not wake it), or why not.
    async fn live(&self, id_or_name: &str) -> Result<Arc<Live>, EngineError> {
        match self.find(id_or_name).await? {
            // The table lets a Change through in every state of a live sandbox (a test of it says so): it is
            // handed out without a look at its record, which a pause holds across its freeze.
            lifecycle::Found::Live(l) => Ok(l),
            lifecycle::Found::Kept(s) => Err(lifecycle::refused(&s.id, s.state, lifecycle::Operation::Change)),
        }
    }

    pub async fn list(&self) -> Vec<Sandbox> {
        let all: Vec<Arc<Live>> = self.sandboxes.lock().await.values().cloned().collect();
        let mut out = Vec::new();
        for l in all {
            out.push(l.record.lock().await.clone());
        }
        let stopped: Vec<Sandbox> = self.store.stopped().unwrap_or_default();
        for s in stopped {
            if !out.iter().any(|o| o.id == s.id) {
                out.push(s);
            }
        }
        out.sort_by_key(|s| s.created_at_ms);
        out
    }

    pub async fn get(&self, id: &str) -> Result<Sandbox, EngineError> {
        Ok(match self.find(id).await? {
            lifecycle::Found::Live(l) => l.record.lock().await.clone(),
            lifecycle::Found::Kept(s) => s,
        })
    }

    /// Tear a sandbox down (in order, through its shim), remove its files, and report what was done.
    pub async fn remove(&self, id: &str) -> Result<Teardown, EngineError> {
        self.remove_because(id, "remove").await
    }

    async fn remove_because(&self, id: &str, why: &str) -> Result<Teardown, EngineError> {
        let admitted = self.admit(id, lifecycle::Operation::Remove).await?;
        admitted.step()?;
        let _down = self.holds.tear_down(&admitted.sid);
        self.tear_down(&admitted.sid, why).await
    }

    /// Tear down in order — outputs out, credentials revoked, records flushed, runtime and files destroyed —
    /// then check for leftovers and keep the receipt.
    async fn tear_down(&self, sid: &str, why: &str) -> Result<Teardown, EngineError> {
        let spec: Option<CreateSandbox> =
            self.store.spec(sid).ok().flatten().and_then(|v| serde_json::from_value(v).ok());
        let name = self.get(sid).await.map(|r| r.name).unwrap_or_default();
        let mut receipt = Teardown {
            id: sid.to_string(),
            name,
            reason: why.to_string(),
            started_at_ms: now_ms(),
            ..Teardown::default()
        };
        // Its own sandboxes die with it, first.
        for child in self.children_of(sid).await {
            if let Ok(t) = Box::pin(self.remove_because(&child, "owner removed")).await {
                receipt.steps.push(format!("removed its sandbox {} (clean: {})", t.id, t.clean));
            }
        }
        // 1: what it leaves behind.
        let globs = spec.as_ref().map(|s| s.outputs.clone()).unwrap_or_default();
        self.collect_outputs(sid, &globs, &mut receipt).await;
        // 2: its credentials, and the previews of its ports.
        self.revoke_credentials(sid, &mut receipt).await;
        let closed = self.close_previews(sid);
        if closed > 0 {
            receipt.revoked.push(format!("{closed} preview URL(s)"));
            receipt.steps.push(format!("closed {closed} preview(s)"));
        }
        // 3: its records.
        let live = self.live(sid).await.ok();
        match &live {
            Some(l) => l.note(why, serde_json::json!({}), serde_json::json!({"outputs": receipt.outputs.len()})),
            None => {
                if let Ok(mut j) = Journal::open(&journal_path(&self.root, sid)) {
                    let _ = j.append(&actor(), why, serde_json::json!({}), serde_json::json!({"stopped": true}));
                }
            }
        }
        self.count_flushed(sid, &mut receipt);
        receipt.usage = self.final_usage(sid).await;
        self.count_tenant_egress(sid).await;
        // 4: the sandbox itself; the commands still running in it first, so that their results say they
        // were killed (by a budget, a TTL, a removal).
        if let Some(live) = &live {
            kill_running(live).await;
            let state = live.record.lock().await.state;
            let halted = match lifecycle::held_step(sid, state, lifecycle::Operation::Remove) {
                Ok(step) => self.halt(live, sid, step).await,
                Err(e) => Err(e),
            };
            match halted {
                Ok(t) => {
                    receipt.steps.extend(t.steps);
                    receipt.leftovers.extend(t.leftovers);
                }
                // Its supervisor is already gone, and its processes with it: the rest of the teardown still runs.
                Err(e) => {
                    receipt.steps.push(format!("its supervisor was already gone ({e})"));
                    self.sweep_runtime(sid).await;
                }
            }
        }
        self.discard_files(sid, &mut receipt).await;
        self.forget_hibernation(sid).await;
        let _ = self.store.sandbox_gone(sid, why, now_ms());
        let kind = if why == "reaped" { EventKind::Reaped } else { EventKind::Removed };
        self.events.emit(sid, kind, None, None);
        let _ = tokio::fs::remove_dir_all(self.root.join("logs").join(sid)).await;
        let _ = tokio::fs::remove_file(usage::meter_path(&self.root, sid)).await;
        self.forget_contexts(sid).await;
        // 5: nothing left (a shim killed earlier leaves its socket behind: it goes now).
        self.remove_stale_socket(sid).await;
        self.check_leaks(sid, &mut receipt);
        receipt.finished_at_ms = now_ms();
        self.keep_receipt(&receipt);
        self.forget_old_removed().await;
        Ok(receipt)
    }

    /// Destroy a live sandbox's runtime through its shim (its files stay) and forget it as live.
    /// `step`: its stop's or its removal's.
    async fn halt(&self, live: &Arc<Live>, sid: &str, step: lifecycle::Step) -> Result<Teardown, EngineError> {
        self.thaw_to_end(live).await;
        let sid = sid.to_string();
        // Still listed (as stopping) until it is gone; the reaper leaves alone what is being removed or stopped.
        step.begin(&mut *live.record.lock().await);
        let path = shim::socket_path(&self.root, &sid);
        let teardown = tokio::task::spawn_blocking(move || -> Result<Teardown, EngineError> {
            let conn = berth_sys::fd::seqpacket_connect(&path).map_err(|_| EngineError::ShimGone)?;
            berth_init::protocol::send(conn.as_fd(), &ShimRequest::Destroy, &[]).map_err(|_| EngineError::ShimGone)?;
            match berth_init::protocol::recv::<ShimReply>(conn.as_fd()) {
                Ok((ShimReply::Destroyed { teardown }, _)) => Ok(teardown),
                _ => Err(EngineError::ShimGone),
            }
        })
        .await
        .map_err(|_| EngineError::ShimGone)
        .and_then(|t| t);
        // Gone either way: a shim that does not answer has no sandbox left to tear down.
        self.sandboxes.lock().await.remove(&sid);
        teardown
    }

    /// Run `op` once per idempotency key: a retry with the same key gets the first call's result.
    pub async fn idempotent<F>(&self, key: Option<String>, op: F) -> Result<(u16, serde_json::Value), EngineError>
    where
        F: std::future::Future<Output = Result<(u16, serde_json::Value), EngineError>>,
    {
        let Some(key) = key else { return op.await };
        // Serialised by this lock, so a retry racing the original waits for it and gets its result; kept in
        // the database, so a retry after a daemon restart gets it too.
        let _guard = self.idempotent.lock().await;
        if let Some(hit) = self.store.idempotent_get(&key)? {
            return Ok(hit);
        }
        let result = op.await?;
        self.store.idempotent_put(&key, result.0, &result.1, now_ms())?;
        Ok(result)
    }

    /// Record a file-system change made through the API in the sandbox's journal.
    pub async fn note_files(&self, id: &str, action: &str, args: serde_json::Value) {
        if let Ok(live) = self.live(id).await {
            live.record.lock().await.last_activity_ms = now_ms();
            live.note(action, args, serde_json::json!({"ok": true}));
        }
    }

    /// Serve each sandbox's own API port with `api` (once: later calls are ignored).
    pub fn serve_sandbox_apis_with(&self, api: Box<dyn network::SandboxApi>) {
        let _ = self.sandbox_api.set(api);
    }

    /// The daemon's version and its bounds: the engine's, then the transports' (`listeners`).
    pub fn info(&self, listeners: Vec<berth_api::Bound>) -> berth_api::DaemonInfo {
        berth_api::DaemonInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            bounds: std::iter::once(self.files_bound())
                .chain(crate::bounds::table(&self.bounds))
                .chain(listeners)
                .collect(),
            warm: self.warm_info(),
            isolation: self.bounds.isolation,
            isolations: create::isolations(),
        }
    }

    /// Recent lifecycle events, and a receiver for the ones to come.
    pub fn events(&self) -> (Vec<LifecycleEvent>, tokio::sync::broadcast::Receiver<LifecycleEvent>) {
        let rx = self.events.tx.subscribe();
        let recent = self.events.recent.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default();
        (recent, rx)
    }
}

/// Connect to a shim, fetch its sandbox's record and take over its init's control socket.
/// What a shim hands over: the sandbox's record, its exec environment, its proxy's authority, a session.
struct Adopted {
    record: Sandbox,
    env: BTreeMap<String, String>,
    authority: Option<(String, String)>,
    session: Arc<Session>,
}

async fn adopt(path: &Path) -> Result<Adopted, EngineError> {
    let path = path.to_path_buf();
    let (record, env, authority, control) = tokio::task::spawn_blocking(move || -> Result<_, EngineError> {
        let conn = berth_sys::fd::seqpacket_connect(&path).map_err(|_| EngineError::ShimGone)?;
        let ask = |req: &ShimRequest| -> Result<(ShimReply, Vec<std::os::fd::OwnedFd>), EngineError> {
            berth_init::protocol::send(conn.as_fd(), req, &[]).map_err(|_| EngineError::ShimGone)?;
            berth_init::protocol::recv(conn.as_fd()).map_err(|_| EngineError::ShimGone)
        };
        let ShimReply::Info { record, env, authority } = ask(&ShimRequest::Info)?.0 else {
            return Err(EngineError::ShimGone);
        };
        let (ShimReply::Control, mut fds) = ask(&ShimRequest::Control)? else { return Err(EngineError::ShimGone) };
        let control = fds.pop().ok_or(EngineError::ShimGone)?;
        Ok((*record, env, authority, control))
    })
    .await
    .map_err(|_| EngineError::ShimGone)??;
    Ok(Adopted { record, env, authority, session: Session::start(control)? })
}

/// Kill the execs still running in `live` (the sandbox is being removed), and give each a moment to record
/// its end: killed, as it was.
async fn kill_running(live: &Live) {
    let ending: Vec<tokio::sync::watch::Receiver<Option<berth_api::ExecResult>>> = {
        let execs = live.execs.lock().await;
        execs
            .values()
            .filter(|e| e.done.borrow().is_none())
            .map(|e| {
                let _ = e.kill.send(true);
                e.done.clone()
            })
            .collect()
    };
    for mut done in ending {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), done.wait_for(Option::is_some)).await;
    }
}
