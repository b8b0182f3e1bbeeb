//! Writing one entry into the image: the policy every source shares.
//!
//! Tar layers and directory copies both end in [`Writer::put`], so the rules live in one place: where an
//! entry may go (see [`crate::safefs`]), which kinds are refused, which mode bits and xattrs survive, how ids
//! are shifted, and the byte and file budgets.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;

use crate::error::ImportError;
use crate::safefs::{self, READ_DIR, Root, WalkError};
use crate::{Options, Progress, Rejected};

/// At most this many rejections are listed; the rest are only counted, so a hostile archive of millions of
/// device nodes cannot grow the report without bound.
const MAX_LISTED: usize = 10_000;
/// Longest entry path accepted (the kernel's `PATH_MAX`); this also bounds how deep a tree can get.
const MAX_PATH: usize = 4096;
/// Ids an image may use; the rest map to `nobody`.
const ID_RANGE: u64 = 65536;
const NOBODY: u32 = 65534;

/// Ownership, mode, time and xattrs of an entry, as the source gave them.
pub(crate) struct Meta {
    pub uid: u64,
    pub gid: u64,
    pub mode: u32,
    pub mtime: (i64, u32),
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What to create.
pub(crate) enum Body<'r> {
    File(&'r mut dyn Read),
    Dir,
    Symlink(Vec<u8>),
    /// The target as the source named it (not yet checked).
    HardLink(Vec<u8>),
    Fifo,
    /// Not created; the reason goes into the report.
    Refuse(String),
}

/// Why one entry was not written: a reason for the report, or an error that ends the import.
pub(crate) enum Fail {
    Reject(String),
    Errno(Errno),
    /// An error that ends the import whatever it is: the owner could not be set (not root, or the shifted
    /// ids are not mapped here), and every later entry would fail the same way.
    Fatal(Errno),
    Stop(ImportError),
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Self {
        Fail::Errno(e)
    }
}

/// Errors that say something about the host rather than the entry, and so end the import.
pub(crate) fn is_fatal(e: Errno) -> bool {
    matches!(
        e,
        Errno::NOSPC
            | Errno::DQUOT
            | Errno::IO
            | Errno::ROFS
            | Errno::NOMEM
            | Errno::MFILE
            | Errno::NFILE
            | Errno::PERM
            | Errno::ACCESS
            | Errno::BADF
            | Errno::FBIG
    )
}

/// Turns an archive's path into a relative path of plain components: `./` and `/` prefixes and empty or `.`
/// components are dropped; `..` anywhere is refused. Returns the path and whether it was absolute.
pub(crate) fn normalize(raw: &[u8]) -> Result<(PathBuf, bool), &'static str> {
    if raw.len() > MAX_PATH {
        return Err("path longer than 4096 bytes; skipped");
    }
    let mut path = PathBuf::new();
    for comp in raw.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return Err("escapes the image (..); skipped"),
            c if c.contains(&0) => return Err("name contains a NUL byte; skipped"),
            c => path.push(OsStr::from_bytes(c)),
        }
    }
    Ok((path, raw.starts_with(b"/")))
}

pub(crate) struct Writer<'o> {
    pub(crate) root: Root,
    shift: u32,
    pub(crate) max_bytes: u64,
    /// Declared data of every entry seen, written or not: the budget `max_bytes` applies to.
    seen_bytes: u64,
    /// File data written.
    pub(crate) bytes: u64,
    rejected: Vec<Rejected>,
    omitted: u64,
    dir_times: HashMap<PathBuf, (i64, u32)>,
    /// Paths written by the layer being applied, and their ancestors: whiteouts leave these alone.
    pub(crate) written: HashSet<PathBuf>,
    pub(crate) ancestors: HashSet<PathBuf>,
    /// What is being read, for error messages ("layer 2 of 3 (sha256:...)").
    pub(crate) what: String,
    pub(crate) progress: Option<&'o (dyn Fn(Progress) + Sync)>,
    /// Bytes of the current source consumed so far (fed by a counting reader, or by `put` for directories).
    pub(crate) counter: Rc<Cell<u64>>,
    pub(crate) count_writes: bool,
    pub(crate) layer: usize,
    pub(crate) layers: usize,
    pub(crate) total: u64,
    pub(crate) last_emit: u64,
    buf: Vec<u8>,
}

impl<'o> Writer<'o> {
    pub(crate) fn new(dest: OwnedFd, opts: &'o Options<'o>) -> Self {
        Writer {
            root: Root::new(dest, opts.id_shift, opts.max_files),
            shift: opts.id_shift,
            max_bytes: opts.max_bytes,
            seen_bytes: 0,
            bytes: 0,
            rejected: Vec::new(),
            omitted: 0,
            dir_times: HashMap::new(),
            written: HashSet::new(),
            ancestors: HashSet::new(),
            what: "the archive".into(),
            progress: opts.progress,
            counter: Rc::new(Cell::new(0)),
            count_writes: false,
            layer: 0,
            layers: 0,
            total: 0,
            last_emit: 0,
            buf: Vec::new(),
        }
    }

    /// Charges an entry's declared size against `max_bytes` before anything is read.
    pub(crate) fn charge(&mut self, size: u64) -> Result<(), ImportError> {
        self.seen_bytes = self.seen_bytes.saturating_add(size);
        if self.seen_bytes > self.max_bytes {
            return Err(ImportError::TooManyBytes { limit: self.max_bytes });
        }
        Ok(())
    }

    pub(crate) fn reject(&mut self, raw: &[u8], reason: impl Into<String>) {
        if self.rejected.len() < MAX_LISTED {
            self.rejected.push(Rejected { path: String::from_utf8_lossy(raw).into_owned(), reason: reason.into() });
        } else {
            self.omitted += 1;
        }
    }

    /// Creates `path` (already normalized; `raw` is the name the source used, for the report).
    pub(crate) fn put(&mut self, raw: &[u8], path: &Path, body: Body<'_>, meta: &Meta) -> Result<(), ImportError> {
        let result = match (path.file_name(), body) {
            (_, Body::Refuse(reason)) => Err(Fail::Reject(reason)),
            (None, Body::Dir) => self.root_dir(raw, meta),
            (None, _) => Err(Fail::Reject("names the image root but is not a directory; skipped".into())),
            (Some(name), body) => {
                let parent = path.parent().unwrap_or(Path::new(""));
                match self.root.dir(parent, true) {
                    Ok(dir) => self.create(raw, path, &dir, name, body, meta),
                    Err(e) => Err(walk_fail(e, self.root.max_files)),
                }
            }
        };
        match result {
            Ok(()) => {
                self.mark_written(path);
                Ok(())
            }
            Err(Fail::Reject(reason)) => {
                self.reject(raw, reason);
                Ok(())
            }
            Err(Fail::Errno(e)) if !is_fatal(e) => {
                self.reject(raw, format!("could not be written ({e}); skipped"));
                Ok(())
            }
            Err(Fail::Errno(e) | Fail::Fatal(e)) => {
                Err(ImportError::Write { path: String::from_utf8_lossy(raw).into_owned(), source: e.into() })
            }
            Err(Fail::Stop(e)) => Err(e),
        }
    }

    fn create(
        &mut self,
        raw: &[u8],
        path: &Path,
        dir: &OwnedFd,
        name: &OsStr,
        body: Body<'_>,
        meta: &Meta,
    ) -> Result<(), Fail> {
        match body {
            Body::File(data) => self.file(raw, dir, name, data, meta),
            Body::Dir => {
                match rfs::mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => self.count()?,
                    Err(Errno::EXIST) if is_dir_at(dir, name)? => {}
                    Err(Errno::EXIST) => {
                        self.clear(dir, name)?;
                        rfs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?;
                        self.count()?;
                    }
                    Err(e) => return Err(e.into()),
                }
                let fd = rfs::openat(dir, name, READ_DIR, Mode::empty())?;
                self.finish(raw, &fd, meta, true)?;
                self.dir_times.insert(path.to_path_buf(), meta.mtime);
                Ok(())
            }
            Body::Symlink(target) => {
                if target.is_empty() || target.contains(&0) {
                    return Err(Fail::Reject("symlink with an empty or malformed target; skipped".into()));
                }
                let target = OsStr::from_bytes(&target);
                self.count()?;
                if let Err(Errno::EXIST) = rfs::symlinkat(target, dir, name) {
                    self.clear(dir, name)?;
                    rfs::symlinkat(target, dir, name)?;
                }
                let (uid, gid) = self.ids(raw, meta);
                safefs::set_owner_at(dir, name, uid, gid).map_err(Fail::Fatal)?;
                cosmetic(rfs::utimensat(dir, name, &times(meta.mtime), AtFlags::SYMLINK_NOFOLLOW))?;
                for (key, _) in &meta.xattrs {
                    self.reject(raw, format!("xattr {} dropped (symlinks keep no xattrs)", lossy(key)));
                }
                Ok(())
            }
            Body::HardLink(target) => self.hard_link(path, dir, name, &target),
            Body::Fifo => {
                self.count()?;
                let fifo = (FileType::Fifo, Mode::from_raw_mode(0o600));
                if let Err(Errno::EXIST) = rfs::mknodat(dir, name, fifo.0, fifo.1, 0) {
                    self.clear(dir, name)?;
                    rfs::mknodat(dir, name, fifo.0, fifo.1, 0)?;
                }
                let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rfs::openat(dir, name, flags, Mode::empty())?;
                self.finish(raw, &fd, meta, false)?;
                cosmetic(rfs::futimens(&fd, &times(meta.mtime)))?;
                Ok(())
            }
            Body::Refuse(reason) => Err(Fail::Reject(reason)),
        }
    }

    /// A regular file is always created afresh (`O_EXCL`): writing into an existing one could write through
    /// a hard link the archive made to something else.
    fn file(&mut self, raw: &[u8], dir: &OwnedFd, name: &OsStr, data: &mut dyn Read, meta: &Meta) -> Result<(), Fail> {
        self.count()?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::openat(dir, name, flags, Mode::from_raw_mode(0o600)) {
            Err(Errno::EXIST) => {
                self.clear(dir, name)?;
                rfs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?
            }
            other => other?,
        };
        let file = File::from(fd);
        let result = self.fill(raw, &file, data, meta);
        if result.is_err() {
            // Nothing half-written (and still owned by the host's root) stays in the image.
            let _ = rfs::unlinkat(dir, name, AtFlags::empty());
        }
        result
    }

    fn fill(&mut self, raw: &[u8], mut file: &File, data: &mut dyn Read, meta: &Meta) -> Result<(), Fail> {
        if self.buf.is_empty() {
            self.buf = vec![0; 1 << 20];
        }
        loop {
            let n = match data.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fail::Stop(ImportError::Corrupt { what: self.what.clone(), source: e })),
            };
            if let Err(e) = file.write_all(&self.buf[..n]) {
                let errno = e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error);
                return Err(Fail::Errno(errno));
            }
            self.bytes += n as u64;
            if self.count_writes {
                self.counter.set(self.counter.get() + n as u64);
            }
            self.tick();
        }
        self.finish(raw, file, meta, false)?;
        cosmetic(rfs::futimens(file, &times(meta.mtime)))?;
        Ok(())
    }

    fn hard_link(&mut self, path: &Path, dir: &OwnedFd, name: &OsStr, target: &[u8]) -> Result<(), Fail> {
        let outside = || Fail::Reject(format!("hard link to outside the image ({}); skipped", lossy(target)));
        let (tpath, _) = normalize(target).map_err(|_| outside())?;
        let Some(tname) = tpath.file_name() else { return Err(outside()) };
        if tpath == path {
            return Err(Fail::Reject("hard link to itself; skipped".into()));
        }
        let missing = || Fail::Reject(format!("hard link to {}, which is not in the image; skipped", lossy(target)));
        let tdir = match self.root.dir(tpath.parent().unwrap_or(Path::new("")), false) {
            Ok(d) => d,
            Err(WalkError::Symlink { at, .. }) => {
                return Err(Fail::Reject(format!("hard link through the symlink {}; skipped", at.display())));
            }
            Err(WalkError::Io(e)) if is_fatal(e) => return Err(e.into()),
            Err(_) => return Err(missing()),
        };
        let st = match rfs::statat(&tdir, tname, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Err(missing()),
            Err(e) => return Err(e.into()),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(Fail::Reject("hard link to a directory; skipped".into()));
        }
        self.count()?;
        if let Err(Errno::EXIST) = rfs::linkat(&tdir, tname, dir, name, AtFlags::empty()) {
            let here = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino) {
                return Ok(());
            }
            self.clear(dir, name)?;
            rfs::linkat(&tdir, tname, dir, name, AtFlags::empty())?;
        }
        Ok(())
    }

    /// The image root itself (`./` in an archive): its owner and mode come from the entry.
    fn root_dir(&mut self, raw: &[u8], meta: &Meta) -> Result<(), Fail> {
        let fd = rfs::openat(self.root.fd(), ".", READ_DIR, Mode::empty())?;
        self.finish(raw, &fd, meta, true)?;
        self.dir_times.insert(PathBuf::new(), meta.mtime);
        Ok(())
    }

    /// Owner, mode (setuid and setgid removed) and `user.*` xattrs, through the entry's own descriptor.
    fn finish(&mut self, raw: &[u8], fd: &impl AsFd, meta: &Meta, is_dir: bool) -> Result<(), Fail> {
        let (uid, gid) = self.ids(raw, meta);
        safefs::set_owner(fd, uid, gid).map_err(Fail::Fatal)?;
        let mut mode = meta.mode & 0o7777;
        // A setgid directory only makes new files inherit its group, which grants nothing; it is kept.
        let strip = mode & if is_dir { 0o4000 } else { 0o6000 };
        if strip != 0 {
            mode &= !strip;
            let what = match strip {
                0o4000 => "setuid bit removed",
                0o2000 => "setgid bit removed",
                _ => "setuid and setgid bits removed",
            };
            self.reject(raw, what);
        }
        rfs::fchmod(fd, Mode::from_raw_mode(mode))?;
        for (key, value) in &meta.xattrs {
            if !key.starts_with(b"user.") || key.contains(&0) {
                self.reject(raw, format!("xattr {} dropped (only user.* xattrs are kept)", lossy(key)));
                continue;
            }
            if let Err(e) = rfs::fsetxattr(fd, OsStr::from_bytes(key), value, XattrFlags::empty()) {
                self.reject(raw, format!("xattr {} not kept: {e}", lossy(key)));
            }
        }
        Ok(())
    }

    /// Host ids for an entry: the image's id plus the shift, with ids beyond the image's range as `nobody`.
    fn ids(&mut self, raw: &[u8], meta: &Meta) -> (u32, u32) {
        let mut map = |id: u64, what: &str| -> u32 {
            let id = if id >= ID_RANGE {
                self.reject(
                    raw,
                    format!("{what} {id} is outside the image's ids 0-65535; stored as {NOBODY} (nobody)"),
                );
                NOBODY
            } else {
                id as u32
            };
            self.shift + id
        };
        (map(meta.uid, "uid"), map(meta.gid, "gid"))
    }

    fn count(&mut self) -> Result<(), Fail> {
        self.root.take_one().map_err(|_| Fail::Stop(ImportError::TooManyFiles { limit: self.root.max_files }))
    }

    /// Removes whatever is at `name` so a new entry can take its place.
    fn clear(&mut self, dir: &OwnedFd, name: &OsStr) -> Result<(), Fail> {
        if safefs::remove_any(dir.as_fd(), name)? == Some(true) {
            self.root.forget();
        }
        Ok(())
    }

    fn mark_written(&mut self, path: &Path) {
        if path.as_os_str().is_empty() {
            return;
        }
        self.written.insert(path.to_path_buf());
        let mut up = path.parent();
        while let Some(dir) = up.filter(|d| !d.as_os_str().is_empty()) {
            if !self.ancestors.insert(dir.to_path_buf()) {
                break;
            }
            up = dir.parent();
        }
    }

    /// Sets directory times last (creating entries in a directory changes its time) and returns the
    /// totals: files created, bytes written, rejections, and how many rejections were not listed.
    pub(crate) fn finish_all(mut self) -> Result<(u64, u64, Vec<Rejected>, u64), ImportError> {
        let times_by_dir = std::mem::take(&mut self.dir_times);
        for (path, mtime) in times_by_dir {
            let Some(name) = path.file_name() else {
                let _ = rfs::futimens(self.root.fd(), &times(mtime));
                continue;
            };
            if let Ok(dir) = self.root.dir(path.parent().unwrap_or(Path::new("")), false) {
                // The directory may since have been removed by a whiteout; that is not an error.
                let _ = rfs::utimensat(&dir, name, &times(mtime), AtFlags::SYMLINK_NOFOLLOW);
            }
        }
        Ok((self.root.created, self.bytes, self.rejected, self.omitted))
    }
}

/// Why a parent directory could not be reached, as a report line or an error.
pub(crate) fn walk_fail(e: WalkError, max_files: u64) -> Fail {
    match e {
        WalkError::Symlink { at, target } => Fail::Reject(format!(
            "goes through the symlink {} -> {}, which could lead outside the image; skipped",
            at.display(),
            lossy(&target)
        )),
        WalkError::NotDir { at } => Fail::Reject(format!("{} is not a directory; skipped", at.display())),
        WalkError::Missing => Fail::Reject("its directory does not exist; skipped".into()),
        WalkError::Limit => Fail::Stop(ImportError::TooManyFiles { limit: max_files }),
        WalkError::Io(e) => Fail::Errno(e),
    }
}

/// Times are cosmetic: one the file system cannot store (far past or future) is not worth refusing the
/// entry over, but a host failure still ends the import.
fn cosmetic(result: Result<(), Errno>) -> Result<(), Errno> {
    match result {
        Err(e) if is_fatal(e) => Err(e),
        _ => Ok(()),
    }
}

fn is_dir_at(dir: &OwnedFd, name: &OsStr) -> Result<bool, Errno> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileType::from_raw_mode(st.st_mode) == FileType::Directory)
}

pub(crate) fn times((sec, nsec): (i64, u32)) -> Timestamps {
    let t = Timespec { tv_sec: sec, tv_nsec: i64::from(nsec.min(999_999_999)) };
    Timestamps { last_access: t, last_modification: t }
}

pub(crate) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
