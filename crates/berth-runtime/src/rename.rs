//! Naming a sandbox's host after it is built: for a sandbox built before anyone asked for it, under a name
//! of its own, and given the name of the sandbox it becomes when it is taken.

use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};

use crate::{RuntimeError, Sandbox, plan, spec};

impl Sandbox {
    /// Make `name` the sandbox's host name, as its backend can (only where it `supports().warm_pool`).
    pub fn rename_host(&self, name: &str) -> Result<(), RuntimeError> {
        self.backend.rename_host(self, name)
    }
}

/// Make `name` the host name of `sb`, a namespaces sandbox: its UTS namespace's, and that of its
/// `/etc/hostname` and `/etc/hosts` (the files on its scratch tmpfs bound over the image's). Meant for a
/// sandbox in which nothing has run yet: the files are rewritten in place, as the build wrote them.
pub(crate) fn rename_host(sb: &Sandbox, name: &str) -> Result<(), RuntimeError> {
    spec::check_name(name)?;
    berth_sys::uts::set_hostname_of(sb.pidfd(), name)?;
    let root = rustix::fs::open(
        format!("/proc/{}/root", sb.pid()),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| berth_sys::SysError::new("open the sandbox's root", e))?;
    for (file, contents) in plan::host_files(name) {
        berth_sys::uts::rewrite_in_root(root.as_fd(), &format!("etc/{file}"), contents.as_bytes())?;
    }
    Ok(())
}
