//! The lifecycle of one sandbox on the host: create, talk to its init, destroy and prove nothing is left.

use std::fs::{self, File};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_init::protocol::{self, Attached, Event, Request};
use berth_sys::mount::Attrs;
use berth_sys::process;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::FlockOperation;

use crate::RuntimeError;
use crate::backend::{Backend, Boot};
use crate::cgroup::{Cgroup, Hierarchy, Usage};
use crate::claims::{Partial, claim, claim_held, prepare_storage};
pub use crate::claims::{new_id, supervised, sweep_sandbox};
use crate::ids::{IDS_PER_SANDBOX, IdBlock, STORAGE_BASE};
use crate::image::Images;
use crate::plan::{self, Idmap, Layout, Plan};
use crate::spec::{self, Isolation, Spec};

/// The empty directory each sandbox mounts its private scratch tmpfs on, inside its own mount namespace.
/// It lives under /run rather than the data root so that it can be reached with the sandbox's own (host
/// unprivileged) credentials whatever the data root's permissions are.
pub const SCRATCH_MOUNT_POINT: &str = "/run/berth/scratch";

/// Host-wide liveness claims, one per sandbox, held (flock) for its whole life by whoever supervises it.
pub const LIVE_DIR: &str = "/run/berth/live";

/// Most bind mounts one sandbox may have.
pub const MAX_MOUNTS: usize = 32;

/// One host's sandbox runtime, rooted at a data directory.
pub struct Runtime {
    pub(crate) root: PathBuf,
    pub(crate) hierarchy: Hierarchy,
    pub(crate) images: Images,
    /// The berth binary, opened once: every sandbox's init is started from it.
    pub(crate) exe: OwnedFd,
}

/// A running sandbox. Dropping it destroys it; [`Sandbox::destroy`] does the same and reports how it went.
pub struct Sandbox {
    pub(crate) id: String,
    pub(crate) claim_path: PathBuf,
    pub(crate) _claim: File,
    pub(crate) live_path: PathBuf,
    pub(crate) _live: File,
    /// The host id range its ids map to (none under gVisor, whose kernel maps them).
    pub(crate) _ids: Option<IdBlock>,
    pub(crate) cgroup: Cgroup,
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) control: OwnedFd,
    /// The backend it runs on.
    pub(crate) backend: &'static dyn Backend,
    /// Threads copying commands' streams to and from regular files, for a backend whose
    /// `command_streams` needs them (gVisor's: see `gvisor::through_pipes`), joined at teardown.
    pub(crate) copiers: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Its init can be checkpointed: one berth started, or one restored that executed itself again.
    pub(crate) checkpointable: bool,
    /// What init's ready said of its landlock rules (see [`Sandbox::landlock`]).
    pub(crate) landlock: String,
    pub(crate) destroyed: bool,
}

/// A command's standard streams, handed to it as they are.
#[derive(Clone, Copy, Default)]
pub struct Stdio<'a> {
    pub stdin: Option<BorrowedFd<'a>>,
    pub stdout: Option<BorrowedFd<'a>>,
    pub stderr: Option<BorrowedFd<'a>>,
}

/// What destroying a sandbox did, in order, and what the leak check found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Teardown {
    pub steps: Vec<String>,
    pub leftovers: Vec<String>,
}

impl Runtime {
    /// Open the runtime on `root`, creating it if needed, and clean up what crashed runs left behind.
    pub fn open(root: &Path) -> Result<Runtime, RuntimeError> {
        if !rustix::process::geteuid().is_root() {
            return Err(RuntimeError::NotRoot);
        }
        let text = root.to_string_lossy();
        if !root.is_absolute() || text.contains([',', ':', '=', '\n']) {
            return Err(RuntimeError::DataRoot {
                path: root.to_path_buf(),
                reason: "it must be an absolute path without ',', ':' or '='".into(),
            });
        }
        for sub in ["sandboxes", "images"] {
            fs::create_dir_all(root.join(sub))
                .map_err(|source| RuntimeError::PrepareRoot { path: root.join(sub), source })?;
        }
        // Imported images are stored under berth's storage ids: host users have no business in them.
        fs::set_permissions(root.join("images"), fs::Permissions::from_mode(0o700))
            .map_err(|source| RuntimeError::PrepareRoot { path: root.join("images"), source })?;
        fs::create_dir_all(SCRATCH_MOUNT_POINT)
            .map_err(|source| RuntimeError::PrepareRoot { path: SCRATCH_MOUNT_POINT.into(), source })?;
        let exe = rustix::fs::open(
            "/proc/self/exe",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| berth_sys::SysError::new("open the berth binary", e))?;
        let rt = Runtime {
            root: root.to_path_buf(),
            hierarchy: Hierarchy::detect()?,
            images: Images::new(root.join("images")),
            exe,
        };
        rt.sweep();
        Ok(rt)
    }

    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// Remove sandboxes whose supervisor died without tearing them down (their claim is no longer held).
    /// Returns the ids removed.
    pub fn sweep(&self) -> Vec<String> {
        let mut removed = Vec::new();
        crate::claims::remove_half_made(&self.root.join("sandboxes"), None);
        crate::claims::remove_half_made(Path::new(LIVE_DIR), None);
        let Ok(entries) = fs::read_dir(self.root.join("sandboxes")) else {
            return removed;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".lock") else { continue };
            let Ok(file) = File::options().write(true).open(entry.path()) else {
                continue;
            };
            if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
                continue;
            }
            let cg = self.hierarchy.open(id);
            let _ = cg.kill_all();
            let _ = cg.remove();
            let _ = fs::remove_file(entry.path());
            let _ = fs::remove_file(Path::new(LIVE_DIR).join(format!("{id}.lock")));
            removed.push(id.to_string());
        }
        // Cgroups are the host's, not one data root's: a sandbox whose data root is gone (or that crashed
        // before anything else was made) is found by its cgroup, and is stale when nobody holds its liveness
        // claim.
        for id in self.hierarchy.list() {
            let live = Path::new(LIVE_DIR).join(format!("{id}.lock"));
            if claim_held(&live) {
                continue;
            }
            let cg = self.hierarchy.open(&id);
            let _ = cg.kill_all();
            if cg.remove().is_ok() {
                let _ = fs::remove_file(&live);
                removed.push(id);
            }
        }
        removed
    }

    /// Build and start a sandbox. On error nothing of it is left behind.
    pub fn create(&self, spec: &Spec) -> Result<Sandbox, RuntimeError> {
        spec::check_name(&spec.name)?;
        let backend = crate::backend::backend(spec.isolation);
        backend.check()?;
        if let Some(bytes) = spec.limits.memory_bytes.filter(|b| *b < spec::MIN_MEMORY) {
            return Err(spec::SpecError::MemoryTooSmall(bytes).into());
        }
        if spec.mounts.len() > MAX_MOUNTS {
            return Err(RuntimeError::TooManyMounts { max: MAX_MOUNTS });
        }
        let owners = mount_owners(spec)?;
        for v in &spec.volumes {
            spec::check_target(&v.target)?;
        }
        crate::trace::mark("start");
        let layers = self.images.layers(&spec.image)?;
        if let Some(state) = &spec.state {
            prepare_storage(state, 0o700)?;
        }
        for v in &spec.volumes {
            prepare_storage(&v.source, 0o755)?;
        }
        let id = match &spec.id {
            Some(id) => {
                spec::check_id(id)?;
                if claim_held(&Path::new(LIVE_DIR).join(format!("{id}.lock"))) {
                    return Err(RuntimeError::Running { id: id.clone() });
                }
                id.clone()
            }
            None => new_id()?,
        };
        let (claim_file, claim_path) = claim(&self.root.join("sandboxes"), &id)?;
        // From here on, a failure must undo what was made: `Partial` does that when dropped.
        let mut partial = Partial { cgroup: None, claim_path: Some(claim_path.clone()), live_path: None };
        let (live, live_path) = claim(Path::new(LIVE_DIR), &id)?;
        partial.live_path = Some(live_path.clone());
        let layout = Layout { dir: PathBuf::from(SCRATCH_MOUNT_POINT), state: spec.state.is_some() };
        let plan = plan::compile(spec, &layers, &layout, &owners);
        let claims = ((claim_file, claim_path), (live, live_path));
        backend.boot(self, spec, Boot { id: &id, claims, partial: &mut partial, plan, layout: &layout })
    }
}

/// The owners (uid, gid) of the spec's mount sources, in order; a read-write mount of a root-owned one is
/// refused.
pub(crate) fn mount_owners(spec: &Spec) -> Result<Vec<(u32, u32)>, RuntimeError> {
    let mut owners = Vec::new();
    for m in &spec.mounts {
        let meta = fs::metadata(&m.host).map_err(|_| RuntimeError::MountSource { path: m.host.clone() })?;
        // Read-write, files a sandbox writes there would belong to host root (the directory's owner),
        // setuid bits and all.
        if !m.readonly && (meta.uid() == 0 || meta.gid() == 0) {
            return Err(RuntimeError::RootOwnedMount { path: m.host.clone() });
        }
        owners.push((meta.uid(), meta.gid()));
    }
    Ok(owners)
}

/// The plan's trees, cloned detached and id-mapped: `userns` is the sandbox's own user namespace (or one
/// with the same map).
pub(crate) fn clone_trees(plan: &Plan, base: u32, userns: BorrowedFd<'_>) -> Result<Vec<OwnedFd>, RuntimeError> {
    let mut owner_ns: Vec<((u32, u32), OwnedFd)> = Vec::new();
    let mut storage_ns: Option<OwnedFd> = None;
    let mut trees = Vec::with_capacity(plan.trees.len());
    for t in &plan.trees {
        let attrs = Attrs { readonly: t.readonly, nosuid: true, nodev: true, noexec: false };
        let ns = match t.idmap {
            Idmap::Host => {
                trees.push(berth_sys::mount::clone_tree(&t.source, attrs, true)?);
                continue;
            }
            Idmap::Sandbox => userns,
            Idmap::Storage => {
                if storage_ns.is_none() {
                    let map = format!("{STORAGE_BASE} {base} {IDS_PER_SANDBOX}\n");
                    storage_ns = Some(berth_sys::clone::user_namespace(&map, &map)?);
                }
                storage_ns.as_ref().map(|ns| ns.as_fd()).ok_or(RuntimeError::InitGone)?
            }
            Idmap::Owner { uid, gid } => {
                if !owner_ns.iter().any(|(k, _)| *k == (uid, gid)) {
                    let ns =
                        berth_sys::clone::user_namespace(&format!("{uid} {base} 1\n"), &format!("{gid} {base} 1\n"))?;
                    owner_ns.push(((uid, gid), ns));
                }
                owner_ns
                    .iter()
                    .find(|(k, _)| *k == (uid, gid))
                    .map(|(_, ns)| ns.as_fd())
                    .ok_or(RuntimeError::InitGone)?
            }
        };
        trees.push(berth_sys::mount::clone_idmapped(&t.source, ns, attrs, true)?);
    }
    Ok(trees)
}

impl Sandbox {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Init's pid on the host.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A pidfd for init: readable when init (and so the whole sandbox) has ended.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Ask init to run a command.
    pub fn exec(
        &self,
        id: u64,
        argv: &[String],
        env: &[String],
        cwd: &str,
        stdio: Stdio<'_>,
    ) -> Result<(), RuntimeError> {
        let attached =
            Attached { stdin: stdio.stdin.is_some(), stdout: stdio.stdout.is_some(), stderr: stdio.stderr.is_some() };
        let streams = [stdio.stdin, stdio.stdout, stdio.stderr];
        let piped = self.backend.command_streams(self, streams)?;
        let fds: Vec<BorrowedFd<'_>> = match &piped {
            Some(given) => given.iter().flatten().map(|f| f.as_fd()).collect(),
            None => streams.into_iter().flatten().collect(),
        };
        let req = Request::Exec {
            id,
            argv: argv.to_vec(),
            env: env.to_vec(),
            cwd: cwd.to_string(),
            uid: 0,
            gid: 0,
            attached,
            join_cgroup: 0,
            tty: false,
            pty: None,
        };
        protocol::send(self.control.as_fd(), &req, &fds)?;
        Ok(())
    }

    /// Send a signal to a command's process group.
    pub fn signal(&self, id: u64, signal: i32) -> Result<(), RuntimeError> {
        protocol::send(self.control.as_fd(), &Request::Signal { id, signal }, &[])?;
        Ok(())
    }

    /// Whether the landlock rules of its init (and so of every command it starts) are `enforced`, `partial`
    /// (this kernel's landlock lacks some of them) or `unavailable` (the kernel has no landlock), as init
    /// reported once it was up; `none` when it was restored by an older berth whose init could not apply them
    /// again.
    pub fn landlock(&self) -> &str {
        &self.landlock
    }

    /// The control socket, for callers that poll it alongside other descriptors.
    pub fn control(&self) -> BorrowedFd<'_> {
        self.control.as_fd()
    }

    /// Wait up to `timeout` (forever when `None`) for init's next event.
    pub fn next_event(&self, timeout: Option<Duration>) -> Result<Option<Event>, RuntimeError> {
        let ts = timeout
            .map(|d| rustix::time::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) });
        let mut fds = [PollFd::new(&self.control, PollFlags::IN)];
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(0) | Err(rustix::io::Errno::INTR) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(berth_sys::SysError::new("wait for the sandbox", e).into()),
        }
        match protocol::recv::<Event>(self.control.as_fd()) {
            // A connection init relays (gVisor) gets a socket whose other end is closed: nobody here takes
            // connections, and it must not wait for one.
            Ok((Event::Connection { relay: Some(relay), port }, _)) => {
                if let Ok((_ours, theirs)) = std::os::unix::net::UnixStream::pair() {
                    let _ =
                        protocol::send(self.control.as_fd(), &protocol::Request::Relay { relay }, &[theirs.as_fd()]);
                }
                Ok(Some(Event::Connection { port, relay: Some(relay) }))
            }
            Ok((ev, _)) => Ok(Some(ev)),
            Err(protocol::ProtocolError::Closed) => Err(RuntimeError::InitGone),
            Err(e) => Err(e.into()),
        }
    }

    /// CPU, memory and OOM accounting of everything in the sandbox so far.
    pub fn usage(&self) -> Result<Usage, RuntimeError> {
        Ok(self.cgroup.usage()?)
    }

    /// Kill every process in the sandbox now (init included); the sandbox can then only be destroyed.
    pub fn kill(&self) -> Result<(), RuntimeError> {
        process::pidfd_signal(self.pidfd.as_fd(), rustix::process::Signal::KILL)?;
        if !self.backend.supports().init_ends_all {
            // Its processes are not init's children in one pid namespace (runsc's): the cgroup holds them.
            self.cgroup.kill_all()?;
        }
        Ok(())
    }

    /// The boundary it runs behind.
    pub fn isolation(&self) -> Isolation {
        self.backend.isolation()
    }

    /// The backend it runs on.
    pub fn backend(&self) -> &'static dyn Backend {
        self.backend
    }

    /// Hibernate: write its processes to `dir` and end them, and tear the rest down, as its backend does
    /// (see [`Backend::hibernate`]). On error it keeps running as it was.
    pub fn hibernate(
        &mut self,
        dir: &Path,
        d: &crate::Dump<'_>,
    ) -> Result<(crate::checkpoint::Manifest, Teardown), RuntimeError> {
        let backend = self.backend;
        backend.hibernate(self, dir, d)
    }

    /// Checkpoint: write its processes to `dir` and leave them running (forks and snapshots with processes),
    /// where its backend `supports().checkpoint_running`.
    pub fn checkpoint(&self, dir: &Path, d: &crate::Dump<'_>) -> Result<crate::checkpoint::Manifest, RuntimeError> {
        self.backend.checkpoint(self, dir, d)
    }

    /// Tear the sandbox down and check that nothing of it remains.
    pub fn destroy(mut self) -> Result<Teardown, RuntimeError> {
        let report = self.teardown();
        if report.leftovers.is_empty() { Ok(report) } else { Err(RuntimeError::Leak { leftovers: report.leftovers }) }
    }

    /// Tear the sandbox down now (see [`Sandbox::destroy`]); a second call does nothing.
    pub fn teardown(&mut self) -> Teardown {
        if self.destroyed {
            return Teardown::default();
        }
        self.destroyed = true;
        let mut t = Teardown::default();
        // Init is PID 1 of the sandbox's pid namespace: when it dies the kernel kills every other process in
        // it, and init is reaped only after they are all gone.
        let _ = process::pidfd_signal(self.pidfd.as_fd(), rustix::process::Signal::KILL);
        crate::trace::mark("command done");
        match process::pidfd_wait(self.pidfd.as_fd()) {
            Ok(_) => t.steps.push("killed every process".into()),
            Err(e) => t.leftovers.push(format!("init (pid {}): {}", self.pid, crate::error_chain(&e))),
        }
        crate::trace::mark("kill");
        if !self.backend.supports().init_ends_all {
            // Init ended, not everything else (under gVisor runsc ended; its kernel and gofer go with the
            // cgroup, and with them the last holders of the streams' pipes, so the copies end).
            let _ = self.cgroup.kill_all();
        }
        for copier in self.copiers.get_mut().map(std::mem::take).unwrap_or_default() {
            let _ = copier.join();
        }
        if let Err(e) = self.cgroup.kill_all().and_then(|()| self.cgroup.remove()) {
            t.leftovers.push(format!("cgroup: {}", crate::error_chain(&e)));
        } else {
            t.steps.push("removed cgroups".into());
        }
        crate::trace::mark("remove cgroups");
        // The sandbox's files and mounts lived only in its own mount namespace (on its private tmpfs), which
        // ended with its last process: on the host there is only the claim left to drop.
        for path in [&self.claim_path, &self.live_path] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => t.leftovers.push(format!("{}: {e}", path.display())),
            }
        }
        if self.cgroup.exists() {
            t.leftovers.push(format!("cgroup {}", self.id));
        }
        crate::trace::mark("verify");
        t
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.destroyed {
            let _ = self.teardown();
        }
    }
}
