//! Trees as tar: packing a directory (symbolic links stored, never followed; only files, directories and
//! links), checking a whole archive before any of it is unpacked, and unpacking it from descriptors. Used by
//! `SandboxFs` with the sandbox's ids, and by `berth cp` on the host.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;

use super::MAX_DEPTH;
use super::error::{FileError, Result, io_err, sys};
use super::fd::{check_fs, entry, file_size, names, open_regular_at, own};
use super::fs::Ids;

/// Reads exactly `left` bytes from a file that may change size meanwhile: cut when it grew, zeros when it
/// shrank, so that the tar stays well-formed.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            buf[..want].fill(0);
            n = want;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Write the tree under `dir` (any descriptor of a directory) to `out` as a tar of its contents (paths
/// relative to it). Symbolic links are stored as links, never followed; FIFOs, sockets and devices are left
/// out, and so is what is inside a kernel file system. `ids`: the sandbox's, to store inside ids.
pub(super) fn write_tar_at<W: Write>(dir: BorrowedFd<'_>, out: W, ids: Option<Ids>) -> Result<W> {
    let mut b = tar::Builder::new(out);
    tar_dir(&mut b, dir, &mut Vec::new(), ids, 0)?;
    b.into_inner().map_err(|e| io_err("finish", "the archive", e))
}

/// `write_tar_at` for the host side (`berth cp`): ids are stored as they are.
pub fn write_tar_host<W: Write>(dir: BorrowedFd<'_>, out: W) -> Result<W> {
    write_tar_at(dir, out, None)
}

#[allow(clippy::unnecessary_cast)]
fn header_for(st: &Stat, kind: tar::EntryType, ids: Option<Ids>) -> tar::Header {
    let e = entry(String::new(), st, None, ids);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(e.mode);
    h.set_mtime((st.st_mtime as i64).max(0) as u64);
    h.set_uid(u64::from(e.uid));
    h.set_gid(u64::from(e.gid));
    h.set_size(0);
    h
}

fn tar_dir<W: Write>(
    b: &mut tar::Builder<W>,
    dir: BorrowedFd<'_>,
    prefix: &mut Vec<u8>,
    ids: Option<Ids>,
    depth: usize,
) -> Result<()> {
    let shown = || format!("./{}", String::from_utf8_lossy(prefix));
    if depth >= MAX_DEPTH {
        return Err(FileError::Conflict(format!("{} is more than {MAX_DEPTH} directories deep", shown())));
    }
    let (fd, all) = names(dir, &shown())?;
    for name in all {
        let os = OsStr::from_bytes(&name);
        let len = prefix.len();
        prefix.extend_from_slice(&name);
        let path = Path::new(OsStr::from_bytes(prefix)).to_path_buf();
        let shown = format!("./{}", path.display());
        let append = |e: io::Error| io_err("archive", &shown, e);
        let st = match rustix::fs::statat(&fd, os, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => {
                prefix.truncate(len);
                continue;
            }
            Err(e) => return Err(sys("stat", &shown, e)),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let sub = rustix::fs::openat(
                    &fd,
                    os,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                if let Ok(sub) = sub {
                    let mut h = header_for(&st, tar::EntryType::Directory, ids);
                    b.append_data(&mut h, &path, io::empty()).map_err(append)?;
                    if check_fs(&sub, &shown).is_ok() {
                        prefix.push(b'/');
                        tar_dir(b, sub.as_fd(), prefix, ids, depth + 1)?;
                    }
                }
            }
            FileType::RegularFile => {
                if let Some(file) = open_regular_at(fd.as_fd(), os, &shown)? {
                    let st = rustix::fs::fstat(&file).map_err(|e| sys("stat", &shown, e))?;
                    let mut h = header_for(&st, tar::EntryType::Regular, ids);
                    h.set_size(file_size(&st));
                    b.append_data(&mut h, &path, Exact { inner: file, left: file_size(&st) }).map_err(append)?;
                }
            }
            FileType::Symlink => {
                if let Ok(target) = rustix::fs::readlinkat(&fd, os, Vec::new()) {
                    let mut h = header_for(&st, tar::EntryType::Symlink, ids);
                    b.append_link(&mut h, &path, OsStr::from_bytes(target.as_bytes())).map_err(append)?;
                }
            }
            _ => {}
        }
        prefix.truncate(len);
    }
    Ok(())
}

/// The components of a path in a tar: relative, no `..`, no empty or `.` components.
fn tar_parts(bytes: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let shown = String::from_utf8_lossy(bytes);
    if bytes.starts_with(b"/") {
        return Err(format!("the archive holds an absolute path, {shown:?}"));
    }
    let parts: Vec<&[u8]> = bytes.split(|b| *b == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
    if parts.iter().any(|c| *c == b"..") {
        return Err(format!("the archive holds a path with .., {shown:?}"));
    }
    Ok(parts)
}

/// Check a whole tar before any of it is unpacked: only files, directories and links, at relative paths
/// without `..`.
pub fn validate_tar(data: &[u8]) -> Result<()> {
    let bad = |m: String| FileError::Invalid(m);
    let mut archive = tar::Archive::new(data);
    for e in archive.entries().map_err(|e| bad(format!("the body is not a tar archive: {e}")))? {
        let e = e.map_err(|e| bad(format!("the body is not a valid tar archive: {e}")))?;
        let path = e.path_bytes();
        tar_parts(&path).map_err(bad)?;
        match e.header().entry_type() {
            tar::EntryType::Regular
            | tar::EntryType::Continuous
            | tar::EntryType::Directory
            | tar::EntryType::Symlink
            | tar::EntryType::XGlobalHeader => {}
            tar::EntryType::Link => {
                let target = e.link_name_bytes().unwrap_or_default();
                let parts = tar_parts(&target).map_err(bad)?;
                if parts.is_empty() {
                    return Err(bad(format!("the hard link {:?} has no target", String::from_utf8_lossy(&path))));
                }
            }
            other => {
                return Err(bad(format!(
                    "the archive holds {:?}, of a type the files API does not unpack ({other:?}): only files, \
                     directories and links",
                    String::from_utf8_lossy(&path)
                )));
            }
        }
    }
    Ok(())
}

/// Unpack a tar into `dest` (any descriptor of a directory), checking each entry as it comes (as
/// `validate_tar` does). No symbolic link is ever followed: a path whose directories include one is
/// refused, and a file or link that exists is replaced, not written through. Returns how many entries were
/// unpacked.
pub(super) fn extract_at<R: Read>(dest: BorrowedFd<'_>, input: R, ids: Option<Ids>) -> Result<u64> {
    let bad = |m: String| FileError::Invalid(m);
    let mut archive = tar::Archive::new(input);
    let mut count = 0;
    for e in archive.entries().map_err(|e| bad(format!("not a tar archive: {e}")))? {
        let mut e = e.map_err(|e| bad(format!("not a valid tar archive: {e}")))?;
        let raw = e.path_bytes().into_owned();
        let parts = tar_parts(&raw).map_err(bad)?;
        let shown = format!("./{}", String::from_utf8_lossy(&raw).trim_start_matches("./"));
        let kind = e.header().entry_type();
        let Some((name, dirs)) = parts.split_last() else { continue };
        let name = OsStr::from_bytes(name);
        if kind == tar::EntryType::XGlobalHeader {
            continue;
        }
        let dir = walk(dest, dirs, true, ids, &shown)?;
        check_fs(&dir, &shown)?;
        let mode = e.header().mode().unwrap_or(0o644);
        match kind {
            tar::EntryType::Directory => {
                let made = match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => true,
                    Err(Errno::EXIST) => false,
                    Err(e) => return Err(sys("make", &shown, e)),
                };
                let d = rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| sys("open the directory", &shown, e))?;
                if made && let Some(ids) = ids {
                    own(&d, ids, &shown)?;
                }
                rustix::fs::fchmod(&d, Mode::from_raw_mode(mode & 0o1777))
                    .map_err(|e| sys("set the mode of", &shown, e))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                replace(&dir, name, &shown)?;
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(0o600))
                    .map_err(|e| sys("create", &shown, e))?;
                if let Some(ids) = ids {
                    own(&fd, ids, &shown)?;
                }
                let mut f = std::fs::File::from(fd);
                io::copy(&mut e, &mut f).map_err(|e| io_err("write", &shown, e))?;
                // Never a set-id bit from an archive.
                rustix::fs::fchmod(&f, Mode::from_raw_mode(mode & 0o777))
                    .map_err(|e| sys("set the mode of", &shown, e))?;
                if let Ok(mtime) = e.header().mtime() {
                    let t = Timespec { tv_sec: i64::try_from(mtime).unwrap_or(0), tv_nsec: 0 };
                    let _ = rustix::fs::futimens(&f, &Timestamps { last_access: t, last_modification: t });
                }
            }
            tar::EntryType::Symlink => {
                let target = e.link_name_bytes().unwrap_or_default().into_owned();
                if target.is_empty() {
                    return Err(bad(format!("the symbolic link {shown} has no target")));
                }
                replace(&dir, name, &shown)?;
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &dir, name)
                    .map_err(|e| sys("make the link", &shown, e))?;
                if let Some(ids) = ids {
                    rustix::fs::chownat(
                        &dir,
                        name,
                        Some(rustix::fs::Uid::from_raw(ids.owner().0)),
                        Some(rustix::fs::Gid::from_raw(ids.owner().1)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(|e| sys("set the owner of", &shown, e))?;
                }
            }
            tar::EntryType::Link => {
                let target = e.link_name_bytes().unwrap_or_default().into_owned();
                let tparts = tar_parts(&target).map_err(bad)?;
                let Some((tname, tdirs)) = tparts.split_last() else {
                    return Err(bad(format!("the hard link {shown} has no target")));
                };
                let tdir = walk(dest, tdirs, false, None, &shown).map_err(|_| {
                    FileError::Invalid(format!("the hard link {shown} points at a path that is not in the archive"))
                })?;
                replace(&dir, name, &shown)?;
                rustix::fs::linkat(&tdir, OsStr::from_bytes(tname), &dir, name, AtFlags::empty())
                    .map_err(|e| sys("make the hard link", &shown, e))?;
            }
            other => {
                return Err(bad(format!("{shown} is of a type the files API does not unpack ({other:?})")));
            }
        }
        count += 1;
    }
    Ok(count)
}

/// `extract_at` for the host side (`berth cp`): files keep the caller's ids.
pub fn extract_host<R: Read>(dest: BorrowedFd<'_>, input: R) -> Result<u64> {
    extract_at(dest, input, None)
}

/// The directory `dirs` below `dest`, never following a symbolic link; with `make`, missing ones are made
/// (and given to `ids`, when set).
fn walk(dest: BorrowedFd<'_>, dirs: &[&[u8]], make: bool, ids: Option<Ids>, shown: &str) -> Result<OwnedFd> {
    let mut cur = rustix::fs::openat(dest, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| sys("open the directory", shown, e))?;
    for d in dirs {
        let d = OsStr::from_bytes(d);
        let open = |at: &OwnedFd| {
            rustix::fs::openat(
                at,
                d,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let not_dir = || {
            FileError::Conflict(format!(
                "cannot unpack {shown}: one of its directories is not a directory (symbolic links are never \
                 followed while unpacking)"
            ))
        };
        cur = match open(&cur) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if make => {
                check_fs(&cur, shown)?;
                match rustix::fs::mkdirat(&cur, d, Mode::from_raw_mode(0o755)) {
                    Ok(()) => {
                        let made = open(&cur).map_err(|_| not_dir())?;
                        if let Some(ids) = ids {
                            let r = rustix::fs::openat(
                                &made,
                                ".",
                                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                                Mode::empty(),
                            )
                            .map_err(|e| sys("open", shown, e))?;
                            own(&r, ids, shown)?;
                            rustix::fs::fchmod(&r, Mode::from_raw_mode(0o755))
                                .map_err(|e| sys("set the mode of", shown, e))?;
                        }
                        made
                    }
                    Err(Errno::EXIST) => open(&cur).map_err(|_| not_dir())?,
                    Err(e) => return Err(sys("make a directory for", shown, e)),
                }
            }
            Err(Errno::NOTDIR | Errno::LOOP) => return Err(not_dir()),
            Err(e) => return Err(sys("open a directory for", shown, e)),
        };
    }
    Ok(cur)
}

/// Clear the way for a new non-directory `name` in `dir`: remove a file or link that is there (a directory
/// stays, and is an error).
fn replace(dir: &OwnedFd, name: &OsStr, shown: &str) -> Result<()> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(sys("stat", shown, e)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            Err(FileError::Conflict(format!("cannot unpack {shown}: a directory is in the way")))
        }
        Ok(_) => match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(sys("replace", shown, e)),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8], &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (path, kind, data, link) in entries {
            // Raw headers, so that paths the builder would refuse can be written.
            let mut h = tar::Header::new_old();
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.extend_from_slice(&[0; 1024]);
        out
    }

    #[test]
    fn tars_with_escapes_or_devices_are_refused_before_anything_is_unpacked() {
        use tar::EntryType as T;
        for bad in [
            tar_of(&[("ok", T::Regular, b"x", ""), ("../evil", T::Regular, b"x", "")]),
            tar_of(&[("/etc/evil", T::Regular, b"x", "")]),
            tar_of(&[("a/../../evil", T::Regular, b"x", "")]),
            tar_of(&[("dev", T::Char, b"", "")]),
            tar_of(&[("fifo", T::Fifo, b"", "")]),
            tar_of(&[("hl", T::Link, b"", "../../etc/passwd")]),
        ] {
            assert!(matches!(validate_tar(&bad), Err(FileError::Invalid(_))));
        }
        assert!(validate_tar(&tar_of(&[("d/", T::Directory, b"", ""), ("d/f", T::Regular, b"hi", "")])).is_ok());
    }

    #[test]
    fn unpacking_never_follows_a_symlink_and_a_tree_round_trips() {
        use tar::EntryType as T;
        let outside = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(dest.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        // A link to outside, then a file "through" it: refused, and nothing lands outside.
        let link = outside.path().to_str().unwrap().to_string();
        let evil = tar_of(&[("l", T::Symlink, b"", &link), ("l/owned", T::Regular, b"x", "")]);
        assert!(validate_tar(&evil).is_ok(), "each entry alone is fine");
        assert!(matches!(extract_host(fd.as_fd(), &evil[..]), Err(FileError::Conflict(_))));
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // A link, then a file at the link's own name: the link is replaced, not written through.
        let target = outside.path().join("victim");
        let evil = tar_of(&[("v", T::Symlink, b"", target.to_str().unwrap()), ("v", T::Regular, b"x", "")]);
        extract_host(fd.as_fd(), &evil[..]).unwrap();
        assert!(!target.exists());
        assert_eq!(std::fs::read(dest.path().join("v")).unwrap(), b"x");

        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/f"), b"deep").unwrap();
        std::fs::write(src.path().join("top"), vec![7u8; 100_000]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("a/ln")).unwrap();
        let sfd = rustix::fs::open(src.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let tar = write_tar_host(sfd.as_fd(), Vec::new()).unwrap();
        validate_tar(&tar).unwrap();
        let out = tempfile::tempdir().unwrap();
        let ofd = rustix::fs::open(out.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert_eq!(extract_host(ofd.as_fd(), &tar[..]).unwrap(), 5);
        assert_eq!(std::fs::read(out.path().join("a/b/f")).unwrap(), b"deep");
        assert_eq!(std::fs::read(out.path().join("top")).unwrap(), vec![7u8; 100_000]);
        assert_eq!(std::fs::read_link(out.path().join("a/ln")).unwrap(), Path::new("/etc/passwd"));
    }
}
