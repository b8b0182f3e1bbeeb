//! The execution journal: one append-only file per sandbox, one JSON record per action, hash-chained.
//!
//! Each record carries the hash of the one before it and its own hash over its content, so editing,
//! inserting or deleting a record breaks the chain at that point and [`verify`] says where. Secret values
//! never enter it: environment variables are recorded by name only, and exec output is represented by its
//! log file's path and SHA-256 digest. Journals outlive their sandboxes: the audit trail of a session is
//! still there after it ends.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The hash the first record chains to.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub time_ms: u64,
    /// Who asked: `local` for the unix socket, otherwise the token's id.
    pub actor: String,
    pub action: String,
    pub args: serde_json::Value,
    pub result: serde_json::Value,
    pub prev: String,
    pub hash: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub ok: bool,
    pub records: u64,
    /// The first record (line number, from 1) that does not check out, and why.
    pub first_bad: Option<(u64, String)>,
}

/// A sandbox's journal, open for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::fs::File,
    seq: u64,
    last: String,
    /// Bytes in the file.
    bytes: u64,
    /// Bytes of its egress records, and the most they may take (`u64::MAX`: unbounded).
    egress_bytes: u64,
    egress_share: u64,
    /// Whether the egress share is spent (an `egress_log_full` record says from when).
    egress_full: bool,
    /// Egress attempts left out since the last `egress_dropped` record: how many, first and last time.
    dropped: Option<(u64, u64, u64)>,
}

/// The action of the record that marks where egress attempts stopped being written.
pub const EGRESS_FULL: &str = "egress_log_full";
/// The action of the record that counts the egress attempts left out.
pub const EGRESS_DROPPED: &str = "egress_dropped";

fn hash_of(r: &Record) -> String {
    let body = serde_json::json!([r.seq, r.time_ms, r.actor, r.action, r.args, r.result, r.prev]);
    let digest = Sha256::digest(body.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex SHA-256 of a file's contents.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// [`file_digest`] off the async threads (a log may be many megabytes); empty when it cannot be read.
pub async fn file_digest_async(path: std::path::PathBuf) -> String {
    tokio::task::spawn_blocking(move || file_digest(&path).unwrap_or_default()).await.unwrap_or_default()
}

impl Journal {
    /// Open (or create) the journal at `path`, continuing its chain, with no bound on its egress records.
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        Journal::open_bounded(path, u64::MAX)
    }

    /// Open (or create) the journal at `path`, continuing its chain; its egress records may take at most
    /// `egress_share` bytes (see [`Journal::append_egress`]).
    pub fn open_bounded(path: &Path, egress_share: u64) -> std::io::Result<Journal> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let (mut seq, mut last) = (0, GENESIS.to_string());
        let (mut bytes, mut egress_bytes, mut egress_full) = (0u64, 0u64, false);
        if let Ok(f) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(f).lines() {
                let line = line?;
                bytes += line.len() as u64 + 1;
                if let Ok(r) = serde_json::from_str::<Record>(&line) {
                    match r.action.as_str() {
                        "egress" => egress_bytes += line.len() as u64 + 1,
                        EGRESS_FULL => egress_full = true,
                        _ => {}
                    }
                    seq = r.seq;
                    last = r.hash;
                }
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            seq,
            last,
            bytes,
            egress_bytes,
            egress_share,
            egress_full,
            dropped: None,
        })
    }

    /// Bytes the journal holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Append an egress record, unless the egress records' share is spent: then the attempt is counted
    /// (written later as one `egress_dropped` record by [`Journal::flush_dropped`]), and the first attempt
    /// over the share writes an `egress_log_full` record instead. Returns the record written, if any.
    pub fn append_egress(
        &mut self,
        actor: &str,
        args: serde_json::Value,
        result: serde_json::Value,
    ) -> std::io::Result<Option<Record>> {
        let time = crate::engine::now_ms();
        if !self.egress_full {
            let r = self.record(actor, "egress", args, result);
            let line = line_of(&r)?;
            if self.egress_bytes.saturating_add(line.len() as u64) <= self.egress_share {
                self.egress_bytes += line.len() as u64;
                return self.write(r, &line).map(Some);
            }
            self.egress_full = true;
            let full = serde_json::json!({
                "share_bytes": self.egress_share,
                "written_bytes": self.egress_bytes,
                "from_ms": time,
            });
            self.append(actor, EGRESS_FULL, serde_json::json!({}), full)?;
        }
        let (n, first, _) = self.dropped.unwrap_or((0, time, time));
        self.dropped = Some((n + 1, first, time));
        Ok(None)
    }

    /// Write the count of egress attempts left out since the last such record, if any were.
    pub fn flush_dropped(&mut self, actor: &str) -> std::io::Result<Option<Record>> {
        let Some((count, first_ms, last_ms)) = self.dropped.take() else { return Ok(None) };
        let result = serde_json::json!({"count": count, "first_ms": first_ms, "last_ms": last_ms});
        self.append(actor, EGRESS_DROPPED, serde_json::json!({}), result).map(Some)
    }

    fn record(&self, actor: &str, action: &str, args: serde_json::Value, result: serde_json::Value) -> Record {
        let mut r = Record {
            seq: self.seq + 1,
            time_ms: crate::engine::now_ms(),
            actor: actor.to_string(),
            action: action.to_string(),
            args,
            result,
            prev: self.last.clone(),
            hash: String::new(),
        };
        r.hash = hash_of(&r);
        r
    }

    fn write(&mut self, r: Record, line: &[u8]) -> std::io::Result<Record> {
        self.file.write_all(line)?;
        self.file.flush()?;
        self.bytes += line.len() as u64;
        self.seq = r.seq;
        self.last = r.hash.clone();
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record and return it.
    pub fn append(
        &mut self,
        actor: &str,
        action: &str,
        args: serde_json::Value,
        result: serde_json::Value,
    ) -> std::io::Result<Record> {
        let r = self.record(actor, action, args, result);
        let line = line_of(&r)?;
        self.write(r, &line)
    }
}

fn line_of(r: &Record) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Read every record of a journal file.
pub fn read(path: &Path) -> std::io::Result<Vec<Record>> {
    read_actions(path, |_| true)
}

/// Read the records of a journal file whose action `keep` accepts, one line at a time (the others are
/// never held).
pub fn read_actions(path: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<Vec<Record>> {
    #[derive(Deserialize)]
    struct Action {
        action: String,
    }
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if serde_json::from_str::<Action>(&line).is_ok_and(|a| keep(&a.action))
            && let Ok(r) = serde_json::from_str(&line)
        {
            out.push(r);
        }
    }
    Ok(out)
}

/// A journal file as one JSON array of its records, handed to `send` in chunks of about `chunk` bytes, read a
/// line at a time (lines that are not records are left out, as [`read`] does). Stops when `send` returns
/// false.
pub fn write_array(file: std::fs::File, chunk: usize, mut send: impl FnMut(Vec<u8>) -> bool) {
    let mut out = Vec::with_capacity(chunk + 4096);
    out.push(b'[');
    let mut first = true;
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        if serde_json::from_str::<Record>(&line).is_err() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(line.as_bytes());
        if out.len() >= chunk && !send(std::mem::replace(&mut out, Vec::with_capacity(chunk + 4096))) {
            return;
        }
    }
    out.push(b']');
    send(out);
}

/// Check a journal file's chain from its first record to its last.
pub fn verify(path: &Path) -> std::io::Result<Verdict> {
    let f = std::fs::File::open(path)?;
    let mut prev = GENESIS.to_string();
    let mut n = 0u64;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        let no = i as u64 + 1;
        let bad = |why: &str| Verdict { ok: false, records: no - 1, first_bad: Some((no, why.to_string())) };
        let Ok(r) = serde_json::from_str::<Record>(&line) else { return Ok(bad("not a journal record")) };
        if r.seq != no {
            return Ok(bad("out of sequence (a record was removed or inserted)"));
        }
        if r.prev != prev {
            return Ok(bad("does not chain to the record before it"));
        }
        if hash_of(&r) != r.hash {
            return Ok(bad("its content does not match its hash (it was edited)"));
        }
        prev = r.hash;
        n = no;
    }
    Ok(Verdict { ok: true, records: n, first_bad: None })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holding_floats_verifies_once_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        // Values whose shortest form needs all 17 digits, which parsing without full precision can miss by one
        // unit in the last place (the hash is over the value as read back).
        let mut x = 0.1f64;
        for i in 0..2000 {
            x = (x * 1.000_000_123_456_7 + 1e-9 * f64::from(i)).fract() + f64::from(i % 7);
            j.append("local", "usage", serde_json::json!({"cpu_seconds": x}), serde_json::json!({"ms": x * 1000.0}))
                .unwrap();
        }
        let verdict = verify(&path).unwrap();
        assert!(verdict.ok, "{verdict:?}");
        assert_eq!(verdict.records, 2000);
    }

    fn sample(dir: &Path) -> PathBuf {
        let path = dir.join("j.jsonl");
        let mut j = Journal::open(&path).unwrap();
        for i in 0..3 {
            j.append("local", "exec", serde_json::json!({"argv": ["echo", i]}), serde_json::json!({"exit_code": 0}))
                .unwrap();
        }
        path
    }

    #[test]
    fn an_untouched_journal_verifies_and_reopening_continues_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let mut j = Journal::open(&path).unwrap();
        let r = j.append("local", "remove", serde_json::json!({}), serde_json::json!({})).unwrap();
        assert_eq!(r.seq, 4);
        assert_eq!(verify(&path).unwrap(), Verdict { ok: true, records: 4, first_bad: None });
    }

    #[test]
    fn egress_past_its_share_is_counted_not_written_and_the_chain_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open_bounded(&path, 2000).unwrap();
        j.append("local", "create", serde_json::json!({}), serde_json::json!({})).unwrap();
        let attempt =
            |i: u32| (serde_json::json!({"host": format!("h{i}.test")}), serde_json::json!({"verdict": "denied"}));
        let mut written = 0;
        for i in 0..100 {
            let (args, result) = attempt(i);
            written += usize::from(j.append_egress("sandbox", args, result).unwrap().is_some());
        }
        assert!(written > 0 && written < 100, "some attempts fit the share, not all: {written}");
        // Core records still go in past the egress share.
        j.append("local", "exec", serde_json::json!({}), serde_json::json!({})).unwrap();
        let flushed = j.flush_dropped("local").unwrap().unwrap();
        assert_eq!(flushed.result["count"], 100 - written as u64);
        assert_eq!(j.flush_dropped("local").unwrap(), None, "counted once");
        let all = read(&path).unwrap();
        let egress: Vec<_> = all.iter().filter(|r| r.action == "egress").collect();
        assert_eq!(egress.len(), written);
        let egress_bytes: usize = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"action\":\"egress\""))
            .map(|l| l.len() + 1)
            .sum();
        assert!(egress_bytes <= 2000, "egress records keep to their share: {egress_bytes}");
        assert_eq!(all.iter().filter(|r| r.action == EGRESS_FULL).count(), 1, "one marker");
        assert!(verify(&path).unwrap().ok);
        assert_eq!(j.bytes(), std::fs::metadata(&path).unwrap().len());
        // Reopened, the share is still spent.
        let mut again = Journal::open_bounded(&path, 2000).unwrap();
        let (args, result) = attempt(0);
        assert!(again.append_egress("sandbox", args, result).unwrap().is_none());
        assert_eq!(read_actions(&path, |a| a == EGRESS_FULL).unwrap().len(), 1);
    }

    #[test]
    fn a_journal_streams_as_one_array_of_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let mut body = Vec::new();
        let mut chunks = 0;
        write_array(std::fs::File::open(&path).unwrap(), 10, |c| {
            chunks += 1;
            body.extend(c);
            true
        });
        assert!(chunks > 1, "sent in pieces");
        let records: Vec<Record> = serde_json::from_slice(&body).unwrap();
        assert_eq!(records, read(&path).unwrap());
        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        let mut body = Vec::new();
        write_array(std::fs::File::open(&empty).unwrap(), 10, |c| {
            body.extend(c);
            true
        });
        assert_eq!(body, b"[]");
    }

    #[test]
    fn edits_deletions_and_insertions_are_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();

        let edited = lines.join("\n").replace("\"exit_code\":0", "\"exit_code\":1");
        std::fs::write(&path, edited.replacen("\"exit_code\":1", "\"exit_code\":0", 2)).unwrap();
        let v = verify(&path).unwrap();
        assert!(!v.ok);
        assert_eq!(v.first_bad.unwrap().0, 3);

        std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
        assert_eq!(verify(&path).unwrap().first_bad.unwrap().0, 2);

        std::fs::write(&path, format!("{}\n{}\n{}\n", lines[0], lines[0], lines[1])).unwrap();
        assert!(!verify(&path).unwrap().ok);
    }
}
