//! Killing everything in a cgroup: `cgroup.kill` on v2, rounds of freeze, SIGKILL, thaw otherwise.

use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use super::CgroupError;
use super::fsio;
use super::handle::{Cgroup, Kind};

/// How long [`kill_all`] keeps at it before reporting the processes that are left.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one round waits for the killed processes to leave before starting another.
const ROUND_WAIT: Duration = Duration::from_millis(100);

pub(crate) fn kill_all(cg: &Cgroup) -> Result<(), CgroupError> {
    // The common case at teardown: the sandbox's init is already reaped and took everything with it.
    if cg.procs()?.is_empty() {
        return Ok(());
    }
    let kill_file = match cg.kind() {
        Kind::V2(dir) => Some(dir.join("cgroup.kill")).filter(|f| f.exists()),
        Kind::V1(_) | Kind::Invalid { .. } => None,
    };
    match kill_file {
        // Linux 5.14+: the kernel kills the whole subtree, and nothing can fork its way out.
        Some(file) => {
            fsio::write(&file, "1").map_err(|source| CgroupError::Kill { path: file.clone(), pid: None, source })?;
            if fsio::wait_for(KILL_TIMEOUT, || Ok(cg.procs()?.is_empty()))? {
                return Ok(());
            }
        }
        None => {
            if signal_rounds(cg)? {
                return Ok(());
            }
        }
    }
    Err(CgroupError::NotEmpty { path: cg.control_dir().to_owned(), pids: cg.procs()? })
}

/// Freeze (so nothing forks while signals go out), SIGKILL every process, thaw (frozen tasks
/// die only once thawed), and wait a little; again until empty or out of time. Returns whether
/// the cgroup emptied.
fn signal_rounds(cg: &Cgroup) -> Result<bool, CgroupError> {
    let deadline = Instant::now() + KILL_TIMEOUT;
    let me = rustix::process::getpid();
    loop {
        // A freeze that does not complete (a task stuck in the kernel, or no freezer on an old v2
        // kernel) is no reason not to kill; thawing is then only a best effort.
        let frozen = cg.freeze().is_ok();
        let signalled = cg.procs().and_then(|pids| signal_all(cg, &pids, me));
        let thawed = cg.thaw();
        signalled?;
        if frozen {
            thawed?;
        }
        if fsio::wait_for(ROUND_WAIT, || Ok(cg.procs()?.is_empty()))? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

fn signal_all(cg: &Cgroup, pids: &[i32], me: Pid) -> Result<(), CgroupError> {
    for &raw in pids {
        // Never this process, should it have been put in the cgroup.
        let Some(pid) = Pid::from_raw(raw).filter(|p| *p != me) else {
            continue;
        };
        match rustix::process::kill_process(pid, Signal::KILL) {
            Ok(()) | Err(Errno::SRCH) => {}
            Err(e) => {
                let path = cg.control_dir().to_owned();
                return Err(CgroupError::Kill { path, pid: Some(raw), source: e.into() });
            }
        }
    }
    Ok(())
}
