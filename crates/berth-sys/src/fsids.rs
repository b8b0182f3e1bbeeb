//! Acting on file systems with another user's ids, from one thread of a multi-threaded process.
//!
//! A file system mounted inside a sandbox's user namespace refuses to create files for a caller whose
//! file-system uid has no mapping there (EOVERFLOW), which host root's uid 0 never has. The daemon therefore
//! switches the calling thread's fsuid/fsgid to the sandbox root's host ids for the length of a files-API
//! call: the kernel then accepts the creation, and new files belong to root inside the sandbox.
//!
//! setfsuid and setfsgid change only the calling thread's credentials (unlike setuid, the C library does not
//! broadcast them to every thread), so the rest of the process is unaffected.

use rustix::thread::{CapabilitySet, CapabilitySets, capabilities, set_capabilities};

use crate::error::{Context, SysError, SysResult};

/// The calling thread acts with other file-system ids until this is dropped.
#[derive(Debug)]
pub struct FsIds {
    uid: u32,
    gid: u32,
    caps: CapabilitySets,
    /// The thread's supplementary groups, when they were dropped for the guard's length.
    groups: Option<Vec<rustix::process::Gid>>,
}

/// Make the calling thread's file-system uid and gid `uid` and `gid` until the returned guard is dropped.
///
/// Changing the fsuid away from 0 clears the file capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN, ...)
/// from the thread's effective set; they are raised again from its permitted set, so the thread keeps the
/// access it had. The guard must be dropped on the thread that made it.
pub fn act_as(uid: u32, gid: u32) -> SysResult<FsIds> {
    let guard = switch(uid, gid)?;
    set_capabilities(None, guard.caps).ctx(|| "keep this thread's capabilities")?;
    Ok(guard)
}

/// As [`act_as`], but as `uid` and `gid` alone: the thread's supplementary groups are dropped and its
/// effective capabilities cleared for the guard's length (both per thread, and given back by the guard), so
/// its access is that of a process of that user with no other group.
pub fn act_as_unprivileged(uid: u32, gid: u32) -> SysResult<FsIds> {
    if uid == 0 {
        return Err(SysError::new("act as an unprivileged uid", std::io::Error::from_raw_os_error(libc::EINVAL)));
    }
    let groups = rustix::process::getgroups().ctx(|| "read this thread's groups")?;
    rustix::thread::set_thread_groups(&[]).ctx(|| "drop this thread's groups")?;
    let mut guard = match switch(uid, gid) {
        Ok(g) => g,
        Err(e) => {
            let _ = rustix::thread::set_thread_groups(&groups);
            return Err(e);
        }
    };
    guard.groups = Some(groups);
    let none = CapabilitySets { effective: CapabilitySet::empty(), ..guard.caps };
    set_capabilities(None, none).ctx(|| "clear this thread's effective capabilities")?;
    Ok(guard)
}

/// Switch the fsuid and fsgid (which clears the file capabilities from the effective set).
fn switch(uid: u32, gid: u32) -> SysResult<FsIds> {
    let caps = capabilities(None).ctx(|| "read this thread's capabilities")?;
    let old_gid = set_fsgid(gid);
    if current_fsgid() != gid {
        set_fsgid(old_gid);
        return Err(SysError::new(format!("act as gid {gid}"), std::io::Error::from_raw_os_error(libc::EPERM)));
    }
    let old_uid = set_fsuid(uid);
    let guard = FsIds { uid: old_uid, gid: old_gid, caps, groups: None };
    if current_fsuid() != uid {
        return Err(SysError::new(format!("act as uid {uid}"), std::io::Error::from_raw_os_error(libc::EPERM)));
    }
    Ok(guard)
}

impl Drop for FsIds {
    fn drop(&mut self) {
        set_fsuid(self.uid);
        set_fsgid(self.gid);
        let _ = set_capabilities(None, self.caps);
        if let Some(groups) = self.groups.take() {
            let _ = rustix::thread::set_thread_groups(&groups);
        }
    }
}

/// The calling thread's file-system uid.
pub fn current_fsuid() -> u32 {
    // An id that cannot be set (-1) changes nothing and returns the current one.
    set_fsuid(u32::MAX)
}

/// The calling thread's file-system gid.
pub fn current_fsgid() -> u32 {
    set_fsgid(u32::MAX)
}

/// setfsuid(2) on the calling thread only; returns the previous fsuid.
fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid takes an id by value and touches no memory of ours; the raw system call changes the
    // calling thread's credentials only.
    let r = unsafe { libc::syscall(libc::SYS_setfsuid, libc::c_long::from(uid)) };
    r as u32
}

/// setfsgid(2) on the calling thread only; returns the previous fsgid.
fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: as for set_fsuid.
    let r = unsafe { libc::syscall(libc::SYS_setfsgid, libc::c_long::from(gid)) };
    r as u32
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_change_for_the_guard_and_come_back() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test needs root (to change fsuid and fsgid); run it as root"
        );
        // On a thread of its own, so that a failure cannot leak into other tests.
        std::thread::spawn(|| {
            let before = (current_fsuid(), current_fsgid(), capabilities(None).unwrap());
            {
                let _g = act_as(123_456, 123_457).unwrap();
                assert_eq!((current_fsuid(), current_fsgid()), (123_456, 123_457));
                assert_eq!(capabilities(None).unwrap().effective, before.2.effective);
            }
            assert_eq!((current_fsuid(), current_fsgid(), capabilities(None).unwrap()), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn an_unprivileged_thread_is_held_to_the_files_permissions() {
        let dir = std::env::temp_dir().join(format!("berth-fsids-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let inside = dir.join("f");
        let result = std::thread::spawn(move || {
            let before = capabilities(None).unwrap();
            let refused = {
                let _g = act_as_unprivileged(123_456, 123_457).unwrap();
                std::fs::write(&inside, b"x").map_err(|e| e.raw_os_error())
            };
            let privileged = {
                let _g = act_as(123_456, 123_457).unwrap();
                std::fs::write(&inside, b"x").map_err(|e| e.raw_os_error())
            };
            assert_eq!(capabilities(None).unwrap(), before);
            // Acting unprivileged, the thread has no effective capability and no supplementary group.
            let extra = rustix::process::Gid::from_raw(4242);
            rustix::thread::set_thread_groups(&[extra]).unwrap();
            let groups_before = rustix::process::getgroups().unwrap();
            assert_eq!(groups_before, vec![extra]);
            {
                let _g = act_as_unprivileged(123_456, 123_457).unwrap();
                assert!(capabilities(None).unwrap().effective.is_empty());
                assert!(rustix::process::getgroups().unwrap().is_empty());
            }
            assert_eq!(rustix::process::getgroups().unwrap(), groups_before);
            assert_eq!(capabilities(None).unwrap(), before);
            (refused, privileged)
        })
        .join()
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(result, (Err(Some(libc::EACCES)), Ok(())));
        assert!(act_as_unprivileged(0, 0).is_err());
    }
}
