//! A sandbox's execs after they started: list them, their logs, their end, killing one.

use std::path::PathBuf;
use std::time::Duration;

use berth_api::{ExecInfo, ExecResult};
use tokio::sync::watch;

use super::Engine;
use crate::EngineError;

impl Engine {
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
}
