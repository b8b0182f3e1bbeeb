//! Opening what sandboxed code wrote without ever following one of its links.
//!
//! Directories are opened beneath a layer's root with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; files are
//! pinned with `O_PATH | O_NOFOLLOW`, checked to be regular files, and only then opened for reading.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{CWD, FileType as RawType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::{DiffError, join};

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Paths are resolved in pieces of at most this many bytes, well under `PATH_MAX`.
const PIECE: usize = 2048;

/// Opens the directory `rel` beneath the layer root `root` without following any link. A path longer than
/// the kernel takes in one call (sandboxed code can nest directories at will) is opened piece by piece,
/// each piece beneath the directory the last one reached.
pub(crate) fn open_beneath(root: &OwnedFd, rel: &str) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut rest = rel;
    let mut dir: Option<OwnedFd> = None;
    loop {
        let piece = if rest.len() <= PIECE {
            rest
        } else {
            // A name is at most 255 bytes, so a separator lies within any PIECE-long stretch.
            let cut = rest.as_bytes()[..PIECE].iter().rposition(|&c| c == b'/').unwrap_or(rest.len());
            &rest[..cut]
        };
        let target = if piece.is_empty() { "." } else { piece };
        let next = rustix::fs::openat2(dir.as_ref().unwrap_or(root), target, flags, Mode::empty(), beneath())?;
        rest = rest[piece.len()..].trim_start_matches('/');
        if rest.is_empty() {
            return Ok(next);
        }
        dir = Some(next);
    }
}

/// Errors meaning "not there (any more)": the tree may be live, and a path that was swapped for a link is
/// treated as gone rather than followed.
pub(crate) fn vanished(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV)
}

pub(crate) fn utf8(side: &'static str, dir: &str, raw: &[u8]) -> Result<String, DiffError> {
    String::from_utf8(raw.to_vec())
        .map_err(|_| DiffError::NotUtf8 { side, path: join(dir, &String::from_utf8_lossy(raw)) })
}

pub(crate) fn has_xattr(fd: impl AsFd, names: [&str; 2], want: Option<&[u8]>) -> bool {
    let mut buf = [0u8; 8];
    names.iter().any(|name| match rustix::fs::fgetxattr(fd.as_fd(), *name, &mut buf) {
        Ok(n) => want.is_none_or(|w| buf.get(..n) == Some(w)),
        Err(Errno::RANGE) => want.is_none(),
        Err(_) => false,
    })
}

/// The device and inode numbers of a file.
#[allow(clippy::useless_conversion)] // widenings on 32-bit targets
pub(crate) fn inode(st: &Stat) -> (u64, u64) {
    (u64::from(st.st_dev), u64::from(st.st_ino))
}

/// Pins a regular file of a directory with an `O_PATH` descriptor, without following a link. `Ok(None)`: it
/// is not a regular file (any more). Nothing is opened for reading yet: see [`reopen`].
fn pin_regular(dir: BorrowedFd<'_>, name: &str) -> rustix::io::Result<Option<(OwnedFd, Stat)>> {
    let pinned = rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&pinned)?;
    Ok((RawType::from_raw_mode(st.st_mode) == RawType::RegularFile).then_some((pinned, st)))
}

/// Opens a pinned regular file for reading through `/proc/self/fd`. The inode is the one that was checked,
/// so a device or FIFO swapped in under the same name is never opened (opening a device can have effects
/// of its own). Fails with `ENOENT` when `/proc` is not mounted.
fn reopen(pinned: &OwnedFd) -> rustix::io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let path = format!("/proc/self/fd/{}", pinned.as_raw_fd());
    rustix::fs::openat(CWD, &path, flags, Mode::empty()).map(File::from)
}

/// Opens a regular file of a directory for reading, without following a link (see [`reopen`]).
/// `Ok(None)`: it is not a regular file (any more).
pub(crate) fn open_regular(dir: BorrowedFd<'_>, name: &str) -> rustix::io::Result<Option<(File, Stat)>> {
    let Some((pinned, st)) = pin_regular(dir, name)? else { return Ok(None) };
    match reopen(&pinned) {
        Ok(file) => Ok(Some((file, st))),
        // Without /proc, open by name and check it is still the same file: NOFOLLOW and NONBLOCK keep links
        // out and FIFOs from blocking.
        Err(Errno::NOENT) => {
            let flags = OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
            let now = rustix::fs::fstat(&fd)?;
            Ok((inode(&now) == inode(&st)).then_some((File::from(fd), now)))
        }
        Err(e) => Err(e),
    }
}

/// A character device 0:0, or an empty file with a whiteout xattr.
pub(crate) fn is_whiteout(dir: impl AsFd, name: &str, st: &Stat) -> bool {
    match RawType::from_raw_mode(st.st_mode) {
        RawType::CharacterDevice => st.st_rdev == 0,
        RawType::RegularFile if st.st_size == 0 => match open_regular(dir.as_fd(), name) {
            Ok(Some((file, _))) => has_xattr(&file, ["user.overlay.whiteout", "trusted.overlay.whiteout"], None),
            _ => false,
        },
        _ => false,
    }
}

pub(crate) fn opaque_names() -> [&'static str; 2] {
    ["user.overlay.opaque", "trusted.overlay.opaque"]
}
