//! Where a volume is: a path inside the pool, reached one component at a time without following symlinks.
//!
//! Volumes hold what sandboxes wrote, so nothing under a volume's root can be trusted; the directories above
//! it are the pool's own. Opening every component with `O_NOFOLLOW` from the pool's root means a symlink
//! planted anywhere on the way is refused rather than followed out of the pool.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::StorageError;

/// The pool's directories; every volume lives below one of them.
pub(crate) const AREAS: [&str; 4] = ["sandboxes", "snapshots", "volumes", "images"];

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// A volume's parent directory, open, and its name in it.
#[derive(Debug)]
pub(crate) struct Place {
    pub parent: OwnedFd,
    pub name: OsString,
    /// The full path, for messages and for the tools that take paths.
    pub path: PathBuf,
}

impl Place {
    pub(crate) fn name(&self) -> &OsStr {
        &self.name
    }
}

/// The path of `path` relative to the pool at `pool`, if it names a place where a volume may be.
pub(crate) fn relative(pool: &Path, path: &Path) -> Result<PathBuf, StorageError> {
    let outside = || StorageError::OutsidePool { path: path.to_path_buf(), pool: pool.to_path_buf() };
    let rel = if path.is_absolute() { path.strip_prefix(pool).map_err(|_| outside())? } else { path };
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            _ => return Err(outside()),
        }
    }
    let in_area = parts.first().is_some_and(|a| AREAS.iter().any(|area| OsStr::new(area) == *a));
    if parts.len() < 2 || !in_area {
        return Err(outside());
    }
    Ok(parts.iter().collect())
}

/// Open the pool's root directory.
pub(crate) fn open_pool(pool: &Path) -> Result<OwnedFd, StorageError> {
    rustix::fs::open(pool, DIR_FLAGS, Mode::empty())
        .map_err(|e| StorageError::io("open the storage pool", pool)(e.into()))
}

/// Open the directory `rel` below `dir` one component at a time, never following a symlink; with `create`,
/// make missing directories (0700) on the way.
pub(crate) fn open_dir_beneath(dir: &OwnedFd, rel: &Path, create: bool, shown: &Path) -> Result<OwnedFd, StorageError> {
    let mut cur: Option<OwnedFd> = None;
    for part in rel.components() {
        let Component::Normal(part) = part else { continue };
        let at = cur.as_ref().unwrap_or(dir);
        let next = match rustix::fs::openat(at, part, DIR_FLAGS, Mode::empty()) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(at, part, Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(StorageError::io("create the directory", shown)(e.into())),
                }
                rustix::fs::openat(at, part, DIR_FLAGS, Mode::empty())
            }
            other => other,
        };
        let next = next.map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => StorageError::NotAVolume {
                path: shown.to_path_buf(),
                reason: "a symlink or a file is on the way to it",
            },
            Errno::NOENT => StorageError::NotFound { path: shown.to_path_buf() },
            e => StorageError::io("open the directory of", shown)(e.into()),
        })?;
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => rustix::io::fcntl_dupfd_cloexec(dir, 0).map_err(|e| StorageError::io("open", shown)(e.into())),
    }
}

/// Find the place of the volume `path` in the pool, opening its parent (and creating it with `create`).
pub(crate) fn place(pool: &Path, path: &Path, create: bool) -> Result<Place, StorageError> {
    let rel = relative(pool, path)?;
    let full = pool.join(&rel);
    let root = open_pool(pool)?;
    let parent_rel = rel.parent().unwrap_or(Path::new(""));
    let parent = open_dir_beneath(&root, parent_rel, create, &full)?;
    let name = rel.file_name().map(OsStr::to_os_string).unwrap_or_default();
    Ok(Place { parent, name, path: full })
}

/// Open a volume's root directory (without following a symlink).
pub(crate) fn open_volume(place: &Place) -> Result<OwnedFd, StorageError> {
    rustix::fs::openat(&place.parent, place.name(), DIR_FLAGS, Mode::empty()).map_err(|e| match e {
        Errno::NOENT => StorageError::NotFound { path: place.path.clone() },
        Errno::LOOP | Errno::NOTDIR => {
            StorageError::NotAVolume { path: place.path.clone(), reason: "it is a symlink or a file, not a directory" }
        }
        e => StorageError::io("open the volume", &place.path)(e.into()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_places_inside_an_area_are_volumes() {
        let pool = Path::new("/data/pool");
        assert_eq!(relative(pool, Path::new("/data/pool/sandboxes/abc")).unwrap(), Path::new("sandboxes/abc"));
        assert_eq!(relative(pool, Path::new("snapshots/a/b")).unwrap(), Path::new("snapshots/a/b"));
        assert_eq!(relative(pool, Path::new("/data/pool/./volumes/v")).unwrap(), Path::new("volumes/v"));
        for bad in [
            "/data/pool",
            "/data/pool/sandboxes",
            "/data/pool/other/x",
            "/data/pool/sandboxes/../../etc",
            "/data/poolx/sandboxes/a",
            "/etc/passwd",
            "sandboxes/a/../b",
            "",
        ] {
            assert!(relative(pool, Path::new(bad)).is_err(), "{bad}");
        }
    }
}
