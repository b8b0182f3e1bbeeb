//! Removing a tree of files that a sandbox wrote: never following a symlink, never crossing into another
//! mount, deleting btrfs subvolumes found on the way whole.
//!
//! The walk keeps its place in a stack of open directories rather than in recursion, so a tree of any depth
//! cannot overflow the caller's stack; a tree deeper than the open-file limit falls back to `rm`.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_sys::btrfs::{self, SUBVOLUME_ROOT_INO};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::{StorageError, mounts};

/// A directory being emptied.
struct Frame {
    dir: Dir,
    name: OsString,
    dev: u64,
    subvolume: bool,
    /// How many times it was read to the end; entries added meanwhile need another pass.
    passes: u8,
}

/// Remove `name` in `parent` and everything below it. Missing is not an error. With `on_btrfs`, directories
/// that are subvolume roots are deleted with the destroy ioctl (read-only ones too).
pub(crate) fn remove_tree(parent: &OwnedFd, name: &OsStr, shown: &Path, on_btrfs: bool) -> Result<(), StorageError> {
    match remove_walk(parent, name, shown, on_btrfs) {
        Err(Walk::TooDeep) => {
            mounts::run(Command::new("rm").args(["-rf", "--one-file-system", "--"]).arg(shown), || {
                StorageError::MissingTool { tool: "rm", package: "coreutils" }
            })
        }
        Err(Walk::Failed(e)) => Err(e),
        Ok(()) => Ok(()),
    }
}

enum Walk {
    TooDeep,
    Failed(StorageError),
}

fn remove_walk(parent: &OwnedFd, name: &OsStr, shown: &Path, on_btrfs: bool) -> Result<(), Walk> {
    let fail = |action: &'static str, at: PathBuf| {
        move |e: Errno| match e {
            Errno::MFILE | Errno::NFILE => Walk::TooDeep,
            e => Walk::Failed(StorageError::io(action, at)(e.into())),
        }
    };
    let Some(first) = enter(parent.as_fd(), name, on_btrfs, u64::MAX).map_err(fail("remove", shown.to_path_buf()))?
    else {
        return Ok(());
    };
    let mut stack = vec![first];
    while let Some(top) = stack.last_mut() {
        match top.dir.read() {
            Some(entry) => {
                let entry = entry.map_err(fail("read the directory", here(shown, &stack, None)))?;
                let child = OsStr::from_bytes(entry.file_name().to_bytes());
                if child == "." || child == ".." {
                    continue;
                }
                let Some(top) = stack.last() else { break };
                let dir_fd = top.dir.fd().map_err(fail("read the directory", here(shown, &stack, None)))?;
                match enter(dir_fd, child, on_btrfs, top.dev) {
                    Ok(Some(frame)) => stack.push(frame),
                    Ok(None) => {}
                    Err(e) => return Err(fail("remove", here(shown, &stack, Some(child)))(e)),
                }
            }
            None => {
                let Some(mut done) = stack.pop() else { break };
                let up = match stack.last() {
                    Some(f) => f.dir.fd().map_err(fail("read the directory", here(shown, &stack, None)))?,
                    None => parent.as_fd(),
                };
                let result = if done.subvolume {
                    btrfs::destroy_subvolume(up, &done.name).map_err(errno)
                } else {
                    rustix::fs::unlinkat(up, &done.name, AtFlags::REMOVEDIR)
                };
                match result {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(Errno::NOTEMPTY) if done.passes < 3 => {
                        done.passes += 1;
                        done.dir.rewind();
                        stack.push(done);
                    }
                    Err(e) => return Err(fail("remove", here(shown, &stack, Some(&done.name)))(e)),
                }
            }
        }
    }
    Ok(())
}

fn errno(e: berth_sys::SysError) -> Errno {
    Errno::from_raw_os_error(e.errno().unwrap_or(Errno::IO.raw_os_error()))
}

/// Remove `name` in `dir` if it can go at once (a file, a symlink, a subvolume without subvolumes in it);
/// otherwise open it for emptying.
fn enter(dir: BorrowedFd<'_>, name: &OsStr, on_btrfs: bool, parent_dev: u64) -> Result<Option<Frame>, Errno> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e),
        };
    }
    let subvolume = on_btrfs && st.st_ino == SUBVOLUME_ROOT_INO;
    if subvolume {
        match btrfs::destroy_subvolume(dir, name) {
            Ok(()) => return Ok(None),
            Err(e) if e.errno() == Some(Errno::NOENT.raw_os_error()) => return Ok(None),
            Err(e) if e.errno() == Some(Errno::NOTEMPTY.raw_os_error()) => {}
            Err(e) => return Err(errno(e)),
        }
    } else if parent_dev != u64::MAX && st.st_dev != parent_dev {
        // Another file system is mounted here; removing through it would reach what is not the volume's.
        return Err(Errno::BUSY);
    }
    let fd: OwnedFd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if subvolume && btrfs::is_readonly(fd.as_fd()).unwrap_or(false) {
        btrfs::set_readonly(fd.as_fd(), false).map_err(errno)?;
    }
    let dir = Dir::new(fd)?;
    Ok(Some(Frame { dir, name: name.to_os_string(), dev: st.st_dev, subvolume, passes: 0 }))
}

/// The path of the entry being worked on, for messages.
fn here(shown: &Path, stack: &[Frame], child: Option<&OsStr>) -> PathBuf {
    let mut p = shown.to_path_buf();
    for f in stack.iter().skip(1) {
        p.push(&f.name);
    }
    if let Some(c) = child {
        p.push(c);
    }
    p
}
