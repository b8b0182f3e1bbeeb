//! Copying a directory tree into the image.
//!
//! The source is read as carefully as the destination is written: every directory is reached from the
//! source's descriptor with `O_NOFOLLOW` at each step and every file is opened with `O_NOFOLLOW`, so a symlink
//! in the source (or one swapped in while the copy runs) is copied as a symlink and never read through.
//! Descriptors are not held across the walk (pending directories are kept as paths), so depth costs memory,
//! not descriptors.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::ImportError;
use crate::safefs::{self, READ_DIR};
use crate::writer::{Body, Meta, Writer};

/// Host labels, not part of the image; dropping them is not worth a line in the report.
const HOST_XATTRS: &[&[u8]] = &[b"security.selinux"];

pub(crate) fn copy(source: &Path, w: &mut Writer<'_>) -> Result<(), ImportError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let src = rfs::open(source, flags, Mode::empty()).map_err(|e| ImportError::source_io(source, e.into()))?;
    let dest = rfs::fstat(w.root.fd()).map_err(|e| ImportError::source_io(source, e.into()))?;
    let top = rfs::fstat(&src).map_err(|e| ImportError::source_io(source, e.into()))?;
    w.put(b"/", Path::new(""), Body::Dir, &meta(&top, xattrs(&src)))?;

    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let names: Vec<OsString> = rel.iter().map(|c| c.to_os_string()).collect();
        let dir = match safefs::walk_nofollow(src.as_fd(), &names) {
            Ok(dir) => dir,
            Err(_) => {
                w.reject(rel.as_os_str().as_bytes(), "changed while being copied; skipped");
                continue;
            }
        };
        let dir = dir.as_ref().map_or(src.as_fd(), |d| d.as_fd());
        let children = safefs::list(dir).map_err(|e| ImportError::source_io(&source.join(&rel), e.into()))?;
        for name in children {
            let child = rel.join(&name);
            let raw = child.as_os_str().as_bytes();
            let st = match rfs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(ImportError::source_io(&source.join(&child), e.into())),
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory if (st.st_dev, st.st_ino) == (dest.st_dev, dest.st_ino) => {
                    w.reject(raw, "is the destination itself; skipped");
                }
                FileType::Directory => {
                    let Ok(fd) = rfs::openat(dir, &name, READ_DIR, Mode::empty()) else {
                        w.reject(raw, "changed while being copied; skipped");
                        continue;
                    };
                    w.put(raw, &child, Body::Dir, &meta(&st, xattrs(&fd)))?;
                    pending.push(child);
                }
                FileType::RegularFile => copy_file(w, dir, &name, &child, &mut links, source)?,
                FileType::Symlink => {
                    let target = rfs::readlinkat(dir, &name, Vec::new())
                        .map_err(|e| ImportError::source_io(&source.join(&child), e.into()))?;
                    w.put(raw, &child, Body::Symlink(target.into_bytes()), &meta(&st, Vec::new()))?;
                }
                FileType::Fifo => w.put(raw, &child, Body::Fifo, &meta(&st, Vec::new()))?,
                FileType::CharacterDevice | FileType::BlockDevice => {
                    w.put(raw, &child, Body::Refuse("device node; skipped".into()), &meta(&st, Vec::new()))?
                }
                FileType::Socket => {
                    w.put(raw, &child, Body::Refuse("socket; skipped".into()), &meta(&st, Vec::new()))?
                }
                FileType::Unknown => {
                    w.put(raw, &child, Body::Refuse("unknown file type; skipped".into()), &meta(&st, Vec::new()))?
                }
            }
            w.tick();
        }
    }
    w.emit();
    Ok(())
}

/// Copies one regular file; a second name for an inode already copied becomes a hard link.
fn copy_file(
    w: &mut Writer<'_>,
    dir: BorrowedFd<'_>,
    name: &OsString,
    child: &Path,
    links: &mut HashMap<(u64, u64), PathBuf>,
    source: &Path,
) -> Result<(), ImportError> {
    let raw = child.as_os_str().as_bytes();
    // O_NONBLOCK: if a fifo was swapped in since the stat, opening it must not hang.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd: OwnedFd = match rfs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(Errno::LOOP) => {
            w.reject(raw, "changed while being copied; skipped");
            return Ok(());
        }
        Err(e) => return Err(ImportError::source_io(&source.join(child), e.into())),
    };
    let st = rfs::fstat(&fd).map_err(|e| ImportError::source_io(&source.join(child), e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        w.reject(raw, "changed while being copied; skipped");
        return Ok(());
    }
    if st.st_nlink > 1 {
        let key = (st.st_dev, st.st_ino);
        if let Some(first) = links.get(&key) {
            let target = first.as_os_str().as_bytes().to_vec();
            return w.put(raw, child, Body::HardLink(target), &meta(&st, Vec::new()));
        }
        links.insert(key, child.to_path_buf());
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    w.charge(size)?;
    let attrs = xattrs(&fd);
    let mut data = File::from(fd).take(size);
    w.put(raw, child, Body::File(&mut data), &meta(&st, attrs))
}

fn meta(st: &Stat, xattrs: Vec<(Vec<u8>, Vec<u8>)>) -> Meta {
    Meta {
        uid: u64::from(st.st_uid),
        gid: u64::from(st.st_gid),
        mode: st.st_mode & 0o7777,
        mtime: (st.st_mtime, u32::try_from(st.st_mtime_nsec).unwrap_or(0)),
        xattrs,
    }
}

/// The extended attributes of an open file or directory (those the writer will not keep are reported there).
fn xattrs(fd: &impl AsFd) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut names = vec![0u8; 64 << 10];
    let Ok(n) = rfs::flistxattr(fd, &mut names[..]) else { return Vec::new() };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty() && !HOST_XATTRS.contains(n)) {
        let mut value = vec![0u8; 64 << 10];
        if let Ok(len) = rfs::fgetxattr(fd, std::ffi::OsStr::from_bytes(name), &mut value[..]) {
            value.truncate(len);
            out.push((name.to_vec(), value));
        }
    }
    out
}
