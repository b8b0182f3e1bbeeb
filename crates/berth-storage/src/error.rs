use std::io;
use std::path::PathBuf;

use berth_sys::SysError;

/// What went wrong with the storage pool; each message says what failed, where, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(
        "the data root {} is already on btrfs, so it needs no pool image: volumes are subvolumes of it as it is \
         (for disk quotas, turn them on with `btrfs quota enable {}`)",
        root.display(),
        root.display()
    )]
    AlreadyBtrfs { root: PathBuf },
    #[error("a storage pool already exists at {}; to start over, unmount it and delete {}", path.display(), image.display())]
    PoolExists { path: PathBuf, image: PathBuf },
    #[error(
        "the storage pool directory {} already holds volumes; a new pool would hide them, so move them away first",
        path.display()
    )]
    PoolNotEmpty { path: PathBuf },
    #[error(
        "{} is left over from a pool creation that did not finish (or one is running now); delete it and try again",
        path.display()
    )]
    HalfMade { path: PathBuf },
    #[error("{} is in the way: {reason}; move it elsewhere", path.display())]
    InTheWay { path: PathBuf, reason: &'static str },
    #[error("a pool of {size} bytes is too small: btrfs needs at least {min} bytes (try --size 1G or more)")]
    TooSmall { size: u64, min: u64 },
    #[error("{tool} was not found; install the {package} package (for example `apt-get install {package}`)")]
    MissingTool { tool: &'static str, package: &'static str },
    #[error("`{command}` failed ({status}){}", if stderr.is_empty() { String::new() } else { format!(": {stderr}") })]
    Command { command: String, status: String, stderr: String },
    #[error("the storage pool at {} is not mounted any more; open the pool again to mount it", path.display())]
    NotMounted { path: PathBuf },
    #[error("{} is mounted but is not a loop-mounted pool image; berth unmounts only pools it made", path.display())]
    NotLoopPool { path: PathBuf },
    #[error("cannot unmount the storage pool at {}: it is still in use (are sandboxes running?)", path.display())]
    Busy { path: PathBuf },
    #[error(
        "{} is not a place for a volume: volumes live one level or more inside the pool's sandboxes, snapshots, \
         volumes or images directory (in {}), and the path may not contain `..`",
        path.display(),
        pool.display()
    )]
    OutsidePool { path: PathBuf, pool: PathBuf },
    #[error(
        "the storage pool at {} cannot work in {mode} mode: its file system allows {best} at best",
        path.display()
    )]
    Unsupported { path: PathBuf, mode: crate::Mode, best: crate::Mode },
    #[error("the volume {} does not exist", path.display())]
    NotFound { path: PathBuf },
    #[error("{} already exists; remove it first or choose another name", path.display())]
    Exists { path: PathBuf },
    #[error("{} is not a volume ({reason})", path.display())]
    NotAVolume { path: PathBuf, reason: &'static str },
    #[error("the same destination {} was given twice", path.display())]
    Duplicate { path: PathBuf },
    #[error("disk quotas are not available for {}: {reason}", path.display())]
    QuotaUnsupported { path: PathBuf, reason: String },
    #[error("cannot {action} {}", path.display())]
    Sys {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: SysError,
    },
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl StorageError {
    pub(crate) fn sys(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(SysError) -> Self {
        let path = path.into();
        move |source| Self::Sys { action, path, source }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { action, path, source }
    }

    /// The errno under this error, if it came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Sys { source, .. } => source.errno(),
            Self::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
