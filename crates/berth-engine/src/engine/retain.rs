//! What is kept of a sandbox's work: at most `--max-exec-records` finished execs (with their logs), and its
//! journal, which no new action may add to once it is full, so that nothing happens unrecorded; and how many
//! execs one sandbox may run at once.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use super::live::{Starting, exec_number, log_numbers};
use super::{Engine, Live, journal_path};
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

    /// Before an action that adds a record to sandbox `id`'s journal: refuse it when the journal is full
    /// (`refused` says what is not done). Actions that end the sandbox's work (stop, remove, kill) are not
    /// asked: they are done and recorded past the bound, and each can happen only so often.
    pub async fn admit_record(&self, id: &str, refused: &str) -> Result<(), EngineError> {
        let (sid, bytes) = match self.live(id).await {
            Ok(live) => (live.record.lock().await.id.clone(), live.journal_bytes()),
            Err(_) => {
                let sid = self.get(id).await?.id;
                let bytes = tokio::fs::metadata(journal_path(&self.root, &sid)).await.map(|m| m.len()).unwrap_or(0);
                (sid, bytes)
            }
        };
        self.journal_room(&sid, bytes, refused)
    }

    pub(super) fn journal_room(&self, sid: &str, bytes: u64, refused: &str) -> Result<(), EngineError> {
        if bytes < self.bounds.max_journal_bytes {
            return Ok(());
        }
        Err(EngineError::Conflict(format!(
            "sandbox {sid}'s journal holds {bytes} bytes, its bound of {} (berth daemon --max-journal-bytes): \
             {refused} so that nothing happens unrecorded; read its journal, then remove it or restart the \
             daemon with a larger bound",
            crate::bounds::size(self.bounds.max_journal_bytes)
        )))
    }

    /// Before a new exec or shell of `live`: refuse it when the journal is full or the sandbox has its
    /// `--max-running-execs` running, and drop the oldest finished exec records and logs past
    /// `--max-exec-records`. The new exec counts as running from here: keep what is returned until it is
    /// among the sandbox's execs.
    pub(super) async fn admit_exec(&self, live: &Arc<Live>, sid: &str) -> Result<Starting, EngineError> {
        self.journal_room(sid, live.journal_bytes(), "no new exec is started")?;
        let starting = {
            let execs = live.execs.lock().await;
            let running = execs.values().filter(|e| e.done.borrow().is_none()).count()
                + live.starting.load(std::sync::atomic::Ordering::Acquire);
            let max = self.bounds.max_running_execs;
            if running >= max {
                return Err(EngineError::Conflict(format!(
                    "sandbox {sid} has {running} execs running, the most it may run at once (berth daemon \
                     --max-running-execs {max}): wait for one to end, or kill one, then try again"
                )));
            }
            // Taken under the lock that the count was, so two execs admitted at once count each other.
            Starting::new(&live.starting)
        };
        self.drop_old_records(live, sid).await;
        Ok(starting)
    }

    /// Keep at most `--max-exec-records` finished execs, with room for one more: the oldest go, with their
    /// logs. What is on disk counts, so that the logs a previous daemon left go in turn too. Running execs
    /// are never dropped.
    async fn drop_old_records(&self, live: &Arc<Live>, sid: &str) {
        let (root, dir) = (self.root.clone(), sid.to_string());
        let on_disk = tokio::task::spawn_blocking(move || log_numbers(&root, &dir)).await.unwrap_or_default();
        let removed: Vec<u64> = {
            let mut execs = live.execs.lock().await;
            // Finished execs this daemon ran, and the logs a previous one left. A log of this daemon's that
            // is not yet among its execs belongs to one starting now.
            let mut finished: BTreeSet<u64> =
                execs.iter().filter(|(_, e)| e.done.borrow().is_some()).map(|(id, _)| exec_number(id)).collect();
            // An exec woken from hibernation runs on under its number, below this daemon's first.
            let running: BTreeSet<u64> =
                execs.iter().filter(|(_, e)| e.done.borrow().is_none()).map(|(id, _)| exec_number(id)).collect();
            finished.extend(on_disk.into_iter().filter(|n| *n < live.first_exec && !running.contains(n)));
            // Room for the one about to start once it has finished too.
            let over = (finished.len() + 1).saturating_sub(self.bounds.max_exec_records);
            let gone: Vec<u64> = finished.into_iter().take(over).collect();
            for n in &gone {
                execs.remove(&format!("x{n}"));
            }
            gone
        };
        for n in removed {
            let _ = tokio::fs::remove_file(self.root.join("logs").join(sid).join(format!("x{n}.log"))).await;
        }
    }
}
