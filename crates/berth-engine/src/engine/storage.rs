//! The bound on sandboxes' files: which pool the daemon uses, whether it makes a btrfs pool by itself, the
//! disk quota a sandbox gets when it asks for none, and what the daemon says when it cannot bound them.

use std::path::Path;
use std::sync::Arc;

use berth_storage::{Mode, Pool, StorageError};

use super::Engine;
use crate::EngineError;

/// The disk quota of a sandbox created without `disk_bytes`, when the pool can enforce one.
pub const DEFAULT_DISK: u64 = 10 << 30;

/// Whether the daemon makes a btrfs pool by itself (`berth daemon --storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageChoice {
    /// Make a pool when the data root has none and the host can (root, mkfs.btrfs, loop devices); else go on
    /// without one and say that sandboxes' files are not bounded.
    Auto,
    /// Make a pool when there is none, and refuse to start when that fails.
    Pool,
    /// Use the data root as it is: a btrfs pool if one was made, a plain directory otherwise.
    None,
}

impl std::str::FromStr for StorageChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(StorageChoice::Auto),
            "pool" => Ok(StorageChoice::Pool),
            "none" => Ok(StorageChoice::None),
            _ => Err(format!("unknown storage choice {s:?} (expected auto, pool or none)")),
        }
    }
}

/// How the daemon bounds sandboxes' files.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    pub choice: StorageChoice,
    /// The size of a pool the daemon makes; default [`berth_storage::auto_pool_size`].
    pub pool_size: Option<u64>,
    /// The quota of a sandbox that asks for none.
    pub default_disk: u64,
    /// The cluster's shared database, where volume names are held (see `crate::cluster`); none: this node's
    /// names are its own.
    pub cluster: Option<crate::cluster::ClusterOptions>,
}

impl Default for StorageOptions {
    /// What `berth daemon` does unless told otherwise: a pool when the host can make one, 10 GiB a sandbox.
    fn default() -> Self {
        StorageOptions { choice: StorageChoice::Auto, pool_size: None, default_disk: DEFAULT_DISK, cluster: None }
    }
}

impl StorageOptions {
    /// The data root as it is, with no pool made: for an engine opened on its own (tests of the engine).
    pub fn as_is() -> Self {
        StorageOptions { choice: StorageChoice::None, ..StorageOptions::default() }
    }
}

/// The pool a daemon starts with, and why sandboxes' files are not bounded when they are not.
pub(super) fn open_pool(root: &Path, opts: &StorageOptions) -> Result<(Pool, Option<String>), EngineError> {
    let pool = Pool::open(root).map_err(|e| EngineError::Storage(e.to_string()))?;
    if pool.mode() == Mode::Btrfs || opts.choice == StorageChoice::None {
        let why = unbounded_reason(&pool, opts.choice);
        return Ok((pool, why));
    }
    let made =
        opts.pool_size.map_or_else(|| berth_storage::auto_pool_size(root), Ok).and_then(|size| Pool::init(root, size));
    match made {
        Ok(p) => {
            crate::log::info(
                "made a btrfs storage pool",
                serde_json::json!({"image": p.info().ok().and_then(|i| i.loop_file), "size_bytes": p.info().ok().map(|i| i.size_bytes)}),
            );
            Ok((p, None))
        }
        Err(e) if opts.choice == StorageChoice::Pool => Err(EngineError::Storage(format!(
            "--storage pool: could not make a btrfs storage pool: {}",
            berth_runtime::error_chain(&e)
        ))),
        Err(e) => {
            let why = format!(
                "sandboxes' files are not bounded: this host could not make a btrfs storage pool ({}); fix that \
                 and run `berth storage init`, which the running daemon takes up at once",
                berth_runtime::error_chain(&e)
            );
            Ok((pool, Some(why)))
        }
    }
}

/// Why a pool bounds no sandbox's files (none when it bounds every one).
fn unbounded_reason(pool: &Pool, choice: StorageChoice) -> Option<String> {
    let quotas = pool.info().is_ok_and(|i| i.quotas);
    match (pool.mode(), quotas) {
        (Mode::Btrfs, true) => None,
        (Mode::Btrfs, false) => Some(format!(
            "sandboxes' files are not bounded: the storage pool at {} is on btrfs with quotas off; turn them on \
             with `btrfs quota enable {}`",
            pool.path().display(),
            pool.path().display()
        )),
        (mode, _) => Some(format!(
            "sandboxes' files are not bounded: the storage pool is a plain directory ({mode} mode){}; run `berth \
             storage init`, which the running daemon takes up at once",
            if choice == StorageChoice::None { " because the daemon runs with --storage none" } else { "" }
        )),
    }
}

fn init_error(e: StorageError) -> EngineError {
    match e {
        e @ (StorageError::AlreadyBtrfs { .. }
        | StorageError::PoolExists { .. }
        | StorageError::PoolNotEmpty { .. }
        | StorageError::HalfMade { .. }) => EngineError::Conflict(e.to_string()),
        e @ StorageError::TooSmall { .. } => EngineError::invalid(e.to_string()),
        e => EngineError::Storage(berth_runtime::error_chain(&e)),
    }
}

impl Engine {
    /// The pool as it is now (`berth storage init` may replace it while the daemon runs).
    pub fn pool(&self) -> Arc<Pool> {
        self.pool.read().map(|p| Arc::clone(&p)).unwrap_or_else(|p| Arc::clone(&p.into_inner()))
    }

    /// Why sandboxes' files are not bounded, if they are not.
    pub fn unbounded_reason(&self) -> Option<String> {
        self.storage_note.read().ok().and_then(|n| n.clone())
    }

    /// The quota a sandbox that asks for none gets, when the pool enforces quotas.
    pub fn default_disk(&self) -> Option<u64> {
        self.unbounded_reason().is_none().then_some(self.storage.default_disk)
    }

    /// `berth storage init` through the daemon: make a btrfs pool of `size` bytes (default: half the free
    /// space, at most 512 GiB) and use it from the next sandbox on. Refused when the pool holds volumes
    /// already, which the new pool would hide.
    pub async fn init_storage(&self, size: Option<u64>) -> Result<berth_storage::PoolInfo, EngineError> {
        // The warm pool's volumes would be in the pool replaced: none while it is made, refilled on the new one.
        let _warm = self.suspend_warm().await;
        let root = self.root.clone();
        let made = tokio::task::spawn_blocking(move || {
            let size = size.map_or_else(|| berth_storage::auto_pool_size(&root), Ok)?;
            Pool::init(&root, size)
        })
        .await
        .map_err(|_| EngineError::Storage("making the storage pool panicked".into()))?
        .map_err(init_error)?;
        let info = made.info().map_err(|e| EngineError::Storage(e.to_string()))?;
        let why = unbounded_reason(&made, self.storage.choice);
        if let Ok(mut p) = self.pool.write() {
            *p = Arc::new(made);
        }
        if let Ok(mut n) = self.storage_note.write() {
            *n = why;
        }
        self.log_storage();
        Ok(info)
    }

    /// The row of the bounds table for sandboxes' files (root changes and `/workspace`).
    pub(crate) fn files_bound(&self) -> berth_api::Bound {
        let (bound, note) = match self.unbounded_reason() {
            None => (
                format!(
                    "{} per sandbox (disk quota), {} for all together (the pool)",
                    crate::bounds::size(self.storage.default_disk),
                    self.pool().info().map_or_else(|_| "the pool's size".into(), |i| crate::bounds::size(i.size_bytes))
                ),
                "writes past it fail inside the sandbox with EDQUOT (\"Disk quota exceeded\"); the daemon and other \
                 sandboxes are unaffected"
                    .to_string(),
            ),
            Some(why) => ("none".to_string(), why),
        };
        berth_api::Bound {
            resource: "sandbox files".into(),
            bound,
            set_by:
                "berth daemon --default-disk, --storage, --pool-size; per sandbox: disk_bytes (berth create --disk)"
                    .into(),
            note,
        }
    }

    /// Say at start (and when the pool changes) what bounds sandboxes' files.
    pub(crate) fn log_storage(&self) {
        let info = self.pool().info().ok();
        match self.unbounded_reason() {
            None => crate::log::info(
                "storage",
                serde_json::json!({
                    "mode": info.as_ref().map(|i| i.mode.to_string()),
                    "pool": info.as_ref().map(|i| &i.path),
                    "pool_bytes": info.as_ref().map(|i| i.size_bytes),
                    "default_disk_bytes": self.storage.default_disk,
                    "bounded": "every sandbox's files (root changes and /workspace) by its disk quota, all of them together by the pool's size",
                }),
            ),
            Some(why) => crate::log::warn(
                "storage",
                serde_json::json!({
                    "mode": info.as_ref().map(|i| i.mode.to_string()),
                    "pool": info.as_ref().map(|i| &i.path),
                    "bounded": false,
                    "unbounded": why,
                }),
            ),
        }
    }
}
