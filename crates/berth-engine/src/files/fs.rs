//! `SandboxFs`: one sandbox's file system as the daemon reaches it, through `/proc/<init>/root`. API paths are
//! parsed here, and resolved from the sandbox's root with `openat2` (`RESOLVE_IN_ROOT`); reading, writing,
//! listing, stat, removal, mkdir, moves and the sandbox side of tar start here.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use berth_api::FileEntry;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

use super::MAX_FILE;
use super::archive::{extract_at, validate_tar, write_tar_at};
use super::error::{FileError, Result, io_err, not_regular, sys, too_large};
use super::fd::{check_fs, entry, file_size, list, open_new_dir, own, remove_at, reopen};

/// Ids per sandbox, as in its uid map.
const DEFAULT_ID_COUNT: u32 = 65536;
/// What inside ids outside the map show as.
const NOBODY: u32 = 65534;

/// The host ids that are root inside a sandbox, how many ids its maps cover, and the inside ids the work is
/// done as (root unless [`SandboxFs::as_user`] said otherwise).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ids {
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) count: u32,
    pub(super) user: (u32, u32),
}

impl Ids {
    /// The host ids of the user the work is done as: what new files are owned by, and whose permissions
    /// the sandbox's files are checked against.
    pub(super) fn owner(&self) -> (u32, u32) {
        (self.uid + self.user.0, self.gid + self.user.1)
    }

    pub(super) fn inside(base: u32, count: u32, host: u32) -> u32 {
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
    /// First components of paths that the sandbox's own kernel serves (gVisor's `/proc`, `/sys`, `/dev`).
    unreachable: &'static [&'static str],
    /// Its backend's name, to say whose kernel that is.
    backend: &'static str,
}

impl SandboxFs {
    /// Reach the root of the sandbox whose init has host pid `pid` (under gVisor: whose `runsc run` has it),
    /// where its backend's `file_root` says it is.
    pub fn open(pid: i32, isolation: berth_api::Isolation) -> Result<SandboxFs> {
        let gone = |e: Errno| {
            FileError::Conflict(format!("the sandbox's init (pid {pid}) cannot be reached: {}", io::Error::from(e)))
        };
        // The descriptor of /proc/<pid> stays tied to that process: if it exits, reads through it fail
        // rather than reaching a process that reused the number.
        let proc =
            rustix::fs::open(format!("/proc/{pid}"), OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(gone)?;
        let root = rustix::fs::openat(&proc, "root", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(gone)?;
        let backend = berth_runtime::backend(isolation);
        let at = backend.file_root();
        // Under gVisor runsc runs as the host's root, in a mount namespace of its own where the sandbox's root
        // is one directory; confined to that directory like any sandbox's.
        let root = match at.under.as_os_str().is_empty() {
            true => root,
            false => {
                rustix::fs::openat(&root, &at.under, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(gone)?
            }
        };
        let ids = match at.ids {
            berth_runtime::FileIds::Mapped => {
                let (uid, count) = id_map(&proc, "uid_map")?;
                let (gid, _) = id_map(&proc, "gid_map")?;
                Ids { uid, gid, count, user: (0, 0) }
            }
            // The trees mounted there map the sandbox's ids to the same numbers (gVisor's kernel maps
            // nothing), so its root is acted as as root.
            berth_runtime::FileIds::Same => Ids { uid: 0, gid: 0, count: DEFAULT_ID_COUNT, user: (0, 0) },
        };
        Ok(SandboxFs { root, ids, unreachable: at.unreachable, backend: backend.name() })
    }

    /// Do the work as inside user `uid` and group `gid` instead of root: the sandbox's permissions apply to
    /// it as to that user's processes, and what it makes is theirs.
    pub fn as_user(mut self, uid: u32, gid: u32) -> Result<SandboxFs> {
        if uid >= self.ids.count || gid >= self.ids.count {
            return Err(FileError::Invalid(format!("ids {uid}:{gid} are beyond the sandbox's {}", self.ids.count)));
        }
        self.ids.user = (uid, gid);
        Ok(self)
    }

    /// `path`'s components, refused when they name a file system of the sandbox's own kernel (gVisor's
    /// `/proc`, `/sys`, `/dev`): the host holds only the empty directories they are mounted on.
    fn parts<'a>(&self, path: &'a str) -> Result<Vec<&'a str>> {
        let parts = parse_path(path)?;
        if parts.first().is_some_and(|p| self.unreachable.contains(p)) {
            return Err(FileError::Conflict(format!(
                "{path} is in a file system of the sandbox's {} kernel, which the files API cannot reach: read it \
                 with an exec",
                self.backend
            )));
        }
        Ok(parts)
    }

    /// Act as the sandbox's root (or the user of `as_user`) on this thread until the guard drops.
    fn act(&self) -> Result<berth_sys::fsids::FsIds> {
        let (uid, gid) = self.ids.owner();
        if self.ids.user.0 == 0 {
            berth_sys::fsids::act_as(uid, gid)
        } else {
            berth_sys::fsids::act_as_unprivileged(uid, gid)
        }
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
        let parts = self.parts(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        // Kernel file systems (/proc, /sys, cgroups) are refused whatever is asked of them: there the daemon's
        // host credentials, not the sandbox's, would decide what is seen.
        check_fs(&fd, path)?;
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
        let parts = self.parts(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        check_fs(&fd, path)?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        Ok(entry(parts.last().unwrap_or(&"/").to_string(), &st, None, Some(self.ids)))
    }

    /// Connect to the unix socket at `path` inside the sandbox. The path is resolved inside its root like every
    /// other, the socket is opened `O_PATH` and connected to through `/proc/self/fd`, so that a link planted
    /// inside cannot point the daemon at a socket of the host's.
    pub fn connect(&self, path: &str) -> Result<std::os::unix::net::UnixStream> {
        let parts = self.parts(path)?;
        let _ids = self.act()?;
        let fd = self.resolve(&parts, OFlags::PATH).map_err(|e| sys("open", path, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| sys("stat", path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Socket {
            return Err(not_regular(path, FileType::from_raw_mode(st.st_mode)));
        }
        use std::os::fd::AsRawFd;
        std::os::unix::net::UnixStream::connect(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| io_err("connect to", path, e))
    }

    /// A new pseudo-terminal in the sandbox's own devpts (`/dev/pts/N` inside), owned by its root.
    pub fn open_terminal(&self) -> Result<berth_sys::pty::Pty> {
        let _ids = self.act()?;
        berth_sys::pty::open_in(self.root.as_fd()).map_err(|e| FileError::Internal(berth_runtime::error_chain(&e)))
    }

    /// Create or truncate a regular file. Returns it, and whether it was created.
    pub fn write(&self, path: &str, data: &[u8], mode: Option<u32>, parents: bool) -> Result<(FileEntry, bool)> {
        let parts = self.parts(path)?;
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
        let parts = self.parts(path)?;
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
        let parts = self.parts(path)?;
        let Some((name, dir_parts)) = parts.split_last() else {
            return Err(FileError::Invalid("the files API does not remove /".into()));
        };
        let _ids = self.act()?;
        let dir = self.resolve_dir(path, dir_parts)?;
        check_fs(&dir, path)?;
        remove_at(&dir, name, path, recursive)
    }

    /// Rename or move `from` to `to`: a file, a symbolic link (the link itself, never what it points to) or
    /// a directory tree, in one `renameat2` relative to the two parents' descriptors. Both parents are
    /// resolved inside the sandbox as every path is, and the last components are names in them. Without
    /// `overwrite`, an existing `to` is a 409 (`RENAME_NOREPLACE`); with it, a file or link replaces a file or
    /// link, and a directory an empty directory. Returns the moved entry (a link as a link).
    pub fn rename(&self, from: &str, to: &str, overwrite: bool) -> Result<FileEntry> {
        let src = self.parts(from)?;
        let dst = self.parts(to)?;
        let Some((src_name, src_dir)) = src.split_last() else {
            return Err(FileError::Invalid("the files API does not move /".into()));
        };
        let Some((dst_name, dst_dir)) = dst.split_last() else {
            return Err(FileError::Invalid("nothing is moved onto /".into()));
        };
        if dst.len() > src.len() && dst.starts_with(&src) {
            return Err(into_itself(from, to));
        }
        let _ids = self.act()?;
        let from_dir = self.resolve_dir(from, src_dir)?;
        check_fs(&from_dir, from)?;
        let to_dir = self.resolve_dir(to, dst_dir)?;
        check_fs(&to_dir, to)?;
        let flags = if overwrite { RenameFlags::empty() } else { RenameFlags::NOREPLACE };
        rustix::fs::renameat_with(&from_dir, *src_name, &to_dir, *dst_name, flags).map_err(|e| match e {
            Errno::EXIST if !overwrite => FileError::Conflict(format!("{to} exists: pass overwrite to replace it")),
            Errno::EXIST | Errno::NOTEMPTY => {
                FileError::Conflict(format!("{to} is a directory that is not empty: {from} cannot replace it"))
            }
            Errno::ISDIR => FileError::Conflict(format!("{to} is a directory and {from} is not")),
            Errno::NOTDIR => FileError::Conflict(format!("{from} is a directory and {to} is not")),
            Errno::XDEV => FileError::Conflict(format!(
                "{from} and {to} are on different file systems, and a move does not cross them: copy it, then \
                 remove the original"
            )),
            // Moving a directory below itself (through a symbolic link the components did not show).
            Errno::INVAL => into_itself(from, to),
            e => sys("move", &format!("{from} to {to}"), e),
        })?;
        let st = rustix::fs::statat(&to_dir, *dst_name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| sys("stat", to, e))?;
        let target = (FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
            .then(|| rustix::fs::readlinkat(&to_dir, *dst_name, Vec::new()).ok())
            .flatten()
            .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
        Ok(entry(dst_name.to_string(), &st, target, Some(self.ids)))
    }

    /// A directory, O_PATH, for `write_tar`.
    pub fn open_dir(&self, path: &str) -> Result<OwnedFd> {
        let parts = self.parts(path)?;
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
        let parts = self.parts(path)?;
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

fn into_itself(from: &str, to: &str) -> FileError {
    FileError::Invalid(format!("{to} is inside {from}: a directory cannot be moved into itself"))
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
}
