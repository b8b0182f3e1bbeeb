//! Starting a command: its streams (behind pipes of the sandbox's own where init gives those), on a terminal
//! init opens or on the streams attached, in a process group of its own.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use berth_sys::process as proc;

use super::{Init, libc_sig};
use crate::protocol::{self, Attached};

impl Init {
    /// The command's attached streams (the first of `fds`) as it gets them: where init gives commands pipes
    /// of the sandbox's own, each pipe of the supervisor's is put behind one (its copy added to `copies`).
    pub(super) fn own_streams(
        &self,
        attached: Attached,
        tty: bool,
        fds: Vec<OwnedFd>,
        copies: &mut Vec<crate::streams::Copy>,
    ) -> Result<Vec<OwnedFd>, String> {
        if !self.own_pipes || tty {
            return Ok(fds);
        }
        let inputs = [attached.stdin, attached.stdout, attached.stderr]
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .map(|(i, _)| i == 0)
            .collect::<Vec<bool>>();
        let mut out = Vec::with_capacity(fds.len());
        for (n, fd) in fds.into_iter().enumerate() {
            match inputs.get(n) {
                Some(input) if crate::streams::is_pipe(&fd) => match crate::streams::wrap(fd, *input) {
                    Ok((theirs, copy)) => {
                        out.push(theirs);
                        copies.push(copy);
                    }
                    Err(message) => {
                        std::mem::take(copies).into_iter().for_each(crate::streams::Copy::finish);
                        return Err(message);
                    }
                },
                _ => out.push(fd),
            }
        }
        Ok(out)
    }

    /// Start a command on a terminal init opens (see `pty`): `fds` are the supervisor's stream socket and
    /// the cgroup files to join.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spawn_on_terminal(
        &mut self,
        id: u64,
        argv: &[String],
        env: &[String],
        cwd: &str,
        (uid, gid): (u32, u32),
        attached: Attached,
        join_cgroup: usize,
        size: protocol::Winsize,
        mut fds: Vec<OwnedFd>,
    ) -> Result<i32, (i32, String)> {
        if attached != (Attached { stdin: true, stdout: false, stderr: false }) {
            return Err((
                125,
                "a command on init's terminal has only its stdin attached (the socket to copy to)".into(),
            ));
        }
        if fds.len() != 1 + join_cgroup {
            return Err((125, format!("expected {} descriptors, got {}", 1 + join_cgroup, fds.len())));
        }
        let outside = fds.remove(0);
        let (master, slave) = crate::terminal::open(size).map_err(|m| (125, m))?;
        let dup =
            |fd: &OwnedFd| rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| (125, format!("keep a terminal: {e}")));
        let (kept, copy) = (dup(&master)?, dup(&master)?);
        let mut stdio = vec![dup(&slave)?, dup(&slave)?, slave];
        stdio.append(&mut fds);
        let all = Attached { stdin: true, stdout: true, stderr: true };
        let pid = self.spawn(argv, env, cwd, uid, gid, all, join_cgroup, true, stdio)?;
        drop(master);
        // The command holds the only slave ends now: when it and its children are done with the terminal, the
        // copy from the master ends, and the supervisor's socket with it.
        if let Err(message) = crate::terminal::relay(copy, outside, pid) {
            proc::kill_group(pid, libc_sig::KILL);
            return Err((125, message));
        }
        self.terminals.insert(id, crate::terminal::Terminal { master: kept });
        Ok(pid)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn spawn(
        &self,
        argv: &[String],
        env: &[String],
        cwd: &str,
        uid: u32,
        gid: u32,
        attached: Attached,
        join_cgroup: usize,
        tty: bool,
        fds: Vec<OwnedFd>,
    ) -> Result<i32, (i32, String)> {
        let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
            return Err((125, "no command given".into()));
        };
        if tty && !attached.stdin {
            return Err((125, "a command on a terminal needs the terminal attached as its stdin".into()));
        }
        let expected = [attached.stdin, attached.stdout, attached.stderr].iter().filter(|a| **a).count() + join_cgroup;
        if fds.len() != expected {
            return Err((125, format!("expected {expected} stream descriptors, got {}", fds.len())));
        }
        if let Err(e) = std::fs::create_dir_all(cwd) {
            return Err((125, format!("cannot create the working directory {cwd}: {e}")));
        }
        let mut fds = fds.into_iter();
        let streams = expected - join_cgroup;
        let mut stdio: Vec<OwnedFd> = fds.by_ref().take(streams).collect();
        let join: Vec<OwnedFd> = fds.collect();
        stdio.reverse();
        let mut stream = |on: bool| {
            if on { stdio.pop().map(Stdio::from).unwrap_or_else(Stdio::null) } else { Stdio::null() }
        };
        let mut cmd = Command::new(program);
        cmd.args(&argv[1..])
            .env_clear()
            .current_dir(cwd)
            .uid(uid)
            .gid(gid)
            .stdin(stream(attached.stdin))
            .stdout(stream(attached.stdout))
            .stderr(stream(attached.stderr));
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        // Its own process group (so that it and its children can be signalled together); on a terminal, the
        // session that setsid makes gives it one.
        if !tty {
            cmd.process_group(0);
        }
        proc::prepare_command(&mut cmd, join, tty);
        match cmd.spawn() {
            Ok(child) => Ok(child.id() as i32),
            Err(e) => Err(match e.kind() {
                std::io::ErrorKind::NotFound => (127, format!("{program}: command not found")),
                std::io::ErrorKind::PermissionDenied => (126, format!("{program}: permission denied")),
                _ => (126, format!("{program}: cannot execute: {e}")),
            }),
        }
    }
}
