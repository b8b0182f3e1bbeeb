//! The storage pool: copy-on-write volumes for sandbox state, snapshots, named volumes and images, and disk
//! quotas.
//!
//! A sandbox keeps everything it writes (overlay upper and work directories, `/workspace`) in one volume, so
//! that a snapshot, a fork, a restore or a named volume is a clone of a volume and a disk quota is a limit
//! on one. How cheap a clone is depends on the file system under the pool, which [`Mode`] names: on btrfs a
//! volume is a subvolume and a clone a snapshot (constant time, whatever the size); on a file system with
//! reflinks a clone shares every file's data blocks; elsewhere it is a plain copy. `berth storage init`
//! ([`Pool::init`]) makes a btrfs pool in a loop-mounted image on any host, for snapshots and quotas where the
//! data root's own file system has neither.
//!
//! Layout of a data root: `pool/` (the pool, with `sandboxes/`, `snapshots/`, `volumes/` and `images/`), and
//! `pool.img` when the pool is an image. Every volume path handed to a [`Pool`] must lie one level or more
//! inside one of the four directories; names starting with `.` are the pool's own (copies in progress).
#![forbid(unsafe_code)]

mod copy;
mod error;
mod mounts;
mod paths;
mod quota;
mod setup;
mod subvol;
mod volume;
mod walk;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use error::StorageError;
pub use setup::{MAX_AUTO_POOL_SIZE, MIN_POOL_SIZE, auto_pool_size};

/// How the pool makes volumes and clones, decided by the file system under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Volumes are subvolumes, clones are snapshots, quotas are qgroup limits.
    Btrfs,
    /// Volumes are directories, clones are copies that share data blocks (FICLONE).
    Reflink,
    /// Volumes are directories, clones are full copies.
    Copy,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Btrfs => "btrfs",
            Mode::Reflink => "reflink",
            Mode::Copy => "copy",
        })
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "btrfs" => Ok(Mode::Btrfs),
            "reflink" => Ok(Mode::Reflink),
            "copy" => Ok(Mode::Copy),
            _ => Err(format!("unknown storage mode {s:?} (expected btrfs, reflink or copy)")),
        }
    }
}

/// What `berth storage` and `berth info` show about a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub mode: Mode,
    pub path: PathBuf,
    /// Size and free space of the file system that holds the pool.
    pub size_bytes: u64,
    pub free_bytes: u64,
    /// Whether per-volume disk quotas can be set ([`Pool::set_quota`]).
    pub quotas: bool,
    /// The image file the pool is mounted from, when it is one.
    pub loop_file: Option<PathBuf>,
}

/// The storage pool of one data root.
///
/// A `Pool` holds no descriptors: every call opens what it needs, so a pool image can be unmounted while
/// `Pool` values exist (their calls then fail with [`StorageError::NotMounted`]). It is `Send` and `Sync`.
#[derive(Debug, Clone)]
pub struct Pool {
    mode: Mode,
    path: PathBuf,
    loop_file: Option<PathBuf>,
    /// The btrfs file system's UUID, which names its directory in /sys/fs/btrfs.
    fsid: Option<[u8; 16]>,
}

impl Pool {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The pool's directory, `<data root>/pool`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn modes_print_and_parse() {
        for m in [Mode::Btrfs, Mode::Reflink, Mode::Copy] {
            assert_eq!(m.to_string().parse::<Mode>().unwrap(), m);
        }
        assert_eq!(Mode::Btrfs.to_string(), "btrfs");
        assert!("zfs".parse::<Mode>().is_err());
    }
}
