//! Pools in temporary directories, and a tree of files with everything a clone must keep.
#![allow(clippy::unwrap_used, dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use berth_storage::Pool;
use rustix::fs::{AtFlags, CWD, FileType, Mode, Timespec, Timestamps};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

/// A host id as sandboxes have them: 0x6f000000 + N.
pub const SHIFTED: u32 = 0x6f00_0000;

/// Fail, with the reason, unless these tests can run here: they need root for loop devices and mounts, and
/// a test that could not run must not pass.
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests need root (for loop devices and mounts); run them as root"
    );
}

/// A btrfs pool made by `Pool::init` in a temporary data root, unmounted when dropped (even on panic).
pub struct TestPool {
    pub pool: Pool,
    pub root: tempfile::TempDir,
}

impl TestPool {
    pub fn new(size: u64) -> TestPool {
        let root = tempfile::tempdir().unwrap();
        let pool = Pool::init(root.path(), size).unwrap();
        TestPool { pool, root }
    }

    pub fn at(&self, rel: &str) -> PathBuf {
        self.pool.path().join(rel)
    }
}

impl Drop for TestPool {
    fn drop(&mut self) {
        unmount_hard(&self.root.path().join("pool"));
    }
}

/// Unmount whatever a test mounted; lazily if a panicking test left files open.
pub fn unmount_hard(path: &Path) {
    for _ in 0..3 {
        if rustix::mount::unmount(path, rustix::mount::UnmountFlags::empty()).is_err() {
            break;
        }
    }
    let _ = rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH);
}

/// A tmpfs mounted on a temporary directory, for a data root that is neither btrfs nor reflink-capable.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn new() -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        rustix::mount::mount("tmpfs", dir.path(), "tmpfs", rustix::mount::MountFlags::empty(), Some(c"size=64m"))
            .unwrap();
        Tmpfs { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Pool::unmount(self.dir.path());
        unmount_hard(self.dir.path());
    }
}

fn set_mtime(path: &Path, secs: u64, nanos: u32) {
    let t = Timespec { tv_sec: secs as i64, tv_nsec: nanos as _ };
    let times = Timestamps { last_access: t, last_modification: t };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// Fill `dir` with what sandbox state holds: shifted owners, setuid bits, overlay xattrs, whiteouts,
/// symlinks (one to a host path that must not be followed), hard links, a 0000 directory.
pub fn populate(dir: &Path) {
    let id = |n| SHIFTED + n;
    fs::create_dir_all(dir.join("upper/etc")).unwrap();
    fs::write(dir.join("upper/etc/hosts"), b"1.2.3.4 x\n").unwrap();
    std::os::unix::fs::chown(dir.join("upper/etc/hosts"), Some(id(0)), Some(id(0))).unwrap();
    fs::write(dir.join("upper/su"), b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(dir.join("upper/su"), Some(id(0)), Some(id(4))).unwrap();
    fs::set_permissions(dir.join("upper/su"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::create_dir(dir.join("upper/tmp")).unwrap();
    fs::set_permissions(dir.join("upper/tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::create_dir(dir.join("upper/home")).unwrap();
    std::os::unix::fs::chown(dir.join("upper/home"), Some(id(1000)), Some(id(1000))).unwrap();
    rustix::fs::lsetxattr(dir.join("upper/home"), "trusted.overlay.opaque", b"y", rustix::fs::XattrFlags::empty())
        .unwrap();
    rustix::fs::lsetxattr(dir.join("upper/home"), "user.overlay.opaque", b"y", rustix::fs::XattrFlags::empty())
        .unwrap();
    rustix::fs::lsetxattr(dir.join("upper/etc/hosts"), "user.note", b"\x00bin\xff", rustix::fs::XattrFlags::empty())
        .unwrap();
    // An overlayfs whiteout: a character device 0:0.
    rustix::fs::mknodat(CWD, dir.join("upper/etc/passwd"), FileType::CharacterDevice, Mode::empty(), 0).unwrap();
    std::os::unix::fs::lchown(dir.join("upper/etc/passwd"), Some(id(0)), Some(id(0))).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", dir.join("upper/escape")).unwrap();
    std::os::unix::fs::lchown(dir.join("upper/escape"), Some(id(7)), Some(id(7))).unwrap();
    std::os::unix::fs::symlink("../nowhere", dir.join("upper/dangling")).unwrap();
    fs::write(dir.join("upper/a"), vec![7u8; 100_000]).unwrap();
    fs::hard_link(dir.join("upper/a"), dir.join("upper/a-link")).unwrap();
    fs::create_dir_all(dir.join("work/work")).unwrap();
    fs::set_permissions(dir.join("work/work"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::create_dir(dir.join("workspace")).unwrap();
    fs::write(dir.join("workspace/big"), vec![1u8; 3 << 20]).unwrap();
    set_mtime(&dir.join("upper/etc/hosts"), 1_000_000_000, 123_456_789);
    set_mtime(&dir.join("upper/escape"), 1_100_000_000, 5);
    set_mtime(&dir.join("upper/etc"), 1_200_000_000, 0);
}

fn kind_of(ft: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if ft.is_dir() => "dir",
        _ if ft.is_file() => "file",
        _ if ft.is_symlink() => "symlink",
        _ if ft.is_char_device() => "char",
        _ if ft.is_block_device() => "block",
        _ if ft.is_fifo() => "fifo",
        _ => "socket",
    }
}

/// Everything a clone must keep about one entry.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    kind: String,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    rdev: u64,
    /// Length and FNV-1a hash of a regular file's content.
    content: (usize, u64),
    link: Option<PathBuf>,
    xattrs: BTreeMap<String, Vec<u8>>,
    /// Every path of the same inode, for hard links.
    links: Vec<PathBuf>,
}

/// Every entry of a tree by relative path, the root included.
pub fn snapshot_tree(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path).unwrap();
        let ft = meta.file_type();
        let kind = kind_of(&ft).to_string();
        if ft.is_dir() {
            for e in fs::read_dir(&path).unwrap() {
                todo.push(rel.join(e.unwrap().file_name()));
            }
        }
        if meta.nlink() > 1 && !ft.is_dir() {
            inodes.entry(meta.ino()).or_default().push(rel.clone());
        }
        let mut xattrs = BTreeMap::new();
        let mut names = vec![0u8; 4096];
        let n = rustix::fs::llistxattr(&path, &mut names[..]).unwrap();
        for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let name = String::from_utf8_lossy(name).into_owned();
            let mut value = vec![0u8; 4096];
            let len = rustix::fs::lgetxattr(&path, name.as_str(), &mut value[..]).unwrap();
            value.truncate(len);
            xattrs.insert(name, value);
        }
        out.insert(
            rel.clone(),
            Entry {
                kind,
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                mtime: if ft.is_dir() && rel.as_os_str().is_empty() {
                    (0, 0)
                } else {
                    (meta.mtime(), meta.mtime_nsec())
                },
                rdev: meta.rdev(),
                content: if ft.is_file() { digest(&fs::read(&path).unwrap()) } else { (0, 0) },
                link: ft.is_symlink().then(|| fs::read_link(&path).unwrap()),
                xattrs,
                links: Vec::new(),
            },
        );
    }
    for mut paths in inodes.into_values() {
        paths.sort();
        for p in &paths {
            if let Some(e) = out.get_mut(p) {
                e.links = paths.clone();
            }
        }
    }
    out
}

fn digest(data: &[u8]) -> (usize, u64) {
    let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
    (data.len(), hash)
}

/// Assert that `dst` is an exact copy of `src`.
pub fn assert_same_tree(src: &Path, dst: &Path) {
    let a = snapshot_tree(src);
    let b = snapshot_tree(dst);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (path, entry) in &a {
        assert_eq!(Some(entry), b.get(path), "{}", path.display());
    }
    // Spot checks, so that a bug in the comparison cannot hide everything.
    let su = &b[Path::new("upper/su")];
    assert_eq!((su.mode & 0o7777, su.uid, su.gid), (0o4755, SHIFTED, SHIFTED + 4));
    let wh = &b[Path::new("upper/etc/passwd")];
    assert_eq!((wh.kind.as_str(), wh.rdev), ("char", 0));
    assert_eq!(b[Path::new("upper/escape")].link.as_deref(), Some(Path::new("/etc/shadow")));
    assert_eq!(b[Path::new("upper/home")].xattrs.get("trusted.overlay.opaque").map(Vec::as_slice), Some(&b"y"[..]));
    assert_eq!(b[Path::new("upper/etc/hosts")].mtime, (1_000_000_000, 123_456_789));
    assert_eq!(b[Path::new("upper/a-link")].links.len(), 2);
}

/// Write `total` bytes to a new file in 1 MiB chunks; the bytes written before an error, and the error.
pub fn fill(path: &Path, total: u64) -> (u64, Option<std::io::Error>) {
    use std::io::Write;
    let mut f = fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; MIB as usize];
    let mut written = 0;
    while written < total {
        if let Err(e) = f.write_all(&chunk) {
            return (written, Some(e));
        }
        written += MIB;
    }
    match f.sync_all() {
        Ok(()) => (written, None),
        Err(e) => (written, Some(e)),
    }
}

pub fn elapsed_ms(since: SystemTime) -> f64 {
    since.elapsed().unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0
}
