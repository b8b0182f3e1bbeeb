//! Execs: what starts one, the frames of its streamed answer, how it ended, and how it is listed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes/{id}/execs`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Required: an exec without a command is refused.
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Default: `/workspace`.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Server-side: the exec's whole process tree is killed when it runs out (exit code 124).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Bytes of output sent to the client (default 64 KiB); the exec's log keeps more (`max_log_bytes`).
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// Bytes of output kept in the exec's log: its head and tail, with a marker where the middle was dropped.
    /// Default and most: the daemon's `--max-log-bytes` (16 MiB).
    #[serde(default)]
    pub max_log_bytes: Option<u64>,
    /// Return at once with the exec's id; read its output later from its log.
    #[serde(default)]
    pub detach: bool,
    /// Data for the command's standard input, which is closed after it (without this, stdin is /dev/null).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Keep its standard input open (after `stdin`, if given) for input sent while it runs
    /// (`POST /v1/sandboxes/{id}/execs/{exec}/stdin`), until that closes it or the command ends.
    #[serde(default)]
    pub stdin_open: bool,
    /// Who the command runs as inside the sandbox: a user of its `/etc/passwd` by name (`user`), or ids
    /// (`1000`, `1000:1000`). Default: root. A named user's `HOME`, `USER` and `LOGNAME` are set, and the
    /// working directory defaults to its home.
    #[serde(default)]
    pub user: Option<String>,
}

/// Which output stream a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of an exec's NDJSON response stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecFrame {
    Started {
        exec_id: String,
        pid: i32,
    },
    /// Output as it was produced. `data` is UTF-8 (invalid sequences replaced).
    Output {
        stream: Stream,
        seq: u64,
        data: String,
    },
    /// The output budget was spent: `dropped_bytes` from the middle are not sent (they are in the log).
    Truncated {
        dropped_bytes: u64,
    },
    Exit(ExecResult),
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    pub exec_id: String,
    /// The exit code a shell would report: the command's own, 128+N for signal N, 124 on timeout,
    /// 126/127 when it could not be started.
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub killed: bool,
    pub bytes_dropped: u64,
    pub output_bytes: u64,
    /// Bytes dropped from the middle of the exec's log (past `max_log_bytes`); a marker line stands there.
    #[serde(default)]
    pub log_bytes_dropped: u64,
    /// The kernel's OOM killer killed a process of the exec (at the sandbox's memory limit).
    #[serde(default)]
    pub oom_killed: bool,
    /// Why the command could not start, when it could not.
    pub error: Option<String>,
}

impl ExecResult {
    /// An exec that ended before it ran (or without a report of how it ended): no output, no time, and why.
    pub fn without_run(exec_id: &str, exit_code: i32, signal: Option<i32>, error: String) -> ExecResult {
        ExecResult {
            exec_id: exec_id.to_string(),
            exit_code,
            signal,
            duration_ms: 0,
            timed_out: false,
            killed: false,
            bytes_dropped: 0,
            output_bytes: 0,
            log_bytes_dropped: 0,
            oom_killed: false,
            error: Some(error),
        }
    }
}

/// An exec as `GET /v1/sandboxes/{id}/execs` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecInfo {
    pub exec_id: String,
    pub argv: Vec<String>,
    pub started_at_ms: u64,
    pub running: bool,
    pub result: Option<ExecResult>,
}
