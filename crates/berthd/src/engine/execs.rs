//! A sandbox's execs: the cgroup and OOM count each starts with, and after they started: list them, their
//! logs, their end, killing one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_api::{EventKind, ExecInfo, ExecResult};
use tokio::sync::watch;

use super::{Engine, Live, now_ms};
use crate::EngineError;
use crate::journal;

impl Engine {
    /// The cgroup of command `exec_id` of sandbox `sid`, inside the sandbox's: its whole tree, to be killed at
    /// once. None under gVisor, whose processes are not the host's: there a command's tree is its process
    /// group (what leaves it with setsid ends with the sandbox).
    pub(super) fn command_cgroup(
        &self,
        sid: &str,
        exec_id: &str,
        isolation: berth_api::Isolation,
    ) -> Result<Option<berth_runtime::cgroup::Cgroup>, EngineError> {
        match &self.cgroups {
            Some(h) if isolation == berth_api::Isolation::Namespaces => {
                h.open(sid).child(exec_id).map(Some).map_err(|e| EngineError::Create(berth_runtime::error_chain(&e)))
            }
            _ => Ok(None),
        }
    }

    /// Start counting the OOM kills of a command of sandbox `sid` whose own cgroup is `own` (under gVisor, the
    /// kills of the whole sandbox, which one ends).
    pub(super) fn oom_count(
        &self,
        sid: &str,
        own: Option<&berth_runtime::cgroup::Cgroup>,
        isolation: berth_api::Isolation,
    ) -> Option<crate::launch::OomCount> {
        let sandbox = self.cgroups.as_ref()?.open(sid);
        match isolation {
            berth_api::Isolation::Gvisor => crate::launch::OomCount::whole(sandbox),
            berth_api::Isolation::Namespaces => crate::launch::OomCount::start(sandbox, own?),
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
