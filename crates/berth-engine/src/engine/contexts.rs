//! Code contexts: a long-lived interpreter inside a sandbox, started as a detached exec of berth's driver (so
//! in a cgroup of its own, listed with the sandbox's execs, killed with it), reached through two unix sockets
//! it serves inside the sandbox. Their records are kept beside the sandbox's exec logs, so a restarted daemon
//! reaches the same interpreters, with their state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::{Context, ContextLanguage, ContextState, CreateContext, ExecRequest, Interrupted};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use super::{Engine, Live, now_ms};
use crate::EngineError;

/// Contexts one sandbox may have at once (each is an interpreter process and a running exec).
pub const MAX_CONTEXTS: usize = 16;
/// Where the drivers' sockets are, inside the sandbox.
pub const SOCKET_DIR: &str = "/run/berth/contexts";
/// How long a new interpreter has to start serving.
const START_WAIT: Duration = Duration::from_secs(20);

const PYTHON_DRIVER: &str = include_str!("../contexts/driver.py");
const JS_DRIVER: &str = include_str!("../contexts/driver.js");

/// A context as it is kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ContextRecord {
    pub id: String,
    pub sandbox_id: String,
    pub language: ContextLanguage,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub exec_id: String,
    pub created_at_ms: u64,
    pub last_run_at_ms: Option<u64>,
    pub execution_count: u64,
    /// The host pid of the sandbox's init when the interpreter was started: a sandbox started again since
    /// (stop and start, rebuild, restore) has lost its interpreters.
    pub init_pid: i32,
}

/// A context, in memory.
pub(crate) struct Ctx {
    pub record: std::sync::Mutex<ContextRecord>,
    /// Held by the run going on, if any (one at a time).
    pub run: Arc<Mutex<()>>,
}

impl Ctx {
    pub fn snapshot(&self) -> ContextRecord {
        self.record.lock().map(|r| r.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn view(&self) -> Context {
        let r = self.snapshot();
        let state = if self.run.try_lock().is_ok() { ContextState::Idle } else { ContextState::Busy };
        Context {
            id: r.id,
            sandbox_id: r.sandbox_id,
            language: r.language,
            cwd: r.cwd,
            state,
            execution_count: r.execution_count,
            created_at_ms: r.created_at_ms,
            last_run_at_ms: r.last_run_at_ms,
            exec_id: r.exec_id,
        }
    }

    pub fn update(&self, f: impl FnOnce(&mut ContextRecord)) {
        if let Ok(mut r) = self.record.lock() {
            f(&mut r);
        }
    }
}

/// Every sandbox's contexts, loaded from disk the first time a sandbox's are asked for.
#[derive(Default)]
pub(crate) struct Contexts {
    by_sandbox: Mutex<HashMap<String, Vec<Arc<Ctx>>>>,
}

impl Engine {
    fn contexts_file(&self, sid: &str) -> std::path::PathBuf {
        self.root.join("logs").join(sid).join("contexts.json")
    }

    /// The live sandbox `id`, its id and its init's host pid; a sandbox that is not running has no contexts.
    pub(super) async fn context_host(&self, id: &str) -> Result<(Arc<Live>, String, i32), EngineError> {
        let live = self.live(id).await?;
        let r = live.record.lock().await;
        let pid = r.pid.ok_or_else(|| EngineError::WrongState {
            id: r.id.clone(),
            state: "not running".into(),
            hint: "start it first (berth start)".into(),
        })?;
        let sid = r.id.clone();
        drop(r);
        Ok((live, sid, pid))
    }

    /// The contexts of sandbox `sid` whose interpreters belong to its current runtime.
    pub(crate) async fn contexts_of(&self, sid: &str, pid: i32) -> Vec<Arc<Ctx>> {
        let mut all = self.contexts.by_sandbox.lock().await;
        let list = all.entry(sid.to_string()).or_insert_with(|| {
            std::fs::read(self.contexts_file(sid))
                .ok()
                .and_then(|b| serde_json::from_slice::<Vec<ContextRecord>>(&b).ok())
                .unwrap_or_default()
                .into_iter()
                .map(|r| Arc::new(Ctx { record: std::sync::Mutex::new(r), run: Arc::new(Mutex::new(())) }))
                .collect()
        });
        let before = list.len();
        list.retain(|c| c.snapshot().init_pid == pid);
        let now = list.clone();
        drop(all);
        if now.len() != before {
            self.save_contexts(sid).await;
        }
        now
    }

    pub(crate) async fn save_contexts(&self, sid: &str) {
        let records: Vec<ContextRecord> = match self.contexts.by_sandbox.lock().await.get(sid) {
            Some(list) => list.iter().map(|c| c.snapshot()).collect(),
            None => return,
        };
        let path = self.contexts_file(sid);
        let tmp = path.with_extension("json.new");
        if let Ok(bytes) = serde_json::to_vec(&records)
            && tokio::fs::write(&tmp, bytes).await.is_ok()
        {
            let _ = tokio::fs::rename(&tmp, &path).await;
        }
    }

    /// The contexts of sandbox `sid` started under init `from` are now those of init `to`: its process tree
    /// was woken from hibernation, interpreters and all.
    pub(crate) async fn rehome_contexts(&self, sid: &str, from: i32, to: i32) {
        let moved = self.contexts_of(sid, from).await;
        for c in &moved {
            c.update(|r| r.init_pid = to);
        }
        self.save_contexts(sid).await;
    }

    /// Forget a sandbox's contexts (it is being removed).
    pub(crate) async fn forget_contexts(&self, sid: &str) {
        self.contexts.by_sandbox.lock().await.remove(sid);
    }

    /// Whether any of sandbox `sid`'s contexts is running code now, and the exec ids of its interpreters
    /// (which run between runs too, and are no activity of their own).
    pub(crate) async fn context_activity(&self, sid: &str) -> (bool, Vec<String>) {
        let all = self.contexts.by_sandbox.lock().await;
        let Some(list) = all.get(sid) else { return (false, Vec::new()) };
        let busy = list.iter().any(|c| c.run.try_lock().is_err());
        (busy, list.iter().map(|c| c.snapshot().exec_id).collect())
    }

    pub(super) async fn context(&self, id: &str, ctx: &str) -> Result<(Arc<Live>, Arc<Ctx>), EngineError> {
        let (live, sid, pid) = self.context_host(id).await?;
        let found = self.contexts_of(&sid, pid).await.into_iter().find(|c| c.snapshot().id == ctx);
        found.map(|c| (live, c)).ok_or(EngineError::NoContext { sandbox: sid, context: ctx.to_string() })
    }

    pub async fn create_context(&self, id: &str, req: CreateContext) -> Result<Context, EngineError> {
        let cwd = match &req.cwd {
            Some(w) => berth_runtime::spec::sandbox_path(w).map_err(|e| EngineError::invalid(e.to_string()))?,
            None => "/workspace".to_string(),
        };
        for (k, v) in &req.env {
            berth_runtime::spec::check_env(k, v).map_err(|e| EngineError::invalid(e.to_string()))?;
        }
        // Making a context is activity: a hibernated sandbox wakes for it, as for a run.
        self.live_or_wake(id, "context").await?;
        let (live, sid, pid) = self.context_host(id).await?;
        let count = self.contexts_of(&sid, pid).await.len();
        if count >= MAX_CONTEXTS {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid} has {count} code contexts, the most it may have: remove one first"
            )));
        }
        let ctx_id = format!("c{}", &berth_runtime::new_id().map_err(|e| EngineError::Create(e.to_string()))?[..12]);
        let mut record = ContextRecord {
            id: ctx_id,
            sandbox_id: sid.clone(),
            language: req.language,
            cwd,
            env: req.env,
            exec_id: String::new(),
            created_at_ms: now_ms(),
            last_run_at_ms: None,
            execution_count: 0,
            init_pid: pid,
        };
        record.exec_id = self.start_interpreter(&record).await?;
        live.note(
            "context_create",
            serde_json::json!({"context": record.id, "language": record.language, "cwd": record.cwd,
                               "env_names": record.env.keys().collect::<Vec<_>>()}),
            serde_json::json!({"exec_id": record.exec_id}),
        );
        let ctx = Arc::new(Ctx { record: std::sync::Mutex::new(record), run: Arc::new(Mutex::new(())) });
        self.contexts.by_sandbox.lock().await.entry(sid.clone()).or_default().push(Arc::clone(&ctx));
        self.save_contexts(&sid).await;
        // A pass of the reaper while the interpreter was an exec not yet known as a context counted it as
        // activity and set no idle deadline: the idle clocks run again from here.
        self.wake_reaper();
        Ok(ctx.view())
    }

    pub async fn list_contexts(&self, id: &str) -> Result<Vec<Context>, EngineError> {
        let (_, sid, pid) = self.context_host(id).await?;
        Ok(self.contexts_of(&sid, pid).await.iter().map(|c| c.view()).collect())
    }

    pub async fn get_context(&self, id: &str, ctx: &str) -> Result<Context, EngineError> {
        Ok(self.context(id, ctx).await?.1.view())
    }

    pub async fn remove_context(&self, id: &str, ctx: &str) -> Result<(), EngineError> {
        let (live, c) = self.context(id, ctx).await?;
        let r = c.snapshot();
        self.stop_interpreter(&r).await;
        if let Some(list) = self.contexts.by_sandbox.lock().await.get_mut(&r.sandbox_id) {
            list.retain(|x| x.snapshot().id != r.id);
        }
        self.save_contexts(&r.sandbox_id).await;
        live.note("context_remove", serde_json::json!({"context": r.id}), serde_json::json!({}));
        Ok(())
    }

    /// A fresh interpreter in place of the old one: same id, state gone, count back at zero.
    pub async fn restart_context(&self, id: &str, ctx: &str) -> Result<Context, EngineError> {
        let (live, c) = self.context(id, ctx).await?;
        // A run going on ends with the interpreter it runs in.
        self.stop_interpreter(&c.snapshot()).await;
        let _run = c.run.lock().await;
        self.replace_interpreter(&c).await?;
        live.note("context_restart", serde_json::json!({"context": c.snapshot().id}), serde_json::json!({}));
        drop(_run);
        // The sandbox's idle clocks run again.
        self.wake_reaper();
        Ok(c.view())
    }

    /// Kill a context's interpreter and start another (the caller holds its run lock, or it has none).
    pub(crate) async fn replace_interpreter(&self, c: &Arc<Ctx>) -> Result<(), EngineError> {
        let mut r = c.snapshot();
        self.stop_interpreter(&r).await;
        r.exec_id = self.start_interpreter(&r).await?;
        c.update(|rec| {
            rec.exec_id = r.exec_id.clone();
            rec.execution_count = 0;
        });
        self.save_contexts(&r.sandbox_id).await;
        Ok(())
    }

    pub async fn interrupt_context(&self, id: &str, ctx: &str) -> Result<Interrupted, EngineError> {
        let (live, c) = self.context(id, ctx).await?;
        let r = c.snapshot();
        let reply = control(&Reach::of(&live, r.init_pid).await, &r.id, "interrupt").await?;
        let interrupted = reply.get("interrupted").and_then(serde_json::Value::as_bool).unwrap_or(false);
        if interrupted {
            live.note("context_interrupt", serde_json::json!({"context": r.id}), serde_json::json!({}));
        }
        Ok(Interrupted { interrupted })
    }

    /// Start the driver for `r` as a detached exec, and wait until it serves its sockets.
    async fn start_interpreter(&self, r: &ContextRecord) -> Result<String, EngineError> {
        let mut env = r.env.clone();
        env.insert("BERTH_CONTEXT_DIR".into(), SOCKET_DIR.into());
        env.insert("BERTH_CONTEXT_ID".into(), r.id.clone());
        env.insert("BERTH_CONTEXT_LANGUAGE".into(), r.language.name().into());
        let argv: Vec<String> = match r.language {
            ContextLanguage::Python | ContextLanguage::Bash => {
                env.insert("BERTH_DRIVER".into(), PYTHON_DRIVER.into());
                env.entry("MPLBACKEND".into()).or_insert_with(|| "Agg".into());
                [
                    "python3",
                    "-u",
                    "-c",
                    "import os; exec(compile(os.environ['BERTH_DRIVER'], '<berth context driver>', 'exec'))",
                ]
                .map(String::from)
                .to_vec()
            }
            ContextLanguage::Javascript => {
                env.insert("BERTH_DRIVER".into(), JS_DRIVER.into());
                ["node", "-e", "new Function('require', process.env.BERTH_DRIVER)(require)"].map(String::from).to_vec()
            }
        };
        let interpreter = argv[0].clone();
        let req = ExecRequest {
            argv,
            env,
            workdir: Some(r.cwd.clone()),
            max_log_bytes: Some(64 * 1024),
            detach: true,
            ..ExecRequest::default()
        };
        let (info, _) = self.exec_because(&r.sandbox_id, req, "context").await?;
        let done = self.exec_done(&r.sandbox_id, &info.exec_id).await?;
        let deadline = Instant::now() + START_WAIT;
        loop {
            if control(&self.reach(r).await, &r.id, "info").await.is_ok() {
                return Ok(info.exec_id);
            }
            let ended = done.borrow().clone();
            if let Some(result) = ended {
                let log = self.root.join("logs").join(&r.sandbox_id).join(format!("{}.log", info.exec_id));
                let said = tokio::fs::read(&log).await.unwrap_or_default();
                let said = String::from_utf8_lossy(&said[said.len().saturating_sub(2000)..]).trim().to_string();
                let why = match result.exit_code {
                    127 => format!("this sandbox's image has no {interpreter}"),
                    code => format!("{interpreter} exited with status {code}: {said}"),
                };
                return Err(EngineError::Conflict(format!("the {} context could not start: {why}", r.language.name())));
            }
            if Instant::now() >= deadline {
                let _ = self.kill_exec(&r.sandbox_id, &info.exec_id).await;
                return Err(EngineError::Conflict(format!(
                    "the {} context did not start serving within {} s",
                    r.language.name(),
                    START_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// End an interpreter: ask it to exit, then kill its exec's whole cgroup (which also ends whatever it
    /// started), whether or not this daemon started it.
    pub(crate) async fn stop_interpreter(&self, r: &ContextRecord) {
        let reach = self.reach(r).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), control(&reach, &r.id, "exit")).await;
        let _ = self.kill_exec(&r.sandbox_id, &r.exec_id).await;
        if let Some(h) = &self.cgroups
            && let Ok(cg) = h.open(&r.sandbox_id).child(&r.exec_id)
        {
            let _ = tokio::task::spawn_blocking(move || cg.kill_all().and_then(|()| cg.remove())).await;
        }
    }
}

/// How the daemon reaches a socket inside a sandbox: through its files, from the host (the sandbox whose
/// init has this pid, behind this isolation), or through its init, which connects inside and copies (where
/// the backend has no `host_sockets`: gVisor, whose kernel keeps a socket its processes make).
pub(crate) enum Reach {
    Files(i32, berth_api::Isolation),
    Init(Arc<crate::session::Session>),
}

impl Reach {
    pub(super) async fn of(live: &Live, pid: i32) -> Self {
        let isolation = live.record.lock().await.isolation;
        match berth_runtime::backend(isolation).supports().host_sockets {
            true => Reach::Files(pid, isolation),
            false => Reach::Init(Arc::clone(&live.session)),
        }
    }
}

impl Engine {
    /// How to reach the sockets of context `r`.
    pub(crate) async fn reach(&self, r: &ContextRecord) -> Reach {
        match self.live(&r.sandbox_id).await {
            Ok(live) => Reach::of(&live, r.init_pid).await,
            Err(_) => Reach::Files(r.init_pid, berth_api::Isolation::default()),
        }
    }
}

/// Connect to one of a context's sockets (`sock`: runs, `ctl`: control) inside its sandbox.
pub(crate) async fn connect(reach: &Reach, ctx: &str, kind: &str) -> Result<UnixStream, EngineError> {
    let path = format!("{SOCKET_DIR}/{ctx}.{kind}");
    let (pid, isolation) = match reach {
        Reach::Files(pid, isolation) => (*pid, *isolation),
        Reach::Init(session) => {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| berth_sys::SysError::new("make a socket pair", e))?;
            session.send(&berth_init::protocol::Request::Connect { path }, &[std::os::fd::AsFd::as_fd(&theirs)])?;
            ours.set_nonblocking(true).map_err(|e| berth_sys::SysError::new("set a socket non-blocking", e))?;
            return UnixStream::from_std(ours).map_err(|e| berth_sys::SysError::new("watch a socket", e).into());
        }
    };
    let stream = tokio::task::spawn_blocking(move || -> Result<_, EngineError> {
        let fs = crate::files::SandboxFs::open(pid, isolation).map_err(|e| EngineError::Conflict(e.to_string()))?;
        let s = fs.connect(&path).map_err(|e| {
            EngineError::Conflict(format!("the context's interpreter cannot be reached: {e}; restart the context"))
        })?;
        s.set_nonblocking(true).map_err(|e| berth_sys::SysError::new("set a socket non-blocking", e))?;
        Ok(s)
    })
    .await
    .map_err(|_| EngineError::Conflict("connecting to the context panicked".into()))??;
    UnixStream::from_std(stream).map_err(|e| berth_sys::SysError::new("watch a socket", e).into())
}

/// One control request to a context's driver, and its answer.
pub(crate) async fn control(reach: &Reach, ctx: &str, op: &str) -> Result<serde_json::Value, EngineError> {
    let mut s = connect(reach, ctx, "ctl").await?;
    let unreachable =
        |e: std::io::Error| EngineError::Conflict(format!("the context's interpreter did not answer: {e}"));
    s.write_all(format!("{{\"op\":\"{op}\"}}\n").as_bytes()).await.map_err(unreachable)?;
    let mut line = String::new();
    let mut reader = BufReader::new(s.take(1 << 16));
    match tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await {
        Ok(Ok(_)) => serde_json::from_str(&line)
            .map_err(|_| EngineError::Conflict("the context's interpreter answered nonsense".into())),
        Ok(Err(e)) => Err(unreachable(e)),
        Err(_) => Err(EngineError::Conflict("the context's interpreter did not answer in 5 s".into())),
    }
}
