//! A container's state file, its status as the kernel shows it, and the verbs that act on its processes;
//! `create`, which forks the container's first process, is here too.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_init::protocol;
use berth_sys::clone::{Forked, Namespaces};
use berth_sys::process::{self, NamespaceKind};
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::config::{Config, Want};
use super::{CreateArgs, OciError, Report, pods};
use crate::cgroup::{Cgroup, Entry, Hierarchy};
use crate::child::Go;
use crate::ids::IDS_PER_SANDBOX;

pub(crate) const STATE_FILE: &str = "state.json";
const FIFO: &str = "exec.fifo";
/// The cgroup parent of containers whose config names none.
const DEFAULT_CGROUP_PARENT: &str = "berth-oci";

/// A container's status, as runtime-spec names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Created,
    Running,
    Paused,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

/// What berth keeps of a container between verbs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub id: String,
    /// The first process's host pid, and its start time (so that a reused pid is not taken for it).
    pub pid: i32,
    pub start_time: u64,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created_ms: u64,
    pub annotations: BTreeMap<String, String>,
    pub cgroup_parent: PathBuf,
    pub cgroup_name: String,
    /// The host id that is root inside.
    pub host_root: u32,
    #[serde(skip)]
    dir: PathBuf,
}

impl State {
    pub(crate) fn load(dir: &Path, id: &str) -> Result<State, OciError> {
        let text = std::fs::read_to_string(dir.join(STATE_FILE)).map_err(|_| OciError::NotFound(id.into()))?;
        let mut st: State = serde_json::from_str(&text)
            .map_err(|e| OciError::State(format!("the state of container {id} cannot be read: {e}")))?;
        st.dir = dir.to_path_buf();
        Ok(st)
    }

    fn save(&self) -> Result<(), OciError> {
        let fresh = self.dir.join("state.json.new");
        let text = serde_json::to_vec(self).map_err(|e| OciError::State(e.to_string()))?;
        std::fs::write(&fresh, text)
            .and_then(|()| std::fs::rename(&fresh, self.dir.join(STATE_FILE)))
            .map_err(OciError::io("save the container's state"))
    }

    pub(crate) fn cgroup(&self) -> Result<Cgroup, OciError> {
        Ok(Hierarchy::detect()?.nested(&self.cgroup_parent)?.open(&self.cgroup_name))
    }

    /// Whether the first process still runs (a zombie, or another process under its pid, does not).
    pub fn alive(&self) -> bool {
        proc_start(self.pid).is_some_and(|(state, start)| start == self.start_time && state != 'Z' && state != 'X')
    }

    pub fn status(&self) -> Status {
        if !self.alive() {
            Status::Stopped
        } else if self.dir.join(FIFO).exists() {
            Status::Created
        } else if self.cgroup().and_then(|c| Ok(c.is_frozen()?)).unwrap_or(false) {
            Status::Paused
        } else {
            Status::Running
        }
    }

    /// The state as `runc state` prints it.
    pub fn to_oci(&self) -> serde_json::Value {
        let status = self.status();
        serde_json::json!({
            "ociVersion": "1.0.2",
            "id": self.id,
            "pid": if status == Status::Stopped { 0 } else { self.pid },
            "status": status.as_str(),
            "bundle": self.bundle,
            "rootfs": self.rootfs,
            "created": berth_api::rfc3339(self.created_ms),
            "owner": "",
            "annotations": self.annotations,
        })
    }

    pub(crate) fn start(&self, dir: &Path) -> Result<(), OciError> {
        match self.status() {
            Status::Created => {}
            Status::Stopped if dir.join(FIFO).exists() => {
                return Err(OciError::State(format!("container {}'s process ended before it was started", self.id)));
            }
            other => {
                return Err(OciError::State(format!("container {} is {}, not created", self.id, other.as_str())));
            }
        }
        let fifo = dir.join(FIFO);
        let r = rustix::fs::open(&fifo, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| OciError::io("open the start fifo")(e.into()))?;
        loop {
            let mut fds = [rustix::event::PollFd::new(&r, rustix::event::PollFlags::IN)];
            let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
            let mut byte = [0u8; 1];
            match rustix::io::read(&r, &mut byte) {
                Ok(1) => break,
                Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(OciError::io("read the start fifo")(e.into())),
            }
            if !self.alive() {
                return Err(OciError::State(format!("container {}'s process ended before it was started", self.id)));
            }
        }
        std::fs::remove_file(&fifo).map_err(OciError::io("remove the start fifo"))
    }

    pub(crate) fn kill(&self, signal: i32, all: bool) -> Result<(), OciError> {
        if all {
            let cg = self.cgroup()?;
            for pid in cg.procs().unwrap_or_default() {
                let _ = process::signal_pid(pid, signal);
            }
            // Frozen processes die only once thawed.
            if signal == 9 && cg.is_frozen().unwrap_or(false) {
                cg.thaw()?;
            }
            return Ok(());
        }
        // containerd looks for runc's words to tell a process that is gone from a failure.
        if !self.alive() {
            return Err(OciError::State(format!("container not running: {} has stopped", self.id)));
        }
        Ok(process::signal_pid(self.pid, signal)?)
    }

    /// Kill every process of the container and wait (a few seconds at most) until none is left.
    pub(crate) fn kill_everything(&self) -> Result<(), OciError> {
        let cg = self.cgroup()?;
        if !cg.exists() {
            return Ok(());
        }
        let _ = cg.kill_all();
        let _ = cg.thaw();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cg.procs().is_ok_and(|p| !p.is_empty()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

/// A process's state letter and start time (in clock ticks since boot), from `/proc/PID/stat`.
fn proc_start(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 of the line is the 20th after the name.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Undo what `create` made of container `dir`: its cgroup, its pod membership, its directory.
pub(crate) fn remove(root: &Path, dir: &Path, id: &str) -> Result<(), OciError> {
    // Every step is tried; the first failure is the one reported.
    let mut first: Option<OciError> = None;
    if let Ok(st) = State::load(dir, id) {
        match st.cgroup() {
            Ok(cg) => {
                let _ = cg.kill_all();
                let _ = cg.thaw();
                if let Err(e) = cg.remove() {
                    first.get_or_insert(e.into());
                }
            }
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    if let Err(e) = pods::leave(root, dir) {
        first.get_or_insert(e);
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        first.get_or_insert(OciError::io(format!("remove {}", dir.display()))(e));
    }
    first.map_or(Ok(()), Err)
}

/// The cgroup parent and name for a container: the config's `cgroupsPath`, else `berth-oci/<id>`.
fn cgroup_place(config: &Config, id: &str) -> (PathBuf, String) {
    match config.linux.cgroups_path.as_deref().map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
        Some(path) => {
            let p = Path::new(path);
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| id.to_string());
            let parent = p.parent().filter(|q| !q.as_os_str().is_empty()).map(Path::to_path_buf);
            (parent.unwrap_or_else(|| PathBuf::from(DEFAULT_CGROUP_PARENT)), name)
        }
        None => (PathBuf::from(DEFAULT_CGROUP_PARENT), id.to_string()),
    }
}

/// Build the container in `dir` (already made, empty) and leave its first process waiting for `start`.
pub(crate) fn create(root: &Path, dir: &Path, config: &Config, args: &CreateArgs<'_>) -> Result<(), OciError> {
    let ns = config.namespaces()?;
    let limits = config.limits()?;
    let mut process = config.process.clone().unwrap_or_default();
    super::set_env(&mut process.env, args.extra_env);
    let hierarchy = Hierarchy::detect()?;
    let (cgroup_parent, cgroup_name) = cgroup_place(config, args.id);
    let nested = hierarchy.nested(&cgroup_parent)?;
    let v2 = hierarchy.version() == crate::cgroup::Version::V2;
    let own_cgroups = if v2 { Vec::new() } else { nested.open(&cgroup_name).paths().to_vec() };
    let host = super::plan::Host {
        bundle: args.bundle,
        scratch: Path::new(crate::sandbox::SCRATCH_MOUNT_POINT),
        cgroup_v2: v2,
        cgroup_dirs: &own_cgroups,
        workspace: args.workspace,
    };
    if let Some(ws) = args.workspace {
        crate::claims::prepare_storage(ws, 0o755)?;
    }
    let plan = super::plan::compile(config, &host)?;
    std::fs::create_dir_all(host.scratch).map_err(OciError::io("create the scratch mount point"))?;
    let pod = pods::key(args.id, &config.annotations);
    // A pod's containers come after its sandbox container, which is under this root.
    let pod_leader = if pod == args.id {
        None
    } else {
        Some(State::load(&root.join(&pod), &pod).map_err(|_| {
            OciError::Config(format!(
                "the config names the pod {pod}, which has no sandbox container under this runtime's root"
            ))
        })?)
    };
    let place = cgroup_parent.join(&cgroup_name);
    for other in super::Oci::new(root).list().iter().filter_map(|id| State::load(&root.join(id), id).ok()) {
        let theirs = other.cgroup_parent.join(&other.cgroup_name);
        if place.starts_with(&theirs) || theirs.starts_with(&place) {
            return Err(OciError::Config(format!(
                "the cgroup {} would hold, or be inside, container {}'s",
                place.display(),
                other.id
            )));
        }
    }
    let base = pods::join(root, dir, &pod)?;
    let cgroup = nested.create(&cgroup_name, &limits)?;
    let mut st = State {
        id: args.id.to_string(),
        pid: 0,
        start_time: 0,
        bundle: args.bundle.to_path_buf(),
        rootfs: config.rootfs(args.bundle),
        created_ms: now_ms(),
        annotations: config.annotations.clone(),
        cgroup_parent,
        cgroup_name,
        host_root: base,
        dir: dir.to_path_buf(),
    };
    // Saved before the fork, so that a failure from here on removes the cgroup with the rest.
    st.save()?;
    let fifo_path = dir.join(FIFO);
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo_path, Mode::from_raw_mode(0o600))
        .map_err(|e| OciError::io("make the start fifo")(e.into()))?;
    // Opened for writing by the container's root, which is this host id.
    let owner = Some(rustix::process::Uid::from_raw(base));
    rustix::fs::chown(&fifo_path, owner, Some(rustix::process::Gid::from_raw(base)))
        .map_err(|e| OciError::io("hand the start fifo to the container")(e.into()))?;
    let fifo = rustix::fs::open(&fifo_path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| OciError::io("open the start fifo")(e.into()))?;
    let console = match (process.terminal, args.console_socket) {
        (true, Some(path)) => Some(super::connect_console(path)?),
        (true, None) => {
            return Err(OciError::Config("the process wants a terminal: give --console-socket".into()));
        }
        (false, _) => None,
    };
    // Namespaces to share (a pod's) are entered here, by host root, so that the child is born in them: only
    // the pod's own (those its sandbox container's user namespace owns), or the host's network and uts ones.
    let own_pid_ns = process::open_namespace(std::process::id() as i32, "pid")?;
    let leader_userns = match &pod_leader {
        Some(leader) => Some(
            rustix::fs::stat(format!("/proc/{}/ns/user", leader.pid))
                .map_err(|e| OciError::State(format!("the pod's sandbox container {pod} is not running: {e}")))?,
        ),
        None => None,
    };
    let mut pod_userns = None;
    for (want, kind, name) in [
        (&ns.net, NamespaceKind::Net, "network"),
        (&ns.ipc, NamespaceKind::Ipc, "ipc"),
        (&ns.uts, NamespaceKind::Uts, "uts"),
        (&ns.pid, NamespaceKind::Pid, "pid"),
    ] {
        let Want::Join(path) = want else { continue };
        let f = std::fs::File::open(path).map_err(OciError::io(format!("open the namespace {}", path.display())))?;
        let (owner, host) = process::namespace_owner(f.as_fd())?;
        if host && matches!(kind, NamespaceKind::Pid | NamespaceKind::Ipc) {
            return Err(OciError::Config(format!(
                "the config joins {}, the host's {name} namespace: berth-oci refuses it",
                path.display()
            )));
        }
        if !host {
            let theirs = rustix::fs::fstat(&owner).map_err(|e| OciError::io("look at a user namespace")(e.into()))?;
            let pods = leader_userns.as_ref().is_some_and(|l| l.st_ino == theirs.st_ino && l.st_dev == theirs.st_dev);
            if !pods && kind != NamespaceKind::Net {
                return Err(OciError::Config(format!(
                    "the config joins {}, another container's {name} namespace: only its own pod's are joined",
                    path.display()
                )));
            }
        }
        process::join_namespace(f.as_fd(), kind)?;
        if kind == NamespaceKind::Pid && !host {
            pod_userns = Some(owner);
        }
    }
    let entry = cgroup.entry()?;
    let into_cgroup = match &entry {
        Entry::Dir(d) => Some(d.as_fd()),
        Entry::Tasks(_) => None,
    };
    let (parent_sock, child_sock) = berth_sys::fd::seqpacket_pair()?;
    let own = Namespaces {
        user: true,
        mount: true,
        pid: ns.pid == Want::New,
        net: ns.net == Want::New,
        ipc: ns.ipc == Want::New,
        uts: ns.uts == Want::New,
    };
    // In a pod's user namespace the child makes its namespaces itself, once it is in it.
    let spawn_ns = if pod_userns.is_some() { Namespaces::NONE } else { own };
    let pod_userns_for_maps = match &pod_userns {
        Some(fd) => Some(
            rustix::io::fcntl_dupfd_cloexec(fd, 3)
                .map_err(|e| OciError::io("keep the pod's user namespace")(e.into()))?,
        ),
        None => None,
    };
    let (pid, pidfd) = match berth_sys::clone::spawn(spawn_ns, into_cgroup)? {
        Forked::Child => {
            drop(parent_sock);
            let handed = super::child::Handed {
                control: child_sock,
                cgroup: &entry,
                process: &process,
                fifo,
                console,
                set_hostname: ns.uts == Want::New,
                loopback: ns.net == Want::New,
                preserve_fds: args.preserve_fds,
                pod_userns,
                unshare: Namespaces { user: false, pid: false, ..own },
            };
            super::child::run(&plan, handed)
        }
        Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    // What this process forks from here on (the overlay's staging helper) is not the pod's to see.
    process::join_namespace(own_pid_ns.as_fd(), NamespaceKind::Pid)?;
    drop(child_sock);
    drop(entry);
    let started = start_child(pid, &plan, base, pod_userns_for_maps, parent_sock.as_fd());
    if let Err(e) = started {
        let _ = process::pidfd_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
        let _ = process::pidfd_wait(pidfd.as_fd());
        return Err(e);
    }
    if let Some(adj) = process.oom_score_adj {
        std::fs::write(format!("/proc/{pid}/oom_score_adj"), adj.to_string()).map_err(OciError::io(format!(
            "set the container's oom_score_adj to {adj} (lowering it needs CAP_SYS_RESOURCE; containerd's \
             restrict_oom_score_adj keeps it at containerd's own)"
        )))?;
    }
    st.pid = pid;
    st.start_time = proc_start(pid).map(|(_, t)| t).unwrap_or(0);
    st.save()?;
    if let Some(file) = args.pid_file {
        super::write_pid_file(file, pid)?;
    }
    Ok(())
}

/// Map the child's ids (unless it joins the pod's user namespace), hand it its mounts, and wait until it says
/// it waits for `start`.
fn start_child(
    pid: i32,
    plan: &crate::plan::Plan,
    base: u32,
    pod_userns: Option<OwnedFd>,
    control: std::os::fd::BorrowedFd<'_>,
) -> Result<(), OciError> {
    let userns = match pod_userns {
        // Mapped already: the pod's, whose root is `base` too (one id block per pod).
        Some(userns) => userns,
        None => {
            process::write_id_maps(pid, base, IDS_PER_SANDBOX)?;
            process::open_namespace(pid, "user")?
        }
    };
    // The root is tree 0. An overlay (containerd's snapshot) is made again on id-mapped layers; anything
    // else is id-mapped as it is.
    let rootfs = &plan.trees[0];
    let first = match overlay_at(&rootfs.source) {
        Some(layers) => {
            let staging = Path::new(crate::sandbox::SCRATCH_MOUNT_POINT);
            berth_sys::mount::overlay_idmapped(userns.as_fd(), &layers, staging, base)?
        }
        None => crate::sandbox::clone_trees(
            &crate::plan::Plan { trees: vec![rootfs.clone()], ..plan.clone() },
            base,
            userns.as_fd(),
        )?
        .pop()
        .ok_or_else(|| OciError::State("the root could not be prepared".into()))?,
    };
    let rest = crate::plan::Plan { trees: plan.trees[1..].to_vec(), ..plan.clone() };
    let mut trees = vec![first];
    trees.extend(crate::sandbox::clone_trees(&rest, base, userns.as_fd())?);
    let fds: Vec<std::os::fd::BorrowedFd<'_>> = trees.iter().map(|t| t.as_fd()).collect();
    let died = || OciError::State("the container's first process died while it was being set up".into());
    protocol::send(control, &Go { trees: fds.len() }, &fds).map_err(|_| died())?;
    match protocol::recv::<Report>(control) {
        Ok((Report::Waiting, _)) => Ok(()),
        Ok((Report::Failed { message }, _)) => Err(OciError::State(message)),
        Err(_) => Err(died()),
    }
}

/// The layers of the overlay mounted at `path`, if an overlay is what is mounted there.
fn overlay_at(path: &Path) -> Option<berth_sys::mount::OverlayLayers> {
    let mounts = berth_sys::mountinfo::read().ok()?;
    let m = mounts.iter().rev().find(|m| m.mount_point == path)?;
    if m.fstype != "overlay" {
        return None;
    }
    overlay_layers(&m.super_options)
}

/// An overlay's layers from its super options (`lowerdir=a:b,upperdir=u,workdir=w,index=off`).
fn overlay_layers(options: &[String]) -> Option<berth_sys::mount::OverlayLayers> {
    let mut layers = berth_sys::mount::OverlayLayers { lower: vec![], upper: None, work: None, options: vec![] };
    for o in options {
        match o.split_once('=') {
            Some(("lowerdir", v)) => layers.lower = v.split(':').filter(|p| !p.is_empty()).map(PathBuf::from).collect(),
            Some(("upperdir", v)) => layers.upper = Some(PathBuf::from(v)),
            Some(("workdir", v)) => layers.work = Some(PathBuf::from(v)),
            // Options of the mount rather than of the overlay, and ones the kernel adds by itself.
            None if matches!(o.as_str(), "rw" | "ro" | "" | "relatime" | "noatime") => {}
            _ => layers.options.push(o.clone()),
        }
    }
    (!layers.lower.is_empty()).then_some(layers)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_overlays_layers_are_read_from_its_options() {
        let opts: Vec<String> = "rw,lowerdir=/s/2/fs:/s/1/fs,upperdir=/s/3/fs,workdir=/s/3/work,index=off,uuid=null"
            .split(',')
            .map(str::to_string)
            .collect();
        let l = overlay_layers(&opts).unwrap();
        assert_eq!(l.lower, [PathBuf::from("/s/2/fs"), PathBuf::from("/s/1/fs")]);
        assert_eq!(l.upper, Some(PathBuf::from("/s/3/fs")));
        assert_eq!(l.work, Some(PathBuf::from("/s/3/work")));
        assert_eq!(l.options, ["index=off", "uuid=null"]);
        assert!(overlay_layers(&["rw".to_string()]).is_none());
    }

    #[test]
    fn a_configs_cgroups_path_is_its_parent_and_name() {
        let mut c: Config = serde_json::from_value(serde_json::json!({"ociVersion": "1.0.2"})).unwrap();
        assert_eq!(cgroup_place(&c, "abc"), (PathBuf::from("berth-oci"), "abc".into()));
        c.linux.cgroups_path = Some("/k8s.io/0123abc".into());
        assert_eq!(cgroup_place(&c, "x"), (PathBuf::from("k8s.io"), "0123abc".into()));
        c.linux.cgroups_path = Some("/kubepods/burstable/pod1/c1".into());
        assert_eq!(cgroup_place(&c, "x"), (PathBuf::from("kubepods/burstable/pod1"), "c1".into()));
        c.linux.cgroups_path = Some("solo".into());
        assert_eq!(cgroup_place(&c, "x"), (PathBuf::from("berth-oci"), "solo".into()));
    }

    #[test]
    fn a_process_start_time_is_read_past_its_name() {
        let (state, start) = proc_start(std::process::id() as i32).unwrap();
        assert!(state == 'R' || state == 'S');
        assert!(start > 0);
        assert!(proc_start(i32::MAX).is_none());
    }
}
