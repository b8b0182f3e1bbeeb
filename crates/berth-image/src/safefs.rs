//! File system operations that cannot be redirected outside a directory.
//!
//! Everything the import writes goes through [`Root`], which holds a descriptor for the destination and
//! reaches a parent directory either with one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` or, where
//! that is refused, component by component with `O_NOFOLLOW`. A symlink anywhere on the way is an error,
//! never a detour: an archive that plants `evil -> /etc` and then writes `evil/passwd` gets the second entry
//! rejected. The last component is always acted on with a `*at` call on the parent descriptor and flags that
//! do not follow it (`O_NOFOLLOW`, `O_EXCL`, `AT_SYMLINK_NOFOLLOW`).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Flags for a directory that is only a place to resolve names from.
const PATH_DIR: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);
/// Flags for a directory whose entries, owner, mode or xattrs are read or changed.
pub(crate) const READ_DIR: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Why a parent directory could not be reached.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// `at` (relative to the root) is a symlink; following it could lead anywhere.
    Symlink {
        at: PathBuf,
        target: Vec<u8>,
    },
    /// `at` exists but is not a directory.
    NotDir {
        at: PathBuf,
    },
    /// A component does not exist and was not to be created.
    Missing,
    /// Creating a missing directory would exceed the file limit.
    Limit,
    Io(Errno),
}

/// The destination directory, with a budget of entries it may still create.
pub(crate) struct Root {
    fd: Rc<OwnedFd>,
    shift: u32,
    /// The last parent reached, since archives list a directory's entries together.
    cache: Option<(PathBuf, Rc<OwnedFd>)>,
    use_openat2: bool,
    /// Entries created so far (including directories created implicitly).
    pub(crate) created: u64,
    pub(crate) max_files: u64,
}

impl Root {
    pub(crate) fn new(fd: OwnedFd, shift: u32, max_files: u64) -> Self {
        Root { fd: Rc::new(fd), shift, cache: None, use_openat2: true, created: 0, max_files }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Counts one more created entry, or refuses when the budget is spent.
    pub(crate) fn take_one(&mut self) -> Result<(), WalkError> {
        if self.created >= self.max_files {
            return Err(WalkError::Limit);
        }
        self.created += 1;
        Ok(())
    }

    /// Drops the cached parent; called whenever a directory is removed, since the cache could point into it.
    pub(crate) fn forget(&mut self) {
        self.cache = None;
    }

    /// A descriptor for the directory `rel` (relative, already free of `.`, `..` and empty components).
    /// With `create`, missing directories are made 0755 and owned by the image's root.
    pub(crate) fn dir(&mut self, rel: &Path, create: bool) -> Result<Rc<OwnedFd>, WalkError> {
        if rel.as_os_str().is_empty() {
            return Ok(self.fd.clone());
        }
        if let Some((path, fd)) = &self.cache
            && path == rel
        {
            return Ok(fd.clone());
        }
        let fd = match self.fast(rel) {
            Some(fd) => fd,
            None => self.slow(rel, create)?,
        };
        let fd = Rc::new(fd);
        self.cache = Some((rel.to_path_buf(), fd.clone()));
        Ok(fd)
    }

    /// One `openat2` that fails on any symlink; `None` sends the caller to the slow walk, which also works
    /// out why it failed.
    fn fast(&mut self, rel: &Path) -> Option<OwnedFd> {
        if !self.use_openat2 {
            return None;
        }
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rfs::openat2(self.fd.as_fd(), rel, PATH_DIR, Mode::empty(), how) {
            Ok(fd) => Some(fd),
            Err(Errno::NOSYS | Errno::PERM) => {
                self.use_openat2 = false;
                None
            }
            Err(_) => None,
        }
    }

    fn slow(&mut self, rel: &Path, create: bool) -> Result<OwnedFd, WalkError> {
        let mut cur: Option<OwnedFd> = None;
        let mut at = PathBuf::new();
        for comp in rel.components() {
            let Component::Normal(name) = comp else { return Err(WalkError::Io(Errno::INVAL)) };
            at.push(name);
            let parent = cur.as_ref().map_or(self.fd.as_fd(), |f| f.as_fd());
            let next = match rfs::openat(parent, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            {
                Ok(fd) => {
                    let st = rfs::fstat(&fd).map_err(WalkError::Io)?;
                    match FileType::from_raw_mode(st.st_mode) {
                        FileType::Directory => fd,
                        FileType::Symlink => {
                            let target = rfs::readlinkat(parent, name, Vec::new()).map_err(WalkError::Io)?;
                            return Err(WalkError::Symlink { at, target: target.into_bytes() });
                        }
                        _ => return Err(WalkError::NotDir { at }),
                    }
                }
                Err(Errno::NOENT) if create => {
                    if self.created >= self.max_files {
                        return Err(WalkError::Limit);
                    }
                    match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(WalkError::Io(e)),
                    }
                    self.created += 1;
                    let fd = rfs::openat(parent, name, READ_DIR, Mode::empty()).map_err(WalkError::Io)?;
                    set_owner(&fd, self.shift, self.shift).map_err(WalkError::Io)?;
                    rfs::fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(WalkError::Io)?;
                    fd
                }
                Err(Errno::NOENT) => return Err(WalkError::Missing),
                Err(e) => return Err(WalkError::Io(e)),
            };
            cur = Some(next);
        }
        cur.ok_or(WalkError::Io(Errno::INVAL))
    }
}

/// `fchown` to host ids.
pub(crate) fn set_owner(fd: impl AsFd, uid: u32, gid: u32) -> Result<(), Errno> {
    rfs::fchown(fd, Some(rfs::Uid::from_raw(uid)), Some(rfs::Gid::from_raw(gid)))
}

/// `fchownat(AT_SYMLINK_NOFOLLOW)`, for symlinks, which have no descriptor to change through.
pub(crate) fn set_owner_at(dir: impl AsFd, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno> {
    let ids = (Some(rfs::Uid::from_raw(uid)), Some(rfs::Gid::from_raw(gid)));
    rfs::chownat(dir, name, ids.0, ids.1, AtFlags::SYMLINK_NOFOLLOW)
}

/// Removes `name` in `parent` whatever it is; a directory goes with everything under it. Returns whether
/// anything was there, and whether it was a directory.
pub(crate) fn remove_any(parent: BorrowedFd<'_>, name: &OsStr) -> Result<Option<bool>, Errno> {
    let st = match rfs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        remove_tree(parent, name)?;
        Ok(Some(true))
    } else {
        rfs::unlinkat(parent, name, AtFlags::empty())?;
        Ok(Some(false))
    }
}

/// Removes the directory `name` in `parent` and everything under it without following any symlink. It walks
/// down with `O_NOFOLLOW` and back up with `..`, holding at most three descriptors however deep the tree,
/// and does not recurse, so a hostile depth can neither exhaust descriptors nor the stack.
pub(crate) fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    let mut cur = rfs::openat(parent, name, READ_DIR, Mode::empty())?;
    let mut names: Vec<OsString> = Vec::new();
    loop {
        let mut subdir = None;
        for entry in Dir::read_from(&cur)? {
            let entry = entry?;
            let child = OsStr::from_bytes(entry.file_name().to_bytes());
            if child == "." || child == ".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => {
                    FileType::from_raw_mode(rfs::statat(&cur, child, AtFlags::SYMLINK_NOFOLLOW)?.st_mode)
                        == FileType::Directory
                }
                _ => false,
            };
            if is_dir {
                subdir = Some(child.to_os_string());
                break;
            }
            rfs::unlinkat(&cur, child, AtFlags::empty())?;
        }
        if let Some(sub) = subdir {
            cur = rfs::openat(&cur, &sub, READ_DIR, Mode::empty())?;
            names.push(sub);
            continue;
        }
        match names.pop() {
            None => {
                drop(cur);
                return rfs::unlinkat(parent, name, AtFlags::REMOVEDIR);
            }
            Some(done) => {
                let up = rfs::openat(&cur, "..", READ_DIR, Mode::empty())?;
                drop(cur);
                rfs::unlinkat(&up, &done, AtFlags::REMOVEDIR)?;
                cur = up;
            }
        }
    }
}

/// The names in a directory (without `.` and `..`), sorted so results do not depend on the file system.
pub(crate) fn list(dir: BorrowedFd<'_>) -> Result<Vec<OsString>, Errno> {
    let fd = rfs::openat(dir, ".", READ_DIR, Mode::empty())?;
    let mut names = Vec::new();
    for entry in Dir::new(fd)? {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Opens `path` under `base` as if `base` were `/`: symlinks are followed but can never leave `base`, the
/// semantics of `RESOLVE_IN_ROOT`, done in user space so it also works where `openat2` is unavailable. Used
/// to read image layouts, whose shared layers are sometimes symlinks to each other.
pub(crate) fn open_in_root(base: BorrowedFd<'_>, path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let mut todo: Vec<OsString> = path.components().rev().filter_map(normal_or_up).collect();
    let mut done: Vec<OsString> = Vec::new();
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            done.pop();
            continue;
        }
        let parent = walk_nofollow(base, &done)?;
        let parent = parent.as_ref().map_or(base, |f| f.as_fd());
        let st = rfs::statat(parent, &name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            hops += 1;
            if hops > 40 {
                return Err(Errno::LOOP.into());
            }
            let target = rfs::readlinkat(parent, &name, Vec::new())?;
            let target = Path::new(OsStr::from_bytes(target.to_bytes()));
            if target.is_absolute() {
                done.clear();
            }
            todo.extend(target.components().rev().filter_map(normal_or_up));
            continue;
        }
        done.push(name);
    }
    let last = done.pop();
    let parent = walk_nofollow(base, &done)?;
    let parent = parent.as_ref().map_or(base, |f| f.as_fd());
    match last {
        Some(name) => Ok(rfs::openat(parent, &name, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?),
        None => Ok(rfs::openat(parent, ".", flags | OFlags::CLOEXEC, Mode::empty())?),
    }
}

/// Opens the directory `names` under `base`, refusing symlinks at every step (`None` means `base` itself).
pub(crate) fn walk_nofollow(base: BorrowedFd<'_>, names: &[OsString]) -> io::Result<Option<OwnedFd>> {
    let mut cur: Option<OwnedFd> = None;
    for name in names {
        let parent = cur.as_ref().map_or(base, |f| f.as_fd());
        cur = Some(rfs::openat(parent, name, READ_DIR, Mode::empty())?);
    }
    Ok(cur)
}

fn normal_or_up(c: Component<'_>) -> Option<OsString> {
    match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some("..".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn root(dir: &Path, openat2: bool) -> Root {
        let fd = rfs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut root = Root::new(fd, 0, 1000);
        root.use_openat2 = openat2;
        root
    }

    #[test]
    fn both_walks_create_and_refuse_alike() {
        for openat2 in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink("/", tmp.path().join("s")).unwrap();
            std::fs::write(tmp.path().join("f"), "").unwrap();
            let mut r = root(tmp.path(), openat2);
            r.dir(Path::new("a/b"), true).unwrap();
            assert!(tmp.path().join("a/b").is_dir());
            assert_eq!(r.created, 2);
            match r.dir(Path::new("s/x"), true) {
                Err(WalkError::Symlink { at, target }) => assert_eq!((at, target), (PathBuf::from("s"), b"/".to_vec())),
                other => panic!("{other:?}"),
            }
            assert!(matches!(r.dir(Path::new("f/x"), true), Err(WalkError::NotDir { .. })));
            assert!(matches!(r.dir(Path::new("m/n"), false), Err(WalkError::Missing)));
        }
    }

    #[test]
    fn remove_tree_handles_depth_and_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "").unwrap();
        let deep: PathBuf = (0..300).map(|_| "d").collect();
        std::fs::create_dir_all(tmp.path().join("t").join(&deep)).unwrap();
        std::fs::write(tmp.path().join("t").join(&deep).join("f"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("t/d/link")).unwrap();
        let base = rfs::open(tmp.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        remove_tree(base.as_fd(), OsStr::new("t")).unwrap();
        assert!(!tmp.path().join("t").exists());
        assert!(outside.path().join("keep").exists());
    }

    #[test]
    fn open_in_root_keeps_symlinks_inside() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("etc")).unwrap();
        std::fs::write(tmp.path().join("etc/hostname"), "inside").unwrap();
        std::os::unix::fs::symlink("../../../../etc", tmp.path().join("up")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", tmp.path().join("abs")).unwrap();
        let base = rfs::open(tmp.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for name in ["up/hostname", "abs", "../etc/hostname"] {
            let fd = open_in_root(base.as_fd(), Path::new(name), OFlags::RDONLY).unwrap();
            let text = std::io::read_to_string(std::fs::File::from(fd)).unwrap();
            assert_eq!(text, "inside", "{name}");
        }
    }
}
