//! A sandbox's execs: starting one (its user, environment, cgroup and OOM count), and after they started:
//! list them, their logs, their end, killing one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_api::{EventKind, ExecInfo, ExecRequest, ExecResult};
use tokio::sync::{mpsc, watch};

use super::live::ExecEntry;
use super::{Engine, Live, actor, now_ms, users};
use crate::EngineError;
use crate::exec::{self, ExecPlan};
use crate::journal;

impl Engine {
    /// Start an exec. Returns its id, and (unless detached) the stream of its frames.
    pub async fn exec(
        &self,
        id: &str,
        req: ExecRequest,
    ) -> Result<(ExecInfo, Option<mpsc::Receiver<berth_api::ExecFrame>>), EngineError> {
        self.exec_because(id, req, "exec").await
    }

    /// Start an exec, as activity of kind `cause` (`exec`, or `context` for a context's interpreter).
    pub(crate) async fn exec_because(
        &self,
        id: &str,
        req: ExecRequest,
        cause: &str,
    ) -> Result<(ExecInfo, Option<mpsc::Receiver<berth_api::ExecFrame>>), EngineError> {
        if req.argv.is_empty() || req.argv[0].is_empty() {
            return Err(EngineError::invalid("argv must name a command"));
        }
        let workdir = match &req.workdir {
            Some(w) => berth_runtime::spec::sandbox_path(w).map_err(|e| EngineError::invalid(e.to_string()))?,
            None => "/workspace".to_string(),
        };
        if let Some(t) = req.timeout_seconds.filter(|t| !(*t > 0.0 && *t <= berth_api::MAX_DURATION_SECONDS)) {
            return Err(EngineError::invalid(format!(
                "timeout_seconds must be positive and at most {} (100 years), not {t}",
                berth_api::MAX_DURATION_SECONDS
            )));
        }
        let max_output = req.max_output_bytes.unwrap_or(exec::DEFAULT_MAX_OUTPUT);
        if max_output < 64 {
            return Err(EngineError::invalid("max_output_bytes must be at least 64"));
        }
        let max_log = req.max_log_bytes.unwrap_or(self.bounds.max_log_bytes);
        if max_log < crate::bounds::MIN_LOG_BYTES || max_log > self.bounds.max_log_bytes {
            return Err(EngineError::invalid(format!(
                "max_log_bytes must be between {} and this daemon's bound of {} (berth daemon --max-log-bytes), \
                 not {max_log}",
                crate::bounds::MIN_LOG_BYTES,
                self.bounds.max_log_bytes
            )));
        }
        let user = req.user.as_deref().map(users::parse).transpose()?;
        let live = self.live_or_wake(id, cause).await?;
        self.touch(&live, cause).await?;
        let (sid, isolation, pid) = {
            let r = live.record.lock().await;
            (r.id.clone(), r.isolation, r.pid)
        };
        let account = match (&user, pid) {
            (Some(spec), Some(pid)) => Some(users::account(pid, isolation, spec).await?),
            (Some(_), None) => return Err(EngineError::Conflict(format!("sandbox {sid} has no running init"))),
            (None, _) => None,
        };
        let workdir = match (&req.workdir, account.as_ref().and_then(|a| a.home.clone())) {
            (None, Some(home)) => home,
            _ => workdir,
        };
        let starting = self.admit_exec(&live, &sid).await?;
        let mut env: BTreeMap<String, String> =
            berth_runtime::spec::BASE_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (k, v) in account.iter().flat_map(users::Account::env) {
            match v {
                Some(v) => env.insert(k.to_string(), v),
                None => env.remove(k),
            };
        }
        env.insert("PWD".into(), workdir.clone());
        for (k, v) in live.env.iter().chain(req.env.iter()) {
            berth_runtime::spec::check_env(k, v).map_err(|e| EngineError::invalid(e.to_string()))?;
            env.insert(k.clone(), v.clone());
        }
        let n = live.next_exec.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let exec_id = format!("x{n}");
        let logs = self.root.join("logs").join(&sid);
        tokio::fs::create_dir_all(&logs).await.map_err(EngineError::Log)?;
        let cgroup = self.command_cgroup(&sid, &exec_id, isolation)?;
        let oom = self.oom_count(&sid, cgroup.as_ref(), isolation);
        let plan = ExecPlan {
            exec_id: exec_id.clone(),
            argv: req.argv.clone(),
            env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
            workdir,
            ids: account.as_ref().map_or((0, 0), |a| (a.uid, a.gid)),
            timeout: req.timeout_seconds.map(Duration::from_secs_f64),
            max_output,
            log: logs.join(format!("{exec_id}.log")),
            max_log,
            stdin: req.stdin.clone(),
            stdin_open: req.stdin_open,
            redactor: live.redactor.clone().filter(|r| !r.is_empty()),
            pause: Some(Arc::clone(&live.pause)),
            cgroup,
            oom,
        };
        let log_path = plan.log.clone();
        let env_names: Vec<&String> = live.env.keys().chain(req.env.keys()).collect();
        let args = serde_json::json!({
            "exec_id": exec_id, "argv": req.argv, "workdir": plan.workdir, "env_names": env_names, "user": req.user,
            "timeout_seconds": req.timeout_seconds, "max_output_bytes": max_output, "max_log_bytes": max_log, "detach": req.detach, "stdin_bytes": req.stdin.as_ref().map(String::len), "stdin_open": req.stdin_open,
        });
        // Taken before the command starts: what it does at once (a proxy connection) is after its start.
        let started_at_ms = now_ms();
        let running = exec::start(Arc::clone(&live.session), plan).await?;
        live.note("exec", args, serde_json::json!({"started": true}));
        self.events.emit(&sid, EventKind::ExecStarted, Some(exec_id.clone()), None);
        let recorder = self.record_end(&live, &sid, &exec_id, log_path, actor(), running.done.clone());
        // One read of the watch: two guards held at once deadlock against the exec's end sending its result
        // between them (the lock lets a waiting writer in first).
        let result = running.done.borrow().clone();
        let info = ExecInfo {
            exec_id: exec_id.clone(),
            argv: req.argv.clone(),
            started_at_ms,
            running: result.is_none(),
            result,
        };
        live.execs.lock().await.insert(
            exec_id,
            ExecEntry {
                argv: req.argv,
                started_at_ms,
                kill: running.kill,
                done: running.done,
                park: Some(running.park),
                recorder: Some(recorder),
                input: running.input,
            },
        );
        // Listed: counted as running by its entry from here.
        drop(starting);
        Ok((info, (!req.detach).then_some(running.frames)))
    }

    /// The cgroup of command `exec_id` of sandbox `sid`, inside the sandbox's: its whole tree, to be killed at
    /// once. None where the backend gives commands no host cgroup (gVisor, whose processes are not the
    /// host's: there a command's tree is its process group, and what leaves it with setsid ends with the
    /// sandbox).
    pub(super) fn command_cgroup(
        &self,
        sid: &str,
        exec_id: &str,
        isolation: berth_api::Isolation,
    ) -> Result<Option<berth_runtime::cgroup::Cgroup>, EngineError> {
        match &self.cgroups {
            Some(h) if berth_runtime::backend(isolation).supports().command_cgroups => {
                h.open(sid).child(exec_id).map(Some).map_err(|e| EngineError::Create(berth_runtime::error_chain(&e)))
            }
            _ => Ok(None),
        }
    }

    /// Start counting the OOM kills of a command of sandbox `sid` whose own cgroup is `own`, or of the whole
    /// sandbox where one ends it (gVisor), as its backend's `oom` says.
    pub(super) fn oom_count(
        &self,
        sid: &str,
        own: Option<&berth_runtime::cgroup::Cgroup>,
        isolation: berth_api::Isolation,
    ) -> Option<crate::launch::OomCount> {
        let sandbox = self.cgroups.as_ref()?.open(sid);
        match berth_runtime::backend(isolation).supports().oom {
            berth_runtime::OomScope::Sandbox => crate::launch::OomCount::whole(sandbox),
            berth_runtime::OomScope::Command => crate::launch::OomCount::start(sandbox, own?),
            berth_runtime::OomScope::Uncounted => None,
        }
    }

    pub async fn execs(&self, id: &str) -> Result<Vec<ExecInfo>, EngineError> {
        let live = self.live(id).await?;
        let execs = live.execs.lock().await;
        Ok(execs.iter().map(|(id, e)| e.info(id)).collect())
    }

    pub async fn log_path(&self, id: &str, exec_id: &str) -> Result<PathBuf, EngineError> {
        let live = self.live(id).await?;
        let sid = live.record.lock().await.id.clone();
        if !live.execs.lock().await.contains_key(exec_id) {
            return Err(EngineError::NoExec { sandbox: sid, exec: exec_id.to_string() });
        }
        Ok(self.root.join("logs").join(sid).join(format!("{exec_id}.log")))
    }

    /// A watch that turns `Some` when the exec has ended.
    pub async fn exec_done(&self, id: &str, exec_id: &str) -> Result<watch::Receiver<Option<ExecResult>>, EngineError> {
        let live = self.live(id).await?;
        let execs = live.execs.lock().await;
        match execs.get(exec_id) {
            Some(e) => Ok(e.done.clone()),
            None => Err(EngineError::NoExec { sandbox: id.to_string(), exec: exec_id.to_string() }),
        }
    }

    /// Write `data` to a running exec's open stdin (one started with `stdin_open`), then, with `close`, close it.
    pub async fn send_stdin(&self, id: &str, exec_id: &str, data: Vec<u8>, close: bool) -> Result<(), EngineError> {
        let live = self.live(id).await?;
        let sid = live.record.lock().await.id.clone();
        let execs = live.execs.lock().await;
        let e = execs.get(exec_id).ok_or_else(|| EngineError::NoExec { sandbox: sid.clone(), exec: exec_id.into() })?;
        if e.done.borrow().is_some() {
            return Err(EngineError::Conflict(format!("exec {exec_id} of sandbox {sid} has ended: it takes no input")));
        }
        let Some(tx) = &e.input else {
            return Err(EngineError::Conflict(format!(
                "exec {exec_id} of sandbox {sid} was started without stdin_open: its input cannot be written"
            )));
        };
        let bytes = data.len();
        if (!data.is_empty() && tx.send(crate::exec::Input::Data(data)).is_err()) || tx.is_closed() {
            return Err(EngineError::Conflict(format!("the stdin of exec {exec_id} of sandbox {sid} is closed")));
        }
        if close {
            let _ = tx.send(crate::exec::Input::Close);
        }
        drop(execs);
        live.note(
            "stdin",
            serde_json::json!({"exec_id": exec_id, "bytes": bytes, "close": close}),
            serde_json::json!({}),
        );
        Ok(())
    }

    /// Kill an exec's process group and wait for it to end.
    pub async fn kill_exec(&self, id: &str, exec_id: &str) -> Result<ExecInfo, EngineError> {
        let live = self.live(id).await?;
        let sid = live.record.lock().await.id.clone();
        let mut done = {
            let execs = live.execs.lock().await;
            let e = execs.get(exec_id).ok_or_else(|| EngineError::NoExec { sandbox: sid, exec: exec_id.into() })?;
            let _ = e.kill.send(true);
            e.done.clone()
        };
        // Only a kill of an exec still running is recorded, so that killing, which the journal's bound does
        // not refuse, cannot grow the journal without end.
        if done.borrow().is_none() {
            live.note("kill", serde_json::json!({"exec_id": exec_id}), serde_json::json!({}));
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), done.wait_for(|r| r.is_some())).await;
        let execs = live.execs.lock().await;
        execs.get(exec_id).map(|e| e.info(exec_id)).ok_or(EngineError::InitGone)
    }

    /// When exec `exec_id` of `live` ends: its lifecycle event and its journal record (by whoever started
    /// it). Returns the task's handle: an exec that sleeps through a hibernation is recorded by the sandbox
    /// woken in place of `live`, and this task is then aborted.
    pub(super) fn record_end(
        &self,
        live: &Arc<Live>,
        sid: &str,
        exec_id: &str,
        log_path: PathBuf,
        asked_by: String,
        mut done: watch::Receiver<Option<ExecResult>>,
    ) -> tokio::task::AbortHandle {
        let (events, sid, eid, journal_live) =
            (Arc::clone(&self.events), sid.to_string(), exec_id.to_string(), Arc::clone(live));
        let task = tokio::spawn(async move {
            let waited = done.wait_for(|r| r.is_some()).await.map(|r| r.clone());
            if let Ok(result) = waited {
                if let Some(res) = &result {
                    // The idle clocks start again from an exec's end, not its start.
                    journal_live.record.lock().await.last_activity_ms = now_ms();
                    let kind = match (res.timed_out, res.killed) {
                        (true, _) => EventKind::ExecTimedOut,
                        (_, true) => EventKind::ExecKilled,
                        _ => EventKind::ExecFinished,
                    };
                    events.emit(&sid, kind, Some(eid.clone()), Some(res.exit_code));
                }
                let digest = journal::file_digest_async(log_path.clone()).await;
                journal_live.note_as(
                    &asked_by,
                    "exec_finished",
                    serde_json::json!({"exec_id": result.as_ref().map(|r| r.exec_id.clone())}),
                    serde_json::json!({"result": result, "log": log_path, "log_sha256": digest}),
                );
            }
        });
        task.abort_handle()
    }
}
