//! The pool image: finding out what is mounted on the pool directory, mounting, unmounting, and the lock
//! that keeps two processes from mounting one image twice.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::fs::FlockOperation;
use rustix::io::Errno;

use crate::StorageError;

/// A mount as /proc/self/mountinfo describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub fstype: String,
    pub source: String,
}

/// What is mounted on `dir` (the top-most mount if several are stacked), if anything.
pub(crate) fn mounted_on(dir: &Path) -> Result<Option<MountEntry>, StorageError> {
    let Ok(dir) = std::fs::canonicalize(dir) else { return Ok(None) };
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(StorageError::io("read the mount table", "/proc/self/mountinfo"))?;
    Ok(find_mount(&table, &dir))
}

fn find_mount(table: &str, dir: &Path) -> Option<MountEntry> {
    // The last mount on a path covers the earlier ones.
    berth_sys::mountinfo::parse(table)
        .into_iter()
        .rfind(|m| m.mount_point == dir)
        .map(|m| MountEntry { fstype: m.fstype, source: m.source })
}

/// Whether `entry` is a loop device whose backing file is `image`.
pub(crate) fn is_loop_of(entry: &MountEntry, image: &Path) -> bool {
    let Some(dev) = entry.source.strip_prefix("/dev/") else { return false };
    if !dev.starts_with("loop") || dev.contains('/') {
        return false;
    }
    let Ok(backing) = std::fs::read_to_string(format!("/sys/block/{dev}/loop/backing_file")) else { return false };
    let Ok(image) = std::fs::canonicalize(image) else { return false };
    Path::new(backing.trim_end_matches('\n')) == image
}

/// Mount the btrfs image `image` on `target` through a loop device that is freed when it is unmounted.
///
/// util-linux's mount sets up the loop device with autoclear, so unmounting is all the teardown there is.
pub(crate) fn mount_image(image: &Path, target: &Path) -> Result<(), StorageError> {
    run(Command::new("mount").args(["-t", "btrfs", "-o", "loop,nosuid,nodev,noatime"]).arg(image).arg(target), || {
        StorageError::MissingTool { tool: "mount", package: "mount" }
    })
}

/// Unmount the pool at `target`.
pub(crate) fn unmount(target: &Path) -> Result<(), StorageError> {
    match rustix::mount::unmount(target, rustix::mount::UnmountFlags::empty()) {
        Ok(()) | Err(Errno::INVAL | Errno::NOENT) => Ok(()),
        Err(Errno::BUSY) => Err(StorageError::Busy { path: target.to_path_buf() }),
        Err(e) => Err(StorageError::io("unmount the storage pool", target)(e.into())),
    }
}

/// Run a command to completion; a failure carries its stderr, a missing program `missing()`.
pub(crate) fn run(cmd: &mut Command, missing: impl FnOnce() -> StorageError) -> Result<(), StorageError> {
    run_output(cmd, missing).map(drop)
}

/// Run a command to completion and return its stdout.
pub(crate) fn run_output(cmd: &mut Command, missing: impl FnOnce() -> StorageError) -> Result<String, StorageError> {
    let shown = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
    );
    // The tool ends with the daemon: a crashed daemon's copy does not go on behind the next one's clean-up.
    berth_sys::process::end_with_caller(cmd);
    let out = match cmd.stdin(std::process::Stdio::null()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(StorageError::io("run", PathBuf::from(shown))(e)),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(StorageError::Command {
            command: shown,
            status: out.status.to_string(),
            stderr: stderr.trim().lines().collect::<Vec<_>>().join("; "),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An exclusive lock on the pool image, held while it is checked and mounted or unmounted.
#[derive(Debug)]
pub(crate) struct ImageLock {
    _file: File,
}

pub(crate) fn lock(file: File, path: &Path) -> Result<ImageLock, StorageError> {
    rustix::fs::flock(file.as_fd(), FlockOperation::LockExclusive)
        .map_err(|e| StorageError::io("lock the pool image", path)(e.into()))?;
    Ok(ImageLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_and_unescaped() {
        let table = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:50 / /var/lib/my\\040root/pool rw,nosuid,nodev,noatime shared:50 - btrfs /dev/loop3 rw,space_cache=v2
91 90 0:51 / /var/lib/my\\040root/pool rw - tmpfs tmpfs rw
";
        let dir = Path::new("/var/lib/my root/pool");
        let found = find_mount(table, dir);
        assert_eq!(found, Some(MountEntry { fstype: "tmpfs".into(), source: "tmpfs".into() }));
        let first = find_mount(&table.lines().take(2).collect::<Vec<_>>().join("\n"), dir);
        assert_eq!(first, Some(MountEntry { fstype: "btrfs".into(), source: "/dev/loop3".into() }));
        assert_eq!(find_mount(table, Path::new("/var/lib")), None);
    }
}
