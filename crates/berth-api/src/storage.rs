//! Wire types of durable projects: snapshots, forks, restore and reset, diffs, exports, volumes, images and
//! the storage pool.

use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes/{id}/snapshots`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CreateSnapshot {
    /// Unique among snapshots; a snapshot can be named wherever its id can.
    pub name: Option<String>,
    /// Checkpoint the running processes too (the sandbox runs on): a sandbox created from the snapshot
    /// continues them from that instant. Needs CRIU on the host.
    pub with_processes: bool,
}

/// A sandbox's files (root file system changes and workspace) at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub name: Option<String>,
    /// The sandbox it was taken of.
    pub sandbox_id: String,
    pub image: String,
    pub created_at_ms: u64,
    /// `snapshot` (asked for) or `fork` (the instant a fork was made, kept as its children's parent).
    pub origin: String,
    /// It holds a checkpoint of the sandbox's processes: a sandbox created from it continues them.
    #[serde(default)]
    pub with_processes: bool,
    /// The tenant of the sandbox it was taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// `POST /v1/sandboxes/{id}/fork`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForkRequest {
    /// How many copies (default 1, at most 64).
    pub count: Option<u32>,
    /// Fork the running processes too: each copy is restored from a checkpoint of the sandbox (which runs
    /// on) and continues its programs from that instant, under its own host ids. Needs CRIU on the host.
    pub with_processes: bool,
}

/// What a fork made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forked {
    /// The snapshot of the instant of the fork: every child's parent.
    pub parent: String,
    pub sandboxes: Vec<crate::Sandbox>,
    /// Why each copy that could not be started was not (one sentence a copy; empty when all were made).
    #[serde(default)]
    pub errors: Vec<String>,
}

/// `POST /v1/sandboxes/{id}/restore`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// Snapshot id or name.
    pub snapshot: String,
}

/// `POST /v1/sandboxes/{id}/reset`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResetRequest {
    /// Keep /workspace; only the root file system returns to the image's clean state.
    pub keep_workspace: bool,
}

/// How a path differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One side of a changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathState {
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub file_type: String,
    /// Permission bits, such as 0o755 (as a number).
    pub mode: u32,
    pub size: u64,
    pub symlink_target: Option<String>,
}

/// A changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub path: String,
    pub kind: ChangeKind,
    pub old: Option<PathState>,
    pub new: Option<PathState>,
}

/// `GET /v1/sandboxes/{id}/diff`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// What it was compared with: `image`, or a snapshot's id (a sandbox's parent is a snapshot).
    pub against: String,
    pub changes: Vec<Change>,
}

/// `POST /v1/sandboxes/{id}/export`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportRequest {
    /// A git repository on the daemon's host.
    pub repo: String,
    /// The new branch (it must not exist).
    pub branch: String,
    /// What the branch starts from (default the repository's HEAD).
    pub base: Option<String>,
    /// What the changes are (default `parent` when the sandbox has one, else `image`).
    pub against: Option<String>,
    pub message: Option<String>,
    pub author_name: Option<String>,
    pub author_email: Option<String>,
}

/// What an export made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exported {
    pub branch: String,
    pub commit: String,
    pub files: usize,
}

/// `POST /v1/volumes`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub name: String,
}

/// A named volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub created_at_ms: u64,
    /// Sandboxes (running or stopped) that mount it, and live pods whose workspace it is (as `pod:<id>`).
    pub used_by: Vec<String>,
    /// The tenant it belongs to (none: an operator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The storage pool, as `GET /v1/storage` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageInfo {
    /// `btrfs` (copy-on-write clones, quotas), `reflink` (copy-on-write files) or `copy` (plain copies).
    pub mode: String,
    pub size_bytes: u64,
    pub free_bytes: u64,
    pub quotas: bool,
    /// Whether every sandbox's files (root changes and /workspace) are bounded: by its disk quota, and all
    /// of them together by the pool's size.
    #[serde(default)]
    pub bounded: bool,
    /// The disk quota of a sandbox created without one (when `bounded`).
    #[serde(default)]
    pub default_disk_bytes: Option<u64>,
    /// Why sandboxes' files are not bounded, and what to do about it (when not `bounded`).
    #[serde(default)]
    pub unbounded: Option<String>,
}

/// `POST /v1/storage` (unix socket only): make a btrfs storage pool for the running daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitStorage {
    /// The pool's size; default half the free space of the data root's file system, at most 512 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

/// `POST /v1/images` (unix socket only): import an image from a path on the daemon's host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportImage {
    pub name: String,
    /// A directory, a rootfs tarball (plain, gzip or zstd), an OCI image layout (directory or tar) or a
    /// `docker save` archive.
    pub source: String,
    /// The tenant it is for: only that tenant's sandboxes may use it. Without one, every tenant may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// An archive entry an import refused or changed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedEntry {
    pub path: String,
    pub reason: String,
}

/// A read-only root file system sandboxes are built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub name: String,
    /// `host` (the host's /usr under a generated skeleton), `directory`, `tarball`, `oci` or `docker`.
    pub kind: String,
    pub created_at_ms: u64,
    pub layers: u32,
    pub files: u64,
    pub bytes: u64,
    /// What the import refused or changed (hostile or unsupported entries).
    pub rejected: Vec<RejectedEntry>,
    /// The image's own environment and defaults, when its config had them.
    pub env: Vec<String>,
    pub cmd: Vec<String>,
    pub workdir: Option<String>,
    /// Sandboxes (running or stopped) built from it.
    pub used_by: Vec<String>,
    /// The tenant it is for (none: every tenant may use it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One line of the NDJSON stream `POST /v1/images` answers with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImportFrame {
    Progress { layer: u32, layers: u32, bytes_done: u64, bytes_total: u64 },
    Done { image: Image },
    Error { error: crate::ApiError },
}
