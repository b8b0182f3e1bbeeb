//! Clones as copies (sharing data blocks where the file system can), made by `cp -a`.
//!
//! GNU cp already keeps everything a volume needs (numeric owners, setuid bits, timestamps, every xattr
//! namespace root can read, hard links, devices, symlinks as symlinks) and shares blocks with
//! `--reflink=auto`. The copy is made under a hidden name and renamed into place, so a volume that exists is
//! always complete.

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, RenameFlags};
use rustix::io::Errno;

use crate::paths::Place;
use crate::{StorageError, mounts, walk};

static COPIES: AtomicU64 = AtomicU64::new(0);

pub(crate) fn clone(src: &Place, dst: &Place) -> Result<(), StorageError> {
    if rustix::fs::statat(dst.parent.as_fd(), dst.name(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        return Err(StorageError::Exists { path: dst.path.clone() });
    }
    let tmp = format!(".partial-{}-{}", std::process::id(), COPIES.fetch_add(1, Ordering::Relaxed));
    let tmp_path = dst.path.with_file_name(&tmp);
    let copied = mounts::run(
        Command::new("cp")
            .args(["-a", "--preserve=xattr", "--reflink=auto", "--no-target-directory", "--"])
            .arg(&src.path)
            .arg(&tmp_path),
        || StorageError::MissingTool { tool: "cp", package: "coreutils" },
    );
    let placed = copied.and_then(|()| {
        rustix::fs::renameat_with(&dst.parent, &tmp, &dst.parent, dst.name(), RenameFlags::NOREPLACE).map_err(|e| {
            match e {
                Errno::EXIST => StorageError::Exists { path: dst.path.clone() },
                e => StorageError::io("put the copied volume in place at", &dst.path)(e.into()),
            }
        })
    });
    if placed.is_err() {
        let _ = walk::remove_tree(&dst.parent, tmp.as_ref(), &tmp_path, false);
    }
    placed
}
