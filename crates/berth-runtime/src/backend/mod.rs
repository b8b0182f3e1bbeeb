//! Backends: the ways a sandbox can run on a host, behind one trait.
//!
//! Each [`Isolation`] has one [`Backend`], found with [`backend`], the one place where the kind becomes code.
//! Everything else (the runtime's create and teardown, the shim, the engine, the command line) asks the
//! backend, or decides on what its [`Supports`] says, and never on the kind itself: a new backend is a
//! module here and one arm in [`backend`]. Backends live in this crate only (the trait is sealed, and
//! [`Boot`] can be made only here).
//!
//! Every method is synchronous. `isolation`, `name`, `supports`, `file_root` and `reserved_slot` cost
//! nothing and may be called from async code; `available` may run a program once per process (gVisor asks
//! runsc its version); `boot`, `command_streams`, `rename_host`, `hibernate`, `checkpoint` and `restore` run
//! in the sandbox's supervisor (the daemon's single-threaded shim, or `berth run`).

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::checkpoint::{Criu, Manifest};
use crate::spec::{Isolation, Spec};
use crate::{Runtime, RuntimeError, Sandbox, Teardown};

pub(crate) mod namespaces;

pub(crate) mod sealed {
    /// Implemented by this crate's backends only.
    pub trait Sealed {}
}

/// One isolation's way of running a sandbox.
pub trait Backend: sealed::Sealed + Send + Sync + 'static {
    /// The kind it implements.
    fn isolation(&self) -> Isolation;

    /// How sentences name it: `namespaces`, `gVisor`.
    fn name(&self) -> &'static str;

    /// What provides it on this host, or why this host cannot offer it (a sentence).
    fn available(&self) -> Result<Offered, String>;

    /// Refuse a sandbox of it on a host that cannot offer it, before anything is made.
    fn check(&self) -> Result<(), RuntimeError> {
        self.available()
            .map(drop)
            .map_err(|reason| RuntimeError::IsolationUnavailable { isolation: self.isolation(), reason })
    }

    /// What it can do: what the engine, the shim and the command line decide on.
    fn supports(&self) -> &'static Supports;

    /// Start sandbox `b.id` on `b.plan`, its claims held (what `b.partial` holds is undone on error), and wait
    /// for its init to say it is ready.
    fn boot(&self, rt: &Runtime, spec: &Spec, b: Boot<'_>) -> Result<Sandbox, RuntimeError>;

    /// A command's standard streams as the sandbox can take them; `None`: as they are.
    fn command_streams(
        &self,
        sb: &Sandbox,
        streams: [Option<BorrowedFd<'_>>; 3],
    ) -> Result<Option<[Option<OwnedFd>; 3]>, RuntimeError> {
        let _ = (sb, streams);
        Ok(None)
    }

    /// Where the files API finds the sandbox's `/`, below `/proc/<Sandbox::pid>/root`.
    fn file_root(&self) -> FileRoot;

    /// Give a sandbox nothing has run in yet another host name (the warm pool's claim); only where
    /// `supports().warm_pool`.
    fn rename_host(&self, sb: &Sandbox, name: &str) -> Result<(), RuntimeError> {
        let _ = (sb, name);
        Err(RuntimeError::IsolationCannot { isolation: self.isolation(), what: "be renamed once built" })
    }

    /// Write the sandbox's processes to `dir`, end them and tear the rest down; on error it runs on as it was.
    fn hibernate(&self, sb: &mut Sandbox, dir: &Path, d: &Dump<'_>) -> Result<(Manifest, Teardown), RuntimeError>;

    /// Write the sandbox's processes to `dir` and leave them running (forks and snapshots with processes).
    fn checkpoint(&self, sb: &Sandbox, dir: &Path, d: &Dump<'_>) -> Result<Manifest, RuntimeError>;

    /// Bring back the sandbox whose image is in `dir` (with `w.fork`, as a new sandbox: `spec.id` is its own).
    /// On error nothing of it is left running and the image is untouched.
    fn restore(&self, rt: &Runtime, spec: &Spec, dir: &Path, w: Wake<'_>) -> Result<Sandbox, RuntimeError>;

    /// The host id block an image of this backend keeps reserved while its sandbox sleeps.
    fn reserved_slot(&self, m: &Manifest) -> Option<u32> {
        let _ = m;
        None
    }
}

/// What a backend can do.
#[derive(Debug, PartialEq, Eq)]
pub struct Supports {
    /// Init's death ends every process of the sandbox (it is PID 1 of their pid namespace); otherwise the
    /// sandbox's cgroup is killed too.
    pub init_ends_all: bool,
    /// Each command gets a host cgroup of its own inside the sandbox's (`Exec.join_cgroup`).
    pub command_cgroups: bool,
    /// Whose OOM kills a command's `oom_killed` counts.
    pub oom: OomScope,
    /// Where a shell's terminal is opened.
    pub terminal: TerminalAt,
    /// A unix socket inside is reached from the host through [`Backend::file_root`]; otherwise init connects
    /// to it inside and copies (`Request::Connect`).
    pub host_sockets: bool,
    /// It can be built ahead of a request and renamed when taken (the warm pool).
    pub warm_pool: bool,
    /// It can hibernate and wake.
    pub hibernate: bool,
    /// Its hibernation, wake, checkpoint and restore need the daemon's CRIU ([`Dump::criu`], [`Wake::criu`]).
    pub needs_criu: bool,
    /// Detached execs and idle code contexts sleep with it (their host pipes made anew at wake); otherwise
    /// nothing berth talks to may run when it hibernates.
    pub hibernate_holds_execs: bool,
    /// [`Backend::checkpoint`] works: forks and snapshots with processes.
    pub checkpoint_running: bool,
    /// A file the sandbox keeps in its memory file system (`/dev/shm`) is read from the host through
    /// [`Backend::file_root`]: a desktop's screen, which Xvfb keeps there.
    pub shm_from_host: bool,
}

/// Whose OOM kills a command's `oom_killed` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomScope {
    /// Its own cgroup's (the sandbox's when it has none).
    Command,
    /// The whole sandbox's: one kill ends it all (its kernel is one host process).
    Sandbox,
    /// None the host can see (a guest kernel's own).
    Uncounted,
}

/// Where a shell's terminal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalAt {
    /// A pty of the sandbox's devpts, opened from the host through [`Backend::file_root`]; its slave end is
    /// the command's standard streams.
    Host,
    /// One init opens inside (`Exec.pty`) and copies to the one socket attached, which stands for the master.
    Init,
}

/// Where the sandbox's `/` is for the files API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRoot {
    /// The sandbox's `/` is `/proc/<pid>/root/<under>` (`under` relative; empty: that root itself).
    pub under: PathBuf,
    /// Which host ids the files there are owned by.
    pub ids: FileIds,
    /// First components of a path that the sandbox's own kernel serves, which the host cannot reach.
    pub unreachable: &'static [&'static str],
}

/// Which host ids a sandbox's files are owned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileIds {
    /// Those of the pid's `uid_map` and `gid_map`.
    Mapped,
    /// The same numbers as inside, 65536 of them.
    Same,
}

/// What provides a backend on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    /// One line: what it runs on (`runsc 0.0~20240729.0 at /usr/bin/runsc`).
    pub detail: String,
    /// Facts `berth info` lists besides the detail.
    pub facts: Vec<(&'static str, String)>,
}

/// What a hibernation or a checkpoint needs from the caller.
pub struct Dump<'a> {
    /// The CRIU to write with, where [`Supports::needs_criu`].
    pub criu: Option<&'a Criu>,
    /// Who the sandbox's host id block is reserved for while it sleeps ([`crate::reservation_owner`]).
    pub owner: &'a str,
}

/// What a restore needs from the caller.
pub struct Wake<'a> {
    /// The CRIU to restore with, where [`Supports::needs_criu`].
    pub criu: Option<&'a Criu>,
    /// The pipes whose other ends were outside the sandbox, by the name the image gives them, each given in
    /// its place the end of a new pipe whose other end the caller holds.
    pub pipes: &'a [(String, OwnedFd)],
    /// The image is another sandbox's, which runs on: this is a fork of it with its processes.
    pub fork: bool,
}

/// A sandbox about to boot: its id, its claims, what to undo if it fails, and its compiled plan. Only the
/// runtime makes one.
pub struct Boot<'a> {
    pub(crate) id: &'a str,
    /// Its claim in the data root and its host-wide liveness claim, each with its path.
    pub(crate) claims: ((std::fs::File, PathBuf), (std::fs::File, PathBuf)),
    pub(crate) partial: &'a mut crate::claims::Partial,
    pub(crate) plan: crate::plan::Plan,
    pub(crate) layout: &'a crate::plan::Layout,
}

static NAMESPACES: namespaces::NamespacesBackend = namespaces::NamespacesBackend;
static GVISOR: crate::gvisor_backend::GvisorBackend = crate::gvisor_backend::GvisorBackend;

/// The backend of `isolation`: the one place the kind becomes code.
pub fn backend(isolation: Isolation) -> &'static dyn Backend {
    match isolation {
        Isolation::Namespaces => &NAMESPACES,
        Isolation::Gvisor => &GVISOR,
    }
}

/// Every backend berth has, in the order of [`Isolation::ALL`].
pub fn backends() -> impl Iterator<Item = &'static dyn Backend> {
    Isolation::ALL.into_iter().map(backend)
}

impl Manifest {
    /// The host id block this image keeps reserved while its sandbox sleeps.
    pub fn reserved_slot(&self) -> Option<u32> {
        backend(self.isolation).reserved_slot(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
