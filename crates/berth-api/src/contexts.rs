//! Code contexts: long-lived interpreters inside a sandbox whose variables, imports and open handles survive
//! from one run to the next (notebook semantics).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The interpreters a context can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextLanguage {
    Python,
    Javascript,
    Bash,
}

impl ContextLanguage {
    pub fn name(self) -> &'static str {
        match self {
            ContextLanguage::Python => "python",
            ContextLanguage::Javascript => "javascript",
            ContextLanguage::Bash => "bash",
        }
    }
}

/// `POST /v1/sandboxes/{id}/contexts`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateContext {
    pub language: ContextLanguage,
    /// The interpreter's working directory. Default: `/workspace`.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment of the interpreter, over the sandbox's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Whether a context is running code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextState {
    Idle,
    Busy,
}

/// A context as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    pub id: String,
    pub sandbox_id: String,
    pub language: ContextLanguage,
    pub cwd: String,
    pub state: ContextState,
    /// Runs so far since the context was made or last restarted.
    pub execution_count: u64,
    pub created_at_ms: u64,
    pub last_run_at_ms: Option<u64>,
    /// The exec that is the context's interpreter (listed with the sandbox's execs while it runs).
    pub exec_id: String,
}

/// `POST /v1/sandboxes/{id}/contexts/{ctx}/run`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    pub code: String,
    /// Server-side: the run is interrupted when it runs out; if it does not stop soon after, the interpreter
    /// is killed and started afresh.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Bytes of stdout and stderr sent to the client (default 64 KiB): the head and tail, the middle dropped
    /// with a `truncated` frame; the run's log keeps all of it.
    #[serde(default)]
    pub max_output_bytes: Option<u64>,
    /// Environment variables for this run only: set in the interpreter before the code runs (over the
    /// context's), put back as they were after it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// One line of a run's NDJSON response stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunFrame {
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    /// A value with its representations by MIME type (`text/plain` always; `text/html`, `image/png` as
    /// base64, `application/json`, … where the value has them). `is_main`: the value of the code's trailing
    /// expression; otherwise a value shown with `display()` or a figure.
    Result {
        is_main: bool,
        data: BTreeMap<String, serde_json::Value>,
    },
    Error {
        name: String,
        value: String,
        traceback: String,
    },
    /// The output budget was spent: `dropped_bytes` from the middle are not sent (they are in the log).
    Truncated {
        dropped_bytes: u64,
    },
    End(RunEnd),
}

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub execution_count: u64,
    pub duration_ms: u64,
    /// Stopped by an interrupt (a client's, or its timeout's).
    pub interrupted: bool,
    pub timed_out: bool,
    /// The interpreter did not stop when interrupted and was killed; the context was started afresh and
    /// its state is lost.
    pub killed: bool,
    pub output_bytes: u64,
    pub bytes_dropped: u64,
}

/// `POST /v1/sandboxes/{id}/contexts/{ctx}/interrupt`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    /// Whether a run was going (and was interrupted).
    pub interrupted: bool,
}
