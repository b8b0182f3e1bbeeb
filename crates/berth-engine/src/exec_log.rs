//! An exec's (or a shell's) log on disk, bounded: the head is written as it comes, the tail is held back
//! and written at the end after a marker line that says how many bytes were dropped between them. The same
//! [`OutputBudget`] as the output a client is sent, with a larger tail.

use berth_api::Stream;
use tokio::io::AsyncWriteExt;

use crate::output_budget::OutputBudget;

/// Most of a log's tail held in memory until its exec ends.
const TAIL_MAX: u64 = 1 << 20;
/// Bytes buffered before the log is written (each running exec holds this much of the daemon's memory).
const LOG_BUFFER: usize = 64 << 10;

pub struct ExecLog {
    file: tokio::io::BufWriter<tokio::fs::File>,
    budget: OutputBudget,
    head: u64,
    tail: u64,
}

impl ExecLog {
    /// A log of at most `max` bytes of output (plus the marker line) in `file`.
    pub fn new(file: tokio::fs::File, max: u64) -> ExecLog {
        let budget = OutputBudget::with_tail(max, TAIL_MAX);
        let (head, tail) = budget.shape();
        ExecLog { file: tokio::io::BufWriter::with_capacity(LOG_BUFFER, file), budget, head, tail }
    }

    /// Account for `data` and write what belongs to the head.
    pub async fn write(&mut self, stream: Stream, data: &[u8]) -> std::io::Result<()> {
        match self.budget.push(stream, data) {
            Some(head) => self.file.write_all(&head).await,
            None => Ok(()),
        }
    }

    /// Make what was written so far readable (for `logs` and followers).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush().await
    }

    /// Write out what the head holds and save the rest of the log's state (see [`OutputBudget::save`]).
    pub async fn save(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        self.file.flush().await?;
        out.extend(self.head.to_le_bytes());
        out.extend(self.tail.to_le_bytes());
        self.budget.save(out);
        Ok(())
    }

    /// The log saved by [`ExecLog::save`] going on in `file` (opened to append), read from the front of
    /// `input`.
    pub fn load(file: tokio::fs::File, input: &mut &[u8]) -> Option<ExecLog> {
        let head = crate::output_budget::take_u64(input)?;
        let tail = crate::output_budget::take_u64(input)?;
        let budget = OutputBudget::load(input)?;
        Some(ExecLog { file: tokio::io::BufWriter::with_capacity(LOG_BUFFER, file), budget, head, tail })
    }

    /// At the end: the marker (when anything was dropped) and the tail. Returns the bytes dropped.
    pub async fn finish(mut self) -> u64 {
        let dropped = self.budget.dropped();
        if dropped > 0 {
            let _ = self.file.write_all(marker(dropped, self.head, self.tail).as_bytes()).await;
        }
        for (_, chunk) in self.budget.finish() {
            let _ = self.file.write_all(&chunk).await;
        }
        let _ = self.file.flush().await;
        dropped
    }
}

/// The line that stands where a log's middle was dropped.
pub fn marker(dropped: u64, head: u64, tail: u64) -> String {
    format!(
        "\n[… {dropped} bytes dropped: this log keeps the first {head} and the last {tail} bytes of the output \
         (max_log_bytes) …]\n"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_log_past_its_bound_keeps_head_marker_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x1.log");
        let mut log = ExecLog::new(tokio::fs::File::create(&path).await.unwrap(), 4096);
        for i in 0..1000u32 {
            log.write(Stream::Stdout, format!("line {i:05}\n").as_bytes()).await.unwrap();
        }
        let dropped = log.finish().await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(dropped, 11_000 - 4096);
        assert!(text.starts_with("line 00000\n"), "the head is kept");
        assert!(text.ends_with("line 00999\n"), "the tail is kept");
        assert!(text.contains(&format!("[… {dropped} bytes dropped")), "the marker says how much went");
        assert_eq!(text.len() as u64, 4096 + marker(dropped, 3072, 1024).len() as u64);
    }

    #[tokio::test]
    async fn a_log_within_its_bound_is_whole_and_unmarked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x1.log");
        let mut log = ExecLog::new(tokio::fs::File::create(&path).await.unwrap(), 4096);
        log.write(Stream::Stdout, b"out\n").await.unwrap();
        log.write(Stream::Stderr, b"err\n").await.unwrap();
        assert_eq!(log.finish().await, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "out\nerr\n");
    }
}
