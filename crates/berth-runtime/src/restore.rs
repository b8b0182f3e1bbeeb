//! Waking a hibernated sandbox: its mounts staged again from its plan, then its process tree restored by
//! CRIU into them (see [`crate::checkpoint`] for what the image leaves out).
//!
//! The staging runs the sandbox's own plan in a private mount namespace of a child of the supervisor, with
//! the steps CRIU takes care of left out (the kernel file systems, the tmpfs mounts whose contents are in the
//! image, the masks, the pivot) and the mounts inside the root moved beside it, so that CRIU finds the root
//! overlay alone at `--root` and every external mount at a path of its own. That child then becomes CRIU.
//! The restored init is the supervisor's child (`--restore-sibling`), as a created one is.

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_init::protocol::{self, Event, Request};
use berth_sys::clone::{Forked, Namespaces};
use berth_sys::process;

use crate::checkpoint::{self, Criu, Manifest};
use crate::claims::{claim, claim_held};
use crate::ids::{CLAIMS_DIR, IdBlock};
use crate::plan::{self, Layout, Plan, Step};
use crate::sandbox::{LIVE_DIR, SCRATCH_MOUNT_POINT, Sandbox, clone_trees, mount_owners};
use crate::spec::Spec;
use crate::{Runtime, RuntimeError};
use berth_sys::mount::Flags;

/// The plan's steps for a restore, and where each mount inside the sandbox's root is staged instead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Staging {
    pub steps: Vec<Step>,
    /// Sandbox path (`/usr`, `/etc/hostname`, …) → where its source is once the steps have run.
    pub sources: BTreeMap<String, PathBuf>,
    /// One mask (an empty read-only tmpfs), bound by CRIU over every masked path of the image.
    pub mask: PathBuf,
}

/// Turn a plan into its staging for a restore (see the module's documentation); `root_id` is the host id of
/// the sandbox's root, who owns its masks.
pub(crate) fn stage(plan: &Plan, layout: &Layout, root_id: u32) -> Staging {
    let stage_dir = layout.dir.join("stage");
    let mut steps = vec![];
    let mut sources = BTreeMap::new();
    let inside = |p: &Path| -> Option<String> {
        p.strip_prefix(&plan.root).ok().map(|rel| format!("/{}", rel.display())).filter(|s| s != "/")
    };
    for step in &plan.steps {
        match step {
            Step::Overlay { lower, upper, work, target, volatile } => match inside(target) {
                None => steps.push(step.clone()),
                Some(point) => {
                    let at = stage_dir.join(point.trim_start_matches('/').replace('/', "_"));
                    steps.push(Step::Mkdir { path: at.clone(), mode: 0o755 });
                    steps.push(Step::Overlay {
                        lower: lower.clone(),
                        upper: upper.clone(),
                        work: work.clone(),
                        target: at.clone(),
                        volatile: *volatile,
                    });
                    sources.insert(point, at);
                }
            },
            Step::BindFile { source, target, .. } => match inside(target) {
                None => steps.push(step.clone()),
                Some(point) => {
                    sources.insert(point, source.clone());
                }
            },
            Step::AttachInRoot { tree, target, file } => {
                let at = stage_dir.join(format!("tree-{tree}"));
                if *file {
                    steps.push(Step::WriteFile { path: at.clone(), contents: String::new() });
                } else {
                    steps.push(Step::Mkdir { path: at.clone(), mode: 0o755 });
                }
                steps.push(Step::Attach { tree: *tree, target: at.clone() });
                sources.insert(format!("/{}", target.trim_start_matches('/')), at);
            }
            // Mount points the first run made are in the kept upper layer already; made again if missing.
            Step::EnsureDir { .. } => steps.push(step.clone()),
            Step::Pivot { .. } => {}
            Step::Attach { target, .. }
            | Step::Mount { target, .. }
            | Step::ReadOnly { target, .. }
            | Step::Seal { target }
            | Step::Mask { target } => {
                if inside(target).is_none() && target != &plan.root {
                    steps.push(step.clone());
                }
            }
            Step::Mkdir { path, .. } | Step::WriteFile { path, .. } => {
                if inside(path).is_none() {
                    steps.push(step.clone());
                }
            }
            Step::MaskEach { .. } | Step::MaskLinkParents { .. } | Step::Symlink { .. } => {}
            // Only OCI containers' plans have these, and those are not restored.
            Step::MountInRoot { .. }
            | Step::MaskInRoot { .. }
            | Step::ReadOnlyInRoot { .. }
            | Step::SealInRoot { .. }
            | Step::NoSymlinks { .. } => {}
        }
    }
    // The staging directory itself, on the scratch tmpfs: right after that tmpfs is mounted.
    let scratch = steps.iter().position(|s| matches!(s, Step::Mount { target, .. } if *target == layout.dir));
    let mask = stage_dir.join("mask");
    steps.push(Step::Mkdir { path: mask.clone(), mode: 0o555 });
    steps.push(Step::Mount {
        fstype: "tmpfs",
        target: mask.clone(),
        flags: Flags::RDONLY | Flags::NOSUID | Flags::NODEV | Flags::NOEXEC,
        data: format!("size=0,mode=555,uid={root_id},gid={root_id}"),
    });
    steps.insert(scratch.map_or(0, |i| i + 1), Step::Mkdir { path: stage_dir, mode: 0o755 });
    Staging { steps, sources, mask }
}

impl Runtime {
    /// Bring back the sandbox its backend imaged in `dir`, with the spec it was created with (see
    /// [`crate::Backend::restore`]). On error nothing of it is left running and its image is untouched.
    pub fn restore(&self, spec: &Spec, dir: &Path, w: crate::Wake<'_>) -> Result<Sandbox, RuntimeError> {
        crate::backend(spec.isolation).restore(self, spec, dir, w)
    }

    /// Bring back with CRIU the sandbox hibernated in `dir` with the spec it was created with. `pipes`: the
    /// pipes whose other ends were outside the sandbox (CRIU's `pipe:[INODE]` names), each given in its place
    /// the end of a new pipe whose other end the caller holds. With `fork`, bring up a new sandbox (`spec`,
    /// whose id is its own) from the image of another one, which runs on: a fork with its processes. It gets
    /// a host id block of its own, to which the image (a copy only it restores from) is rewritten, with its
    /// own cgroup and host name (see [`crate::retarget`]).
    pub(crate) fn criu_restore(
        &self,
        spec: &Spec,
        dir: &Path,
        criu: &Criu,
        pipes: &[(String, OwnedFd)],
        fork: bool,
    ) -> Result<Sandbox, RuntimeError> {
        let manifest = checkpoint::read_manifest(dir)?;
        let id = match (fork, spec.id.as_deref()) {
            (false, Some(id)) if id == manifest.id => manifest.id.clone(),
            (true, Some(id)) if id != manifest.id => id.to_string(),
            _ => {
                return Err(RuntimeError::Checkpoint {
                    message: match fork {
                        false => {
                            format!("the image in {} is of sandbox {}, not of this one", dir.display(), manifest.id)
                        }
                        true => format!("a fork of sandbox {} needs an id of its own", manifest.id),
                    },
                });
            }
        };
        let owners = mount_owners(spec)?;
        let layers = self.images.layers(&spec.image)?;
        if claim_held(&Path::new(LIVE_DIR).join(format!("{id}.lock"))) {
            return Err(RuntimeError::Running { id });
        }
        let (claim_file, claim_path) = claim(&self.root.join("sandboxes"), &id)?;
        let mut guard = Cleanup { paths: vec![claim_path.clone()], cgroup: None };
        let (live, live_path) = claim(Path::new(LIVE_DIR), &id)?;
        guard.paths.push(live_path.clone());
        let ids = match fork {
            false => IdBlock::claim_reserved(Path::new(CLAIMS_DIR), manifest.slot, &self.reservation_owner(&id))?,
            true => IdBlock::claim(Path::new(CLAIMS_DIR))?,
        };
        guard.cgroup = Some(self.hierarchy.create(&id, &spec.limits)?);
        if fork {
            let target = crate::retarget::Target {
                from_id: &manifest.id,
                to_id: &id,
                from_base: crate::ids::HOST_ID_BASE + manifest.slot * crate::ids::IDS_PER_SANDBOX,
                to_base: ids.base(),
                hostname: &spec.name,
            };
            crate::retarget::retarget(dir, &target)?;
        }
        // CRIU reads parts of the image from inside the restored user namespace, as the sandbox's root: the
        // image (the sandbox's own memory) becomes that host id's, and nobody else's.
        give_image_to(dir, ids.base())?;
        let layout = Layout { dir: PathBuf::from(SCRATCH_MOUNT_POINT), state: spec.state.is_some() };
        let plan = plan::compile(spec, &layers, &layout, &owners);
        let mut staging = stage(&plan, &layout, ids.base());
        // The image is read from inside the restored user namespace too: bound where that id can reach it,
        // whatever the permissions of the directories above it on the host.
        let image = layout.dir.join("image");
        staging.steps.push(Step::BindFile { source: dir.to_path_buf(), target: image.clone(), optional: false });
        let map = format!("0 {} {}\n", ids.base(), crate::ids::IDS_PER_SANDBOX);
        let userns = berth_sys::clone::user_namespace(&map, &map)?;
        let trees = clone_trees(&plan, ids.base(), userns.as_fd())?;
        let (ours, theirs) = berth_sys::fd::seqpacket_pair()?;
        // Queued before init runs again, so that it is the first thing the restored init reads (see
        // `renew_init`).
        protocol::send(ours.as_fd(), &Request::Reexec, &[])?;
        let exe = fs::File::open(dir.join(checkpoint::INIT_COPY))
            .map_err(|e| RuntimeError::Checkpoint { message: format!("open the kept copy of init: {e}") })?;
        let pidfile = dir.join("restore.pid");
        let _ = fs::remove_file(&pidfile);
        let mut args = restore_args(&manifest, &image, &plan, &staging, &image.join("restore.pid"), &theirs, &exe)?;
        let mut inherit: Vec<&dyn AsFd> = vec![&theirs, &exe];
        for (name, fd) in pipes {
            use std::os::fd::AsRawFd;
            args.extend(["--inherit-fd".into(), format!("fd[{}]:{name}", fd.as_raw_fd())]);
            inherit.push(fd);
        }

        crate::trace::mark("claim, cgroup, id maps, trees");
        let (_, stager) = match berth_sys::clone::spawn(Namespaces::MOUNT, None)? {
            Forked::Child => {
                let sockets = &manifest.bound_sockets;
                let code = match stage_and_exec(&staging, &plan, &trees, userns.as_fd(), sockets, criu, &args, &inherit)
                {
                    Ok(never) => match never {},
                    Err(e) => {
                        let _ = fs::write(dir.join("stage.log"), crate::error_chain(&e));
                        126
                    }
                };
                berth_sys::clone::exit_now(code)
            }
            Forked::Parent { pid, pidfd } => (pid, pidfd),
        };
        drop(trees);
        drop(inherit);
        drop(theirs);
        let exit = process::pidfd_wait(stager.as_fd())?;
        crate::trace::mark("stage and criu restore");
        if exit != process::Exit::Code(0) {
            let message = match fs::read_to_string(dir.join("stage.log")) {
                Ok(why) => format!("the sandbox's mounts could not be staged for its restore: {why}"),
                Err(_) => checkpoint::explain(&dir.join("restore.log"), "restore"),
            };
            return Err(RuntimeError::Checkpoint { message });
        }
        let pid: i32 = fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| RuntimeError::Checkpoint { message: "CRIU did not say which process init is".into() })?;
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid).ok_or(RuntimeError::InitGone)?,
            rustix::process::PidfdFlags::empty(),
        )
        .map_err(|e| berth_sys::SysError::new("open the restored init", e))?;
        // An init that did not execute itself again runs on as it was restored, without a landlock domain.
        let (control, renewed, landlock) = match renew_init(&ours)? {
            Some((new, landlock)) => (new, true, landlock),
            None => (ours, false, "none".to_string()),
        };
        crate::trace::mark("init executed anew");
        let cgroup = guard.cgroup.take().ok_or(RuntimeError::InitGone)?;
        guard.paths.clear();
        Ok(Sandbox::assemble(checkpoint::Parts {
            id,
            claim_path,
            claim: claim_file,
            live_path,
            live,
            ids,
            cgroup,
            pid,
            pidfd,
            control,
            renewed,
            landlock,
        }))
    }

    /// Who a hibernated sandbox's id block is reserved for (see [`reservation_owner`]).
    pub fn reservation_owner(&self, id: &str) -> String {
        reservation_owner(&self.root, id)
    }
}

/// Wait for the restored init's answer to the `reexec` queued before the restore: `ready` from init
/// executed again (its memory the sandbox's namespace's again, its landlock domain back) with the control
/// socket to use from now on and what it says of its landlock rules, or anything else from the init of an
/// older berth that does not know the request, which runs on as it was restored (`None`).
fn renew_init(control: &OwnedFd) -> Result<Option<(OwnedFd, String)>, RuntimeError> {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(control, PollFlags::IN)];
    let limit = rustix::time::Timespec { tv_sec: 10, tv_nsec: 0 };
    match rustix::event::poll(&mut fds, Some(&limit)) {
        Ok(0) => {
            return Err(RuntimeError::Checkpoint { message: "the restored init did not answer within 10 s".into() });
        }
        Ok(_) => {}
        Err(e) => return Err(berth_sys::SysError::new("wait for the restored init", e).into()),
    }
    match protocol::recv::<Event>(control.as_fd()) {
        Ok((Event::Ready { landlock, .. }, mut fds)) if fds.len() == 1 => Ok(fds.pop().map(|fd| (fd, landlock))),
        Ok(_) => Ok(None),
        Err(protocol::ProtocolError::Closed | protocol::ProtocolError::Io(_)) => Err(RuntimeError::InitGone),
        Err(e) => Err(e.into()),
    }
}

/// Who a hibernated sandbox's id block is reserved for: its data root and id.
pub fn reservation_owner(root: &Path, id: &str) -> String {
    format!("{}/{id}", root.display())
}

/// Let the restored sandbox's processes read the image: owned by its root's host id, and readable by any id
/// (CRIU opens some of it from a task of the new user namespace before its id map is written). The image is
/// reached only through the bind in the stager's private mount namespace: on the host it lies under a
/// directory only host root may enter (see the daemon's `hibernate_dir`).
fn give_image_to(dir: &Path, uid: u32) -> Result<(), RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| RuntimeError::Checkpoint {
        message: format!("prepare the image in {}: {e}", dir.display()),
    };
    let owner = Some(rustix::fs::Uid::from_raw(uid));
    let group = Some(rustix::fs::Gid::from_raw(uid));
    for entry in fs::read_dir(dir).map_err(fail)?.flatten() {
        // Init's binary is handed to CRIU open, and is shared with other images.
        if entry.file_name() == checkpoint::INIT_COPY {
            continue;
        }
        let meta = entry.metadata().map_err(fail)?;
        // A file shared by a hard link with the images of other forks (their memory, read only) keeps its
        // owner: it is readable by any id, and those images are given to other ids.
        if std::os::unix::fs::MetadataExt::nlink(&meta) == 1 {
            rustix::fs::chown(entry.path(), owner, group).map_err(|e| fail(e.into()))?;
        }
        let mode = meta.permissions().mode();
        fs::set_permissions(entry.path(), fs::Permissions::from_mode(mode | 0o444)).map_err(fail)?;
    }
    rustix::fs::chown(dir, owner, group).map_err(|e| fail(e.into()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(fail)
}

/// CRIU's restore command line.
fn restore_args(
    manifest: &Manifest,
    dir: &Path,
    plan: &Plan,
    staging: &Staging,
    pidfile: &Path,
    control: &OwnedFd,
    exe: &fs::File,
) -> Result<Vec<String>, RuntimeError> {
    use std::os::fd::AsRawFd;
    let mut args: Vec<String> = vec!["restore".into()];
    args.extend(checkpoint::common_args(dir));
    args.extend(["-o".into(), "restore.log".into(), "--root".into(), plan.root.display().to_string()]);
    for e in &manifest.externals {
        let staged = match checkpoint::is_mask(e) {
            true => Some(staging.mask.clone()),
            false => staging.sources.get(&e.mount_point).cloned(),
        };
        let source = staged.ok_or_else(|| RuntimeError::Checkpoint {
            message: format!(
                "the sandbox had {} mounted at {}, which berth cannot mount again for its restore",
                e.fstype, e.mount_point
            ),
        })?;
        args.push("--external".into());
        args.push(format!("mnt[{}]:{}", e.key, source.display()));
    }
    args.push("--ext-unix-sk".into());
    args.push("--inherit-fd".into());
    args.push(format!("fd[{}]:socket:[{}]", control.as_raw_fd(), manifest.control_ino));
    args.push("--inherit-fd".into());
    args.push(format!("fd[{}]:{}", exe.as_raw_fd(), manifest.exe_key));
    args.extend(["--restore-sibling".into(), "--restore-detached".into(), "--pidfile".into()]);
    args.push(pidfile.display().to_string());
    Ok(args)
}

/// In the stager: build the mounts, then become CRIU. The overlays are made as the sandbox's root makes them
/// at create (made by host root, their upper layers, seen through id-mapped trees, could not be written).
#[allow(clippy::too_many_arguments)]
fn stage_and_exec(
    staging: &Staging,
    plan: &Plan,
    trees: &[OwnedFd],
    userns: std::os::fd::BorrowedFd<'_>,
    sockets: &[String],
    criu: &Criu,
    args: &[String],
    inherit: &[&dyn AsFd],
) -> Result<std::convert::Infallible, RuntimeError> {
    let root = plan.root.as_path();
    berth_sys::mount::make_private_recursive()?;
    for step in &staging.steps {
        match step {
            Step::Overlay { lower, upper, work, target, volatile } => {
                if target == root {
                    clear_stale_sockets(sockets, Some(upper), &BTreeMap::new());
                }
                let mut flags = vec!["userxattr"];
                if *volatile {
                    crate::child::clear_volatile_mark(work)?;
                    flags.push("volatile");
                }
                let overlay = berth_sys::mount::overlay_as(userns, lower, upper, work, &flags)?;
                berth_sys::mount::attach(overlay.as_fd(), target)?;
            }
            _ => crate::child::run_step(step, root, trees)?,
        }
    }
    clear_stale_sockets(sockets, None, &staging.sources);
    for fd in inherit {
        rustix::io::fcntl_setfd(fd.as_fd(), rustix::io::FdFlags::empty())
            .map_err(|e| berth_sys::SysError::new("hand a descriptor to CRIU", e))?;
    }
    let err =
        Command::new(&criu.path).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).exec();
    Err(berth_sys::SysError::new(format!("run {}", criu.path.display()), err).into())
}

/// In the stager: remove the socket files at `paths` (inside the sandbox) that its last run left on its kept
/// file systems, where CRIU is about to bind its sockets again: on the mounts staged at `sources`, else (when
/// given) in the directory `root` stands for the sandbox's root. Only sockets go, and nothing is followed out
/// of the sandbox's trees.
fn clear_stale_sockets(paths: &[String], root: Option<&Path>, sources: &BTreeMap<String, PathBuf>) {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    for path in paths {
        let Some((dir, name)) = path.rsplit_once('/').filter(|(_, n)| !n.is_empty()) else { continue };
        // On the mount it is on: the longest staged mount point above it, else the root.
        let mount = sources
            .iter()
            .filter(|(point, _)| dir == point.as_str() || dir.starts_with(&format!("{point}/")))
            .max_by_key(|(point, _)| point.len())
            .map(|(point, source)| (source.as_path(), &dir[point.len()..]));
        let Some((base, rel)) = mount.or(root.map(|r| (r, dir))) else { continue };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let Ok(base) = rustix::fs::open(base, flags, Mode::empty()) else { continue };
        let rel = match rel.trim_start_matches('/') {
            "" => ".",
            r => r,
        };
        let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
        let Ok(at) = rustix::fs::openat2(&base, rel, flags, Mode::empty(), how) else { continue };
        let socket = rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Socket);
        if socket {
            let _ = rustix::fs::unlinkat(&at, name, AtFlags::empty());
        }
    }
}

/// Undoes a restore that failed half way: the claim files and the cgroup.
struct Cleanup {
    paths: Vec<PathBuf>,
    cgroup: Option<crate::cgroup::Cgroup>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            let _ = cg.remove();
        }
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::image::ImageLayers;

    #[test]
    fn staging_keeps_the_root_overlay_and_moves_every_mount_inside_it_aside() {
        let layout = Layout { dir: "/s".into(), state: true };
        let sp = Spec {
            state: Some("/pool/sandboxes/abc".into()),
            volumes: vec![crate::spec::VolumeMount {
                source: "/pool/volumes/v".into(),
                target: "/data".into(),
                readonly: false,
            }],
            ..Spec::default()
        };
        let layers = ImageLayers { skeleton: "/img/rootfs".into(), usr: Some("/usr".into()), storage_ids: false };
        let plan = plan::compile(&sp, &layers, &layout, &[]);
        let st = stage(&plan, &layout, 1 << 20);
        assert!(st.steps.iter().any(|s| matches!(s, Step::Overlay { target, .. } if *target == plan.root)));
        assert!(!st.steps.iter().any(|s| matches!(s, Step::Pivot { .. })));
        // Nothing is mounted inside the root: CRIU binds the root alone and mounts the rest itself.
        for s in &st.steps {
            if let Step::Mount { target, .. } | Step::Attach { target, .. } = s {
                assert!(!target.starts_with(&plan.root), "{s:?} mounts inside the root");
            }
        }
        assert_eq!(st.sources["/usr"], Path::new("/s/stage/usr"));
        assert_eq!(st.sources["/etc/hostname"], Path::new("/s/hostname"));
        assert_eq!(st.sources["/dev/null"], Path::new("/dev/null"));
        assert_eq!(st.sources["/proc/keys"], Path::new("/dev/null"));
        assert_eq!(st.sources["/workspace"], Path::new("/s/state/workspace"));
        assert!(st.sources["/data"].starts_with("/s/stage"));
        // The staging directory exists before anything is made in it.
        let made = st.steps.iter().position(|s| *s == Step::Mkdir { path: "/s/stage".into(), mode: 0o755 }).unwrap();
        let used = st
            .steps
            .iter()
            .position(|s| matches!(s, Step::Overlay { target, .. } if target.starts_with("/s/stage")))
            .unwrap();
        assert!(made < used);
    }
}
