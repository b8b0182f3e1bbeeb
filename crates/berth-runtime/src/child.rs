//! The sandbox's first process, between `clone` and `exec` of init: it builds the root from the plan,
//! hardens itself, and becomes berth-init. It runs single-threaded, in the new namespaces, as root of the
//! sandbox's user namespace — never as root of the host.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use berth_init::protocol::{self, CONTROL_FD, Event};
use berth_sys::mount::{self, Attrs, Flags};
use berth_sys::{SysError, process, seccomp::SeccompPolicy};
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::cgroup::Entry;
use crate::plan::{Fallback, Plan, Step};
use crate::{RuntimeError, error_chain};

/// Capabilities root inside keeps (the rest leave the bounding set): what package managers and build tools
/// need, and nothing that administers the kernel, the network stack or other processes' memory. SETFCAP is
/// left out too: file capabilities written through an id-mapped mount could take effect on the host. Numbers from
/// <linux/capability.h>.
pub(crate) const KEPT_CAPABILITIES: [u32; 11] = [
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    8,  // SETPCAP
    10, // NET_BIND_SERVICE
    18, // SYS_CHROOT
    29, // AUDIT_WRITE
];

/// The message the supervisor sends once the namespaces are mapped: the detached trees, in plan order.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Go {
    pub trees: usize,
}

/// Run in the cloned child; never returns.
pub(crate) fn run(plan: &Plan, control: OwnedFd, init_exe: BorrowedFd<'_>, cgroup: &Entry) -> ! {
    let err = match setup(plan, &control, init_exe, cgroup) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let _ = protocol::send(control.as_fd(), &Event::SetupFailed { message: error_chain(&err) }, &[]);
    berth_sys::clone::exit_now(125)
}

fn setup(plan: &Plan, control: &OwnedFd, init_exe: BorrowedFd<'_>, cgroup: &Entry) -> Result<Infallible, RuntimeError> {
    if let Entry::Tasks(files) = cgroup {
        // Move this (single-threaded) process into its cgroups itself: see `Entry`.
        for f in files {
            rustix::io::write(f, b"0").map_err(|e| SysError::new("join the sandbox's cgroups", e))?;
        }
    }
    let (go, trees): (Go, Vec<OwnedFd>) = protocol::recv(control.as_fd())?;
    if go.trees != trees.len() || trees.len() != plan.trees.len() {
        return Err(RuntimeError::Setup { message: "the supervisor sent the wrong number of mounts".into() });
    }
    crate::trace::mark("child: join cgroups, receive trees");
    process::become_id(0)?;
    // After the uid change, which clears a parent-death signal set before it.
    process::die_with_parent()?;
    process::unshare_cgroup_namespace()?;
    mount::make_private_recursive()?;
    for step in &plan.steps {
        run_step(step, &plan.root, &trees)?;
    }
    drop(trees);
    crate::trace::mark("child: mounts");
    process::set_hostname(&plan.hostname)?;
    berth_sys::net::loopback_up()?;

    crate::trace::mark("child: hostname, lo");
    crate::trace::mark("child: about to harden and exec");
    // Init's standard streams lead nowhere: what it has to say goes over the control socket.
    let null = rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| SysError::new("open /dev/null", e))?;
    for fd in 0..3 {
        berth_sys::fd::dup_onto(null.as_fd(), fd)?;
    }
    // Move what init needs out of the way of descriptor 3 before putting the control socket there.
    let exe = rustix::io::fcntl_dupfd_cloexec(init_exe, 10).map_err(|e| SysError::new("keep the init binary", e))?;
    let ctl = rustix::io::fcntl_dupfd_cloexec(control, 10).map_err(|e| SysError::new("keep the control socket", e))?;
    berth_sys::fd::dup_onto(ctl.as_fd(), CONTROL_FD)?;
    berth_sys::fd::cloexec_all_except(&[CONTROL_FD])?;

    // A session of its own: the sandbox has no controlling terminal, so a command reading a terminal it was
    // handed is not stopped by job control, and cannot steer the terminal of the session that started it.
    rustix::process::setsid().map_err(|e| SysError::new("start a new session", e))?;
    process::restrict_bounding_set(&KEPT_CAPABILITIES)?;
    process::set_no_new_privs()?;
    SeccompPolicy::sandbox_default().install()?;
    Err(process::exec_fd(exe.as_fd(), &["berth", "init"], &[]).into())
}

/// The kernel refuses a `volatile` overlay's upper layer once it was mounted so (it cannot know the host did
/// not crash since): the mark it leaves in the work directory goes first. berth mounts one again only to wake
/// a hibernated sandbox, whose layer was unmounted with it; an ephemeral sandbox that hibernated is not woken
/// after the host restarted.
pub(crate) fn clear_volatile_mark(work: &Path) -> Result<(), RuntimeError> {
    let mark = work.join("work").join("incompat");
    match fs::remove_dir_all(&mark) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(SysError::new(format!("remove {}", mark.display()), e).into())
        }
        _ => Ok(()),
    }
}

pub(crate) fn run_step(step: &Step, root: &Path, trees: &[OwnedFd]) -> Result<(), RuntimeError> {
    let tree = |i: usize| {
        trees.get(i).map(|t| t.as_fd()).ok_or_else(|| RuntimeError::Setup { message: format!("missing mount {i}") })
    };
    match step {
        Step::Attach { tree: i, target } => mount::attach(tree(*i)?, target)?,
        Step::AttachInRoot { tree: i, target, file } => {
            let target_fd = resolve_in_root(root, target, *file)?;
            mount::attach_at(tree(*i)?, target_fd.as_fd(), Path::new(target))?;
        }
        Step::Overlay { lower, upper, work, target, volatile } => {
            let mut opts = format!(
                "lowerdir={},upperdir={},workdir={},userxattr",
                lower.display(),
                upper.display(),
                work.display()
            );
            if *volatile {
                clear_volatile_mark(work)?;
                opts.push_str(",volatile");
            }
            mount::mount_fs("overlay", target, "overlay", Flags::NOSUID | Flags::NODEV, &opts)?;
        }
        Step::Mount { fstype, target, flags, data } => mount::mount_fs(fstype, target, fstype, *flags, data)?,
        Step::BindFile { source, target, optional } => {
            if fs::symlink_metadata(target).is_err() {
                if *optional {
                    return Ok(());
                }
                if source.is_dir() { fs::create_dir_all(target) } else { fs::write(target, b"") }
                    .map_err(|e| SysError::new(format!("create {}", target.display()), e))?;
            }
            mount::bind(source, target)?;
        }
        Step::ReadOnly { target, optional } => {
            if *optional && fs::symlink_metadata(target).is_err() {
                return Ok(());
            }
            mount::bind(target, target)?;
            mount::set_attr(target, Attrs { readonly: true, nosuid: true, nodev: true, ..Attrs::default() }, false)?;
        }
        Step::Seal { target } => mount::set_attr(target, Attrs { readonly: true, ..Attrs::default() }, false)?,
        Step::Mask { target } => mask(target)?,
        Step::MaskEach { parent, prefix, leaf } => {
            let entries = match fs::read_dir(parent) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(SysError::new(format!("list {}", parent.display()), e).into()),
            };
            for entry in entries.flatten() {
                if entry.file_name().to_str().is_some_and(|n| n.starts_with(prefix)) {
                    mask(&entry.path().join(leaf))?;
                }
            }
        }
        Step::MaskLinkParents { links, within } => {
            for dir in link_parents(links, within)? {
                mask(&dir)?;
            }
        }
        Step::Mkdir { path, mode } => {
            fs::create_dir_all(path)
                .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(*mode)))
                .map_err(|e| SysError::new(format!("create {}", path.display()), e))?;
        }
        Step::EnsureDir { path } => {
            if fs::symlink_metadata(path).is_err() {
                fs::create_dir_all(path).map_err(|e| SysError::new(format!("create {}", path.display()), e))?;
            }
        }
        Step::WriteFile { path, contents } => {
            fs::write(path, contents).map_err(|e| SysError::new(format!("write {}", path.display()), e))?
        }
        Step::Symlink { link, to } => {
            symlink(to, link).map_err(|e| SysError::new(format!("create the link {}", link.display()), e))?
        }
        Step::Pivot { new_root } => mount::pivot_into(new_root)?,
        Step::MountInRoot { fstype, source, target, flags, data, fallback } => {
            let at = resolve_in_root(root, target, false)?;
            let shown = fd_path(&at);
            match mount::mount_fs(source, &shown, fstype, *flags, data) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(rustix::io::Errno::PERM.raw_os_error()) => match fallback {
                    Fallback::None => return Err(e.into()),
                    Fallback::Skip => {}
                    Fallback::BindHostReadOnly(host) => {
                        let tree = mount::clone_tree(
                            host,
                            Attrs { readonly: true, nosuid: true, nodev: true, noexec: true },
                            true,
                        )?;
                        mount::attach_at(tree.as_fd(), at.as_fd(), Path::new(target))?;
                    }
                },
                Err(e) => return Err(e.into()),
            }
        }
        Step::MaskInRoot { target } => {
            let Some(at) = find_in_root(root, target)? else { return Ok(()) };
            let shown = fd_path(&at);
            if rustix::fs::fstat(&at).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir()) {
                mask(&shown)?;
            } else {
                mount::bind(Path::new("/dev/null"), &shown)?;
            }
        }
        Step::ReadOnlyInRoot { target } => {
            let Some(at) = find_in_root(root, target)? else { return Ok(()) };
            let shown = fd_path(&at);
            mount::bind(&shown, &shown)?;
            // The new bind is on top now: address it by the path again, resolved within the root.
            if let Some(top) = find_in_root(root, target)? {
                let attrs = Attrs { readonly: true, nosuid: true, nodev: true, ..Attrs::default() };
                mount::set_attr(&fd_path(&top), attrs, false)?;
            }
        }
        Step::SealInRoot { target } => {
            let at = find_in_root(root, target)?
                .ok_or_else(|| RuntimeError::Setup { message: format!("{target} is missing from the root") })?;
            mount::set_attr(&fd_path(&at), Attrs { readonly: true, ..Attrs::default() }, false)?;
        }
        Step::NoSymlinks { names } => {
            for name in names {
                if fs::symlink_metadata(root.join(name)).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(RuntimeError::Setup {
                        message: format!(
                            "the root file system's /{name} is a symbolic link; berth mounts there and will not follow it"
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The magic link that names an open descriptor, for calls that take a path.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(fd)))
}

/// Open `target` inside `root` as an `O_PATH` descriptor without creating anything; `None` if it is missing.
fn find_in_root(root: &Path, target: &str) -> Result<Option<OwnedFd>, RuntimeError> {
    let fail = |e: rustix::io::Errno| SysError::new(format!("resolve {target} inside the sandbox"), e);
    let rootfd =
        rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(fail)?;
    let rel = target.trim_start_matches('/');
    let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(&rootfd, rel, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), resolve) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => Ok(None),
        Err(e) => Err(fail(e).into()),
    }
}

/// The directories holding what the symlinks in `links` point to, each strictly inside `within`, without
/// repeats. A missing `links` has none; a dangling link or one leading elsewhere is skipped.
fn link_parents(links: &Path, within: &Path) -> Result<BTreeSet<PathBuf>, SysError> {
    let entries = match fs::read_dir(links) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(SysError::new(format!("list {}", links.display()), e)),
    };
    let within = fs::canonicalize(within).unwrap_or_else(|_| within.to_path_buf());
    let mut parents = BTreeSet::new();
    for entry in entries.flatten() {
        let Ok(target) = fs::canonicalize(entry.path()) else { continue };
        if let Some(parent) = target.parent().filter(|p| p.starts_with(&within) && *p != within) {
            parents.insert(parent.to_path_buf());
        }
    }
    Ok(parents)
}

/// Cover a directory with an empty read-only tmpfs; nothing to do if it is missing.
fn mask(target: &Path) -> Result<(), RuntimeError> {
    if target.is_dir() {
        mount::mount_fs(
            "tmpfs",
            target,
            "tmpfs",
            Flags::RDONLY | Flags::NOSUID | Flags::NODEV | Flags::NOEXEC,
            "size=0,mode=555",
        )?;
    }
    Ok(())
}

/// Open `target` (a path inside the sandbox) as an `O_PATH` descriptor, resolving every component inside
/// `root` — `..` and symlinks, absolute or relative, cannot climb out — and creating missing components
/// (directories, or an empty file for the last one when `file`).
fn resolve_in_root(root: &Path, target: &str, file: bool) -> Result<OwnedFd, RuntimeError> {
    let fail = |e: rustix::io::Errno| SysError::new(format!("resolve {target} inside the sandbox"), e);
    let rootfd =
        rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(fail)?;
    let parts: Vec<&str> = target.split('/').filter(|p| !p.is_empty()).collect();
    let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let mut cur = rustix::io::fcntl_dupfd_cloexec(&rootfd, 0).map_err(fail)?;
    for (i, name) in parts.iter().enumerate() {
        let leaf_file = file && i + 1 == parts.len();
        let rel = parts[..=i].join("/");
        let kind = if leaf_file { OFlags::empty() } else { OFlags::DIRECTORY };
        let open = || rustix::fs::openat2(&rootfd, &rel, OFlags::PATH | OFlags::CLOEXEC | kind, Mode::empty(), resolve);
        cur = match open() {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                if leaf_file {
                    let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
                    drop(rustix::fs::openat(&cur, *name, flags, Mode::from_raw_mode(0o644)).map_err(fail)?);
                } else {
                    rustix::fs::mkdirat(&cur, *name, Mode::from_raw_mode(0o755)).map_err(fail)?;
                }
                open().map_err(fail)?
            }
            Err(e) => return Err(fail(e).into()),
        };
    }
    Ok(cur)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn masks_of_missing_directories_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("sys/devices/system/cpu");
        let step = Step::MaskEach { parent: missing, prefix: "cpu", leaf: "thermal_throttle" };
        run_step(&step, dir.path(), &[]).unwrap();
        let step = Step::MaskLinkParents { links: dir.path().join("sys/bus/vmbus/devices"), within: dir.path().into() };
        run_step(&step, dir.path(), &[]).unwrap();
        // Any other failure to list still stops the start.
        fs::write(dir.path().join("file"), b"").unwrap();
        let step = Step::MaskEach { parent: dir.path().join("file"), prefix: "cpu", leaf: "thermal_throttle" };
        assert!(run_step(&step, dir.path(), &[]).is_err());
    }

    #[test]
    fn link_parents_are_the_directories_a_bus_links_into() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["devices/bus0/a", "devices/bus0/b", "devices/bus1/c", "bus/x/devices", "elsewhere/d"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let links = root.join("bus/x/devices");
        for (name, to) in [
            ("a", "../../../devices/bus0/a"),
            ("b", "../../../devices/bus0/b"),
            ("c", "../../../devices/bus1/c"),
            ("gone", "../../../devices/bus2/gone"),
            ("d", "../../../elsewhere/d"),
            ("top", "../../../devices/bus0"),
        ] {
            symlink(to, links.join(name)).unwrap();
        }
        let devices = root.join("devices");
        let got: Vec<PathBuf> = link_parents(&links, &devices).unwrap().into_iter().collect();
        let devices = fs::canonicalize(&devices).unwrap();
        assert_eq!(got, vec![devices.join("bus0"), devices.join("bus1")]);
        assert!(link_parents(&root.join("bus/y/devices"), &devices).unwrap().is_empty());
    }
}
