//! The gVisor backend's [`Backend`]: how [`crate::gvisor`] boots a sandbox, and [`crate::gvisor_checkpoint`]
//! hibernates and restores it, seen from the rest of berth.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use crate::backend::{Backend, Boot, Dump, FileIds, FileRoot, Offered, OomScope, Supports, TerminalAt, Wake, sealed};
use crate::checkpoint::Manifest;
use crate::spec::{Isolation, Spec};
use crate::{Runtime, RuntimeError, Sandbox, Teardown};

pub(crate) struct GvisorBackend;

impl sealed::Sealed for GvisorBackend {}

pub(crate) const SUPPORTS: Supports = Supports {
    init_ends_all: false,
    command_cgroups: false,
    oom: OomScope::Sandbox,
    terminal: TerminalAt::Init,
    host_sockets: false,
    warm_pool: false,
    hibernate: true,
    needs_criu: false,
    hibernate_holds_execs: false,
    checkpoint_running: false,
    shm_from_host: false,
};

/// What gVisor's kernel serves itself, which the host holds only the empty mount points of.
const OWN_FILE_SYSTEMS: &[&str] = &["proc", "sys", "dev"];

impl Backend for GvisorBackend {
    fn isolation(&self) -> Isolation {
        Isolation::Gvisor
    }

    fn name(&self) -> &'static str {
        "gVisor"
    }

    fn available(&self) -> Result<Offered, String> {
        let r = crate::gvisor::runsc()?;
        Ok(Offered {
            detail: format!("runsc {} at {}", r.version, r.path.display()),
            facts: vec![
                ("runsc", r.path.display().to_string()),
                ("version", r.version.clone()),
                ("platform", "systrap".into()),
            ],
        })
    }

    fn supports(&self) -> &'static Supports {
        &SUPPORTS
    }

    fn boot(&self, rt: &Runtime, spec: &Spec, b: Boot<'_>) -> Result<Sandbox, RuntimeError> {
        boot_on(rt, spec, b, rt.exe.as_fd(), None)
    }

    fn command_streams(
        &self,
        sb: &Sandbox,
        streams: [Option<BorrowedFd<'_>>; 3],
    ) -> Result<Option<[Option<OwnedFd>; 3]>, RuntimeError> {
        let mut copiers = sb.copiers.lock().map_err(|_| RuntimeError::InitGone)?;
        crate::gvisor::through_pipes(streams, &mut copiers).map(Some)
    }

    fn file_root(&self) -> FileRoot {
        // runsc runs as the host's root, in a mount namespace of its own where the sandbox's root is one
        // directory; the trees mounted there map the sandbox's ids to the same numbers (gVisor's kernel maps
        // nothing).
        let root = crate::gvisor::root_in_supervisor();
        let under = root.strip_prefix("/").map(Path::to_path_buf).unwrap_or(root);
        FileRoot { under, ids: FileIds::Same, unreachable: OWN_FILE_SYSTEMS }
    }

    fn hibernate(&self, sb: &mut Sandbox, dir: &Path, _: &Dump<'_>) -> Result<(Manifest, Teardown), RuntimeError> {
        sb.hibernate_gvisor(dir)
    }

    fn checkpoint(&self, _: &Sandbox, _: &Path, _: &Dump<'_>) -> Result<Manifest, RuntimeError> {
        Err(RuntimeError::Checkpoint {
            message: "a gVisor sandbox cannot be forked with its processes yet: CRIU cannot write the processes of a \
                      gVisor kernel, and berth uses gVisor's own checkpoints only to hibernate"
                .into(),
        })
    }

    fn restore(&self, rt: &Runtime, spec: &Spec, dir: &Path, w: Wake<'_>) -> Result<Sandbox, RuntimeError> {
        if w.fork {
            return Err(RuntimeError::IsolationCannot {
                isolation: Isolation::Gvisor,
                what: "be forked with its processes",
            });
        }
        rt.restore_gvisor(spec, dir)
    }
}

/// Start gVisor sandbox `b.id` on `b.plan` with `init_exe` as its init: a new one, or with `image`, the one
/// restored from the checkpoint there.
pub(crate) fn boot_on(
    rt: &Runtime,
    spec: &Spec,
    b: Boot<'_>,
    init_exe: BorrowedFd<'_>,
    image: Option<&Path>,
) -> Result<Sandbox, RuntimeError> {
    let Boot { id, claims: ((claim_file, claim_path), (live, live_path)), partial, plan, layout } = b;
    // gVisor's kernel maps the sandbox's ids itself: no host id block is needed. Its CPU limit is set once it
    // is up: gVisor's own start (a Go program's, about 0.2 s of CPU, more for a restore) is not the sandbox's
    // work, and at a hundredth of a core it would take tens of seconds. Nothing of the sandbox's own has run
    // before init says ready (after a restore, only for the moments until this line).
    let limits = crate::gvisor::host_limits(&spec.limits);
    partial.cgroup = Some(rt.hierarchy.create(id, &crate::cgroup::Limits { cpu_millis: None, ..limits })?);
    let entry = partial.cgroup.as_ref().ok_or(RuntimeError::InitGone)?.entry()?;
    let (pid, pidfd, control, landlock) =
        crate::gvisor::start(&crate::gvisor::plan(plan), layout, spec, id, &entry, init_exe, image)?;
    let cgroup = partial.cgroup.take().ok_or(RuntimeError::InitGone)?;
    if let Some(millis) = limits.cpu_millis
        && let Err(e) = cgroup.limit_cpu(millis)
    {
        partial.cgroup = Some(cgroup);
        return Err(e.into());
    }
    partial.claim_path = None;
    partial.live_path = None;
    Ok(Sandbox {
        id: id.to_string(),
        claim_path,
        _claim: claim_file,
        live_path,
        _live: live,
        _ids: None,
        cgroup,
        pid,
        pidfd,
        control,
        backend: &GvisorBackend,
        copiers: Default::default(),
        landlock,
        checkpointable: false,
        destroyed: false,
    })
}
