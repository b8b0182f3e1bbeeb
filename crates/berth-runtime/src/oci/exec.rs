//! `exec`: another process in a running container. It enters the container's namespaces and cgroup from
//! the host, forks, and the child enters the container's user namespace last, then hardens itself as the
//! first process did (capability bound, no_new_privs, seccomp, landlock) and runs the program. Detached,
//! the command ends once the program runs, leaving it to the shim; otherwise it waits for its exit.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use berth_sys::clone::{Forked, Namespaces};
use berth_sys::process::{self, NamespaceKind};

use super::config::{self, Process};
use super::{Oci, OciError, Status};
use crate::RuntimeError;

/// What `exec` is given on its command line.
pub struct ExecArgs<'a> {
    pub id: &'a str,
    pub process: &'a Path,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub detach: bool,
    pub preserve_fds: i32,
    /// Variables set over the process's own (`NAME=value`).
    pub extra_env: &'a [String],
}

/// Run a process in container `args.id`; returns its exit code, or 0 once it runs when detached.
pub fn exec(oci: &Oci, args: &ExecArgs<'_>) -> Result<i32, OciError> {
    let st = oci.state(args.id)?;
    match st.status() {
        Status::Running | Status::Created => {}
        other => {
            return Err(OciError::State(format!("cannot exec in container {}: it is {}", args.id, other.as_str())));
        }
    }
    let text = std::fs::read_to_string(args.process)
        .map_err(OciError::io(format!("read the process {}", args.process.display())))?;
    let mut p: Process = serde_json::from_str(&text)
        .map_err(|e| OciError::Config(format!("{} is not an OCI process: {e}", args.process.display())))?;
    super::set_env(&mut p.env, args.extra_env);
    config::check_process(&p)?;
    let console = match (p.terminal, args.console_socket) {
        (true, Some(path)) => Some(super::connect_console(path)?),
        (true, None) => return Err(OciError::Config("the process wants a terminal: give --console-socket".into())),
        (false, _) => None,
    };
    let open = |kind: &str| process::open_namespace(st.pid, kind);
    let user = open("user")?;
    let others = [
        (open("net")?, NamespaceKind::Net),
        (open("ipc")?, NamespaceKind::Ipc),
        (open("uts")?, NamespaceKind::Uts),
        (open("cgroup")?, NamespaceKind::Cgroup),
        (open("pid")?, NamespaceKind::Pid),
    ];
    // Entered by the child: from the container's mount namespace, /proc is the container's, where this
    // process (outside its pid namespace) is not.
    let mnt = open("mnt")?;
    // The namespaces opened are the container's, not those of a process that took its pid since.
    if !st.alive() {
        return Err(OciError::State(format!("cannot exec in container {}: it is stopped", args.id)));
    }
    st.cgroup()?.add_process(std::process::id() as i32)?;
    for (ns, kind) in &others {
        process::join_namespace(ns.as_fd(), *kind)?;
    }
    let (report_r, report_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| OciError::io("make a pipe")(e.into()))?;
    let (pid, pidfd) = match berth_sys::clone::spawn(Namespaces::NONE, None)? {
        Forked::Child => {
            drop(report_r);
            let err = match run(&p, &mnt, &user, console.as_ref(), args.preserve_fds) {
                Ok(never) => match never {},
                Err(e) => e,
            };
            let _ = rustix::io::write(&report_w, crate::error_chain(&err).as_bytes());
            berth_sys::clone::exit_now(126)
        }
        Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(report_w);
    let mut message = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(&report_r, &mut buf) {
            Ok(0) => break,
            Ok(n) => message.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(OciError::io("read the exec's report")(e.into())),
        }
    }
    if !message.is_empty() {
        let _ = process::pidfd_wait(pidfd.as_fd());
        return Err(OciError::State(String::from_utf8_lossy(&message).into_owned()));
    }
    if let Some(file) = args.pid_file {
        super::write_pid_file(file, pid)?;
    }
    if args.detach {
        return Ok(0);
    }
    Ok(match process::pidfd_wait(pidfd.as_fd())? {
        process::Exit::Code(code) => code,
        process::Exit::Signal(sig) => 128 + sig,
    })
}

/// In the forked child: become the container's root, then its process.
fn run(
    p: &Process,
    mnt: &OwnedFd,
    user: &OwnedFd,
    console: Option<&OwnedFd>,
    preserve_fds: i32,
) -> Result<std::convert::Infallible, RuntimeError> {
    process::join_namespace(mnt.as_fd(), NamespaceKind::Mount)?;
    process::join_namespace(user.as_fd(), NamespaceKind::User)?;
    process::become_id(0)?;
    if p.terminal
        && let Some(console) = console
    {
        super::child::attach_terminal(console)?;
    }
    let ready = super::child::prepare(p, preserve_fds)?;
    super::child::finish(p, &ready)
}
