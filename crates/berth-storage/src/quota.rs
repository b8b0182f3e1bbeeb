//! Disk quotas and usage: btrfs qgroup limits, and the counts the kernel keeps in /sys/fs/btrfs.
//!
//! Every subvolume gets a level-0 qgroup `0/<subvolume id>` when quotas are on; its `referenced` count is
//! what the subvolume can reach, data shared with its snapshot source included, and `max_referenced` is
//! the limit writes run into (EDQUOT). Reading sysfs costs two small reads where `btrfs qgroup show` walks
//! the whole quota tree in a new process.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_sys::btrfs;
use rustix::io::Errno;

use crate::paths::{open_volume, place};
use crate::{Mode, Pool, StorageError, mounts, subvol};

/// The directory of the file system's qgroups in sysfs; it exists only while quotas are on.
fn qgroups_dir(fsid: &[u8; 16]) -> PathBuf {
    let hex: String = fsid.iter().map(|b| format!("{b:02x}")).collect();
    let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
    Path::new("/sys/fs/btrfs").join(uuid).join("qgroups")
}

pub(crate) fn enabled(fsid: &[u8; 16]) -> bool {
    qgroups_dir(fsid).is_dir()
}

/// The committed `referenced` count of subvolume `id`, when the counts can be trusted (they cannot while
/// a rescan is pending, after quotas were turned on over existing data or accounting was given up).
fn referenced(fsid: &[u8; 16], id: u64) -> Option<u64> {
    let dir = qgroups_dir(fsid);
    let inconsistent = std::fs::read_to_string(dir.join("inconsistent")).ok()?;
    if inconsistent.trim() != "0" {
        return None;
    }
    std::fs::read_to_string(dir.join(format!("0_{id}")).join("referenced")).ok()?.trim().parse().ok()
}

impl Pool {
    /// Limit the bytes the volume at `path` references (data shared with the volume it was cloned from
    /// included) to `bytes`, or lift its limit (`None`). Writes past the limit fail with EDQUOT.
    ///
    /// A snapshot inherits its source's limit (the kernel copies it), so a fork stays within the quota of
    /// what it was forked from until the limit is set again or lifted.
    pub fn set_quota(&self, path: &Path, bytes: Option<u64>) -> Result<(), StorageError> {
        let unsupported = |reason: String| StorageError::QuotaUnsupported { path: path.to_path_buf(), reason };
        if self.mode != Mode::Btrfs {
            return Err(unsupported(format!(
                "the storage pool at {} is a plain directory ({} mode), which has no per-volume limits; \
                 run `berth storage init` to make a btrfs pool, which has them",
                self.path.display(),
                self.mode
            )));
        }
        let root = self.open_root()?;
        let place = place(&self.path, path, false)?;
        let vol = open_volume(&place)?;
        subvol::check_subvolume(&vol, &place)?;
        let id = btrfs::subvolume_id(vol.as_fd()).map_err(StorageError::sys("look up the volume", &place.path))?;
        btrfs::limit_qgroup(root.as_fd(), id, bytes).map_err(|e| match e.errno() {
            Some(n) if n == Errno::NOTCONN.raw_os_error() => unsupported(format!(
                "quotas are off on the btrfs file system of {}; turn them on with `btrfs quota enable {}` \
                 (a pool made by `berth storage init` has them on)",
                self.path.display(),
                self.path.display()
            )),
            _ => StorageError::sys("set the disk quota of", &place.path)(e),
        })
    }

    /// The bytes the volume at `path` references. On btrfs with quotas this is the qgroup count as of the
    /// last transaction commit (btrfs commits at least every 30 seconds; [`Pool::sync`] commits now); without
    /// quotas it is the disk usage of a walk of the volume (`du`), hard links counted once.
    pub fn usage(&self, path: &Path) -> Result<u64, StorageError> {
        let place = place(&self.path, path, false)?;
        let vol = open_volume(&place)?;
        if self.mode == Mode::Btrfs && self.quotas_enabled() {
            let _root = self.open_root()?;
            if let Ok(id) = btrfs::subvolume_id(vol.as_fd())
                && let Some(bytes) = self.fsid.and_then(|fsid| referenced(&fsid, id))
                && subvol::check_subvolume(&vol, &place).is_ok()
            {
                return Ok(bytes);
            }
        }
        let out = mounts::run_output(Command::new("du").args(["-s", "-x", "-B1", "--"]).arg(&place.path), || {
            StorageError::MissingTool { tool: "du", package: "coreutils" }
        })?;
        out.split_whitespace().next().and_then(|n| n.parse().ok()).ok_or_else(|| StorageError::Command {
            command: "du".into(),
            status: "unreadable output".into(),
            stderr: out,
        })
    }

    /// Write out and commit the pool's file system, so that usage counts are current; on btrfs this also
    /// starts freeing the blocks of removed volumes at once rather than at the next periodic commit.
    pub fn sync(&self) -> Result<(), StorageError> {
        let root = self.open_root()?;
        if self.mode == Mode::Btrfs {
            return btrfs::sync(root.as_fd()).map_err(StorageError::sys("commit the storage pool", &self.path));
        }
        rustix::fs::syncfs(&root).map_err(|e| StorageError::io("commit the storage pool", &self.path)(e.into()))
    }
}

/// Remove the qgroup of a deleted subvolume, so that stale groups do not slow down every commit.
///
/// Older kernels accept this at once. Recent ones refuse (EBUSY) while the subvolume's blocks are still
/// being freed, and remove the group themselves when they are done.
pub(crate) fn forget(root: &impl AsFd, id: u64) {
    let _ = btrfs::remove_qgroup(root.as_fd(), id);
}

/// The ids of the level-0 qgroups the kernel lists for the file system (`0_<id>` in sysfs).
fn level0_qgroups(fsid: &[u8; 16]) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(qgroups_dir(fsid)) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("0_")?.parse().ok())
        .filter(|&id| id != 5)
        .collect()
}

impl Pool {
    /// Remove the qgroups whose subvolume is gone (what `btrfs qgroup clear-stale` does), and return how many
    /// were removed. A removal the kernel refused while it was still freeing blocks is done here once it is
    /// done; a group whose subvolume exists, or is still being deleted, is never touched. Without quotas, or
    /// outside btrfs, there is nothing to do.
    pub fn prune_qgroups(&self) -> Result<usize, StorageError> {
        let Some(fsid) = self.fsid.filter(|_| self.mode == Mode::Btrfs && self.quotas_enabled()) else {
            return Ok(0);
        };
        let root = self.open_root()?;
        let mut removed = 0;
        for id in level0_qgroups(&fsid) {
            if btrfs::subvolume_exists(root.as_fd(), id).unwrap_or(true) {
                continue;
            }
            if btrfs::remove_qgroup(root.as_fd(), id).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsids_name_their_sysfs_directory() {
        let id = [0x28, 0x58, 0xd5, 0x70, 0x66, 0x44, 0x44, 0xda, 0xac, 0x76, 0x7b, 0xa1, 0x49, 0xcf, 0x85, 0x60];
        assert_eq!(qgroups_dir(&id), Path::new("/sys/fs/btrfs/2858d570-6644-44da-ac76-7ba149cf8560/qgroups"));
    }
}
