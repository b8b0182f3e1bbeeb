//! Claims on a sandbox's id (its lock files, held for its whole life) and undoing a half-made sandbox.

use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::RuntimeError;
use crate::cgroup::{Cgroup, Hierarchy};
use crate::ids::STORAGE_BASE;
use crate::sandbox::LIVE_DIR;
use crate::spec;

/// Create and lock `<dir>/<id>.lock`. It is locked under a name sweeps ignore and then renamed into place
/// (the lock goes with the file), so a sweep never sees an unlocked claim of a sandbox being built.
pub(crate) fn claim(dir: &Path, id: &str) -> Result<(File, PathBuf), RuntimeError> {
    let path = dir.join(format!("{id}.lock"));
    // Made under a name of this process's own, locked, then renamed into place: no other maker can see it
    // unlocked. One left by a maker that died at that moment (its pid reused since) is this one's to remove.
    let fresh = dir.join(format!("{id}.lock.new.{}", std::process::id()));
    fs::create_dir_all(dir).map_err(|source| RuntimeError::PrepareSandbox { source })?;
    // Where the file system can, the file is made without a name and locked before it gets one, so that no
    // name of it is ever unlocked while its maker lives (whatever a sweep in another pid namespace thinks
    // of the maker's pid).
    if let Some(file) = locked_unnamed(dir) {
        let _ = fs::remove_file(&fresh);
        let named = rustix::fs::linkat(&file, "", rustix::fs::CWD, &fresh, rustix::fs::AtFlags::EMPTY_PATH)
            .or_else(|_| {
                let by_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
                rustix::fs::linkat(
                    rustix::fs::CWD,
                    by_fd.as_str(),
                    rustix::fs::CWD,
                    &fresh,
                    rustix::fs::AtFlags::SYMLINK_FOLLOW,
                )
            })
            .and_then(|()| rustix::fs::rename(&fresh, &path));
        if named.is_ok() {
            return Ok((file, path));
        }
        let _ = fs::remove_file(&fresh);
    }
    let open = || File::options().create_new(true).write(true).open(&fresh);
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = fs::remove_file(&fresh);
            open()
        }
        other => other,
    }
    .map_err(|source| RuntimeError::PrepareSandbox { source })?;
    rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)
        .and_then(|()| rustix::fs::rename(&fresh, &path))
        .map_err(|e| {
            let _ = fs::remove_file(&fresh);
            RuntimeError::PrepareSandbox { source: e.into() }
        })?;
    Ok((file, path))
}

/// A new file in `dir` without a name (`O_TMPFILE`), locked; none where the file system cannot make one.
fn locked_unnamed(dir: &Path) -> Option<File> {
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .ok()?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(File::from(fd))
}

/// Remove what sandbox `id` of the data root `root` left when its supervisor died (its cgroup and whatever is
/// still in it, its claim file and its liveness claim), as [`Runtime::sweep`] does for every such sandbox at
/// start; nothing while a supervisor holds its claims. Returns whether it was swept.
pub fn sweep_sandbox(root: &Path, hierarchy: &Hierarchy, id: &str) -> bool {
    if spec::check_id(id).is_err() || supervised(id) {
        return false;
    }
    let claim = root.join("sandboxes").join(format!("{id}.lock"));
    if let Ok(file) = File::options().write(true).open(&claim) {
        if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            return false;
        }
        let _ = fs::remove_file(&claim);
    }
    remove_half_made(&root.join("sandboxes"), Some(id));
    remove_half_made(Path::new(LIVE_DIR), Some(id));
    let cg = hierarchy.open(id);
    let _ = cg.kill_all();
    let _ = cg.remove();
    let _ = fs::remove_file(Path::new(LIVE_DIR).join(format!("{id}.lock")));
    true
}

/// Remove the claims in `dir` (of sandbox `id`, or of any) that a maker killed before renaming them into
/// place left behind: unlocked `<id>.lock.new.<pid>` files whose maker is gone. A live maker's file is left
/// alone even unlocked: it is unlocked between its creation and the maker's lock, and a sweep by another
/// daemon (they share the liveness directory) must not take it from under the maker then.
pub(crate) fn remove_half_made(dir: &Path, id: Option<&str>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((of, pid)) = name.split_once(".lock.new.") else { continue };
        if id.is_some_and(|id| id != of) {
            continue;
        }
        let maker_alive = pid.parse::<u32>().is_ok_and(|p| Path::new("/proc").join(p.to_string()).exists());
        if maker_alive {
            continue;
        }
        let unlocked = File::options()
            .write(true)
            .open(entry.path())
            .is_ok_and(|f| rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok());
        if unlocked {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether some process supervises sandbox `id` now: its liveness claim is held (by its supervisor, from
/// before the sandbox is built until after it is torn down).
pub fn supervised(id: &str) -> bool {
    claim_held(&Path::new(LIVE_DIR).join(format!("{id}.lock")))
}

/// Whether someone holds the claim at `path` (a live sandbox's supervisor).
pub(crate) fn claim_held(path: &Path) -> bool {
    File::options()
        .write(true)
        .open(path)
        .map(|f| rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_err())
        .unwrap_or(false)
}

/// Make a storage directory the sandbox's: its top is owned by root inside (stored as `STORAGE_BASE`), so
/// root inside can write there through the id-mapped mount. A fresh top (empty, or made by the pool) is handed
/// over; a directory that holds someone else's files is refused rather than taken over. A state directory's top
/// is 0700: what a sandbox leaves there (setuid files included) is out of reach of host users; a volume's is
/// 0755, for the sandbox's other users (the pool's own directories keep host users out).
pub(crate) fn prepare_storage(dir: &Path, mode: u32) -> Result<(), RuntimeError> {
    let err = |source| RuntimeError::Storage { path: dir.to_path_buf(), source };
    let meta = fs::symlink_metadata(dir).map_err(err)?;
    if !meta.is_dir() {
        return Err(err(std::io::Error::from(std::io::ErrorKind::NotADirectory)));
    }
    if meta.uid() != STORAGE_BASE || meta.gid() != STORAGE_BASE {
        let empty = fs::read_dir(dir).map_err(err)?.next().is_none();
        if !empty {
            return Err(RuntimeError::ForeignState { path: dir.to_path_buf() });
        }
        std::os::unix::fs::lchown(dir, Some(STORAGE_BASE), Some(STORAGE_BASE)).map_err(err)?;
    }
    if meta.permissions().mode() & 0o7777 != mode {
        fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(err)?;
    }
    Ok(())
}

/// A fresh sandbox id: twelve random hex digits.
pub fn new_id() -> Result<String, RuntimeError> {
    let mut bytes = [0u8; 6];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| berth_sys::SysError::new("read random bytes", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What a failed `create` has made so far; removed on drop.
pub(crate) struct Partial {
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) claim_path: Option<PathBuf>,
    pub(crate) live_path: Option<PathBuf>,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            let _ = cg.remove();
        }
        for p in [self.claim_path.take(), self.live_path.take()].into_iter().flatten() {
            let _ = fs::remove_file(p);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_half_made_claim_left_by_a_dead_maker_does_not_block_the_next() {
        let dir = tempfile::tempdir().unwrap();
        // A maker under this pid died before its rename (the pid is reused): the file is there.
        fs::write(dir.path().join(format!("abc.lock.new.{}", std::process::id())), b"").unwrap();
        // And one of another maker's (a pid past any pid_max: it is gone), which is not touched.
        let dead = "abc.lock.new.99999999";
        fs::write(dir.path().join(dead), b"").unwrap();
        let (held, path) = claim(dir.path(), "abc").unwrap();
        assert!(path.ends_with("abc.lock") && claim_held(&path));
        assert!(!dir.path().join(format!("abc.lock.new.{}", std::process::id())).exists());
        assert!(dir.path().join(dead).exists());
        drop(held);
        // The sweep removes what dead makers left, and not what a live one holds, nor the file a live maker
        // has made and not locked yet (pid 1 is alive).
        let making = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.path().join("xyz.lock.new.99999998"))
            .unwrap();
        rustix::fs::flock(&making, FlockOperation::NonBlockingLockExclusive).unwrap();
        fs::write(dir.path().join("pqr.lock.new.1"), b"").unwrap();
        remove_half_made(dir.path(), None);
        assert!(!dir.path().join(dead).exists());
        assert!(dir.path().join("xyz.lock.new.99999998").exists());
        assert!(dir.path().join("pqr.lock.new.1").exists());
    }
}
