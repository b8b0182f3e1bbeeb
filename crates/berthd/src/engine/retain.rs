//! What a sandbox keeps of its execs: at most `--max-exec-records` finished ones (with their logs), and no new
//! exec once its journal is full, so that nothing runs unrecorded.

use std::sync::Arc;

use super::{Engine, Live, live::exec_number};
use crate::EngineError;

impl Engine {
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
