//! berth as an OCI runtime: the verbs containerd's runc shim calls (`create`, `start`, `state`, `kill`,
//! `delete`, `exec`, `pause`, `resume`, `ps`, `features`), each one short-lived command acting on a
//! container whose state is a small file under the runtime's root.
//!
//! A container is built with berth's own runtime (a user namespace with a host id block of its own,
//! id-mapped mounts, berth's masks, seccomp filter, landlock rules and capability bound), but its first
//! process is the config's program, forked by `create` itself: when `create` ends, the shim that started it
//! (a subreaper) becomes that process's parent, reaps it and reports its exit, as with runc. berth's daemon
//! is not involved.

mod child;
pub mod config;
pub mod exec;
pub mod plan;
mod pods;
mod state;

pub use pods::key as pod_key;

use std::path::{Path, PathBuf};

pub use exec::{ExecArgs, exec};
pub use state::{State, Status};

use crate::RuntimeError;
use crate::cgroup::CgroupError;

/// What went wrong with an OCI verb. Messages are what containerd shows its user.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("container {0} does not exist")]
    NotFound(String),
    #[error("container {0} already exists")]
    Exists(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    State(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Sys(#[from] berth_sys::SysError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl OciError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OciError {
        let what = what.into();
        move |source| OciError::Io { what, source }
    }
}

/// What the container's first process tells `create`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Report {
    /// Built and waiting for `start`.
    Waiting,
    Failed {
        message: String,
    },
}

/// The device paths landlock lets a container's terminal calls reach.
pub(crate) const TTY_PATHS: [&str; 3] = ["/dev/pts", "/dev/tty", "/dev/ptmx"];

/// Where containers' state lives when no `--root` is given.
pub const DEFAULT_ROOT: &str = "/run/berth-oci";

/// What `create` is given on its command line.
pub struct CreateArgs<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub preserve_fds: i32,
    /// A workspace volume of the node's berth daemon to mount at /workspace (its files stored under berth's
    /// storage ids, seen as root's inside).
    pub workspace: Option<&'a Path>,
    /// Variables set over the process's own (`NAME=value`).
    pub extra_env: &'a [String],
}

/// Set each `NAME=value` of `extra` in `env`, over a variable of that name already there.
pub(crate) fn set_env(env: &mut Vec<String>, extra: &[String]) {
    for var in extra {
        let name = var.split('=').next().unwrap_or_default();
        env.retain(|e| e.split('=').next() != Some(name));
        env.push(var.clone());
    }
}

/// The runtime's state root: one directory per container.
pub struct Oci {
    root: PathBuf,
}

impl Oci {
    pub fn new(root: &Path) -> Oci {
        Oci { root: root.to_path_buf() }
    }

    fn dir(&self, id: &str) -> Result<PathBuf, OciError> {
        check_id(id)?;
        Ok(self.root.join(id))
    }

    /// The state of container `id`.
    pub fn state(&self, id: &str) -> Result<State, OciError> {
        State::load(&self.dir(id)?, id)
    }

    /// Build container `id` from its bundle, whose config the caller read (`Config::load`), with its first
    /// process waiting for `start`.
    pub fn create(&self, config: &config::Config, args: &CreateArgs<'_>) -> Result<(), OciError> {
        let dir = self.dir(args.id)?;
        // Root's alone: the state names pids, cgroups and the bundle; the container reaches its start fifo
        // through a descriptor, not by path.
        std::fs::create_dir_all(&self.root).map_err(OciError::io(format!("create {}", self.root.display())))?;
        let private = |path: &Path| {
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(OciError::io(format!("make {} private", path.display())))
        };
        private(&self.root)?;
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(OciError::Exists(args.id.into())),
            Err(e) => return Err(OciError::io(format!("create {}", dir.display()))(e)),
        }
        private(&dir)?;
        let made = state::create(&self.root, &dir, config, args);
        if made.is_err() {
            let _ = state::remove(&self.root, &dir, args.id);
        }
        made
    }

    /// Let the first process of a created container run its program.
    pub fn start(&self, id: &str) -> Result<(), OciError> {
        let st = self.state(id)?;
        st.start(&self.dir(id)?)
    }

    /// Send `signal` to the first process, or with `all` to every process of the container.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), OciError> {
        self.state(id)?.kill(signal, all)
    }

    /// Remove a stopped (or only created) container; with `force`, kill it first whatever it does.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), OciError> {
        let dir = self.dir(id)?;
        let st = match State::load(&dir, id) {
            Ok(st) => st,
            // A half-made container (its create failed or crashed) is removed by force.
            Err(OciError::NotFound(_)) if force && dir.exists() => return state::remove(&self.root, &dir, id),
            Err(e) => return Err(e),
        };
        let status = st.status();
        if !force && !matches!(status, Status::Stopped | Status::Created) {
            return Err(OciError::State(format!(
                "cannot delete container {id} that is not stopped: {}",
                status.as_str()
            )));
        }
        st.kill_everything()?;
        state::remove(&self.root, &dir, id)
    }

    /// Freeze every process of the container.
    pub fn pause(&self, id: &str) -> Result<(), OciError> {
        let st = self.state(id)?;
        match st.status() {
            Status::Running => Ok(st.cgroup()?.freeze()?),
            other => Err(OciError::State(format!("container {id} is {}, not running", other.as_str()))),
        }
    }

    /// Thaw a paused container.
    pub fn resume(&self, id: &str) -> Result<(), OciError> {
        let st = self.state(id)?;
        match st.status() {
            Status::Paused => Ok(st.cgroup()?.thaw()?),
            other => Err(OciError::State(format!("container {id} is {}, not paused", other.as_str()))),
        }
    }

    /// Change the cgroup limits of a container that has not stopped (`update --resources`).
    pub fn update(&self, id: &str, resources: &config::Resources) -> Result<(), OciError> {
        let st = self.state(id)?;
        if st.status() == Status::Stopped {
            return Err(OciError::State(format!("container {id} is stopped")));
        }
        Ok(st.cgroup()?.update(&resources.limits())?)
    }

    /// The host pids of the container's processes.
    pub fn ps(&self, id: &str) -> Result<Vec<i32>, OciError> {
        let st = self.state(id)?;
        Ok(st.cgroup()?.procs().unwrap_or_default())
    }

    /// The ids of the containers under the root, sorted.
    pub fn list(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join(state::STATE_FILE).exists())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        ids.sort();
        ids
    }
}

/// Connect to the console socket a terminal's master end is sent to.
pub(crate) fn connect_console(path: &Path) -> Result<std::os::fd::OwnedFd, OciError> {
    std::os::unix::net::UnixStream::connect(path)
        .map(std::os::fd::OwnedFd::from)
        .map_err(OciError::io(format!("connect to the console socket {}", path.display())))
}

/// Write `pid` to the pid file the shim reads, whole or not at all.
pub(crate) fn write_pid_file(file: &Path, pid: i32) -> Result<(), OciError> {
    let fresh = file.with_extension("berth-new");
    std::fs::write(&fresh, pid.to_string())
        .and_then(|()| std::fs::rename(&fresh, file))
        .map_err(OciError::io(format!("write the pid file {}", file.display())))
}

/// Container ids: what containerd and people give (letters, digits, `_`, `.`, `-`, up to 128).
pub fn check_id(id: &str) -> Result<(), OciError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(OciError::Config(format!(
            "{id:?} is not a container id (1 to 128 letters, digits, '_', '.' and '-', not starting with '.')"
        )))
    }
}

/// What this runtime supports, as runtime-spec's `features` document describes it.
pub fn features() -> serde_json::Value {
    let caps: Vec<String> = crate::child::KEPT_CAPABILITIES
        .iter()
        .filter_map(|n| config::capability_name(*n))
        .map(|n| format!("CAP_{n}"))
        .collect();
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.1.0",
        "hooks": [],
        "mountOptions": ["ro", "rw", "bind", "rbind", "nosuid", "nodev", "noexec", "noatime", "nodiratime",
            "relatime", "strictatime", "sync", "dirsync"],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
            "capabilities": caps,
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false, "rdma": false},
            "seccomp": {"enabled": false},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false},
            "intelRdt": {"enabled": false},
            "mountExtensions": {"idmap": {"enabled": false}}
        },
        "annotations": {
            "org.berth.isolation": "namespaces",
            "org.berth.seccomp": "berth's own filter, always applied; a config's linux.seccomp is not used",
            "org.berth.user-namespace": "always: root inside is an unprivileged host id block per pod"
        }
    })
}
