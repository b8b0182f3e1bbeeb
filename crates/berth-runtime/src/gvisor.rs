//! The gVisor backend: the same sandbox behind a kernel of its own.
//!
//! The supervisor builds the sandbox's root exactly as for the namespaces backend (the image's overlays, the
//! workspace, the mounts, in a mount namespace of their own), but instead of pivoting into it and executing
//! berth's init, the first process executes `runsc run` with that root as the container's root file system.
//! gVisor's kernel (the Sentry) then runs berth's init as PID 1, and init speaks the same control protocol
//! over the socket that is its standard input; what runsc and its processes do happens inside the sandbox's
//! cgroup (`--ignore-cgroups`: berth makes and removes the cgroup, with the limits, as for every sandbox).
//! Everything runsc keeps (its state, the bundle) lives on the sandbox's private scratch tmpfs, so nothing
//! is left on the host when its last process ends.
//!
//! Under gVisor a descriptor can pass from the host into the sandbox but not out: init sends `ready` without
//! a new control socket, and per-command cgroups are not used (a command's tree is its process group).

use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use berth_sys::mount::{self, Attrs};
use berth_sys::{SysError, process};

use crate::cgroup::{Entry, Limits};
use crate::plan::{Layout, Plan, Step};
use crate::spec::{Isolation, Spec};
use crate::{RuntimeError, error_chain};

/// The oldest gVisor release berth runs on: the first with the `systrap` platform (mid 2023), which needs
/// neither KVM nor ptrace's cost on every system call.
const OLDEST_RELEASE: u32 = 20230601;

/// Where berth's init appears inside a gVisor sandbox: on gVisor's own `/dev`, which is memory of the
/// sandbox's kernel, so the sandbox's files never hold it.
pub const INIT_PATH: &str = "/dev/.berth-init";

/// What runsc and its helper processes cost over the sandbox's own memory: the Sentry and the gofer hold
/// about 50 MiB between them when idle (measured here: RSS 54 MB, PSS 35 MB).
pub const MEMORY_OVERHEAD: u64 = 64 << 20;

/// Host tasks of an idle gVisor sandbox (the Sentry's and the gofer's threads, systrap's stubs), and per
/// process inside it: a guest process costs about two host tasks under systrap (a third for the threads
/// gVisor adds under load). The sandbox's own limit is held inside gVisor (`RLIMIT_NPROC`); this one only
/// keeps a gVisor kernel gone wrong from taking the host's tasks.
pub const TASKS_IDLE: u64 = 64;
pub const TASKS_PER_PROCESS: u64 = 3;

/// The capabilities root inside a gVisor sandbox has (gVisor's kernel checks them; none reaches the host's):
/// the same set as the namespaces backend keeps.
const CAPABILITIES: [&str; 11] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
];

/// A runsc binary berth can use.
#[derive(Debug)]
pub struct Runsc {
    pub path: PathBuf,
    /// As `runsc --version` prints it (`0.0~20240729.0`, `release-20240729.0`).
    pub version: String,
    exe: OwnedFd,
}

impl Runsc {
    /// The binary, opened once (executed by descriptor).
    pub(crate) fn exe(&self) -> BorrowedFd<'_> {
        self.exe.as_fd()
    }
}

/// The runsc berth uses (`BERTH_RUNSC`, else the first `runsc` on `PATH` or in /usr/bin and
/// /usr/local/bin), looked for once; why there is none otherwise.
pub fn runsc() -> Result<&'static Runsc, String> {
    static FOUND: OnceLock<Result<Runsc, String>> = OnceLock::new();
    FOUND.get_or_init(find).as_ref().map_err(Clone::clone)
}

fn find() -> Result<Runsc, String> {
    let path = match std::env::var_os("BERTH_RUNSC") {
        Some(p) => PathBuf::from(p),
        None => {
            let path_var = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs: Vec<PathBuf> = std::env::split_paths(&path_var).collect();
            dirs.extend(["/usr/bin", "/usr/local/bin"].map(PathBuf::from));
            dirs.into_iter().map(|d| d.join("runsc")).find(|p| p.is_file()).ok_or_else(|| {
                "runsc (gVisor) is not installed: install it (Debian 12: runsc from bookworm-backports, as \
                 scripts/setup does) or set BERTH_RUNSC to its path"
                    .to_string()
            })?
        }
    };
    let version = version_of(&path)?;
    match release_date(&version) {
        Some(date) if date >= OLDEST_RELEASE => {}
        _ => {
            return Err(format!(
                "{} is gVisor {version}, older than the systrap platform berth needs (release 20230601 or later; \
                 Debian 12: runsc from bookworm-backports)",
                path.display()
            ));
        }
    }
    let exe =
        rustix::fs::open(&path, rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
            .map_err(|e| format!("open {}: {e}", path.display()))?;
    Ok(Runsc { path, version, exe })
}

/// Where the version of the runsc last asked is kept, with what identifies that binary: asking costs a Go
/// program's start (about 25 ms), on every `berth run`.
const VERSION_CACHE: &str = "/run/berth/runsc-version";

/// What `runsc --version` says of the binary at `path` (from the cache while the binary is the same file).
fn version_of(path: &Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).map_err(|e| format!("{} cannot be run: {e}", path.display()))?;
    let key = format!("{} {} {} {} {}", path.display(), meta.dev(), meta.ino(), meta.size(), meta.mtime());
    if let Some(version) = fs::read_to_string(VERSION_CACHE)
        .ok()
        .and_then(|c| c.strip_prefix(&format!("{key}\n")).map(|v| v.trim().to_string()))
        .filter(|v| !v.is_empty())
    {
        return Ok(version);
    }
    let out = std::process::Command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| format!("{} cannot be run: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("runsc version "))
        .map(str::trim)
        .ok_or_else(|| format!("{} --version did not say which gVisor it is", path.display()))?
        .to_string();
    // Written whole under a new name and renamed: a reader sees the old cache or the new one.
    let fresh = format!("{VERSION_CACHE}.{}", std::process::id());
    if fs::write(&fresh, format!("{key}\n{version}\n")).is_ok() && fs::rename(&fresh, VERSION_CACHE).is_err() {
        let _ = fs::remove_file(&fresh);
    }
    Ok(version)
}

/// The release date in a runsc version (`0.0~20240729.0` → 20240729).
fn release_date(version: &str) -> Option<u32> {
    version
        .split(|c: char| !c.is_ascii_digit())
        .find(|part| part.len() == 8 && part.starts_with("20"))
        .and_then(|d| d.parse().ok())
}

/// The cgroup limits that hold a gVisor sandbox to what its spec asks: its memory and processes plus what
/// gVisor itself takes. Going over either ends the whole sandbox (gVisor's kernel is one host process),
/// not one process in it.
pub fn host_limits(limits: &Limits) -> Limits {
    Limits {
        memory_bytes: limits.memory_bytes.map(|m| m.saturating_add(MEMORY_OVERHEAD)),
        pids: limits.pids.map(|p| p.saturating_mul(TASKS_PER_PROCESS).saturating_add(TASKS_IDLE)),
        cpu_millis: limits.cpu_millis,
    }
}

/// The namespaces plan's root without what gVisor's kernel provides itself (`/proc`, `/sys`, `/dev`), and
/// without the pivot: runsc is given the root where it was built. `/tmp` stays the plan's own tmpfs (not one
/// of gVisor's memory): the files API, which reaches the sandbox's files from the host, sees it too.
pub(crate) fn plan(mut plan: Plan) -> Plan {
    let own: Vec<PathBuf> = ["proc", "sys", "dev"].iter().map(|d| plan.root.join(d)).collect();
    let gvisors = |p: &Path| own.iter().any(|o| p.starts_with(o));
    plan.steps.retain(|step| match step {
        Step::Pivot { .. } => false,
        // Mount points stay: gVisor mounts its own file systems there.
        Step::EnsureDir { .. } => true,
        Step::Mount { target, .. }
        | Step::BindFile { target, .. }
        | Step::ReadOnly { target, .. }
        | Step::Seal { target }
        | Step::Mask { target } => !gvisors(target),
        Step::MaskEach { parent, .. } => !gvisors(parent),
        Step::MaskLinkParents { links, .. } => !gvisors(links),
        Step::Mkdir { path, .. } | Step::WriteFile { path, .. } => !gvisors(path),
        Step::Symlink { link, .. } => !gvisors(link),
        Step::Attach { .. } | Step::AttachInRoot { .. } | Step::Overlay { .. } => true,
        // Only OCI containers' plans have these, and those do not run behind gVisor.
        Step::MountInRoot { .. }
        | Step::MaskInRoot { .. }
        | Step::ReadOnlyInRoot { .. }
        | Step::SealInRoot { .. }
        | Step::NoSymlinks { .. } => true,
    });
    plan
}

/// The OCI runtime configuration runsc runs the sandbox from.
pub(crate) fn config(plan: &Plan, layout: &Layout, spec: &Spec) -> serde_json::Value {
    let caps: Vec<&str> = CAPABILITIES.to_vec();
    let mut rlimits = vec![serde_json::json!({"type": "RLIMIT_NOFILE", "hard": 524_288, "soft": 1024})];
    // gVisor's kernel counts the sandbox's processes itself: past the limit a fork fails there (EAGAIN) and
    // the sandbox goes on, as under the namespaces backend. The host's pids limit is only a backstop.
    if let Some(pids) = spec.limits.pids {
        rlimits.push(serde_json::json!({"type": "RLIMIT_NPROC", "hard": pids, "soft": pids}));
    }
    let env: Vec<String> = crate::spec::BASE_ENV.iter().take(1).map(|(k, v)| format!("{k}={v}")).collect();
    // gVisor's kernel has no OOM killer: init holds the sandbox's memory limit itself, below the host's.
    let mut args = vec![INIT_PATH.to_string(), "init".into(), berth_init::protocol::CONTROL_ON_STDIN.to_string()];
    if let Some(limit) = spec.limits.memory_bytes {
        args.push(format!("{}{limit}", berth_init::memory::ARG));
    }
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": env,
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": rlimits,
            "noNewPrivileges": true
        },
        "root": {"path": plan.root, "readonly": false},
        "hostname": spec.name,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            // gVisor's own cgroups (not the host's), where init keeps each command's tree.
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev"]},
            // Named, or runsc would cover the root's empty /tmp with a tmpfs of its own.
            {"destination": "/tmp", "type": "bind", "source": plan.root.join("tmp"), "options": ["rbind", "rw", "nosuid", "nodev"]},
            {"destination": INIT_PATH, "type": "bind", "source": init_copy(layout), "options": ["bind", "ro"]}
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
        }
    })
}

/// Where a gVisor sandbox's root is in the mount namespace of its first process (`runsc run`, whose root is
/// the host's): `/proc/<pid>/root/` and this path reach the files its kernel serves.
pub fn root_in_supervisor() -> PathBuf {
    Layout { dir: PathBuf::from(crate::sandbox::SCRATCH_MOUNT_POINT), state: false }.rootfs()
}

/// Where the berth binary is bound for runsc to hand to the sandbox, on the scratch tmpfs.
pub(crate) fn init_copy(layout: &Layout) -> PathBuf {
    layout.dir.join("init")
}

fn bundle(layout: &Layout) -> PathBuf {
    layout.dir.join("bundle")
}

fn state(layout: &Layout) -> PathBuf {
    layout.dir.join("runsc")
}

/// The flags berth runs runsc with (before the command). `--platform=systrap`: no KVM or ptrace needed;
/// `--network=none`: loopback only; `--ignore-cgroups`: the cgroup is berth's, made with the limits before
/// runsc starts and removed after it ends; `--overlay2=none`: writes go through to the root berth built (its
/// overlays), as for the namespaces backend, rather than into a file store of gVisor's own; `--host-uds=none`:
/// no host sockets; `--file-access=shared`: the root is not gVisor's alone (the files API writes it from the
/// host, and a mounted host directory changes under it), so gVisor checks what it cached against the host's
/// files instead of trusting its cache.
pub const FLAGS: [&str; 6] = [
    "--platform=systrap",
    "--network=none",
    "--ignore-cgroups",
    "--overlay2=none",
    "--host-uds=none",
    "--file-access=shared",
];

/// runsc with berth's flags and its state for this sandbox, up to the command.
pub(crate) fn runsc_prefix(layout: &Layout) -> Vec<String> {
    let mut argv = vec!["runsc".to_string(), format!("--root={}", state(layout).display())];
    argv.extend(FLAGS.map(String::from));
    argv
}

/// The argument vector of `runsc run` for sandbox `id`, or of `runsc restore` from the checkpoint in `image`.
pub(crate) fn argv(layout: &Layout, id: &str, image: Option<&Path>) -> Vec<String> {
    let mut argv = runsc_prefix(layout);
    if let Some(image) = image {
        argv.extend(["restore".into(), format!("--image-path={}", image.display())]);
    } else {
        argv.push("run".into());
    }
    argv.extend([format!("--bundle={}", bundle(layout).display()), id.to_string()]);
    argv
}

/// Run in the cloned child (a new mount namespace, still the host's root): build the root, write the bundle
/// and execute `runsc run`, with the control socket as its standard input and `log` as its output. Never
/// returns; on failure the reason goes to the supervisor as init's would.
pub(crate) struct Child<'a> {
    pub plan: &'a Plan,
    pub trees: &'a [OwnedFd],
    pub layout: &'a Layout,
    pub config: &'a serde_json::Value,
    pub argv: &'a [String],
    pub cgroup: &'a Entry,
    /// A detached mount of the berth binary.
    pub init_exe: BorrowedFd<'a>,
    pub log: BorrowedFd<'a>,
    pub runsc: &'a Runsc,
    /// A restore: the files of the sandbox's `/tmp` kept beside its checkpoint, put back first.
    pub tmp_from: Option<&'a Path>,
}

impl Child<'_> {
    pub(crate) fn run(self, control: OwnedFd) -> ! {
        let err = match self.setup(&control) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        let event = berth_init::protocol::Event::SetupFailed { message: error_chain(&err) };
        let _ = berth_init::protocol::send(control.as_fd(), &event, &[]);
        berth_sys::clone::exit_now(125)
    }

    fn setup(&self, control: &OwnedFd) -> Result<std::convert::Infallible, RuntimeError> {
        if let Entry::Tasks(files) = self.cgroup {
            for f in files {
                rustix::io::write(f, b"0").map_err(|e| SysError::new("join the sandbox's cgroups", e))?;
            }
        }
        process::die_with_parent()?;
        mount::make_private_recursive()?;
        for step in &self.plan.steps {
            crate::child::run_step(step, &self.plan.root, self.trees)?;
        }
        if let Some(kept) = self.tmp_from {
            crate::gvisor_checkpoint::put_back(kept, &self.plan.root.join("tmp"))?;
        }
        let init = init_copy(self.layout);
        fs::write(&init, b"").map_err(|e| SysError::new("make init's mount point", e))?;
        mount::attach(self.init_exe, &init)?;
        for dir in [bundle(self.layout), state(self.layout)] {
            fs::create_dir_all(&dir).map_err(|e| SysError::new(format!("create {}", dir.display()), e))?;
        }
        fs::write(bundle(self.layout).join("config.json"), self.config.to_string())
            .map_err(|e| SysError::new("write the sandbox's OCI configuration", e))?;
        berth_sys::fd::dup_onto(control.as_fd(), 0)?;
        berth_sys::fd::dup_onto(self.log, 1)?;
        berth_sys::fd::dup_onto(self.log, 2)?;
        berth_sys::fd::cloexec_all_except(&[0, 1, 2])?;
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        Err(process::exec_fd(self.runsc.exe.as_fd(), &argv, &[]).into())
    }
}

/// Refuse a gVisor sandbox on a host without a usable runsc, before anything is made.
pub(crate) fn check() -> Result<&'static Runsc, RuntimeError> {
    runsc().map_err(|reason| RuntimeError::IsolationUnavailable { isolation: Isolation::Gvisor, reason })
}

/// How long runsc may take to boot the sandbox and have init report ready.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Start the sandbox's first process, which builds `plan`'s root and becomes `runsc run` (or, with `image`,
/// `runsc restore` from the checkpoint there), in the cgroup `entry` opens; wait for init's `ready`. Returns
/// runsc's pid, a pidfd for it, the control socket, and what init said of landlock (gVisor's kernel has
/// none: `unavailable`).
pub(crate) fn start(
    plan: &Plan,
    layout: &Layout,
    spec: &Spec,
    id: &str,
    entry: &Entry,
    init_exe: BorrowedFd<'_>,
    image: Option<&Path>,
) -> Result<(i32, OwnedFd, OwnedFd, String), RuntimeError> {
    let runsc = check()?;
    let trees = trees(plan)?;
    // Cloned here, in the host's mount namespace, where the binary's mount is: a bind of it from inside the
    // child's new namespace is refused.
    let init_tree = mount::clone_tree(
        Path::new(&format!("/proc/self/fd/{}", init_exe.as_raw_fd())),
        Attrs { readonly: true, nosuid: true, nodev: true, noexec: false },
        false,
    )?;
    crate::trace::mark("gvisor trees");
    let config = config(plan, layout, spec);
    let argv = argv(layout, id, image);
    // runsc's own messages (and whatever init writes to its standard error), read if the start fails.
    let log = rustix::fs::memfd_create("berth-runsc", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| SysError::new("make runsc's log", e))?;
    let (parent_sock, child_sock) = berth_sys::fd::seqpacket_pair()?;
    // A restored init knows nothing of its new control socket: asked first, it says ready again.
    if image.is_some() {
        berth_init::protocol::send(parent_sock.as_fd(), &berth_init::protocol::Request::Hello, &[])?;
    }
    let tmp_kept = image.map(crate::gvisor_checkpoint::tmp_dir);
    let into_cgroup = match entry {
        Entry::Dir(dir) => Some(dir.as_fd()),
        Entry::Tasks(_) => None,
    };
    let (pid, pidfd) = match berth_sys::clone::spawn(berth_sys::clone::Namespaces::MOUNT, into_cgroup)? {
        berth_sys::clone::Forked::Child => {
            drop(parent_sock);
            let child = Child {
                plan,
                trees: &trees,
                layout,
                config: &config,
                argv: &argv,
                cgroup: entry,
                init_exe: init_tree.as_fd(),
                log: log.as_fd(),
                runsc,
                tmp_from: tmp_kept.as_deref(),
            };
            child.run(child_sock)
        }
        berth_sys::clone::Forked::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(child_sock);
    drop((trees, init_tree));
    crate::trace::mark("gvisor spawn");
    match wait_ready(parent_sock.as_fd(), log.as_fd()) {
        Ok(landlock) => {
            crate::trace::mark("gvisor ready");
            Ok((pid, pidfd, parent_sock, landlock))
        }
        Err(e) => {
            let _ = process::pidfd_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
            let _ = process::pidfd_wait(pidfd.as_fd());
            Err(e)
        }
    }
}

/// Wait for init's `ready` (runsc ending first closes the socket).
fn wait_ready(control: BorrowedFd<'_>, log: BorrowedFd<'_>) -> Result<String, RuntimeError> {
    use berth_init::protocol::{self, Event};
    use rustix::event::{PollFd, PollFlags};
    let failed = |why: String| {
        let said = log_tail(log);
        let message = if said.is_empty() { why } else { format!("{why}: {said}") };
        RuntimeError::Setup { message }
    };
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(failed(format!("gVisor did not start the sandbox within {} s", READY_TIMEOUT.as_secs())));
        }
        let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: 0 };
        let mut fds = [PollFd::new(&control, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => break,
            Err(e) => return Err(SysError::new("wait for the sandbox", e).into()),
        }
    }
    match protocol::recv::<Event>(control) {
        Ok((Event::Ready { landlock, .. }, fds)) if fds.is_empty() => Ok(landlock),
        Ok((Event::Ready { .. }, _)) => Err(failed("init's ready came with descriptors it cannot send".into())),
        Ok((Event::SetupFailed { message }, _)) => Err(failed(message)),
        Ok((other, _)) => Err(failed(format!("unexpected first message {other:?}"))),
        Err(protocol::ProtocolError::Closed | protocol::ProtocolError::Io(_)) => {
            Err(failed("runsc ended before the sandbox was ready".into()))
        }
        Err(e) => Err(e.into()),
    }
}

/// The last lines runsc wrote, on one line.
pub(crate) fn log_tail(log: BorrowedFd<'_>) -> String {
    let mut buf = vec![0u8; 64 * 1024];
    let n = rustix::io::pread(log, &mut buf, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

/// The plan's trees, cloned for a sandbox whose ids gVisor's kernel maps: the image's files as they are
/// (host root's are root's inside), berth's storage shifted down from [`crate::ids::STORAGE_BASE`], and a
/// mounted directory's owner as root.
fn trees(plan: &Plan) -> Result<Vec<OwnedFd>, RuntimeError> {
    use crate::ids::{IDS_PER_SANDBOX, STORAGE_BASE};
    use crate::plan::Idmap;
    let mut trees = Vec::with_capacity(plan.trees.len());
    for t in &plan.trees {
        let attrs = Attrs { readonly: t.readonly, nosuid: true, nodev: true, noexec: false };
        let tree = match t.idmap {
            Idmap::Sandbox | Idmap::Host => mount::clone_tree(&t.source, attrs, true)?,
            Idmap::Storage => {
                let map = format!("{STORAGE_BASE} 0 {IDS_PER_SANDBOX}\n");
                let ns = berth_sys::clone::user_namespace(&map, &map)?;
                mount::clone_idmapped(&t.source, ns.as_fd(), attrs, true)?
            }
            Idmap::Owner { uid, gid } => {
                let ns = berth_sys::clone::user_namespace(&format!("{uid} 0 1\n"), &format!("{gid} 0 1\n"))?;
                mount::clone_idmapped(&t.source, ns.as_fd(), attrs, true)?
            }
        };
        trees.push(tree);
    }
    Ok(trees)
}

/// A command's standard streams as a gVisor sandbox can take them. gVisor writes to a regular file it was
/// handed at an offset of its own, from the start, rather than at the offset the file shares with the caller
/// (`(echo a; berth run -- echo b) > f` would lose `a`): such a stream goes through a pipe instead, copied
/// to or from the file by a thread of the caller's, which it joins once the sandbox is gone.
pub(crate) fn through_pipes(
    stdio: [Option<BorrowedFd<'_>>; 3],
    copiers: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<[Option<OwnedFd>; 3], RuntimeError> {
    let mut given: [Option<OwnedFd>; 3] = [None, None, None];
    for (i, fd) in stdio.into_iter().enumerate() {
        let Some(fd) = fd else { continue };
        let regular = rustix::fs::fstat(fd)
            .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile);
        let dup = || rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(|e| SysError::new("keep a stream", e));
        if !regular {
            given[i] = Some(dup()?);
            continue;
        }
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SysError::new("make a pipe for a stream", e))?;
        let file = fs::File::from(dup()?);
        let (ours, theirs) = if i == 0 { (write, read) } else { (read, write) };
        let ours = fs::File::from(ours);
        let copier = if i == 0 {
            std::thread::spawn(move || {
                // A command that leaves its input unread closes the pipe: this thread gets EPIPE, not the
                // signal that would end the caller.
                let _ = process::block_signals(&[13]);
                copy_plain(file, ours);
            })
        } else {
            std::thread::spawn(move || {
                copy_plain(ours, file);
            })
        };
        copiers.push(copier);
        given[i] = Some(theirs);
    }
    Ok(given)
}

/// Copy until the end of `from` with plain reads and writes. (`std::io::copy` splices between a pipe and a
/// file, and two splices into one open file, such as a caller's stdout and stderr after `2>&1`, can both
/// take the same offset and write over each other; each `write` moves the offset it shares at once.)
fn copy_plain(from: fs::File, to: fs::File) {
    berth_init::relay::copy(from, &to, |_| Ok(()));
}
