//! berth's wire types: what the HTTP API accepts and returns, shared by the daemon, the CLI and tests.
//!
//! Requests reject unknown fields, so a typo in a field name is an error rather than a silently ignored
//! option. Sizes are bytes, durations are seconds (fractions allowed), times are Unix milliseconds.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The OpenAPI 3.1 description of the daemon's HTTP API, as `GET /v1/openapi.json` serves it.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Longest duration a request may give (`ttl_seconds`, `idle_timeout_seconds`, an exec's `timeout_seconds`):
/// 100 years, which every clock and timer the daemon uses can hold.
pub const MAX_DURATION_SECONDS: f64 = 3_153_600_000.0;

/// `POST /v1/sandboxes`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CreateSandbox {
    /// Unique among live sandboxes; also the host name inside. Default: `berth-<id>`.
    pub name: Option<String>,
    /// Default: `host`.
    pub image: Option<String>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// Cores, such as 1.5.
    pub cpus: Option<f64>,
    /// Wall-clock lifetime; the daemon removes the sandbox when it runs out, with or without a client.
    pub ttl_seconds: Option<f64>,
    /// Removed after this long without an exec.
    pub idle_timeout_seconds: Option<f64>,
    /// Paused (its processes frozen, their memory kept) after this long without activity, instead of removed;
    /// any activity wakes it again.
    pub idle_pause_seconds: Option<f64>,
    /// Hibernated (its processes and their memory written to disk, its RAM released) after this long without
    /// activity; any activity wakes it. Usually longer than `idle_pause_seconds`.
    pub idle_hibernate_seconds: Option<f64>,
    /// The TTL counts only time running: time paused is added back to it at each resume.
    pub ttl_active_only: bool,
    /// What happens when the TTL runs out: removed (the default), or put to sleep, `hibernate` (to disk;
    /// paused where it cannot be) or `pause`, without a TTL until one is set again; any activity wakes it.
    pub ttl_action: TtlAction,
    /// Environment for every exec (an exec's own `env` wins).
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    /// The tenant it belongs to, counted against that tenant's quota. A tenant's token creates in its own
    /// tenant (naming another is refused); an operator may name any tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(deserialize_with = "objects_only")]
    pub mounts: Vec<Mount>,
    /// Keep the workspace and the root file system's changes through stop, start, rebuild and a lost
    /// supervisor (a host reboot); an ephemeral sandbox's state goes when its supervisor does.
    pub persistent: bool,
    /// Disk quota for the sandbox's writable state (needs a btrfs storage pool).
    pub disk_bytes: Option<u64>,
    /// Named volumes to mount.
    #[serde(deserialize_with = "objects_only")]
    pub volumes: Vec<VolumeMount>,
    /// Start from this snapshot's files (id or name) instead of the image's clean state.
    pub from_snapshot: Option<String>,
    /// Files to copy out at teardown: globs under /workspace (`*` within a name, `**` across directories).
    pub outputs: Vec<String>,
    /// Egress policy (default: no network).
    #[serde(deserialize_with = "object_only")]
    pub network: Network,
    /// Secrets (`berth secret set NAME`) this sandbox gets: `NAME` is an environment variable with the value in
    /// every exec; `NAME@HOST` keeps the value out of the sandbox — the variable holds a placeholder, and the
    /// proxy puts the value in its place in requests to HOST only (HOST as an egress rule: a name, a glob or
    /// an address, with an optional port).
    pub secrets: Vec<String>,
    /// Limits on what it may use (CPU, egress, running time); at 100 % of one it is removed.
    #[serde(deserialize_with = "object_only")]
    pub budget: Budget,
    /// The boundary it runs behind (default: the daemon's `--isolation`, itself `namespaces` by default). A
    /// backend this host lacks is an error, never a quiet fallback.
    pub isolation: Option<Isolation>,
    /// A virtual desktop: a display server and a window manager, run inside as its `user`.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "some_object")]
    pub desktop: Option<Desktop>,
}

/// A named volume brought into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    pub target: String,
    #[serde(default)]
    pub readonly: bool,
}

/// A host path brought into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub host: String,
    pub target: String,
    #[serde(default)]
    pub readonly: bool,
}

/// Where a sandbox is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Creating,
    Running,
    /// Its processes are frozen, their memory kept; any activity resumes them.
    Paused,
    /// Its processes and their memory are on disk, its RAM released; any activity wakes it.
    Hibernated,
    Stopping,
    /// No processes; its files are kept until it is started again or removed.
    Stopped,
    Gone,
}

/// A sandbox as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    pub id: String,
    pub name: String,
    pub image: String,
    pub state: SandboxState,
    pub created_at_ms: u64,
    /// When the TTL runs out, if one was set.
    pub expires_at_ms: Option<u64>,
    pub idle_timeout_seconds: Option<f64>,
    pub last_activity_ms: u64,
    /// What the last activity was: `create`, `exec`, `shell`, `context`, `files`, `resume`, `start`.
    #[serde(default)]
    pub last_activity: Option<String>,
    #[serde(default)]
    pub idle_pause_seconds: Option<f64>,
    #[serde(default)]
    pub ttl_active_only: bool,
    /// What happens when its TTL runs out.
    #[serde(default)]
    pub ttl_action: TtlAction,
    /// When it was paused, while it is.
    #[serde(default)]
    pub paused_at_ms: Option<u64>,
    /// When it went to disk, while it hibernates.
    #[serde(default)]
    pub hibernated_at_ms: Option<u64>,
    #[serde(default)]
    pub idle_hibernate_seconds: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub labels: BTreeMap<String, String>,
    /// Host pid of the sandbox's init.
    pub pid: Option<i32>,
    /// Whether the landlock rules of its init (and so of every command in it) are `enforced`, `partial` (this
    /// kernel's landlock lacks some of them) or `unavailable` (the kernel has none), as its init reported when
    /// it came up (again at each wake); `none` when an older berth restored it without them. Null while it
    /// has no processes.
    #[serde(default)]
    pub landlock: Option<String>,
    #[serde(default)]
    pub persistent: bool,
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// The snapshot its files started from (a `create --from`, or the instant of a fork).
    #[serde(default)]
    pub parent: Option<String>,
    /// Its egress policy as it is now.
    #[serde(default)]
    pub network: Network,
    /// The sandbox that created it with its session token: it is removed with that one.
    #[serde(default)]
    pub owner: Option<String>,
    /// The tenant it belongs to (that of the token that created it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// What it has used, measured when it is inspected while it runs (none otherwise, and in the list).
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The boundary it runs behind.
    #[serde(default)]
    pub isolation: Isolation,
    /// Its virtual desktop's screen, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<Desktop>,
}

/// What a sandbox's TTL does when it runs out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtlAction {
    /// Removed, through the ordered teardown.
    #[default]
    Remove,
    /// Paused: its processes frozen, their memory kept.
    Pause,
    /// Hibernated: its processes and their memory written to disk, its RAM released (paused where it cannot
    /// be hibernated, such as with an exec running).
    Hibernate,
}

/// A new TTL for a sandbox (`POST /v1/sandboxes/{id}/ttl`): `ttl_seconds` from now, or null for none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SetTtl {
    pub ttl_seconds: Option<f64>,
}

/// A lifecycle event, as `GET /v1/events` streams them (server-sent events, one JSON object each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    /// Increases by one per event since the daemon started.
    pub seq: u64,
    pub time_ms: u64,
    pub sandbox: String,
    pub kind: EventKind,
    pub exec_id: Option<String>,
    pub exit_code: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Created,
    Adopted,
    ExecStarted,
    ExecFinished,
    ExecTimedOut,
    ExecKilled,
    Removed,
    Reaped,
    Stopped,
    Started,
    Snapshotted,
    Restored,
    Forked,
    /// A sandbox reached 80 % of a limit of its budget (its journal says which).
    BudgetWarning,
    Paused,
    Resumed,
    Hibernated,
    Woken,
}

/// `POST /v1/tokens` (unix socket only): mint a token for the TCP listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MintToken {
    /// A name to recognise the token by.
    pub name: String,
    /// The tenant whose resources alone it reaches (it must exist: `POST /v1/tenants`).
    pub tenant: Option<String>,
    /// Reading requests only.
    pub read_only: bool,
    /// Only sandboxes with these labels; the sandboxes it creates get them.
    pub selector: std::collections::BTreeMap<String, String>,
}

impl MintToken {
    /// What the token is to reach.
    pub fn grant(&self) -> Grant {
        Grant { tenant: self.tenant.clone(), read_only: self.read_only, selector: self.selector.clone() }
    }
}

/// A freshly minted token: the only time its secret is shown (the daemon keeps its SHA-256 digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintedToken {
    pub id: String,
    pub name: String,
    /// Send as `Authorization: Bearer <token>` to the TCP listener.
    pub token: String,
}

/// `GET /v1/info`: the daemon, and what it bounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub version: String,
    /// Each host resource a sandbox can consume, its bound on this daemon, and how to change it.
    pub bounds: Vec<Bound>,
    /// The warm pool: sandboxes built ahead for creates that ask for the defaults.
    #[serde(default)]
    pub warm: WarmPool,
    /// The isolation a create gets when it names none (`berth daemon --isolation`).
    #[serde(default)]
    pub isolation: Isolation,
    /// Each isolation and whether this host offers it (and why not).
    #[serde(default)]
    pub isolations: Vec<IsolationInfo>,
}

/// [`DaemonInfo::warm`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmPool {
    /// How many the daemon keeps built ahead (`berth daemon --warm`; 0: no pool).
    pub size: usize,
    /// How many are built and waiting now.
    pub ready: usize,
    /// Creates served from the pool since the daemon started.
    pub served: u64,
    /// Creates the pool could have served but found it empty (built cold).
    pub missed: u64,
}

/// One row of [`DaemonInfo::bounds`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    /// What is consumed, e.g. `exec log`.
    pub resource: String,
    /// The bound in force, e.g. `16 MiB per exec`, or `none` where nothing bounds it.
    pub bound: String,
    /// Where the bound comes from: the daemon flag or request field that changes it, or `fixed`.
    pub set_by: String,
    /// What happens when it is reached, or why it is not bounded.
    pub note: String,
}

/// A token as `GET /v1/tokens` lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub created_at_ms: u64,
    #[serde(flatten)]
    pub grant: Grant,
}

/// What removing a sandbox did: its receipt. Teardown runs in order — declared outputs and the workspace's
/// patch copied out, the session's credentials revoked, its records flushed, its runtime and files destroyed —
/// and then checks that nothing is left (`leftovers`, empty when `clean`). Kept after the sandbox is gone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Teardown {
    pub id: String,
    pub steps: Vec<String>,
    pub leftovers: Vec<String>,
    #[serde(default)]
    pub name: String,
    /// Why it was removed: `remove`, `reaped` (TTL or idle timeout), `owner removed` (it was made with a
    /// session token, and that sandbox was removed).
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub outputs: Vec<OutputFile>,
    /// The workspace's changes as a patch (against the sandbox's parent, else its image).
    #[serde(default)]
    pub patch: Option<OutputFile>,
    /// Credentials that stopped working: the session token, secrets.
    #[serde(default)]
    pub revoked: Vec<String>,
    /// Records flushed to disk before the runtime was destroyed, by kind (`journal`, `egress`).
    #[serde(default)]
    pub flushed: BTreeMap<String, u64>,
    /// Nothing was left behind.
    #[serde(default)]
    pub clean: bool,
    #[serde(default)]
    pub started_at_ms: u64,
    #[serde(default)]
    pub finished_at_ms: u64,
    /// What it had used, measured just before its runtime was destroyed.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// A file copied out of a sandbox at teardown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// Where it was inside the sandbox.
    pub path: String,
    /// Where it is now, on the daemon's host.
    pub saved_as: String,
    pub bytes: u64,
    pub sha256: String,
}

// ---- Files: /v1/sandboxes/{id}/files, /stat, /mkdir, /archive ----
//
// Paths are absolute paths inside the sandbox, given as the `path` query parameter; they are resolved inside
// the sandbox's root (symbolic links included) and may not contain `..`. File contents travel as raw bytes
// (`application/octet-stream`), directory trees as tar (`application/x-tar`).

/// What a path inside a sandbox is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// One file: `GET /v1/sandboxes/{id}/stat`, each entry of `GET .../files` on a directory, and the answer to
/// writing a file, making a directory or moving one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The last component of its path (`/` for the root).
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits, such as 0o644 (420).
    pub mode: u32,
    pub mtime_ms: i64,
    /// Owner and group as the sandbox sees them (root is 0).
    pub uid: u32,
    pub gid: u32,
    /// Where a symbolic link points, in directory listings (links are listed, not followed).
    pub link_target: Option<String>,
}

/// `POST /v1/sandboxes/{id}/move`: rename or move a file, a symbolic link or a directory tree inside the
/// sandbox. Unknown fields are rejected (400).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveFile {
    /// What to move: an absolute path inside the sandbox (not `/`).
    pub from: String,
    /// Its new path; the parent directory must exist.
    pub to: String,
    /// Replace what is at `to` (a file or link, or an empty directory). Without it, an existing `to` is a 409.
    #[serde(default)]
    pub overwrite: bool,
    /// Work as this user of the sandbox (a name of its /etc/passwd, or `UID[:GID]`) instead of root.
    #[serde(default)]
    pub user: Option<String>,
}

/// What `PUT /v1/sandboxes/{id}/archive` unpacked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    pub entries: u64,
}

/// Every error the API returns: an HTTP status, a stable code, and a sentence a person understands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ApiError,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

/// Stable error codes. Clients branch on these, never on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request is malformed or a value is out of range.
    InvalidRequest,
    /// 401: no or a wrong bearer token.
    Unauthorized,
    /// 403: the token may not do this (it is read-only, or the operation is an operator's).
    Forbidden,
    /// 404: no such sandbox or exec.
    NotFound,
    /// 408: the request's head did not arrive in time (the connection is closed after this answer).
    RequestTimeout,
    /// 409: the name is taken, or the sandbox is not in a state that allows this.
    Conflict,
    /// 413: the request body is too large.
    PayloadTooLarge,
    /// 431: the request's head (its request line and headers) is too large.
    HeadersTooLarge,
    /// 429: the tenant's quota does not leave room for this.
    QuotaExceeded,
    /// 500: berth failed; the message says how.
    Internal,
    /// 503: the host cannot take another sandbox right now, or the listener is serving as many connections as
    /// it may.
    Unavailable,
}

impl ErrorCode {
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::Conflict => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::HeadersTooLarge => 431,
            ErrorCode::QuotaExceeded => 429,
            ErrorCode::Internal => 500,
            ErrorCode::Unavailable => 503,
        }
    }
}

mod contexts;
mod desktop;
mod exec;
mod isolation;
mod network;
mod objects;
mod pods;
mod previews;
mod storage;
mod tenants;
mod usage;
mod watch;
pub use contexts::*;
pub use desktop::*;
pub use exec::*;
pub use isolation::*;
pub use network::*;
pub use objects::*;
pub use pods::*;
pub use previews::*;
pub use storage::*;
pub use tenants::*;
pub use usage::*;
pub use watch::*;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_reject_unknown_fields_and_accept_defaults() {
        let c: CreateSandbox = serde_json::from_str("{}").unwrap();
        assert_eq!(c, CreateSandbox::default());
        assert!(serde_json::from_str::<CreateSandbox>(r#"{"memroy_bytes": 5}"#).is_err());
        assert!(serde_json::from_str::<ExecRequest>(r#"{"argv": "ls"}"#).is_err());
        // Objects inside a request are objects, never arrays of their fields.
        assert!(serde_json::from_str::<CreateSandbox>(r#"{"network": [null]}"#).is_err());
        assert!(serde_json::from_str::<CreateSandbox>(r#"{"mounts": [["/a", "/b"]]}"#).is_err());
        assert!(serde_json::from_str::<CreateSandbox>(r#"{"volumes": [["v", "/b"]]}"#).is_err());
        let c: CreateSandbox =
            serde_json::from_str(r#"{"network": {"mode": "none"}, "mounts": [{"host": "/a", "target": "/b"}]}"#)
                .unwrap();
        assert_eq!((c.network.mode.as_deref(), c.mounts.len()), (Some("none"), 1));
    }

    #[test]
    fn frames_are_tagged() {
        let f = ExecFrame::Output { stream: Stream::Stderr, seq: 3, data: "x".into() };
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"type":"output","stream":"stderr","seq":3,"data":"x"}"#);
    }
}

#[cfg(test)]
mod openapi_tests;

/// Milliseconds since the epoch as RFC 3339 (UTC).
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, rem % 3600 / 60, rem % 60, ms % 1000)
}
