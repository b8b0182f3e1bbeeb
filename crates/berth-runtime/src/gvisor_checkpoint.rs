//! Hibernation of a gVisor sandbox, with gVisor's own checkpoint and restore: its kernel (the Sentry) writes
//! its processes, their memory and its own state to an image (`runsc checkpoint`), and a new runsc brings
//! them back from it (`runsc restore`) on a root built again as at start.
//!
//! What gVisor does not keep is kept beside the image:
//! - the files of the sandbox's `/tmp`, a tmpfs of berth's on the sandbox's scratch (the files API reaches
//!   it from the host): copied once its kernel has stopped after the checkpoint, put back before the restore;
//! - init's binary, as for CRIU (see [`crate::checkpoint`]): the restored init runs the very program it
//!   hibernated with, whatever berth was upgraded to meanwhile.
//!
//! A descriptor from the host held inside cannot be written to disk (gVisor refuses the checkpoint, and the
//! sandbox runs on): init gives commands pipes of the sandbox's own (see berth-init's `streams`), so what
//! they leave in the background does not hold one; a command still running does.

use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_sys::process;

use crate::checkpoint::{INIT_COPY, MANIFEST, Manifest};
use crate::claims::{Partial, claim, claim_held};
use crate::plan::Layout;
use crate::spec::{Isolation, Spec};
use crate::{RuntimeError, Sandbox};

/// Where the files of the sandbox's `/tmp` are kept beside its image.
pub(crate) fn tmp_dir(image: &Path) -> PathBuf {
    image.join("tmp")
}

/// How long runsc may take to end the sandbox once its checkpoint is written.
const STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Copy the files kept in `kept` into `tmp` (the new sandbox's empty `/tmp`), as they were.
pub(crate) fn put_back(kept: &Path, tmp: &Path) -> Result<(), RuntimeError> {
    copy_tree(kept, tmp).map_err(|message| RuntimeError::Checkpoint { message })
}

/// `cp -a` of the contents of `from` into the directory `to`: owners, modes, times, links, sockets and
/// special files as they are, holes kept.
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let mut cp = Command::new("cp");
    cp.args(["-a", "--sparse=always", "--no-target-directory"]).arg(from).arg(to);
    // It ends with its caller: a crashed daemon's copy does not go on behind the next one's clean-up.
    berth_sys::process::end_with_caller(&mut cp);
    let out = cp
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("copy {} to {}: run cp: {e}", from.display(), to.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(format!("copy {} to {}: {}", from.display(), to.display(), said.trim()));
    }
    Ok(())
}

impl Sandbox {
    /// runsc `args` (after berth's flags) for this sandbox, run in the mount namespace of its first process
    /// (where runsc's state is): what it printed when it fails.
    fn runsc(&self, args: &[&str]) -> Result<(), String> {
        let runsc = crate::gvisor::runsc()?;
        let layout = Layout { dir: PathBuf::from(crate::sandbox::SCRATCH_MOUNT_POINT), state: false };
        let mut argv = crate::gvisor::runsc_prefix(&layout);
        argv.extend(args.iter().map(|a| a.to_string()));
        let what = format!("runsc {}", args.first().copied().unwrap_or_default());
        let ns = fs::File::open(format!("/proc/{}/ns/mnt", self.pid))
            .map_err(|e| format!("{what}: the sandbox's mount namespace: {e}"))?;
        let log = rustix::fs::memfd_create("berth-runsc", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| format!("{what}: {e}"))?;
        let (_, pidfd) = match berth_sys::clone::spawn(berth_sys::clone::Namespaces::MOUNT, None)
            .map_err(|e| format!("{what}: {}", crate::error_chain(&e)))?
        {
            berth_sys::clone::Forked::Child => {
                let entered = rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Mount),
                );
                let ready = entered.is_ok()
                    && berth_sys::fd::dup_onto(log.as_fd(), 1).is_ok()
                    && berth_sys::fd::dup_onto(log.as_fd(), 2).is_ok()
                    && berth_sys::fd::cloexec_all_except(&[1, 2]).is_ok();
                if ready {
                    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                    let _ = process::exec_fd(runsc.exe(), &argv, &[]);
                }
                berth_sys::clone::exit_now(127)
            }
            berth_sys::clone::Forked::Parent { pid, pidfd } => (pid, pidfd),
        };
        match process::pidfd_wait(pidfd.as_fd()) {
            Ok(process::Exit::Code(0)) => Ok(()),
            Ok(_) => Err(format!("{what}: {}", runsc_said(log.as_fd()))),
            Err(e) => Err(format!("{what}: {}", crate::error_chain(&e))),
        }
    }

    /// Hibernate a gVisor sandbox: write its checkpoint to `dir` (which ends it), keep its `/tmp`, and tear
    /// the rest down. When runsc refuses the checkpoint, the sandbox runs on as it was.
    pub(crate) fn hibernate_gvisor(&mut self, dir: &Path) -> Result<(Manifest, crate::Teardown), RuntimeError> {
        let fail = |message: String| RuntimeError::Checkpoint { message };
        let version = crate::gvisor::runsc().map_err(fail)?.version.clone();
        fs::create_dir_all(dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
        let supervisor_root = PathBuf::from(format!("/proc/{}/root", self.pid));
        let scratch = supervisor_root.join(crate::sandbox::SCRATCH_MOUNT_POINT.trim_start_matches('/'));
        let layout = Layout { dir: scratch.clone(), state: false };
        // Held open, the tmpfs outlives the sandbox's mount namespace, which ends with runsc: it is copied
        // once the kernel that wrote to it has stopped for good, as it was when the memory was written.
        let tmp =
            fs::File::open(layout.rootfs().join("tmp")).map_err(|e| fail(format!("open the sandbox's /tmp: {e}")))?;
        let init = crate::gvisor::init_copy(&layout);
        crate::checkpoint::keep_init(&init.to_string_lossy(), dir)
            .map_err(|e| fail(format!("keep a copy of init's binary: {e}")))?;
        let image = dir.display().to_string();
        self.runsc(&["checkpoint", &format!("--image-path={image}"), &self.id]).map_err(fail)?;
        // The checkpoint ends the sandbox's kernel; runsc follows.
        if !self.ended_within(STOP_TIMEOUT) {
            return Err(fail(format!(
                "runsc did not end within {} s of writing the checkpoint",
                STOP_TIMEOUT.as_secs()
            )));
        }
        use std::os::fd::AsRawFd;
        let held = PathBuf::from(format!("/proc/{}/fd/{}/.", std::process::id(), tmp.as_raw_fd()));
        copy_tree(&held, &tmp_dir(dir)).map_err(fail)?;
        drop(tmp);
        let manifest = Manifest {
            id: self.id.clone(),
            slot: 0,
            control_ino: 0,
            exe_key: String::new(),
            externals: Vec::new(),
            criu_version: String::new(),
            bound_sockets: Vec::new(),
            bytes: crate::checkpoint::dir_bytes(dir),
            boot_id: crate::checkpoint::boot_id(),
            isolation: Isolation::Gvisor,
            runsc_version: version,
        };
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| fail(e.to_string()))?;
        fs::write(dir.join(MANIFEST), text).map_err(|e| fail(format!("write the manifest: {e}")))?;
        Ok((manifest, self.teardown()))
    }

    /// Whether its first process (runsc) ended within `limit`.
    fn ended_within(&self, limit: std::time::Duration) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// What runsc said of its failure: its first line that says so (a Go panic's trace follows it), shortened.
fn runsc_said(log: std::os::fd::BorrowedFd<'_>) -> String {
    let mut buf = vec![0u8; 256 * 1024];
    let n = rustix::io::pread(log, &mut buf, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let said = lines.clone().find(|l| l.contains("failed")).or_else(|| lines.next()).unwrap_or("it said nothing");
    let mut said: String = said.chars().take(400).collect();
    if said.len() < text.trim().len() {
        said.push_str(" …");
    }
    said
}

impl crate::Runtime {
    /// Bring back the gVisor sandbox hibernated in `dir` with the spec it was created with: its root built
    /// again as at start, its `/tmp` put back, and runsc restoring its kernel from the checkpoint. On error
    /// nothing of it is left running and its image is untouched.
    pub(crate) fn restore_gvisor(&self, spec: &Spec, dir: &Path) -> Result<Sandbox, RuntimeError> {
        let fail = |message: String| RuntimeError::Checkpoint { message };
        let manifest = crate::checkpoint::read_manifest(dir)?;
        if manifest.isolation != Isolation::Gvisor {
            return Err(fail(format!("the image in {} is CRIU's, not gVisor's", dir.display())));
        }
        let id = match spec.id.as_deref() {
            Some(id) if id == manifest.id => manifest.id.clone(),
            _ => {
                return Err(fail(format!(
                    "the image in {} is of sandbox {}, not of this one",
                    dir.display(),
                    manifest.id
                )));
            }
        };
        crate::gvisor::check()?;
        let owners = crate::sandbox::mount_owners(spec)?;
        let layers = self.images.layers(&spec.image)?;
        if claim_held(&Path::new(crate::sandbox::LIVE_DIR).join(format!("{id}.lock"))) {
            return Err(RuntimeError::Running { id });
        }
        let init = fs::File::open(dir.join(INIT_COPY)).map_err(|e| fail(format!("open the kept copy of init: {e}")))?;
        let (claim_file, claim_path) = claim(&self.root.join("sandboxes"), &id)?;
        let mut partial = Partial { cgroup: None, claim_path: Some(claim_path.clone()), live_path: None };
        let (live, live_path) = claim(Path::new(crate::sandbox::LIVE_DIR), &id)?;
        partial.live_path = Some(live_path.clone());
        let layout = Layout { dir: PathBuf::from(crate::sandbox::SCRATCH_MOUNT_POINT), state: spec.state.is_some() };
        let plan = crate::plan::compile(spec, &layers, &layout, &owners);
        let claims = ((claim_file, claim_path), (live, live_path));
        let boot = crate::backend::Boot { id: &id, claims, partial: &mut partial, plan, layout: &layout };
        crate::gvisor_backend::boot_on(self, spec, boot, init.as_fd(), Some(dir))
    }
}
