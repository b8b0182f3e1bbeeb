//! Descriptor helpers under `SandboxFs` and the tar code: refusing kernel file systems, reopening an O_PATH
//! descriptor for I/O, making and owning new directories, turning a stat into a `FileEntry`, listing a
//! directory, and removing a tree, all from descriptors and never following a symbolic link.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use berth_api::{FileEntry, FileKind};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use super::MAX_DEPTH;
use super::error::{FileError, Result, sys};
use super::fs::Ids;

/// Refuse kernel file systems: there the daemon would act with host credentials.
#[allow(clippy::unnecessary_cast)]
pub(super) fn check_fs(fd: &OwnedFd, path: &str) -> Result<()> {
    const KERNEL_FS: [i64; 15] = [
        0x9fa0,      // proc
        0x6265_6572, // sysfs
        0x0027_e0eb, // cgroup
        0x6367_7270, // cgroup2
        0x6462_6720, // debugfs
        0x7472_6163, // tracefs
        0x7363_6673, // securityfs
        0xcafe_4a11, // bpf
        0x1cd1,      // devpts
        0x6265_6570, // configfs
        0xde5e_81e4, // efivarfs
        0x6165_676c, // pstore
        0x6573_5543, // fusectl
        0x4249_4e4d, // binfmt_misc
        0x6e73_6673, // nsfs
    ];
    let st = rustix::fs::fstatfs(fd).map_err(|e| sys("inspect the file system of", path, e))?;
    if KERNEL_FS.contains(&(st.f_type as i64)) {
        return Err(FileError::Invalid(format!(
            "{path} is on a kernel file system (such as /proc or /sys), which the files API does not touch"
        )));
    }
    Ok(())
}

/// Open an O_PATH descriptor for I/O (it names the same inode: no path is resolved again).
pub(super) fn reopen(fd: &OwnedFd, flags: OFlags) -> std::result::Result<OwnedFd, Errno> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(link, flags | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
}

/// Open `name` in `dir` as a regular file for reading, without following a symbolic link and without ever
/// opening anything else (a FIFO or a device).
pub(super) fn open_regular_at(dir: BorrowedFd<'_>, name: &OsStr, path: &str) -> Result<Option<std::fs::File>> {
    let fd = match rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(sys("open", path, e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(reopen(&fd, OFlags::RDONLY).map_err(|e| sys("open", path, e))?)))
}

/// Open a directory this call just made, never following a link, and give it to root inside.
pub(super) fn open_new_dir(parent: &OwnedFd, name: &str, ids: Ids, path: &str) -> Result<OwnedFd> {
    let d = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| sys("open the new directory", path, e))?;
    own(&d, ids, path)?;
    rustix::fs::fchmod(&d, Mode::from_raw_mode(0o755)).map_err(|e| sys("set the mode of", path, e))?;
    Ok(d)
}

/// Give a new file or directory to root inside the sandbox (or the user the work is done as).
pub(super) fn own(fd: &OwnedFd, ids: Ids, path: &str) -> Result<()> {
    let (uid, gid) = ids.owner();
    rustix::fs::fchown(fd, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)))
        .map_err(|e| sys("set the owner of", path, e))
}

pub(super) fn kind_of(t: FileType) -> FileKind {
    match t {
        FileType::Directory => FileKind::Directory,
        FileType::Symlink => FileKind::Symlink,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::CharacterDevice => FileKind::CharDevice,
        FileType::BlockDevice => FileKind::BlockDevice,
        _ => FileKind::File,
    }
}

pub(super) fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Directory => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "FIFO",
        FileKind::Socket => "socket",
        FileKind::CharDevice => "character device",
        FileKind::BlockDevice => "block device",
    }
}

#[allow(clippy::unnecessary_cast)]
pub(super) fn file_size(st: &Stat) -> u64 {
    (st.st_size as i64).max(0) as u64
}

#[allow(clippy::unnecessary_cast)]
fn mtime_ms(st: &Stat) -> i64 {
    (st.st_mtime as i64).saturating_mul(1000) + (st.st_mtime_nsec as i64) / 1_000_000
}

pub(super) fn entry(name: String, st: &Stat, link_target: Option<String>, ids: Option<Ids>) -> FileEntry {
    let (uid, gid) = match ids {
        Some(i) => (Ids::inside(i.uid, i.count, st.st_uid), Ids::inside(i.gid, i.count, st.st_gid)),
        None => (st.st_uid, st.st_gid),
    };
    FileEntry {
        name,
        kind: kind_of(FileType::from_raw_mode(st.st_mode)),
        size: file_size(st),
        mode: st.st_mode & 0o7777,
        mtime_ms: mtime_ms(st),
        uid,
        gid,
        link_target,
    }
}

/// The names in a directory (an O_PATH or readable descriptor), sorted, without `.` and `..`.
pub(super) fn names(dir: BorrowedFd<'_>, path: &str) -> Result<(OwnedFd, Vec<Vec<u8>>)> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| sys("open the directory", path, e))?;
    let dup = rustix::io::fcntl_dupfd_cloexec(&fd, 0).map_err(|e| sys("open the directory", path, e))?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::new(dup).map_err(|e| sys("read the directory", path, e))? {
        let e = e.map_err(|e| sys("read the directory", path, e))?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    out.sort();
    Ok((fd, out))
}

/// A directory's entries, not following symbolic links.
pub(super) fn list(dir: &OwnedFd, path: &str, ids: Option<Ids>) -> Result<Vec<FileEntry>> {
    let (fd, all) = names(dir.as_fd(), path)?;
    let mut out = Vec::with_capacity(all.len());
    for name in all {
        let os = OsStr::from_bytes(&name);
        let st = match rustix::fs::statat(&fd, os, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(sys("stat an entry of", path, e)),
        };
        let target = (FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
            .then(|| rustix::fs::readlinkat(&fd, os, Vec::new()).ok())
            .flatten()
            .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
        out.push(entry(String::from_utf8_lossy(&name).into_owned(), &st, target, ids));
    }
    Ok(out)
}

/// Remove `name` in `dir`; a directory tree only with `recursive`. Never follows a symbolic link, and never
/// descends into another file system (a mount point inside the tree stops the removal).
pub(super) fn remove_at(dir: &OwnedFd, name: &str, path: &str, recursive: bool) -> Result<()> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| sys("stat", path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| sys("remove", path, e));
    }
    if recursive {
        let sub = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| sys("open the directory", path, e))?;
        let top = rustix::fs::fstat(&sub).map_err(|e| sys("stat", path, e))?;
        check_fs(&sub, path)?;
        empty_tree(&sub, path, &top, 0)?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(|e| match e {
        Errno::NOTEMPTY | Errno::EXIST => {
            FileError::Conflict(format!("{path} is a directory that is not empty (pass recursive=true)"))
        }
        Errno::BUSY => FileError::Conflict(format!("{path} is a mount point")),
        e => sys("remove", path, e),
    })
}

/// Remove everything in the directory `dir`, by descriptor.
fn empty_tree(dir: &OwnedFd, path: &str, top: &Stat, depth: usize) -> Result<()> {
    if depth >= MAX_DEPTH {
        return Err(FileError::Conflict(format!("{path} is more than {MAX_DEPTH} directories deep")));
    }
    let (fd, all) = names(dir.as_fd(), path)?;
    for name in all {
        let os = OsStr::from_bytes(&name);
        let child = format!("{path}/{}", String::from_utf8_lossy(&name));
        let st = match rustix::fs::statat(&fd, os, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(sys("stat", &child, e)),
        };
        let flags = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let sub = match rustix::fs::openat(
                &fd,
                os,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(sub) => sub,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(sys("open the directory", &child, e)),
            };
            let sst = rustix::fs::fstat(&sub).map_err(|e| sys("stat", &child, e))?;
            if sst.st_dev != top.st_dev {
                return Err(FileError::Conflict(format!("{child} is a mount point; the removal stops there")));
            }
            empty_tree(&sub, &child, top, depth + 1)?;
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(&fd, os, flags) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(sys("remove", &child, e)),
        }
    }
    Ok(())
}
