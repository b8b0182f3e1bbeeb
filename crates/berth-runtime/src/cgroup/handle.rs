//! A handle on one sandbox's cgroup: its directories, and what is done to all of them alike.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rustix::io::Errno;

use super::fsio::{self, Fs};
use super::{CgroupError, Counters, Usage, Version, kill, v1, v2};

/// How long [`Cgroup::remove`] keeps retrying a busy directory (its tasks may still be exiting).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The directories of one cgroup, by layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    V1(v1::Dirs),
    V2(PathBuf),
    /// From `open` with a name that is not a valid cgroup name: no directories, and every
    /// fallible method fails with [`CgroupError::InvalidName`].
    Invalid {
        version: Version,
        reason: &'static str,
    },
}

/// One sandbox's cgroup. Creating it is [`Hierarchy::create`](super::Hierarchy::create); a handle
/// on one that may already exist is [`Hierarchy::open`](super::Hierarchy::open). Dropping the handle
/// leaves the cgroup alone: call [`Cgroup::kill_all`] and [`Cgroup::remove`].
#[derive(Debug, Clone)]
pub struct Cgroup {
    name: String,
    kind: Kind,
    paths: Vec<PathBuf>,
    fs: Fs,
    warnings: Vec<String>,
}

impl Cgroup {
    pub(crate) fn new(name: &str, kind: Kind, fs: Fs) -> Cgroup {
        let paths = match &kind {
            Kind::V1(dirs) => dirs.distinct(),
            Kind::V2(dir) => vec![dir.clone()],
            Kind::Invalid { .. } => Vec::new(),
        };
        Cgroup { name: name.to_owned(), kind, paths, fs, warnings: Vec::new() }
    }

    pub(crate) fn with_warnings(mut self, warnings: Vec<String>) -> Cgroup {
        self.warnings = warnings;
        self
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The directory whose freezer (and, on v2, `cgroup.kill`) acts on the whole cgroup (empty for
    /// an invalid name).
    pub(crate) fn control_dir(&self) -> &Path {
        match &self.kind {
            Kind::V1(dirs) => &dirs.freezer,
            Kind::V2(dir) => dir,
            Kind::Invalid { .. } => Path::new(""),
        }
    }

    /// Fails for a handle opened with an invalid name.
    fn check(&self) -> Result<(), CgroupError> {
        match self.kind {
            Kind::Invalid { reason, .. } => Err(CgroupError::InvalidName { name: self.name.clone(), reason }),
            _ => Ok(()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn version(&self) -> Version {
        match self.kind {
            Kind::V1(_) => Version::V1,
            Kind::V2(_) => Version::V2,
            Kind::Invalid { version, .. } => version,
        }
    }

    /// Its directories, one per hierarchy (one in all on v2; co-mounted controllers share one).
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Things worth telling the user about how the limits were applied (e.g. swap accounting off).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether any of its directories is still there.
    pub fn exists(&self) -> bool {
        self.paths.iter().any(|p| p.is_dir())
    }

    /// Move process `pid` (all its threads) into the cgroup, in every hierarchy.
    pub fn add_process(&self, pid: i32) -> Result<(), CgroupError> {
        self.check()?;
        for dir in &self.paths {
            let path = dir.join("cgroup.procs");
            fsio::write(&path, &pid.to_string()).map_err(|source| CgroupError::AddProcess { pid, path, source })?;
        }
        Ok(())
    }

    /// The processes in the cgroup and in any cgroups nested inside it, sorted, each once.
    /// A directory that is gone holds no processes.
    pub fn procs(&self) -> Result<Vec<i32>, CgroupError> {
        self.check()?;
        let mut pids = Vec::new();
        for dir in &self.paths {
            procs_under(dir, &mut pids)?;
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    pub fn usage(&self) -> Result<Usage, CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::usage(dirs),
            Kind::V2(dir) => v2::usage(dir),
            Kind::Invalid { .. } => self.check().map(|()| Usage::default()),
        }
    }

    /// How many of its processes the kernel's OOM killer has killed (one file read; 0 when the kernel does not
    /// count them).
    pub fn oom_kills(&self) -> Result<u64, CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::oom_kills(dirs),
            Kind::V2(dir) => v2::oom_kills(dir),
            Kind::Invalid { .. } => self.check().map(|()| 0),
        }
    }

    /// CPU time, memory and peak memory only: what metering samples.
    pub fn counters(&self) -> Result<Counters, CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::counters(dirs),
            Kind::V2(dir) => v2::counters(dir),
            Kind::Invalid { .. } => self.check().map(|()| Counters::default()),
        }
    }

    /// Stop every task in the cgroup, and return once the kernel reports them all stopped. A freeze that does
    /// not settle in time (a task held in the kernel, say in the middle of a fork) is undone before the error
    /// is returned: a cgroup is never left half frozen, where on v1 its tasks could not even be killed.
    ///
    /// A freeze can also catch a task at a moment it cannot be frozen in (cgroup v1's freezer and a parent
    /// waiting in vfork for a child that was frozen first): it is then thawed and tried again, up to ten times
    /// in about five seconds.
    pub fn freeze(&self) -> Result<(), CgroupError> {
        let within = std::time::Duration::from_millis(500);
        let mut tries = 0;
        loop {
            let frozen = match &self.kind {
                Kind::V1(dirs) => v1::freeze(&dirs.freezer, within),
                Kind::V2(dir) => v2::freeze(dir, within),
                Kind::Invalid { .. } => return self.check(),
            };
            if frozen.is_ok() {
                return frozen;
            }
            let _ = self.thaw();
            tries += 1;
            if tries == 10 {
                return frozen;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Ask for a freeze and wait for it at most `spin`, looking without sleeping: for a caller that should not
    /// block for long. `Ok(true)`: frozen. `Ok(false)`: still freezing, and left so: [`Cgroup::freeze`] then
    /// waits longer (and undoes and retries a freeze that does not settle), or [`Cgroup::thaw`] undoes it.
    pub fn try_freeze(&self, spin: Duration) -> Result<bool, CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::try_freeze(&dirs.freezer, spin),
            Kind::V2(dir) => v2::try_freeze(dir, spin),
            Kind::Invalid { .. } => self.check().map(|()| false),
        }
    }

    /// Whether every task of the cgroup is frozen (a freeze still under way is not).
    pub fn is_frozen(&self) -> Result<bool, CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::frozen(&dirs.freezer.join("freezer.state")),
            Kind::V2(dir) => v2::frozen(&dir.join("cgroup.events")),
            Kind::Invalid { .. } => self.check().map(|()| false),
        }
    }

    pub fn thaw(&self) -> Result<(), CgroupError> {
        match &self.kind {
            Kind::V1(dirs) => v1::thaw(&dirs.freezer),
            Kind::V2(dir) => v2::thaw(dir),
            Kind::Invalid { .. } => self.check(),
        }
    }

    /// Set (or change) the CPU limit of a cgroup that exists, in thousandths of a core.
    pub fn limit_cpu(&self, millis: u64) -> Result<(), CgroupError> {
        self.update(&super::Limits { cpu_millis: Some(millis), ..super::Limits::default() })
    }

    /// Change the limits `limits` sets (the others stay as they are) of a cgroup that exists.
    pub fn update(&self, limits: &super::Limits) -> Result<(), CgroupError> {
        limits.check()?;
        match &self.kind {
            Kind::V1(dirs) => v1::configure(dirs, limits).map(|_| ()),
            Kind::V2(dir) => v2::configure(dir, limits).map(|_| ()),
            Kind::Invalid { .. } => self.check(),
        }
    }

    /// SIGKILL everything in the cgroup (nested cgroups included) and wait until it is empty.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        self.check()?;
        kill::kill_all(self)
    }

    /// Remove its directories, nested cgroups first. Busy directories are retried for up to 2 s while
    /// tasks exit; directories already gone are fine, so this can be called again. Every directory
    /// is tried; the first error is returned.
    pub fn remove(&self) -> Result<(), CgroupError> {
        self.check()?;
        let deadline = Instant::now() + REMOVE_TIMEOUT;
        let mut first_error = None;
        for dir in &self.paths {
            if let Err(e) = remove_tree(self.fs, dir, deadline) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Add the pids listed in `dir/cgroup.procs` and in those of its subdirectories.
fn procs_under(dir: &Path, pids: &mut Vec<i32>) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.procs");
    match fs::read_to_string(&file) {
        Ok(text) => {
            for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                pids.push(line.parse().map_err(|_| fsio::invalid_data(&file, line))?);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.exists() => return Ok(()),
        // Removed while it was read (an exec's cgroup going at its end): the kernel answers ENODEV for the
        // files of a cgroup on its way out, which holds no process.
        Err(e) if Errno::from_io_error(&e) == Some(Errno::NODEV) => return Ok(()),
        Err(source) => return Err(fsio::read_error(&file, source)),
    }
    for child in fsio::subdirs(dir)? {
        procs_under(&child, pids)?;
    }
    Ok(())
}

/// `rmdir` a cgroup directory after its subdirectories, retrying while busy until `deadline`.
pub(crate) fn remove_tree(fs: Fs, dir: &Path, deadline: Instant) -> Result<(), CgroupError> {
    for child in fsio::subdirs(dir)? {
        remove_tree(fs, &child, deadline)?;
    }
    loop {
        let error = match fs.rmdir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => e,
        };
        let busy = Errno::from_io_error(&error) == Some(Errno::BUSY);
        if busy && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        if busy {
            let mut pids = Vec::new();
            procs_under(dir, &mut pids)?;
            if !pids.is_empty() {
                return Err(CgroupError::NotEmpty { path: dir.to_owned(), pids });
            }
        }
        return Err(CgroupError::Remove { path: dir.to_owned(), source: error });
    }
}

/// How a new process enters a cgroup at birth rather than by migration. Migrating a process takes a global
/// lock whose acquisition waits for an RCU grace period (10–15 ms here): too slow to pay on every create.
#[derive(Debug)]
pub enum Entry {
    /// v1: each hierarchy's `tasks` file, opened by the supervisor. The new process writes `0` to each,
    /// moving its own (only) thread, which the kernel does without the global lock.
    Tasks(Vec<std::os::fd::OwnedFd>),
    /// v2: the cgroup's directory, for `clone3(CLONE_INTO_CGROUP)`.
    Dir(std::os::fd::OwnedFd),
}

impl Cgroup {
    /// Open what a new process needs to be born into this cgroup.
    pub fn entry(&self) -> Result<Entry, CgroupError> {
        self.check()?;
        let open = |path: PathBuf, flags: rustix::fs::OFlags| {
            rustix::fs::open(&path, flags | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
                .map_err(|e| CgroupError::AddProcess { pid: 0, path, source: e.into() })
        };
        match &self.kind {
            Kind::V1(_) => {
                let files = self.paths.iter().map(|p| open(p.join("tasks"), rustix::fs::OFlags::WRONLY));
                Ok(Entry::Tasks(files.collect::<Result<_, _>>()?))
            }
            Kind::V2(dir) => {
                Ok(Entry::Dir(open(dir.clone(), rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::PATH)?))
            }
            Kind::Invalid { .. } => Err(CgroupError::AddProcess {
                pid: 0,
                path: PathBuf::new(),
                source: io::ErrorKind::InvalidInput.into(),
            }),
        }
    }
}

impl Cgroup {
    /// Create (or reuse) a child cgroup `name` below this one, without limits of its own: a unit inside the
    /// sandbox (such as one exec's process tree) that can be killed as a whole.
    pub fn child(&self, name: &str) -> Result<Cgroup, CgroupError> {
        self.check()?;
        super::validate_name(name)?;
        let kind = match &self.kind {
            Kind::V1(dirs) => Kind::V1(dirs.join(Path::new(name))),
            Kind::V2(dir) => Kind::V2(dir.join(name)),
            Kind::Invalid { .. } => return Err(CgroupError::InvalidName { name: name.into(), reason: "no parent" }),
        };
        let child = Cgroup::new(&format!("{}/{name}", self.name), kind, self.fs);
        for path in child.paths() {
            match fs::create_dir(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(CgroupError::Create { path: path.clone(), source }),
            }
        }
        Ok(child)
    }

    /// Files a process writes `0` to in order to move itself into this cgroup: each v1 hierarchy's `tasks`
    /// (a single-threaded process moving itself takes no global lock), or the v2 `cgroup.procs`.
    pub fn join_files(&self) -> Result<Vec<std::os::fd::OwnedFd>, CgroupError> {
        self.check()?;
        let file = match &self.kind {
            Kind::V2(_) => "cgroup.procs",
            _ => "tasks",
        };
        self.paths
            .iter()
            .map(|p| {
                let path = p.join(file);
                rustix::fs::open(
                    &path,
                    rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| CgroupError::AddProcess { pid: 0, path, source: e.into() })
            })
            .collect()
    }
}
