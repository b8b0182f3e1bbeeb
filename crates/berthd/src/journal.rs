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
}

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

impl Journal {
    /// Open (or create) the journal at `path`, continuing its chain.
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let (mut seq, mut last) = (0, GENESIS.to_string());
        if let Ok(f) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(f).lines() {
                if let Ok(r) = serde_json::from_str::<Record>(&line?) {
                    seq = r.seq;
                    last = r.hash;
                }
            }
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Journal { path: path.to_path_buf(), file, seq, last })
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
        let mut line = serde_json::to_vec(&r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        self.seq = r.seq;
        self.last = r.hash.clone();
        Ok(r)
    }
}

/// Read every record of a journal file.
pub fn read(path: &Path) -> std::io::Result<Vec<Record>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        if let Ok(r) = serde_json::from_str(&line?) {
            out.push(r);
        }
    }
    Ok(out)
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
