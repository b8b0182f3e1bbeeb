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

use berth_sys::clone::{Forked, Namespaces};
use berth_sys::process;

use crate::checkpoint::{self, Criu, Manifest};
use crate::ids::{CLAIMS_DIR, IdBlock};
use crate::plan::{self, Layout, Plan, Step};
use crate::sandbox::{LIVE_DIR, SCRATCH_MOUNT_POINT, Sandbox, claim, claim_held, clone_trees, mount_owners};
use crate::spec::Spec;
use crate::{Runtime, RuntimeError};

/// The plan's steps for a restore, and where each mount inside the sandbox's root is staged instead.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Staging {
    pub steps: Vec<Step>,
    /// Sandbox path (`/usr`, `/etc/hostname`, …) → where its source is once the steps have run.
    pub sources: BTreeMap<String, PathBuf>,
}

/// Turn a plan into its staging for a restore (see the module's documentation).
pub(crate) fn stage(plan: &Plan, layout: &Layout) -> Staging {
    let stage_dir = layout.dir.join("stage");
    let mut steps = vec![];
    let mut sources = BTreeMap::new();
    let inside = |p: &Path| -> Option<String> {
        p.strip_prefix(&plan.root).ok().map(|rel| format!("/{}", rel.display())).filter(|s| s != "/")
    };
    for step in &plan.steps {
        match step {
            Step::Overlay { lower, upper, work, target } => match inside(target) {
                None => steps.push(step.clone()),
                Some(point) => {
                    let at = stage_dir.join(point.trim_start_matches('/').replace('/', "_"));
                    steps.push(Step::Mkdir { path: at.clone(), mode: 0o755 });
                    steps.push(Step::Overlay {
                        lower: lower.clone(),
                        upper: upper.clone(),
                        work: work.clone(),
                        target: at.clone(),
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
        }
    }
    // The staging directory itself, on the scratch tmpfs: right after that tmpfs is mounted.
    let scratch = steps.iter().position(|s| matches!(s, Step::Mount { target, .. } if *target == layout.dir));
    steps.insert(scratch.map_or(0, |i| i + 1), Step::Mkdir { path: stage_dir, mode: 0o755 });
    Staging { steps, sources }
}

impl Runtime {
    /// Bring back the sandbox hibernated in `dir` with the spec it was created with. On error nothing of it
    /// is left running and its image is untouched.
    pub fn restore(&self, spec: &Spec, dir: &Path, criu: &Criu) -> Result<Sandbox, RuntimeError> {
        self.restore_as(spec, dir, criu, false)
    }

    /// Bring up a new sandbox (`spec`, whose id is its own) from the image in `dir` of another one, which
    /// runs on: a fork with its processes. It gets a host id block of its own, to which the image (a copy
    /// only it restores from) is rewritten, with its own cgroup and host name (see [`crate::retarget`]).
    pub fn restore_fork(&self, spec: &Spec, dir: &Path, criu: &Criu) -> Result<Sandbox, RuntimeError> {
        self.restore_as(spec, dir, criu, true)
    }

    fn restore_as(&self, spec: &Spec, dir: &Path, criu: &Criu, fork: bool) -> Result<Sandbox, RuntimeError> {
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
        let mut staging = stage(&plan, &layout);
        // The image is read from inside the restored user namespace too: bound where that id can reach it,
        // whatever the permissions of the directories above it on the host.
        let image = layout.dir.join("image");
        staging.steps.push(Step::BindFile { source: dir.to_path_buf(), target: image.clone(), optional: false });
        let map = format!("0 {} {}\n", ids.base(), crate::ids::IDS_PER_SANDBOX);
        let userns = berth_sys::clone::user_namespace(&map, &map)?;
        let trees = clone_trees(&plan, ids.base(), userns.as_fd())?;
        let (ours, theirs) = berth_sys::fd::seqpacket_pair()?;
        let exe = fs::File::open(dir.join(checkpoint::INIT_COPY))
            .map_err(|e| RuntimeError::Checkpoint { message: format!("open the kept copy of init: {e}") })?;
        let pidfile = dir.join("restore.pid");
        let _ = fs::remove_file(&pidfile);
        let args = restore_args(&manifest, &image, &plan, &staging, &image.join("restore.pid"), &theirs, &exe)?;

        let (_, stager) = match berth_sys::clone::spawn(Namespaces::MOUNT, None)? {
            Forked::Child => {
                let code = match stage_and_exec(&staging, &plan.root, &trees, ids.base(), criu, &args, &[&theirs, &exe])
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
        drop(theirs);
        let exit = process::pidfd_wait(stager.as_fd())?;
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
            control: ours,
        }))
    }

    /// Who a hibernated sandbox's id block is reserved for (see [`reservation_owner`]).
    pub fn reservation_owner(&self, id: &str) -> String {
        reservation_owner(&self.root, id)
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
        let source = staging.sources.get(&e.mount_point).cloned().ok_or_else(|| RuntimeError::Checkpoint {
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

/// In the stager: build the mounts, then become CRIU. `root_id`: the host id of the sandbox's root.
fn stage_and_exec(
    staging: &Staging,
    root: &Path,
    trees: &[OwnedFd],
    root_id: u32,
    criu: &Criu,
    args: &[String],
    inherit: &[&dyn AsFd],
) -> Result<std::convert::Infallible, RuntimeError> {
    berth_sys::mount::make_private_recursive()?;
    for step in &staging.steps {
        // An overlay acts on its upper layer (on the sandbox's id-mapped state) as whoever mounted it, and host
        // root's uid 0 has no mapping there (its work directory could not even be made: the overlay would be
        // read-only). Mounted as the sandbox's root, as a created sandbox's are from inside it.
        let _as_root = match step {
            Step::Overlay { .. } => Some(berth_sys::fsids::act_as(root_id, root_id)?),
            _ => None,
        };
        crate::child::run_step(step, root, trees)?;
    }
    for fd in inherit {
        rustix::io::fcntl_setfd(fd.as_fd(), rustix::io::FdFlags::empty())
            .map_err(|e| berth_sys::SysError::new("hand a descriptor to CRIU", e))?;
    }
    let err =
        Command::new(&criu.path).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).exec();
    Err(berth_sys::SysError::new(format!("run {}", criu.path.display()), err).into())
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
        let st = stage(&plan, &layout);
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
