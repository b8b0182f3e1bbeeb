//! Making, cloning and removing volumes, in whichever mode the pool is.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use berth_sys::btrfs;
use rustix::fs::{AtFlags, Mode as FileMode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::paths::{Place, open_volume, place, relative};
use crate::{Mode, Pool, StorageError, copy, quota, subvol, walk};

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// At most this many clones of one `clone_many` call are made at a time: enough for btrfs to take them
/// all in a handful of transaction commits, few enough not to start a crowd of `cp` processes.
const MAX_PARALLEL: usize = 16;

impl Pool {
    /// A new empty volume at `path` (0700, owned by root): a subvolume on btrfs, a directory otherwise.
    /// Missing directories on the way inside the pool are made.
    pub fn create(&self, path: &Path) -> Result<(), StorageError> {
        let _root = self.open_root()?;
        let place = place(&self.path, path, true)?;
        match self.mode {
            Mode::Btrfs => subvol::create(&place),
            Mode::Reflink | Mode::Copy => {
                rustix::fs::mkdirat(&place.parent, place.name(), FileMode::from_raw_mode(0o700)).map_err(|e| match e {
                    Errno::EXIST => StorageError::Exists { path: place.path.clone() },
                    e => StorageError::io("create the volume", &place.path)(e.into()),
                })
            }
        }
    }

    /// A copy-on-write clone of the volume `src` at `dst`, which must not exist: a btrfs snapshot
    /// (read-only with `readonly`, writes then fail with EROFS), a reflink copy or a plain copy.
    ///
    /// Everything is kept: numeric owners, modes with setuid bits, timestamps, xattrs (the overlay's
    /// included), symlinks (never followed), devices (overlay whiteouts) and hard links. `readonly` is
    /// enforced only in btrfs mode; a copy is writable. A btrfs snapshot does not include subvolumes nested
    /// in `src` (they show up as empty directories). A btrfs clone inherits the quota of `src`.
    pub fn clone_volume(&self, src: &Path, dst: &Path, readonly: bool) -> Result<(), StorageError> {
        let _root = self.open_root()?;
        let (src, src_fd) = self.source(src)?;
        let dst = place(&self.path, dst, true)?;
        self.clone_into(&src, &src_fd, &dst, readonly)
    }

    /// Writable clones of one volume at each of `dsts` (`fork --count N`): all are made or, if one fails,
    /// none is left behind.
    ///
    /// On btrfs the snapshots are taken from several threads at once so that they share transaction
    /// commits. A snapshot holds the lock of its destination's directory until its commit is done, so each
    /// is taken in a hidden directory of its own and then renamed into place: ten forks into one directory
    /// take about a third of the time of ten in a row.
    pub fn clone_many(&self, src: &Path, dsts: &[PathBuf]) -> Result<(), StorageError> {
        let mut seen = HashSet::new();
        for d in dsts {
            if !seen.insert(relative(&self.path, d)?) {
                return Err(StorageError::Duplicate { path: d.clone() });
            }
        }
        let _root = self.open_root()?;
        let (src, src_fd) = self.source(src)?;
        let places = dsts.iter().map(|d| place(&self.path, d, true)).collect::<Result<Vec<_>, _>>()?;
        for p in &places {
            if rustix::fs::statat(&p.parent, p.name(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                return Err(StorageError::Exists { path: p.path.clone() });
            }
        }
        let mut results = match self.mode {
            Mode::Btrfs => snapshot_many(&src_fd, &places)?,
            Mode::Reflink | Mode::Copy => in_parallel(&places, |dst| copy::clone(&src, dst)),
        };
        if let Some(pos) = results.iter().position(Result::is_err) {
            for (d, r) in dsts.iter().zip(&results) {
                if r.is_ok() {
                    let _ = self.remove(d);
                }
            }
            return results.swap_remove(pos);
        }
        Ok(())
    }

    /// Remove the volume at `path`, read-only snapshots and subvolumes nested in it included. A volume that
    /// does not exist is not an error. Nothing outside the volume is touched: symlinks are removed, not
    /// followed, and a file system mounted inside it makes the removal fail rather than be emptied.
    pub fn remove(&self, path: &Path) -> Result<(), StorageError> {
        let root = self.open_root()?;
        let place = match place(&self.path, path, false) {
            Ok(place) => place,
            Err(StorageError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let on_btrfs = btrfs::is_btrfs(root.as_fd()).unwrap_or(false);
        let qgroup = if self.mode == Mode::Btrfs && self.quotas_enabled() { subvol::id_of(&place) } else { None };
        walk::remove_tree(&place.parent, place.name(), &place.path, on_btrfs)?;
        if let Some(id) = qgroup {
            quota::forget(&root, id);
        }
        Ok(())
    }

    /// The volume to clone from, open.
    fn source(&self, src: &Path) -> Result<(Place, OwnedFd), StorageError> {
        let src = place(&self.path, src, false)?;
        let fd = open_volume(&src)?;
        if self.mode == Mode::Btrfs {
            subvol::check_subvolume(&fd, &src)?;
        }
        Ok((src, fd))
    }

    fn clone_into(&self, src: &Place, src_fd: &OwnedFd, dst: &Place, readonly: bool) -> Result<(), StorageError> {
        match self.mode {
            Mode::Btrfs => subvol::snapshot(src_fd, dst, readonly),
            Mode::Reflink | Mode::Copy => copy::clone(src, dst),
        }
    }
}

/// Run `f` on every item, up to MAX_PARALLEL at a time; the results in the order of the items.
fn in_parallel<T: Sync>(
    items: &[T],
    f: impl Fn(&T) -> Result<(), StorageError> + Sync,
) -> Vec<Result<(), StorageError>> {
    let mut results = Vec::with_capacity(items.len());
    for chunk in items.chunks(MAX_PARALLEL) {
        std::thread::scope(|s| {
            let running: Vec<_> = chunk.iter().map(|item| s.spawn(|| f(item))).collect();
            for handle in running {
                results.push(handle.join().unwrap_or_else(|_| {
                    Err(StorageError::io("clone a volume", PathBuf::new())(std::io::Error::other("a clone panicked")))
                }));
            }
        });
    }
    results
}

static STAGES: AtomicU64 = AtomicU64::new(0);

/// A hidden directory beside a destination, where its snapshot is taken before it is renamed into place.
struct Stage<'a> {
    dst: &'a Place,
    name: String,
    place: Place,
}

impl Stage<'_> {
    /// Remove the hidden directory and whatever is left in it.
    fn discard(self) {
        let _ = walk::remove_tree(&self.dst.parent, self.name.as_ref(), &self.place.path, true);
    }
}

fn snapshot_many(src: &OwnedFd, dsts: &[Place]) -> Result<Vec<Result<(), StorageError>>, StorageError> {
    let mut stages = Vec::with_capacity(dsts.len());
    for dst in dsts {
        let name = format!(".clone-{}-{}", std::process::id(), STAGES.fetch_add(1, Ordering::Relaxed));
        let shown = dst.path.with_file_name(&name);
        let made = rustix::fs::mkdirat(&dst.parent, name.as_str(), FileMode::from_raw_mode(0o700))
            .and_then(|()| rustix::fs::openat(&dst.parent, name.as_str(), DIR_FLAGS, FileMode::empty()));
        match made {
            Ok(fd) => {
                let place = Place { parent: fd, name: dst.name.clone(), path: dst.path.clone() };
                stages.push(Stage { dst, name, place });
            }
            Err(e) => {
                stages.into_iter().for_each(Stage::discard);
                return Err(StorageError::io("prepare a clone beside", shown)(e.into()));
            }
        }
    }
    let taken = in_parallel(&stages, |stage| subvol::snapshot(src, &stage.place, false));
    let mut results = Vec::with_capacity(stages.len());
    for (stage, taken) in stages.into_iter().zip(taken) {
        let placed = taken.and_then(|()| {
            let dst = stage.dst;
            rustix::fs::renameat_with(&stage.place.parent, dst.name(), &dst.parent, dst.name(), RenameFlags::NOREPLACE)
                .map_err(|e| match e {
                    Errno::EXIST => StorageError::Exists { path: dst.path.clone() },
                    e => StorageError::io("put a clone in place at", &dst.path)(e.into()),
                })
        });
        stage.discard();
        results.push(placed);
    }
    Ok(results)
}
