//! The files API: read, write, list, stat, remove and make directories inside a running sandbox, and move
//! whole trees in and out as tar.
//!
//! The daemon is host root and the sandbox is not trusted, so every path goes through the same few rules:
//!
//! - A path is resolved from the sandbox's own root, `/proc/<init>/root`, with `openat2` and
//!   `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: `..` at the top, absolute symlinks and symlinks that climb
//!   out all stay inside the sandbox, and `/proc/*/root`-style magic links are refused. API paths must be
//!   absolute, and a `..` component is refused outright.
//! - Anything new is created relative to its parent's descriptor with `O_EXCL`/`O_NOFOLLOW` (or mkdirat,
//!   symlinkat), never by resolving a path string again; recursive removal and tar work from descriptors too.
//! - A file is opened `O_PATH` first and opened for I/O (through `/proc/self/fd`) only once it is known to be
//!   a regular file, so a device or a FIFO is never opened.
//! - Nothing on /proc, /sys or another kernel file system is read or written: there, the daemon's
//!   credentials would be the host's.
//! - The work runs on a thread whose file-system ids are the sandbox root's host ids (see
//!   `berth_sys::fsids`): the sandbox's file systems accept new files from it, and new files and
//!   directories are owned by root inside (they are also chowned to it explicitly).
//!
//! The tar functions also serve the CLI on the host side (`berth cp`), with the host's own ids.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use berth_api::{ErrorCode, Extracted, FileEntry, FileKind};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::Engine;
use crate::http::Failure;

/// Largest file read or written in one request, and largest tar accepted in one request.
pub const MAX_FILE: u64 = 64 << 20;
/// Deepest directory tree walked (each level holds a descriptor open).
const MAX_DEPTH: usize = 256;
/// Ids per sandbox, as in its uid map.
const DEFAULT_ID_COUNT: u32 = 65536;
/// What inside ids outside the map show as.
const NOBODY: u32 = 65534;

/// Why a files operation failed; each maps to an API error code.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// 400: a bad path, an escape attempt, or something the API will not touch.
    #[error("{0}")]
    Invalid(String),
    /// 404
    #[error("{0}")]
    NotFound(String),
    /// 409: a directory where a file was wanted (or the reverse), not empty, exists, read-only.
    #[error("{0}")]
    Conflict(String),
    /// 413
    #[error("{0}")]
    TooLarge(String),
    /// 500
    #[error("{0}")]
    Internal(String),
}

impl FileError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FileError::Invalid(_) => ErrorCode::InvalidRequest,
            FileError::NotFound(_) => ErrorCode::NotFound,
            FileError::Conflict(_) => ErrorCode::Conflict,
            FileError::TooLarge(_) => ErrorCode::PayloadTooLarge,
            FileError::Internal(_) => ErrorCode::Internal,
        }
    }
}

type Result<T, E = FileError> = std::result::Result<T, E>;

/// A failed system call on `path`, doing `what`, as the error its errno deserves.
fn sys(what: &str, path: &str, e: Errno) -> FileError {
    let message = format!("cannot {what} {path}: {}", io::Error::from(e));
    match e {
        Errno::NOENT => FileError::NotFound(message),
        Errno::LOOP => FileError::Invalid(format!(
            "{message} (a symbolic link that is never followed here, such as /proc/*/root, or too many links)"
        )),
        Errno::XDEV | Errno::NAMETOOLONG | Errno::INVAL => FileError::Invalid(message),
        Errno::ISDIR
        | Errno::NOTDIR
        | Errno::EXIST
        | Errno::NOTEMPTY
        | Errno::BUSY
        | Errno::ROFS
        | Errno::ACCESS
        | Errno::PERM
        | Errno::TXTBSY
        | Errno::NOSPC
        | Errno::DQUOT
        | Errno::MLINK
        | Errno::FBIG => FileError::Conflict(message),
        _ => FileError::Internal(message),
    }
}

fn io_err(what: &str, path: &str, e: io::Error) -> FileError {
    match e.raw_os_error() {
        Some(n) => sys(what, path, Errno::from_raw_os_error(n)),
        None => FileError::Internal(format!("cannot {what} {path}: {e}")),
    }
}

/// The host ids that are root inside a sandbox, and how many ids its maps cover.
#[derive(Debug, Clone, Copy)]
struct Ids {
    uid: u32,
    gid: u32,
    count: u32,
}

impl Ids {
    fn inside(base: u32, count: u32, host: u32) -> u32 {
        if host >= base && host - base < count { host - base } else { NOBODY }
    }
}

/// Check an API path and split it into its components (no empty ones, no `.`).
pub fn parse_path(path: &str) -> Result<Vec<&str>> {
    if path.is_empty() {
        return Err(FileError::Invalid("give a path, such as path=/workspace/file".into()));
    }
    if path.contains('\0') {
        return Err(FileError::Invalid("a path must not contain NUL".into()));
    }
    if !path.starts_with('/') {
        return Err(FileError::Invalid(format!("{path:?} is not an absolute path (it must start with /)")));
    }
    if path.len() > 4096 {
        return Err(FileError::Invalid("the path is longer than 4096 bytes".into()));
    }
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if parts.contains(&"..") {
        return Err(FileError::Invalid(format!("{path:?} contains a .. component, which the files API refuses")));
    }
    Ok(parts)
}

/// What a path held when it was read.
#[derive(Debug)]
pub enum Got {
    File(Vec<u8>),
    Dir(Vec<FileEntry>),
}

/// One sandbox's file system, reached from the daemon.
#[derive(Debug)]
pub struct SandboxFs {
    /// `/proc/<init>/root`, O_PATH.
    root: OwnedFd,
    ids: Ids,
}

impl SandboxFs {
    /// Reach the root of the sandbox whose init has host pid `pid`.
    pub fn open(pid: i32) -> Result<SandboxFs> {
        let gone = |e: Errno| {
            FileError::Conflict(format!("the sandbox's init (pid {pid}) cannot be reached: {}", io::Error::from(e)))
        };
        // The descriptor of /proc/<pid> stays tied to that process: if it exits, reads through it fail
        // rather than reaching a process that reused the number.
        let proc =
            rustix::fs::open(format!("/proc/{pid}"), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(gone)?;
        let (uid, count) = id_map(&proc, "uid_map")?;
        let (gid, _) = id_map(&proc, "gid_map")?;
        let root = rustix::fs::openat(&proc, "root", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(gone)?;
        Ok(SandboxFs { root, ids: Ids { uid, gid, count } })
    }

    /// Act as the sandbox's root on this thread until the guard drops.
    fn act(&self) -> Result<berth_sys::fsids::FsIds> {
        berth_sys::fsids::act_as(self.ids.uid, self.ids.gid)
            .map_err(|e| FileError::Internal(berth_runtime::error_chain(&e)))
    }

    /// Resolve `parts` from the sandbox's root, following symbolic links inside it.
    fn resolve(&self, parts: &[&str], flags: OFlags) -> std::result::Result<OwnedFd, Errno> {
        let path = if parts.is_empty() { ".".to_string() } else { parts.join("/") };
        let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        loop {
            // EAGAIN: a rename raced the walk over `..`; the kernel asks for another try.
            match rustix::fs::openat2(&self.root, &path, flags | OFlags::CLOEXEC, Mode::empty(), how) {
                Err(Errno::AGAIN) if tries < 16 => tries += 1,
                r => return r,
            }
        }
    }

    fn resolve_dir(&self, path: &str, parts: &[&str]) -> Result<OwnedFd> {
        self.resolve(parts, OFlags::PATH | OFlags::DIRECTORY).map_err(|e| sys("open the directory", path, e))
    }

    /// A file's bytes, or a directory's entries.
    pub fn get(&self, path: &str) -> Result<Got> {
        let parts = parse_path(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => Ok(Got::Dir(list(&fd, path, Some(self.ids))?)),
            FileType::RegularFile => {
                check_fs(&fd, path)?;
                if file_size(&st) > MAX_FILE {
                    return Err(too_large(path, file_size(&st)));
                }
                let file = reopen(&fd, OFlags::RDONLY).map_err(|e| sys("open", path, e))?;
                let mut data = Vec::new();
                std::fs::File::from(file)
                    .take(MAX_FILE + 1)
                    .read_to_end(&mut data)
                    .map_err(|e| io_err("read", path, e))?;
                if data.len() as u64 > MAX_FILE {
                    return Err(too_large(path, data.len() as u64));
                }
                Ok(Got::File(data))
            }
            other => Err(not_regular(path, other)),
        }
    }

    /// What a path is (following symbolic links inside the sandbox).
    pub fn stat(&self, path: &str) -> Result<FileEntry> {
        let parts = parse_path(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        Ok(entry(parts.last().unwrap_or(&"/").to_string(), &st, None, Some(self.ids)))
    }

    /// Create or truncate a regular file. Returns it, and whether it was created.
    pub fn write(&self, path: &str, data: &[u8], mode: Option<u32>, parents: bool) -> Result<(FileEntry, bool)> {
        let parts = parse_path(path)?;
        let Some((name, dir_parts)) = parts.split_last() else {
            return Err(FileError::Conflict("/ is a directory".into()));
        };
        if path.ends_with('/') {
            return Err(FileError::Invalid(format!("{path} ends with /, so it names a directory")));
        }
        if data.len() as u64 > MAX_FILE {
            return Err(too_large(path, data.len() as u64));
        }
        let _ids = self.act()?;
        let (file, created) = match self.resolve(&parts, OFlags::PATH) {
            // It exists (perhaps through a symbolic link inside the sandbox): truncate it in place.
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => {}
                    FileType::Directory => return Err(FileError::Conflict(format!("{path} is a directory"))),
                    other => return Err(not_regular(path, other)),
                }
                check_fs(&fd, path)?;
                (reopen(&fd, OFlags::WRONLY | OFlags::TRUNC).map_err(|e| sys("open", path, e))?, false)
            }
            Err(Errno::NOENT) => {
                let dir = if parents { self.mkdir_all(path, dir_parts)?.0 } else { self.resolve_dir(path, dir_parts)? };
                check_fs(&dir, path)?;
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(&dir, *name, flags, Mode::from_raw_mode(0o600)).map_err(|e| match e {
                    Errno::EXIST => FileError::Conflict(format!(
                        "cannot create {path}: something is already there (such as a symbolic link to a missing file)"
                    )),
                    e => sys("create", path, e),
                })?;
                own(&fd, self.ids, path)?;
                (fd, true)
            }
            Err(e) => return Err(sys("open", path, e)),
        };
        let mut f = std::fs::File::from(file);
        f.write_all(data).map_err(|e| io_err("write", path, e))?;
        if let Some(m) = mode.or(created.then_some(0o644)) {
            rustix::fs::fchmod(&f, Mode::from_raw_mode(m)).map_err(|e| sys("set the mode of", path, e))?;
        }
        let st = rustix::fs::fstat(&f).map_err(|e| sys("stat", path, e))?;
        Ok((entry(name.to_string(), &st, None, Some(self.ids)), created))
    }

    /// Make a directory (and, with `parents`, the missing ones above it; an existing directory is then fine).
    /// Returns it, and whether it was created.
    pub fn mkdir(&self, path: &str, parents: bool, mode: Option<u32>) -> Result<(FileEntry, bool)> {
        let parts = parse_path(path)?;
        let Some((name, dir_parts)) = parts.split_last() else {
            return if parents {
                self.stat(path).map(|e| (e, false))
            } else {
                Err(FileError::Conflict("/ already exists".into()))
            };
        };
        let _ids = self.act()?;
        let (fd, created) = if parents {
            self.mkdir_all(path, &parts)?
        } else {
            let dir = self.resolve_dir(path, dir_parts)?;
            check_fs(&dir, path)?;
            rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o700)).map_err(|e| sys("make", path, e))?;
            (open_new_dir(&dir, name, self.ids, path)?, true)
        };
        if let Some(m) = mode.filter(|_| created) {
            let d = rustix::fs::openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| sys("open", path, e))?;
            rustix::fs::fchmod(&d, Mode::from_raw_mode(m)).map_err(|e| sys("set the mode of", path, e))?;
        }
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        Ok((entry(name.to_string(), &st, None, Some(self.ids)), created))
    }

    /// `mkdir -p` of `parts`: each existing prefix is resolved from the root (inside the sandbox), each
    /// missing one is made relative to its parent's descriptor. Returns the last directory (O_PATH) and
    /// whether it was made here.
    fn mkdir_all(&self, path: &str, parts: &[&str]) -> Result<(OwnedFd, bool)> {
        let mut cur = self.resolve_dir(path, &[])?;
        let mut created = false;
        for i in 0..parts.len() {
            match self.resolve(&parts[..=i], OFlags::PATH | OFlags::DIRECTORY) {
                Ok(fd) => {
                    cur = fd;
                    created = false;
                }
                Err(Errno::NOENT) => {
                    check_fs(&cur, path)?;
                    created = match rustix::fs::mkdirat(&cur, parts[i], Mode::from_raw_mode(0o700)) {
                        Ok(()) => true,
                        Err(Errno::EXIST) => false,
                        Err(e) => return Err(sys("make", &format!("/{}", parts[..=i].join("/")), e)),
                    };
                    let p = format!("/{}", parts[..=i].join("/"));
                    cur = if created {
                        open_new_dir(&cur, parts[i], self.ids, &p)?
                    } else {
                        // Someone else made it meanwhile, or it is a symbolic link to nowhere: never follow.
                        rustix::fs::openat(
                            &cur,
                            parts[i],
                            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                        )
                        .map_err(|e| sys("open the directory", &p, e))?
                    };
                }
                Err(e) => return Err(sys("open the directory", &format!("/{}", parts[..=i].join("/")), e)),
            }
        }
        Ok((cur, created))
    }

    /// Remove a file, a symbolic link (not what it points to), an empty directory, or (with `recursive`) a
    /// directory tree.
    pub fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let parts = parse_path(path)?;
        let Some((name, dir_parts)) = parts.split_last() else {
            return Err(FileError::Invalid("the files API does not remove /".into()));
        };
        let _ids = self.act()?;
        let dir = self.resolve_dir(path, dir_parts)?;
        check_fs(&dir, path)?;
        remove_at(&dir, name, path, recursive)
    }

    /// A directory, O_PATH, for `write_tar`.
    pub fn open_dir(&self, path: &str) -> Result<OwnedFd> {
        let parts = parse_path(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(FileError::Conflict(format!("{path} is not a directory")));
        }
        check_fs(&fd, path)?;
        Ok(fd)
    }

    /// Write the tree under `dir` (from `open_dir`) to `out` as a tar.
    pub fn write_tar<W: Write>(&self, dir: &OwnedFd, out: W) -> Result<W> {
        let _ids = self.act()?;
        write_tar_at(dir.as_fd(), out, Some(self.ids))
    }

    /// Unpack the tar `data` into the directory `path` (made when missing; with `parents`, its parents too).
    pub fn extract_tar(&self, path: &str, data: &[u8], parents: bool) -> Result<u64> {
        validate_tar(data)?;
        let parts = parse_path(path)?;
        let _ids = self.act()?;
        let dir = match self.resolve(&parts, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if parents => self.mkdir_all(path, &parts)?.0,
            Err(Errno::NOENT) => {
                let Some((name, dir_parts)) = parts.split_last() else {
                    return Err(FileError::NotFound("/ is missing".into()));
                };
                let parent = self.resolve_dir(path, dir_parts)?;
                check_fs(&parent, path)?;
                rustix::fs::mkdirat(&parent, *name, Mode::from_raw_mode(0o700)).map_err(|e| sys("make", path, e))?;
                open_new_dir(&parent, name, self.ids, path)?
            }
            Err(e) => return Err(sys("open the directory", path, e)),
        };
        check_fs(&dir, path)?;
        extract_at(dir.as_fd(), data, Some(self.ids))
    }
}

/// Read `0 BASE COUNT` from the first line of a /proc id map: the host id of root inside, and the count.
fn id_map(proc: &OwnedFd, file: &str) -> Result<(u32, u32)> {
    let fd = rustix::fs::openat(proc, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| FileError::Conflict(format!("cannot read the sandbox's {file}: {}", io::Error::from(e))))?;
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(|e| FileError::Internal(format!("cannot read the sandbox's {file}: {e}")))?;
    let fields: Vec<u64> =
        text.lines().next().unwrap_or_default().split_whitespace().filter_map(|f| f.parse().ok()).collect();
    match fields[..] {
        // Host ids that are not 0: a process in its own user namespace, not one that reused the pid.
        [0, base, count] if base != 0 && base <= u64::from(u32::MAX) => {
            Ok((base as u32, u32::try_from(count).unwrap_or(DEFAULT_ID_COUNT)))
        }
        _ => Err(FileError::Conflict(format!("the sandbox's init has an unexpected {file}: {:?}", text.trim()))),
    }
}

/// Refuse kernel file systems: there the daemon would act with host credentials.
#[allow(clippy::unnecessary_cast)]
fn check_fs(fd: &OwnedFd, path: &str) -> Result<()> {
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
fn reopen(fd: &OwnedFd, flags: OFlags) -> std::result::Result<OwnedFd, Errno> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(link, flags | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
}

/// Open `name` in `dir` as a regular file for reading, without following a symbolic link and without ever
/// opening anything else (a FIFO or a device).
fn open_regular_at(dir: BorrowedFd<'_>, name: &OsStr, path: &str) -> Result<Option<std::fs::File>> {
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
fn open_new_dir(parent: &OwnedFd, name: &str, ids: Ids, path: &str) -> Result<OwnedFd> {
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

/// Give a new file or directory to root inside the sandbox.
fn own(fd: &OwnedFd, ids: Ids, path: &str) -> Result<()> {
    rustix::fs::fchown(fd, Some(rustix::fs::Uid::from_raw(ids.uid)), Some(rustix::fs::Gid::from_raw(ids.gid)))
        .map_err(|e| sys("set the owner of", path, e))
}

fn too_large(path: &str, size: u64) -> FileError {
    FileError::TooLarge(format!("{path} is {size} bytes; the files API moves at most {MAX_FILE} bytes at once"))
}

fn not_regular(path: &str, t: FileType) -> FileError {
    FileError::Conflict(format!("{path} is a {}, not a regular file", kind_name(kind_of(t))))
}

fn kind_of(t: FileType) -> FileKind {
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

fn kind_name(k: FileKind) -> &'static str {
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
fn file_size(st: &Stat) -> u64 {
    (st.st_size as i64).max(0) as u64
}

#[allow(clippy::unnecessary_cast)]
fn mtime_ms(st: &Stat) -> i64 {
    (st.st_mtime as i64).saturating_mul(1000) + (st.st_mtime_nsec as i64) / 1_000_000
}

fn entry(name: String, st: &Stat, link_target: Option<String>, ids: Option<Ids>) -> FileEntry {
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
fn names(dir: BorrowedFd<'_>, path: &str) -> Result<(OwnedFd, Vec<Vec<u8>>)> {
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
fn list(dir: &OwnedFd, path: &str, ids: Option<Ids>) -> Result<Vec<FileEntry>> {
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
fn remove_at(dir: &OwnedFd, name: &str, path: &str, recursive: bool) -> Result<()> {
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
fn write_tar_at<W: Write>(dir: BorrowedFd<'_>, out: W, ids: Option<Ids>) -> Result<W> {
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
fn extract_at<R: Read>(dest: BorrowedFd<'_>, input: R, ids: Option<Ids>) -> Result<u64> {
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
                        Some(rustix::fs::Uid::from_raw(ids.uid)),
                        Some(rustix::fs::Gid::from_raw(ids.gid)),
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

// ---- HTTP ----

impl From<FileError> for Failure {
    fn from(e: FileError) -> Failure {
        Failure::new(e.code(), e.to_string())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathQuery {
    path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PutQuery {
    path: String,
    mode: Option<String>,
    #[serde(default)]
    parents: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MkdirQuery {
    path: String,
    mode: Option<String>,
    #[serde(default)]
    parents: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveQuery {
    path: String,
    #[serde(default)]
    parents: bool,
}

/// An octal mode such as `644`, `0644` or `0o644`.
fn parse_mode(m: Option<&str>) -> Result<Option<u32>> {
    let Some(m) = m else { return Ok(None) };
    let digits = m.strip_prefix("0o").unwrap_or(m);
    match u32::from_str_radix(digits, 8) {
        Ok(v) if v <= 0o7777 && !digits.is_empty() => Ok(Some(v)),
        _ => Err(FileError::Invalid(format!("{m:?} is not a file mode: use octal, such as 0644"))),
    }
}

fn query<T>(q: std::result::Result<Query<T>, QueryRejection>) -> Result<T, Failure> {
    q.map(|Query(q)| q).map_err(|e| Failure::new(ErrorCode::InvalidRequest, e.body_text()))
}

fn body(b: std::result::Result<Bytes, BytesRejection>) -> Result<Bytes, Failure> {
    b.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            Failure::new(ErrorCode::PayloadTooLarge, format!("the request body is larger than {MAX_FILE} bytes"))
        }
        _ => Failure::new(ErrorCode::InvalidRequest, e.body_text()),
    })
}

/// Run blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| Failure::new(ErrorCode::Internal, "a files task failed".to_string()))?
        .map_err(Failure::from)
}

/// The sandbox's file system, through its init.
async fn sandbox(e: &Engine, id: &str) -> Result<SandboxFs, Failure> {
    let record = e.get(id).await?;
    let Some(pid) = record.pid else {
        return Err(Failure::new(ErrorCode::Conflict, format!("sandbox {} has no running init", record.id)));
    };
    blocking(move || SandboxFs::open(pid)).await
}

type Api = State<Arc<Engine>>;

/// The files API's routes, merged into the daemon's router.
pub fn routes() -> Router<Arc<Engine>> {
    let upload = DefaultBodyLimit::max(MAX_FILE as usize);
    Router::new()
        .route("/v1/sandboxes/{id}/files", get(get_files).put(put_file).delete(delete_files).layer(upload))
        .route("/v1/sandboxes/{id}/stat", get(stat))
        .route("/v1/sandboxes/{id}/mkdir", post(mkdir))
        .route("/v1/sandboxes/{id}/archive", get(get_archive).put(put_archive).layer(upload))
}

async fn get_files(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let fs = sandbox(&e, &id).await?;
    Ok(match blocking(move || fs.get(&q.path)).await? {
        Got::File(data) => ([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response(),
        Got::Dir(entries) => Json(entries).into_response(),
    })
}

async fn put_file(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PutQuery>, QueryRejection>,
    data: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let mode = parse_mode(q.mode.as_deref())?;
    parse_path(&q.path)?;
    let data = body(data)?;
    let fs = sandbox(&e, &id).await?;
    let (entry, created) = blocking(move || fs.write(&q.path, &data, mode, q.parents)).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)).into_response())
}

async fn delete_files(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let fs = sandbox(&e, &id).await?;
    blocking(move || fs.remove(&q.path, q.recursive)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn stat(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let fs = sandbox(&e, &id).await?;
    Ok(Json(blocking(move || fs.stat(&q.path)).await?).into_response())
}

async fn mkdir(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<MkdirQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let mode = parse_mode(q.mode.as_deref())?;
    let fs = sandbox(&e, &id).await?;
    let (entry, created) = blocking(move || fs.mkdir(&q.path, q.parents, mode)).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)).into_response())
}

async fn get_archive(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<PathQuery>, QueryRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    let fs = sandbox(&e, &id).await?;
    // Errors up to here get a status; after it, one ends the stream early (the client sees a cut body).
    let (fs, dir) = blocking(move || {
        let dir = fs.open_dir(&q.path)?;
        Ok((fs, dir))
    })
    .await?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks { tx: tx.clone(), buf: Vec::with_capacity(CHUNK) };
        let done = fs.write_tar(&dir, &mut out).and_then(|w| w.send().map_err(|e| io_err("send", "the archive", e)));
        if let Err(err) = done {
            let _ = tx.blocking_send(Err(io::Error::other(err.to_string())));
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/x-tar")], Body::from_stream(ReceiverStream::new(rx))).into_response())
}

async fn put_archive(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    q: std::result::Result<Query<ArchiveQuery>, QueryRejection>,
    data: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let q = query(q)?;
    parse_path(&q.path)?;
    let data = body(data)?;
    let fs = sandbox(&e, &id).await?;
    let entries = blocking(move || fs.extract_tar(&q.path, &data, q.parents)).await?;
    Ok(Json(Extracted { entries }).into_response())
}

const CHUNK: usize = 64 * 1024;

/// A writer that hands the response body to the HTTP server in chunks.
struct Chunks {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl Chunks {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl Write for Chunks {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_without_dotdot_or_nul() {
        assert_eq!(parse_path("/").unwrap(), Vec::<&str>::new());
        assert_eq!(parse_path("//a/./b/").unwrap(), ["a", "b"]);
        for bad in ["", "a/b", "../etc/passwd", "/a/../../etc", "/a\0b", "/.."] {
            assert!(matches!(parse_path(bad), Err(FileError::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode(Some("0644")).unwrap(), Some(0o644));
        assert_eq!(parse_mode(Some("0o755")).unwrap(), Some(0o755));
        assert_eq!(parse_mode(None).unwrap(), None);
        for bad in ["", "9", "10000", "rwx"] {
            assert!(parse_mode(Some(bad)).is_err(), "{bad}");
        }
    }

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
