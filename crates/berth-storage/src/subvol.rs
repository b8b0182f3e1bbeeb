//! Volumes as btrfs subvolumes: made, cloned and deleted by ioctl, each in well under a millisecond of our
//! own time (a snapshot waits for the transaction commit it is taken in).

use std::os::fd::{AsFd, OwnedFd};

use berth_sys::SysError;
use berth_sys::btrfs::{self, SUBVOLUME_ROOT_INO};
use rustix::fs::Mode;
use rustix::io::Errno;

use crate::StorageError;
use crate::paths::{Place, open_volume};

fn is(e: &SysError, errno: Errno) -> bool {
    e.errno() == Some(errno.raw_os_error())
}

/// Refuse a directory that is not a subvolume's root: btrfs can snapshot, limit and count only those.
pub(crate) fn check_subvolume(vol: &OwnedFd, place: &Place) -> Result<(), StorageError> {
    let st = rustix::fs::fstat(vol).map_err(|e| StorageError::io("inspect the volume", &place.path)(e.into()))?;
    if st.st_ino != SUBVOLUME_ROOT_INO {
        return Err(StorageError::NotAVolume {
            path: place.path.clone(),
            reason: "it is a plain directory, not a btrfs subvolume made by the pool",
        });
    }
    Ok(())
}

/// A new empty subvolume, its root 0700 like the pool's directories.
pub(crate) fn create(place: &Place) -> Result<(), StorageError> {
    btrfs::create_subvolume(place.parent.as_fd(), place.name()).map_err(|e| {
        if is(&e, Errno::EXIST) {
            StorageError::Exists { path: place.path.clone() }
        } else {
            StorageError::sys("create the volume", &place.path)(e)
        }
    })?;
    let vol = open_volume(place)?;
    rustix::fs::fchmod(&vol, Mode::from_raw_mode(0o700))
        .map_err(|e| StorageError::io("restrict access to the volume", &place.path)(e.into()))
}

/// Snapshot the subvolume open at `src` as `dst`.
pub(crate) fn snapshot(src: &OwnedFd, dst: &Place, readonly: bool) -> Result<(), StorageError> {
    btrfs::snapshot(src.as_fd(), dst.parent.as_fd(), dst.name(), readonly).map_err(|e| {
        if is(&e, Errno::EXIST) {
            StorageError::Exists { path: dst.path.clone() }
        } else {
            StorageError::sys("clone a volume into", &dst.path)(e)
        }
    })
}

/// The subvolume id of the volume at `place`, if it is a subvolume.
pub(crate) fn id_of(place: &Place) -> Option<u64> {
    let vol = open_volume(place).ok()?;
    let st = rustix::fs::fstat(&vol).ok()?;
    if st.st_ino != SUBVOLUME_ROOT_INO {
        return None;
    }
    btrfs::subvolume_id(vol.as_fd()).ok()
}
