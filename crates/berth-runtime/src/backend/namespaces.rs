//! The namespaces backend: a sandbox's processes are the host's, behind its namespaces, a host id block of
//! their own, a cgroup, seccomp and landlock. It hibernates, checkpoints and restores with CRIU
//! ([`crate::checkpoint`], [`crate::restore`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use berth_init::protocol::{self, Event};
use berth_sys::clone::{Forked, Namespaces};
use berth_sys::process;

use super::{Backend, Boot, Dump, FileIds, FileRoot, Offered, OomScope, Supports, TerminalAt, Wake};
use crate::cgroup::Entry;
use crate::checkpoint::{Criu, Manifest};
use crate::child::{self, Go};
use crate::ids::{IDS_PER_SANDBOX, IdBlock};
use crate::plan::Plan;
use crate::spec::{Isolation, Spec};
use crate::{Runtime, RuntimeError, Sandbox, Teardown};

pub(crate) struct NamespacesBackend;

impl super::sealed::Sealed for NamespacesBackend {}

pub(crate) const SUPPORTS: Supports = Supports {
    init_ends_all: true,
    command_cgroups: true,
    oom: OomScope::Command,
    terminal: TerminalAt::Host,
    host_sockets: true,
    warm_pool: true,
    hibernate: true,
    needs_criu: true,
    hibernate_holds_execs: true,
    checkpoint_running: true,
    shm_from_host: true,
};

impl Backend for NamespacesBackend {
    fn isolation(&self) -> Isolation {
        Isolation::Namespaces
    }

    fn name(&self) -> &'static str {
        "namespaces"
    }

    fn available(&self) -> Result<Offered, String> {
        Ok(Offered { detail: "the host kernel's namespaces, cgroups, seccomp and landlock".into(), facts: Vec::new() })
    }

    fn supports(&self) -> &'static Supports {
        &SUPPORTS
    }

    fn boot(&self, rt: &Runtime, spec: &Spec, b: Boot<'_>) -> Result<Sandbox, RuntimeError> {
        let Boot { id, claims: ((claim_file, claim_path), (live, live_path)), partial, plan, layout: _ } = b;
        let ids = IdBlock::claim(Path::new(crate::ids::CLAIMS_DIR))?;
        crate::trace::mark("claim");
        partial.cgroup = Some(rt.hierarchy.create(id, &spec.limits)?);
        crate::trace::mark("create cgroups");

        let entry = partial.cgroup.as_ref().ok_or(RuntimeError::InitGone)?.entry()?;
        let (parent_sock, child_sock) = berth_sys::fd::seqpacket_pair()?;
        let into_cgroup = match &entry {
            Entry::Dir(dir) => Some(dir.as_fd()),
            Entry::Tasks(_) => None,
        };
        let (pid, pidfd) = match berth_sys::clone::spawn(Namespaces::ALL, into_cgroup)? {
            Forked::Child => {
                drop(parent_sock);
                child::run(&plan, child_sock, rt.exe.as_fd(), &entry)
            }
            Forked::Parent { pid, pidfd } => (pid, pidfd),
        };
        drop(child_sock);
        drop(entry);
        crate::trace::mark("clone");
        let (control, landlock) = match start_child(pid, &plan, ids.base(), parent_sock.as_fd()) {
            Ok(ready) => ready,
            Err(e) => {
                let _ = process::pidfd_signal(pidfd.as_fd(), rustix::process::Signal::KILL);
                let _ = process::pidfd_wait(pidfd.as_fd());
                return Err(e);
            }
        };
        drop(parent_sock);
        let cgroup = partial.cgroup.take().ok_or(RuntimeError::InitGone)?;
        partial.claim_path = None;
        partial.live_path = None;
        Ok(Sandbox {
            id: id.to_string(),
            claim_path,
            _claim: claim_file,
            live_path,
            _live: live,
            _ids: Some(ids),
            cgroup,
            pid,
            pidfd,
            control,
            backend: &NamespacesBackend,
            copiers: Default::default(),
            checkpointable: true,
            landlock,
            destroyed: false,
        })
    }

    fn file_root(&self) -> FileRoot {
        FileRoot { under: PathBuf::new(), ids: FileIds::Mapped, unreachable: &[] }
    }

    fn rename_host(&self, sb: &Sandbox, name: &str) -> Result<(), RuntimeError> {
        crate::rename::rename_host(sb, name)
    }

    fn hibernate(&self, sb: &mut Sandbox, dir: &Path, d: &Dump<'_>) -> Result<(Manifest, Teardown), RuntimeError> {
        let criu = dumpable(sb, d.criu, "hibernate again")?;
        sb.criu_hibernate(dir, criu, d.owner)
    }

    fn checkpoint(&self, sb: &Sandbox, dir: &Path, d: &Dump<'_>) -> Result<Manifest, RuntimeError> {
        let criu = dumpable(sb, d.criu, "be forked with its processes")?;
        sb.criu_checkpoint(dir, criu)
    }

    fn restore(&self, rt: &Runtime, spec: &Spec, dir: &Path, w: Wake<'_>) -> Result<Sandbox, RuntimeError> {
        let criu = w.criu.ok_or_else(|| no_criu("restore"))?;
        rt.criu_restore(spec, dir, criu, w.pipes, w.fork)
    }

    fn reserved_slot(&self, m: &Manifest) -> Option<u32> {
        Some(m.slot)
    }
}

fn no_criu(what: &str) -> RuntimeError {
    RuntimeError::Checkpoint { message: format!("a namespaces sandbox needs CRIU to {what}, and none was given") }
}

/// The CRIU to dump `sb` with, or why it cannot be dumped (`what`: what it cannot do then).
fn dumpable<'a>(sb: &Sandbox, criu: Option<&'a Criu>, what: &str) -> Result<&'a Criu, RuntimeError> {
    let criu = criu.ok_or_else(|| no_criu(what))?;
    // CRIU rebuilds init's memory from outside the sandbox's user namespace, and refuses to dump a
    // non-dumpable process whose memory belongs to another namespace; init executes itself again after a
    // restore to fix that, but the init of an older berth cannot.
    if !sb.checkpointable {
        return Err(RuntimeError::Checkpoint {
            message: format!(
                "this sandbox was restored with the init of an older berth, which cannot {what} until its runtime \
                 is rebuilt (berth stop and start, or berth rebuild): CRIU cannot dump that restored init, whose \
                 memory it made outside the sandbox's user namespace"
            ),
        });
    }
    Ok(criu)
}

/// Map the child's ids, hand it its mounts, and wait for init to say it is ready; returns the control socket
/// init made in the sandbox's network namespace, which replaces the one the child was started with, and what
/// init said of its landlock rules.
fn start_child(pid: i32, plan: &Plan, base: u32, control: BorrowedFd<'_>) -> Result<(OwnedFd, String), RuntimeError> {
    process::write_id_maps(pid, base, IDS_PER_SANDBOX)?;
    let userns = process::open_namespace(pid, "user")?;
    let trees = crate::sandbox::clone_trees(plan, base, userns.as_fd())?;
    let fds: Vec<BorrowedFd<'_>> = trees.iter().map(|t| t.as_fd()).collect();
    crate::trace::mark("map ids and clone trees");
    let died = || RuntimeError::Setup {
        message: "the sandbox's first process died while it was being set up (out of memory?)".into(),
    };
    protocol::send(control, &Go { trees: fds.len() }, &fds).map_err(|_| died())?;
    let ready = protocol::recv::<Event>(control);
    crate::trace::mark("child setup and init ready");
    match ready {
        Ok((Event::Ready { landlock, .. }, mut fds)) if fds.len() == 1 => {
            Ok((fds.pop().ok_or(RuntimeError::InitGone)?, landlock))
        }
        Ok((Event::Ready { .. }, _)) => {
            Err(RuntimeError::Setup { message: "init's ready came without its control socket".into() })
        }
        Ok((Event::SetupFailed { message }, _)) => Err(RuntimeError::Setup { message }),
        Ok((other, _)) => Err(RuntimeError::Setup { message: format!("unexpected first message {other:?}") }),
        Err(protocol::ProtocolError::Closed | protocol::ProtocolError::Io(_)) => Err(died()),
        Err(e) => Err(e.into()),
    }
}
