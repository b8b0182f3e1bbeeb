//! Opening a pool (mounting its image when it has one), making one with `berth storage init`, and taking
//! an image pool down.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_sys::btrfs;
use rustix::fs::{Mode as FileMode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::mounts;
use crate::paths::{AREAS, open_pool};
use crate::{Mode, Pool, PoolInfo, StorageError, quota};

/// Below this mkfs.btrfs refuses (or leaves too little room to be of use).
pub const MIN_POOL_SIZE: u64 = 256 << 20;

const POOL_DIR: &str = "pool";
const POOL_IMAGE: &str = "pool.img";
const POOL_IMAGE_NEW: &str = "pool.img.new";

/// The largest pool a daemon makes by itself (`--storage auto`); `--pool-size` or `berth storage init
/// --size` make a bigger one.
pub const MAX_AUTO_POOL_SIZE: u64 = 512 << 30;

/// The size of the pool a daemon makes by itself on `data_root`: half the free space of the file system that
/// holds it, at most [`MAX_AUTO_POOL_SIZE`]. The image is sparse: it takes host disk only as sandboxes
/// write, and never more than this, whatever they write.
pub fn auto_pool_size(data_root: &Path) -> Result<u64, StorageError> {
    std::fs::create_dir_all(data_root).map_err(StorageError::io("create the data root", data_root))?;
    let st = rustix::fs::statvfs(data_root)
        .map_err(|e| StorageError::io("measure the file system of the data root", data_root)(e.into()))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    Ok((free / 2).min(MAX_AUTO_POOL_SIZE))
}

impl Pool {
    /// Open the pool of a data root, mounting `<root>/pool.img` on `<root>/pool` if it exists and is not
    /// mounted yet. Without an image, the pool is the directory `<root>/pool`, in btrfs mode when it is on
    /// btrfs, in reflink mode when its file system shares data blocks between files, and in copy mode
    /// otherwise. The pool's directories are created (0700).
    pub fn open(data_root: &Path) -> Result<Pool, StorageError> {
        open(data_root, None)
    }

    /// Open the pool of a data root as [`Pool::open`] does, but in `mode` rather than the best one
    /// available: reflink or copy on btrfs, copy on a reflink file system. Asking for a mode the file system
    /// cannot do is an error.
    pub fn open_as(data_root: &Path, mode: Mode) -> Result<Pool, StorageError> {
        open(data_root, Some(mode))
    }

    /// `berth storage init`: make a btrfs pool of `size` bytes in the sparse image `<root>/pool.img`, mount it
    /// on `<root>/pool` (nosuid, nodev) and turn its quotas on.
    ///
    /// The image grows as volumes fill it, up to `size`; the pool is mounted again by [`Pool::open`] after a
    /// reboot. It is refused when the data root is on btrfs already (the pool can live there directly), when
    /// a pool exists, and when the plain directory pool already holds volumes that the mount would hide.
    pub fn init(data_root: &Path, size: u64) -> Result<Pool, StorageError> {
        if size < MIN_POOL_SIZE {
            return Err(StorageError::TooSmall { size, min: MIN_POOL_SIZE });
        }
        std::fs::create_dir_all(data_root).map_err(StorageError::io("create the data root", data_root))?;
        let root_fd = open_dir(data_root, "open the data root")?;
        if btrfs::is_btrfs(root_fd.as_fd()).map_err(StorageError::sys("inspect the data root", data_root))? {
            return Err(StorageError::AlreadyBtrfs { root: data_root.to_path_buf() });
        }
        let pool = data_root.join(POOL_DIR);
        let image = data_root.join(POOL_IMAGE);
        if std::fs::symlink_metadata(&image).is_ok() || mounts::mounted_on(&pool)?.is_some() {
            return Err(StorageError::PoolExists { path: pool, image });
        }
        check_pool_dir_empty(&pool)?;

        let new = data_root.join(POOL_IMAGE_NEW);
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&new).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                StorageError::HalfMade { path: new.clone() }
            } else {
                StorageError::io("create the pool image", &new)(e)
            }
        })?;
        let mut undo = Undo { files: vec![new.clone()], mount: None };
        file.set_len(size).map_err(StorageError::io("size the pool image", &new))?;
        mounts::run(Command::new("mkfs.btrfs").args(["-q", "-L", "berth-pool"]).arg(&new), || {
            StorageError::MissingTool { tool: "mkfs.btrfs", package: "btrfs-progs" }
        })?;
        // Renamed only once formatted, so that a pool image that exists is always a file system; the lock
        // keeps a concurrent open from mounting it before this call has.
        let lock = mounts::lock(file, &new)?;
        rustix::fs::renameat_with(&root_fd, POOL_IMAGE_NEW, &root_fd, POOL_IMAGE, RenameFlags::NOREPLACE).map_err(
            |e| match e {
                Errno::EXIST => StorageError::PoolExists { path: pool.clone(), image: image.clone() },
                e => StorageError::io("put the pool image in place at", &image)(e.into()),
            },
        )?;
        undo.files = vec![image.clone()];
        make_dir(&pool)?;
        mounts::mount_image(&image, &pool)?;
        undo.mount = Some(pool.clone());
        std::fs::set_permissions(&pool, std::fs::Permissions::from_mode(0o700))
            .map_err(StorageError::io("restrict access to the storage pool", &pool))?;
        let pool_fd = open_pool(&pool)?;
        btrfs::enable_quotas(pool_fd.as_fd(), false).map_err(StorageError::sys("enable quotas on", &pool))?;
        drop((pool_fd, lock));
        let opened = open(data_root, None)?;
        undo.files.clear();
        undo.mount = None;
        Ok(opened)
    }

    /// Unmount the image pool of a data root, which frees its loop device. Nothing mounted is not an error;
    /// a mount that is not the data root's pool image is left alone and reported.
    pub fn unmount(data_root: &Path) -> Result<(), StorageError> {
        let pool = data_root.join(POOL_DIR);
        let image = data_root.join(POOL_IMAGE);
        let Some(entry) = mounts::mounted_on(&pool)? else { return Ok(()) };
        if !mounts::is_loop_of(&entry, &image) {
            return Err(StorageError::NotLoopPool { path: pool });
        }
        let _lock = lock_image(&image)?;
        mounts::unmount(&pool)
    }

    /// Size, free space and abilities of the pool.
    pub fn info(&self) -> Result<PoolInfo, StorageError> {
        let fd = self.open_root()?;
        let st = rustix::fs::fstatvfs(&fd)
            .map_err(|e| StorageError::io("measure the storage pool", &self.path)(e.into()))?;
        Ok(PoolInfo {
            mode: self.mode,
            path: self.path.clone(),
            size_bytes: st.f_blocks.saturating_mul(st.f_frsize),
            free_bytes: st.f_bavail.saturating_mul(st.f_frsize),
            quotas: self.quotas_enabled(),
            loop_file: self.loop_file.clone(),
        })
    }

    /// The pool's root directory, checked to still be the file system the pool was opened on.
    pub(crate) fn open_root(&self) -> Result<OwnedFd, StorageError> {
        let fd = open_pool(&self.path)?;
        if self.mode == Mode::Btrfs {
            let fsid = btrfs::is_btrfs(fd.as_fd()).ok().filter(|b| *b).and_then(|_| btrfs::fsid(fd.as_fd()).ok());
            if fsid.is_none() || fsid != self.fsid {
                return Err(StorageError::NotMounted { path: self.path.clone() });
            }
        }
        Ok(fd)
    }
}

fn open(data_root: &Path, wanted: Option<Mode>) -> Result<Pool, StorageError> {
    std::fs::create_dir_all(data_root).map_err(StorageError::io("create the data root", data_root))?;
    let pool = data_root.join(POOL_DIR);
    let image = data_root.join(POOL_IMAGE);
    make_dir(&pool)?;
    let mut loop_file = None;
    match std::fs::symlink_metadata(&image) {
        Ok(meta) if meta.is_file() => {
            let _lock = lock_image(&image)?;
            match mounts::mounted_on(&pool)? {
                Some(entry) => {
                    if mounts::is_loop_of(&entry, &image) {
                        loop_file = Some(image);
                    }
                }
                None => {
                    mounts::mount_image(&image, &pool)?;
                    loop_file = Some(image);
                }
            }
        }
        Ok(_) => {
            return Err(StorageError::InTheWay { path: image, reason: "the pool image must be a regular file" });
        }
        Err(_) => {}
    }
    let fd = open_pool(&pool)?;
    let is_btrfs = btrfs::is_btrfs(fd.as_fd()).map_err(StorageError::sys("inspect the storage pool", &pool))?;
    let best = if is_btrfs {
        Mode::Btrfs
    } else if shares_blocks(fd.as_fd()) {
        Mode::Reflink
    } else {
        Mode::Copy
    };
    let mode = match wanted {
        None => best,
        Some(m) if m == best || m == Mode::Copy || (m == Mode::Reflink && best == Mode::Btrfs) => m,
        Some(m) => {
            return Err(StorageError::Unsupported { path: pool, mode: m, best });
        }
    };
    let fsid = if mode == Mode::Btrfs {
        Some(btrfs::fsid(fd.as_fd()).map_err(StorageError::sys("inspect the storage pool", &pool))?)
    } else {
        None
    };
    for area in AREAS {
        match rustix::fs::mkdirat(&fd, area, FileMode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(StorageError::io("create a directory in the storage pool", pool.join(area))(e.into()));
            }
        }
    }
    Ok(Pool { mode, path: pool, loop_file, fsid })
}

/// Whether the file system of `dir` can share data blocks between files: clone a small unnamed file.
fn shares_blocks(dir: BorrowedFd<'_>) -> bool {
    let tmp = || {
        rustix::fs::openat(dir, ".", OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, FileMode::from_raw_mode(0o600))
    };
    let (Ok(src), Ok(dst)) = (tmp(), tmp()) else { return false };
    let mut src = File::from(src);
    if src.write_all(&[0u8; 4096]).is_err() {
        return false;
    }
    btrfs::reflink(dst.as_fd(), src.as_fd()).is_ok()
}

fn open_dir(path: &Path, action: &'static str) -> Result<OwnedFd, StorageError> {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FileMode::empty())
        .map_err(|e| StorageError::io(action, path)(e.into()))
}

/// Create the pool directory (0700) unless it exists; it must be a directory, not a symlink.
fn make_dir(pool: &Path) -> Result<(), StorageError> {
    match std::fs::symlink_metadata(pool) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(StorageError::InTheWay { path: pool.to_path_buf(), reason: "the pool must be a directory" }),
        Err(_) => match std::fs::DirBuilder::new().mode(0o700).create(pool) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StorageError::io("create the storage pool directory", pool)(e)),
        },
    }
}

/// A new pool would be mounted over the directory pool; refuse if that hides volumes.
fn check_pool_dir_empty(pool: &Path) -> Result<(), StorageError> {
    let Ok(entries) = std::fs::read_dir(pool) else { return Ok(()) };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_area = AREAS.iter().any(|a| name == *a);
        let empty_area = is_area && std::fs::read_dir(entry.path()).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty_area {
            return Err(StorageError::PoolNotEmpty { path: pool.to_path_buf() });
        }
    }
    Ok(())
}

fn lock_image(image: &Path) -> Result<mounts::ImageLock, StorageError> {
    let file = File::open(image).map_err(StorageError::io("open the pool image", image))?;
    mounts::lock(file, image)
}

/// What a failed `init` must take back.
struct Undo {
    files: Vec<PathBuf>,
    mount: Option<PathBuf>,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            let _ = mounts::unmount(m);
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Pool {
    /// Whether qgroups are on for the pool's btrfs file system.
    pub(crate) fn quotas_enabled(&self) -> bool {
        self.fsid.is_some_and(|id| quota::enabled(&id))
    }
}
