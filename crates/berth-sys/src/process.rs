//! Process credentials, capabilities, signals and exec.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::process::Signal;

use crate::error::{Context, SysError, SysResult};

/// Write the uid and gid maps of `pid`'s user namespace: inside ids `0..count` map to host ids
/// `host_base..host_base + count`. Called by the (host root) parent.
pub fn write_id_maps(pid: i32, host_base: u32, count: u32) -> SysResult<()> {
    let map = format!("0 {host_base} {count}\n");
    std::fs::write(format!("/proc/{pid}/uid_map"), &map).ctx(|| "write the sandbox's uid map")?;
    std::fs::write(format!("/proc/{pid}/gid_map"), &map).ctx(|| "write the sandbox's gid map")
}

/// Write an arbitrary uid/gid map (`inside outside count` lines) for `pid`.
pub fn write_maps(pid: i32, uid_map: &str, gid_map: &str) -> SysResult<()> {
    std::fs::write(format!("/proc/{pid}/uid_map"), uid_map).ctx(|| "write a uid map")?;
    std::fs::write(format!("/proc/{pid}/gid_map"), gid_map).ctx(|| "write a gid map")
}

/// Drop every supplementary group and become uid/gid `id` of the current user namespace.
pub fn become_id(id: u32) -> SysResult<()> {
    // These are per-thread system calls; callers are single-threaded (a freshly cloned child or init).
    rustix::thread::set_thread_groups(&[]).ctx(|| "drop supplementary groups")?;
    let gid = rustix::process::Gid::from_raw(id);
    rustix::thread::set_thread_res_gid(gid, gid, gid).ctx(|| format!("become gid {id}"))?;
    let uid = rustix::process::Uid::from_raw(id);
    rustix::thread::set_thread_res_uid(uid, uid, uid).ctx(|| format!("become uid {id}"))
}

/// Ask the kernel to SIGKILL this process when its parent dies. (A parent that died before this call is
/// noticed by the caller some other way: from a new pid namespace, getppid() says 0 either way.)
pub fn die_with_parent() -> SysResult<()> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).ctx(|| "set the parent-death signal")
}

/// Mark the process not dumpable: its /proc files become unreadable to others and it cannot be ptraced
/// without CAP_SYS_PTRACE.
pub fn set_not_dumpable() -> SysResult<()> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .ctx(|| "mark the process not dumpable")
}

/// Set no_new_privs: no exec can ever grant more privilege (setuid bits and file capabilities are ignored).
pub fn set_no_new_privs() -> SysResult<()> {
    rustix::thread::set_no_new_privs(true).ctx(|| "set no_new_privs")
}

/// The highest capability number this kernel knows.
pub fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40)
}

/// Remove every capability not in `keep` from the bounding set, and clear the ambient set.
pub fn restrict_bounding_set(keep: &[u32]) -> SysResult<()> {
    for cap in 0..=last_capability() {
        if keep.contains(&cap) {
            continue;
        }
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(SysError::new(format!("drop capability {cap} from the bounding set"), err));
            }
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes no pointers.
    let r = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        return Err(SysError::new("clear ambient capabilities", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Set the host name of the current UTS namespace.
pub fn set_hostname(name: &str) -> SysResult<()> {
    rustix::system::sethostname(name.as_bytes()).ctx(|| format!("set the host name to {name}"))
}

/// Enter a new cgroup namespace rooted at the cgroups this process is in now.
pub fn unshare_cgroup_namespace() -> SysResult<()> {
    // SAFETY: unshare(CLONE_NEWCGROUP) only changes this process's cgroup namespace; no memory is shared
    // with other threads (the caller is single-threaded).
    let r = unsafe { libc::unshare(libc::CLONE_NEWCGROUP) };
    if r != 0 {
        return Err(SysError::new("create a cgroup namespace", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Enter new namespaces of the kinds `ns` names (a new pid namespace is for the children forked afterwards),
/// owned by the user namespace the process is in now. A user namespace is not one of them: see
/// [`join_namespace`].
pub fn unshare_namespaces(ns: crate::clone::Namespaces) -> SysResult<()> {
    let flags = ns.flags() as libc::c_int & !libc::CLONE_NEWUSER;
    // SAFETY: unshare with namespace flags only changes this process's namespaces; no memory is shared with
    // other threads (the callers are single-threaded children).
    let r = unsafe { libc::unshare(flags) };
    if r != 0 {
        return Err(SysError::new("create namespaces", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The user namespace that owns the namespace behind `ns`, and whether it is the caller's own.
pub fn namespace_owner(ns: BorrowedFd<'_>) -> SysResult<(OwnedFd, bool)> {
    // NS_GET_USERNS: _IO(0xb7, 0x1).
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor (or -1); `ns` is a valid
    // descriptor for the call's length.
    let r = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS as _) };
    if r < 0 {
        return Err(SysError::new("find the user namespace owning a namespace", std::io::Error::last_os_error()));
    }
    // SAFETY: the ioctl returned a fresh descriptor that nothing else owns.
    let owner = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r) };
    let st = rustix::fs::fstat(&owner).ctx(|| "look at a user namespace")?;
    // The caller is host root, in the host's user namespace.
    let host = rustix::fs::stat("/proc/self/ns/user").ctx(|| "look at the caller's user namespace")?;
    Ok((owner, st.st_ino == host.st_ino && st.st_dev == host.st_dev))
}

/// Replace this process with the program behind `exe` (an open descriptor), never returning on success.
pub fn exec_fd(exe: BorrowedFd<'_>, argv: &[&str], env: &[String]) -> SysError {
    let to_c = |s: &str| CString::new(s).unwrap_or_default();
    let argv_c: Vec<CString> = argv.iter().map(|a| to_c(a)).collect();
    let env_c: Vec<CString> = env.iter().map(|e| to_c(e)).collect();
    let mut argv_p: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env_c.iter().map(|c| c.as_ptr()).collect();
    env_p.push(std::ptr::null());
    let empty = c"";
    // SAFETY: argv and envp are NULL-terminated arrays of pointers into CStrings that outlive the call;
    // execveat only returns on failure.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            exe.as_raw_fd(),
            empty.as_ptr(),
            argv_p.as_ptr(),
            env_p.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    SysError::new("start berth's init inside the sandbox", std::io::Error::last_os_error())
}

/// Send `signal` to the process behind a pidfd.
pub fn pidfd_signal(pidfd: BorrowedFd<'_>, signal: Signal) -> SysResult<()> {
    match rustix::process::pidfd_send_signal(pidfd, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(SysError::new("signal a process", e)),
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

/// Wait for the process behind a pidfd to end, and reap it.
pub fn pidfd_wait(pidfd: BorrowedFd<'_>) -> SysResult<Exit> {
    loop {
        match rustix::process::waitid(rustix::process::WaitId::PidFd(pidfd), rustix::process::WaitIdOptions::EXITED) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(SysError::new("wait for a process", e)),
            Ok(Some(status)) => {
                return Ok(match status.terminating_signal() {
                    Some(sig) => Exit::Signal(sig),
                    None => Exit::Code(status.exit_status().unwrap_or(0)),
                });
            }
            Ok(None) => continue,
        }
    }
}

fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain old data and sigemptyset/sigaddset only write into it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, exclusively borrowed sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for s in signals {
        // SAFETY: as above.
        unsafe { libc::sigaddset(&mut set, *s) };
    }
    set
}

/// Block `signals` for this thread (add them to its mask).
pub fn block_signals(signals: &[i32]) -> SysResult<()> {
    let set = sigset(signals);
    // SAFETY: `set` is initialised; a null old-set pointer is allowed.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(SysError::new("block signals", std::io::Error::from_raw_os_error(r)));
    }
    Ok(())
}

/// Block `signals` for this thread and return a descriptor that reads them (signalfd).
pub fn signal_fd(signals: &[i32]) -> SysResult<OwnedFd> {
    block_signals(signals)?;
    let set = sigset(signals);
    // SAFETY: `set` is initialised; -1 asks for a new descriptor which we take ownership of below.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(SysError::new("create a signalfd", std::io::Error::last_os_error()));
    }
    // SAFETY: signalfd returned a new descriptor nobody else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Read pending signal numbers from a signalfd (non-blocking; empty when none are pending).
pub fn read_signals(fd: impl AsFd) -> Vec<i32> {
    let mut out = Vec::new();
    // SAFETY: signalfd_siginfo is plain old data.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: reading into a properly sized, exclusively borrowed signalfd_siginfo.
        let n = unsafe {
            libc::read(
                fd.as_fd().as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size_of::<libc::signalfd_siginfo>(),
            )
        };
        if n != size_of::<libc::signalfd_siginfo>() as isize {
            return out;
        }
        out.push(info.ssi_signo as i32);
    }
}

/// Unblock all signals and restore their default dispositions (for a process about to exec a command).
pub fn reset_signals() {
    // SAFETY: sigset_t is plain old data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t; SIG_SETMASK with an empty set unblocks everything.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Wait for any child without blocking: `Some((pid, exit))` for one reaped child, `None` when none is ready.
pub fn reap_any() -> Option<(i32, Exit)> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid writes only into `status`.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let exit = if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    };
    Some((pid, exit))
}

/// Send a signal to a process group (negative pid), ignoring groups that are already gone.
pub fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(-pgid, signal) };
}

/// Send a signal to one process, ignoring a process that is already gone.
pub fn kill_pid(pid: i32, signal: i32) {
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(pid, signal) };
}

/// Send signal number `signal` (1 to 64, real-time ones included) to one process.
pub fn signal_pid(pid: i32, signal: i32) -> SysResult<()> {
    if pid <= 0 || !(1..=64).contains(&signal) {
        return Err(SysError::new(format!("send signal {signal} to {pid}"), std::io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill takes plain integers; a positive pid names one process.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(SysError::new(format!("send signal {signal} to process {pid}"), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Open a process's namespace file (such as `user`) from /proc.
pub fn open_namespace(pid: i32, kind: &str) -> SysResult<OwnedFd> {
    rustix::fs::open(
        format!("/proc/{pid}/ns/{kind}"),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ctx(|| format!("open the {kind} namespace of process {pid}"))
}

/// Prepare `cmd` to start cleanly: with no blocked signals, whatever the caller blocks (init blocks the
/// signals it reads from a signalfd, and a blocked SIGTERM would make the command unkillable by `timeout`
/// and friends), and, first of all, moved into the cgroups whose `tasks`/`cgroup.procs` files are `join`.
///
/// With `terminal`, the command also starts a session of its own (setsid) whose controlling terminal is its
/// stdin, which must then be a terminal: job control works as in a login. The command must not have asked
/// for a process group of its own as well (setsid makes it the leader of a new one).
pub fn prepare_command(cmd: &mut std::process::Command, join: Vec<OwnedFd>, terminal: bool) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs between fork and exec and only calls sigemptyset, pthread_sigmask, write on
    // descriptors it owns, setsid and ioctl(TIOCSCTTY) on descriptor 0, all async-signal-safe; it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            reset_signals();
            for fd in &join {
                if libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if terminal && (libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Start `cmd` with `fds` on descriptors 3, 4, … in order (not close-on-exec there), whatever numbers they
/// have here; the caller's copies stay close-on-exec, so no other child inherits them.
pub fn pass_fds(cmd: &mut std::process::Command, fds: Vec<OwnedFd>) {
    use std::os::unix::process::CommandExt;
    if fds.is_empty() {
        return;
    }
    let first_free = 3 + fds.len() as libc::c_int;
    // SAFETY: the hook runs between fork and exec and only calls fcntl(F_DUPFD_CLOEXEC) and dup2 on
    // descriptors it owns (copies of `fds`), which are async-signal-safe; it allocates nothing. The copies
    // above every target are made first, so that moving one onto its number never closes another's source.
    unsafe {
        cmd.pre_exec(move || {
            let mut moved = [0 as libc::c_int; crate::fd::MAX_FDS];
            if fds.len() > moved.len() {
                return Err(std::io::ErrorKind::InvalidInput.into());
            }
            for (i, fd) in fds.iter().enumerate() {
                let copy = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, first_free);
                if copy < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                moved[i] = copy;
            }
            for (i, copy) in moved.iter().take(fds.len()).enumerate() {
                if libc::dup2(*copy, 3 + i as libc::c_int) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The largest resident set, in bytes, of any child (and its waited-for descendants) this process has
/// reaped so far.
pub fn children_max_rss() -> u64 {
    // SAFETY: rusage is plain old data; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, exclusively borrowed rusage.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    if r != 0 {
        return 0;
    }
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}

/// Hand the C allocator's free memory back to the kernel. glibc's malloc keeps what was freed in each of its
/// arenas (one per thread, up to eight per core) for that arena's next use, and on its own returns memory
/// only from the top of a heap, so a burst of work leaves a long-running process holding pages it no longer
/// uses. Whether any memory was released (always false where the C library is not glibc).
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes no pointers and touches only the allocator's own state, under its locks.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Let SIGPIPE end the process, as command-line tools do (`berth ls | head`), instead of turning a closed
/// pipe into a write error. Rust ignores SIGPIPE by default; long-running servers should keep it so.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler and touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    /// Memory freed below a chunk still in use cannot leave from the top of the heap; the trim hands it back.
    #[test]
    fn free_memory_below_a_live_chunk_is_handed_back() {
        let chunks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8; 8192]).collect();
        let pin = std::hint::black_box(vec![1u8; 64]);
        drop(chunks);
        assert!(super::release_free_memory(), "32 MiB were freed and nothing was released");
        assert_eq!(pin[0], 1);
    }
}

/// Replace this process with the program at `path` (looked up from the current root, no `PATH` search),
/// never returning on success. Scripts work, as with `execve`: their interpreter is found by path too.
pub fn exec_path(path: &str, argv: &[String], env: &[String]) -> SysError {
    let bad =
        || SysError::new(format!("run {path:?} (a NUL byte in it or its arguments)"), std::io::ErrorKind::InvalidInput);
    let Ok(path_c) = CString::new(path) else { return bad() };
    let Ok(argv_c) = argv.iter().map(|a| CString::new(a.as_str())).collect::<Result<Vec<_>, _>>() else { return bad() };
    let Ok(env_c) = env.iter().map(|e| CString::new(e.as_str())).collect::<Result<Vec<_>, _>>() else { return bad() };
    let mut argv_p: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env_c.iter().map(|c| c.as_ptr()).collect();
    env_p.push(std::ptr::null());
    // SAFETY: path, argv and envp are NUL-terminated strings and NULL-terminated arrays of pointers into
    // CStrings that outlive the call; execve only returns on failure.
    unsafe { libc::execve(path_c.as_ptr(), argv_p.as_ptr(), env_p.as_ptr()) };
    SysError::new(format!("run {path}"), std::io::Error::last_os_error())
}

/// Which kind of namespace [`join_namespace`] enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceKind {
    User,
    Mount,
    Pid,
    Net,
    Ipc,
    Uts,
    Cgroup,
}

/// Move the calling thread into the namespace behind `ns` (a `/proc/PID/ns/*` or bind-mounted namespace
/// file), which must be of `kind`. A pid namespace takes effect for the children forked afterwards.
pub fn join_namespace(ns: BorrowedFd<'_>, kind: NamespaceKind) -> SysResult<()> {
    use rustix::thread::LinkNameSpaceType as T;
    let t = match kind {
        NamespaceKind::User => T::User,
        NamespaceKind::Mount => T::Mount,
        NamespaceKind::Pid => T::ProcessID,
        NamespaceKind::Net => T::Network,
        NamespaceKind::Ipc => T::InterProcessCommunication,
        NamespaceKind::Uts => T::HostNameAndNISDomainName,
        NamespaceKind::Cgroup => T::ControlGroup,
    };
    rustix::thread::move_into_link_name_space(ns, Some(t)).ctx(|| format!("enter a {kind:?} namespace"))
}

/// Have `cmd`'s process killed (SIGKILL) when the thread that starts it ends, as when the calling process
/// dies: a tool a daemon runs (a `cp -a` of a workspace, say) does not go on writing after a crash, behind
/// the back of the next daemon's clean-up. The thread must wait for the command itself (the kernel ties the
/// signal to the thread that forked, not to its process). A caller already gone when the command starts
/// makes the start fail.
pub fn end_with_caller(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook runs between fork and exec and only calls prctl and getppid, both async-signal-safe;
    // it allocates nothing (the error is built from the saved errno).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Clear the parent-death signal set by [`die_with_parent`].
pub fn live_on_without_parent() -> SysResult<()> {
    rustix::process::set_parent_process_death_signal(None).ctx(|| "clear the parent-death signal")
}

/// Set supplementary groups and become `uid`/`gid` of the current user namespace (per thread; callers are
/// single-threaded).
pub fn become_user(uid: u32, gid: u32, groups: &[u32]) -> SysResult<()> {
    let groups: Vec<rustix::process::Gid> = groups.iter().map(|g| rustix::process::Gid::from_raw(*g)).collect();
    rustix::thread::set_thread_groups(&groups).ctx(|| "set supplementary groups")?;
    let g = rustix::process::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(g, g, g).ctx(|| format!("become gid {gid}"))?;
    let u = rustix::process::Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(u, u, u).ctx(|| format!("become uid {uid}"))
}
