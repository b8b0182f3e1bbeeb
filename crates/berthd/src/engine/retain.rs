//! What is kept of a sandbox's work: at most `--max-exec-records` finished execs (with their logs), and its
//! journal, which no new exec may start past once it is full, so that nothing runs unrecorded.

use std::path::PathBuf;
use std::sync::Arc;

use super::{Engine, Live, journal_path, live::exec_number};
use crate::EngineError;
use crate::journal;

impl Engine {
    /// A sandbox's journal file (also after the sandbox is gone).
    pub async fn journal_file(&self, id: &str) -> Result<PathBuf, EngineError> {
        let sid = match self.get(id).await {
            Ok(record) => record.id,
            Err(_) if id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) => id.to_string(),
            Err(e) => return Err(e),
        };
        let path = journal_path(&self.root, &sid);
        if !path.exists() {
            return Err(EngineError::NoSandbox(id.to_string()));
        }
        Ok(path)
    }

    /// The verdict of checking a sandbox's journal (read a line at a time).
    pub async fn journal_verify(&self, id: &str) -> Result<journal::Verdict, EngineError> {
        let path = self.journal_file(id).await?;
        tokio::task::spawn_blocking(move || journal::verify(&path))
            .await
            .map_err(|e| EngineError::Log(std::io::Error::other(e)))?
            .map_err(EngineError::Log)
    }

    /// Before a new exec or shell of `live`: refuse it when the journal is full, and drop the oldest finished
    /// exec records (and their logs) past the bound. Running execs are never dropped.
    pub(super) async fn admit_exec(&self, live: &Arc<Live>, sid: &str) -> Result<(), EngineError> {
        let bytes = live.journal_bytes();
        if bytes >= self.bounds.max_journal_bytes {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid}'s journal holds {bytes} bytes, its bound of {} (berth daemon --max-journal-bytes): \
                 no new exec is started so that nothing runs unrecorded; read its journal, then remove it or \
                 restart the daemon with a larger bound",
                crate::bounds::size(self.bounds.max_journal_bytes)
            )));
        }
        let removed: Vec<String> = {
            let mut execs = live.execs.lock().await;
            let mut finished: Vec<(u64, String)> = execs
                .iter()
                .filter(|(_, e)| e.done.borrow().is_some())
                .map(|(id, _)| (exec_number(id), id.clone()))
                .collect();
            // Room for the one about to start once it has finished too.
            let over = (finished.len() + 1).saturating_sub(self.bounds.max_exec_records);
            finished.sort_unstable();
            finished.truncate(over);
            for (_, id) in &finished {
                execs.remove(id);
            }
            finished.into_iter().map(|(_, id)| id).collect()
        };
        for id in removed {
            let _ = tokio::fs::remove_file(self.root.join("logs").join(sid).join(format!("{id}.log"))).await;
        }
        Ok(())
    }
}
