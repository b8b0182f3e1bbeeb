//! An OCI container's first process, between `clone` and the exec of the config's program: it builds the
//! root from the plan, reports that it waits, waits for `start`, hardens itself as every berth sandbox is
//! hardened, becomes the config's user and runs the program. It runs single-threaded, in the new
//! namespaces, as root of the container's user namespace.

use std::convert::Infallible;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use berth_init::protocol;
use berth_sys::mount;
use berth_sys::{SysError, process, seccomp::SeccompPolicy};
use rustix::fs::{Mode, OFlags};

use super::config::{self, Process};
use super::{Report, TTY_PATHS};
use crate::RuntimeError;
use crate::cgroup::Entry;
use crate::child::{Go, KEPT_CAPABILITIES, run_step};
use crate::plan::Plan;

/// What the child is handed besides the plan.
pub(crate) struct Handed<'a> {
    pub control: OwnedFd,
    pub cgroup: &'a Entry,
    pub process: &'a Process,
    /// The start fifo, opened `O_PATH`: opened for writing, it blocks until `start` reads it.
    pub fifo: OwnedFd,
    /// Where a terminal's master end goes (`--console-socket`), when the process has a terminal.
    pub console: Option<OwnedFd>,
    pub set_hostname: bool,
    pub loopback: bool,
    /// Descriptors 3.. that the program keeps (`--preserve-fds`).
    pub preserve_fds: i32,
    /// The pod's user namespace, when the container joins a pid namespace that it owns: the container then
    /// lives in it (a proc file system can be mounted only by the pid namespace's owner), and makes its own
    /// namespaces (`unshare`) inside it rather than being born with them.
    pub pod_userns: Option<OwnedFd>,
    pub unshare: berth_sys::clone::Namespaces,
}

/// Run in the cloned child; never returns.
pub(crate) fn run(plan: &Plan, handed: Handed<'_>) -> ! {
    let err = match setup(plan, &handed) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let _ = protocol::send(handed.control.as_fd(), &Report::Failed { message: crate::error_chain(&err) }, &[]);
    berth_sys::clone::exit_now(125)
}

fn setup(plan: &Plan, h: &Handed<'_>) -> Result<Infallible, RuntimeError> {
    if let Entry::Tasks(files) = h.cgroup {
        for f in files {
            rustix::io::write(f, b"0").map_err(|e| SysError::new("join the container's cgroups", e))?;
        }
    }
    let (go, trees): (Go, Vec<OwnedFd>) = protocol::recv(h.control.as_fd())?;
    if go.trees != trees.len() || trees.len() != plan.trees.len() {
        return Err(RuntimeError::Setup { message: "the runtime sent the wrong number of mounts".into() });
    }
    if let Some(userns) = &h.pod_userns {
        process::join_namespace(userns.as_fd(), process::NamespaceKind::User)?;
    }
    process::become_id(0)?;
    if h.pod_userns.is_some() {
        process::unshare_namespaces(h.unshare)?;
    }
    process::die_with_parent()?;
    process::unshare_cgroup_namespace()?;
    mount::make_private_recursive()?;
    for step in &plan.steps {
        run_step(step, &plan.root, &trees)?;
    }
    drop(trees);
    if h.set_hostname && !plan.hostname.is_empty() {
        process::set_hostname(&plan.hostname)?;
    }
    if h.loopback {
        berth_sys::net::loopback_up()?;
    }
    let p = h.process;
    if p.terminal {
        let console = h.console.as_ref().ok_or_else(|| RuntimeError::Setup {
            message: "the process wants a terminal but no --console-socket was given".into(),
        })?;
        attach_terminal(console)?;
    }
    let ready = prepare(p, h.preserve_fds)?;
    // Set up and waiting: the runtime's `create` ends here, and the parent it leaves behind must not take
    // this process with it.
    process::live_on_without_parent()?;
    protocol::send(h.control.as_fd(), &Report::Waiting, &[])?;
    wait_for_start(&h.fifo)?;
    finish(p, &ready)
}

/// The program to run and the capabilities to keep, found by [`prepare`].
pub(crate) struct Ready {
    program: String,
    keep: Vec<u32>,
}

/// What a container process needs while still root of the user namespace and unhardened: its working
/// directory, its program found, its rlimits, its own session (with its terminal, if it has one), and no
/// descriptor it was not meant to have.
pub(crate) fn prepare(p: &Process, preserve_fds: i32) -> Result<Ready, RuntimeError> {
    let cwd = if p.cwd.is_empty() { "/" } else { p.cwd.as_str() };
    rustix::process::chdir(cwd).map_err(|e| SysError::new(format!("enter the working directory {cwd}"), e))?;
    let program = find_program(&p.args[0], &p.env)?;
    let setup = |e: super::OciError| RuntimeError::Setup { message: e.to_string() };
    for r in &p.rlimits {
        let resource = config::rlimit_resource(&r.kind).map_err(setup)?;
        let limit = rustix::process::Rlimit { current: Some(r.soft), maximum: Some(r.hard) };
        rustix::process::setrlimit(resource, limit)
            .map_err(|e| SysError::new(format!("set {} to {}:{}", r.kind, r.soft, r.hard), e))?;
    }
    // The config's bound, within berth's: what berth never grants stays out whatever the config says.
    let mut keep = Vec::new();
    for name in p.capabilities.iter().flat_map(|c| &c.bounding) {
        let n = config::capability_number(name).map_err(setup)?;
        if KEPT_CAPABILITIES.contains(&n) && !keep.contains(&n) {
            keep.push(n);
        }
    }
    let keep_fds: Vec<i32> = (0..3 + preserve_fds.max(0)).collect();
    berth_sys::fd::cloexec_all_except(&keep_fds)?;
    rustix::process::setsid().map_err(|e| SysError::new("start a new session", e))?;
    if p.terminal {
        rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())
            .map_err(|e| SysError::new("make the terminal the controlling one", e))?;
    }
    Ok(Ready { program, keep })
}

/// Harden the process as every berth sandbox is (capability bound, no_new_privs, seccomp, landlock), become
/// the config's user and run the program.
pub(crate) fn finish(p: &Process, ready: &Ready) -> Result<Infallible, RuntimeError> {
    if let Some(mask) = p.user.umask {
        rustix::process::umask(Mode::from_raw_mode(mask & 0o777));
    }
    process::restrict_bounding_set(&ready.keep)?;
    process::set_no_new_privs()?;
    SeccompPolicy::sandbox_default().install()?;
    berth_sys::landlock::restrict_sandbox(&TTY_PATHS, false)?;
    process::become_user(p.user.uid, p.user.gid, &p.user.additional_gids)?;
    Err(process::exec_path(&ready.program, &p.args, &p.env).into())
}

/// Block until `start` opens the fifo, then tell it so with one byte.
fn wait_for_start(fifo: &OwnedFd) -> Result<(), RuntimeError> {
    let path = format!("/proc/self/fd/{}", fifo.as_raw_fd());
    let w = rustix::fs::open(path.as_str(), OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| SysError::new("wait for start", e))?;
    rustix::io::write(&w, b"0").map_err(|e| SysError::new("answer start", e))?;
    Ok(())
}

/// A new terminal in the container's own devpts, its master end sent to the console socket and its slave
/// end on the standard streams.
pub(crate) fn attach_terminal(console: &OwnedFd) -> Result<(), RuntimeError> {
    let root = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| SysError::new("open the container's root", e))?;
    let pty = berth_sys::pty::open_in(root.as_fd())?;
    berth_sys::fd::send(console.as_fd(), b"/dev/ptmx", &[pty.master.as_fd()])?;
    for fd in 0..3 {
        berth_sys::fd::dup_onto(pty.slave.as_fd(), fd)?;
    }
    Ok(())
}

/// The program `name` names: a path as it is, or a name looked up in the process's `PATH`.
pub(crate) fn find_program(name: &str, env: &[String]) -> Result<String, RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Ok(name.to_string());
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let candidate = format!("{dir}/{name}");
        if std::fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
            return Ok(candidate);
        }
    }
    Err(RuntimeError::Setup { message: format!("exec: {name:?}: executable file not found in $PATH") })
}
