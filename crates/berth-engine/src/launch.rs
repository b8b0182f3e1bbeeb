//! Starting one command through a sandbox's init, and ending it: what an exec with pipes and an interactive
//! shell on a terminal have in common.

use std::os::fd::{AsFd, BorrowedFd};

use berth_init::protocol::{Attached, Event, Request};
use berth_runtime::cgroup::Cgroup;
use tokio::sync::mpsc;

use crate::EngineError;
use crate::session::Session;

/// What to run.
pub struct Command<'a> {
    pub argv: &'a [String],
    /// `KEY=VALUE` strings: the whole environment.
    pub env: &'a [String],
    pub cwd: &'a str,
    /// Uid and gid inside the sandbox.
    pub ids: (u32, u32),
    /// The attached stdin is a terminal that becomes the command's controlling terminal.
    pub tty: bool,
    /// Init opens the terminal itself, of this size, and copies it to the attached stdin (a stream socket).
    pub pty: Option<berth_init::protocol::Winsize>,
}

/// How asking init went.
pub enum Outcome {
    /// Running, as this pid inside the sandbox.
    Started(i32),
    /// Init could not start it: an exit code in the shell's manner (127 not found, 126 not executable) and
    /// why.
    Failed { code: i32, message: String },
}

/// A command init was asked to start: its request id, the channel its later events (its exit) arrive on,
/// and whether it started. A command that did not start is no longer registered with the session.
pub struct Launched {
    pub num: u64,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub outcome: Outcome,
}

/// Ask init to start `cmd` with the streams `stdio` (as `attached` says which), moved first into `cgroup`,
/// and wait for init to say whether it did.
pub async fn launch(
    session: &Session,
    cmd: &Command<'_>,
    attached: Attached,
    stdio: &[BorrowedFd<'_>],
    cgroup: Option<&Cgroup>,
) -> Result<Launched, EngineError> {
    let join = match cgroup {
        Some(cg) => cg.join_files().map_err(|e| EngineError::Create(berth_runtime::error_chain(&e)))?,
        None => Vec::new(),
    };
    let (num, mut events) = session.register();
    let req = Request::Exec {
        id: num,
        argv: cmd.argv.to_vec(),
        env: cmd.env.to_vec(),
        cwd: cmd.cwd.to_string(),
        uid: cmd.ids.0,
        gid: cmd.ids.1,
        attached,
        join_cgroup: join.len(),
        tty: cmd.tty,
        pty: cmd.pty,
    };
    // Init reads one message of at most MAX_MESSAGE bytes: a larger command line is the client's error.
    let size = serde_json::to_vec(&req).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > berth_init::protocol::MAX_MESSAGE {
        session.unregister(num);
        return Err(EngineError::invalid(format!(
            "the command, its environment and working directory take {size} bytes; at most {} are allowed",
            berth_init::protocol::MAX_MESSAGE
        )));
    }
    let mut fds = stdio.to_vec();
    fds.extend(join.iter().map(|f| f.as_fd()));
    let sent = session.send(&req, &fds);
    drop(fds);
    drop(join);
    if let Err(e) = sent {
        session.unregister(num);
        return Err(e);
    }
    let outcome = match events.recv().await {
        Some(Event::Started { pid, .. }) => Outcome::Started(pid),
        Some(Event::Failed { code, message, .. }) => {
            session.unregister(num);
            Outcome::Failed { code, message }
        }
        _ => {
            session.unregister(num);
            return Err(EngineError::InitGone);
        }
    };
    Ok(Launched { num, events, outcome })
}

/// Kill a command's whole tree: its process group through init at once, and everything in its cgroup (which
/// also holds what left the group with setsid) in the background.
pub fn kill_tree(session: &Session, num: u64, cgroup: Option<&Cgroup>) {
    let _ = session.send(&Request::Signal { id: num, signal: 9 }, &[]);
    if let Some(cg) = cgroup.cloned() {
        tokio::task::spawn_blocking(move || cg.kill_all());
    }
}

/// After a command ended: remove its cgroup when its tree is all gone, or when it was killed (after killing
/// whatever is left); one with background processes keeps it until they end or the sandbox does.
pub async fn release_cgroup(cgroup: Option<Cgroup>, killed: bool) {
    let Some(cg) = cgroup else { return };
    if killed {
        let _ = tokio::task::spawn_blocking(move || cg.kill_all().and_then(|()| cg.remove())).await;
    } else if cg.procs().is_ok_and(|p| p.is_empty()) {
        let _ = tokio::task::spawn_blocking(move || cg.remove()).await;
    }
}

/// Where the kernel's OOM kills of one command's tree are counted, and the count when it started. On cgroup v1
/// its own cgroup has the memory controller and the kernel counts a kill in the cgroup of the process killed.
/// On v2 a sandbox's child cgroups have none (init lives in the sandbox's own cgroup, and v2 enables
/// controllers for children only of cgroups without processes): a kill in the sandbox while the command ran
/// is taken as the command's.
#[derive(Clone)]
pub struct OomCount {
    cgroup: Cgroup,
    before: u64,
    /// The highest count seen while the command ran (`whole` only; see there).
    seen: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// How often a whole sandbox's count is looked at while a command of it runs.
const OOM_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

impl OomCount {
    /// Start counting for a command whose own cgroup is `own`, in the sandbox whose cgroup is `sandbox`.
    pub fn start(sandbox: Cgroup, own: &Cgroup) -> Option<OomCount> {
        match own.oom_kills() {
            Ok(before) => Some(OomCount { cgroup: own.clone(), before, seen: None }),
            Err(_) => sandbox.oom_kills().ok().map(|before| OomCount { cgroup: sandbox, before, seen: None }),
        }
    }

    /// Count the kills of the whole sandbox whose cgroup is `sandbox` (gVisor's: one kill ends it). The kill
    /// ends the sandbox, and its supervisor may remove the cgroup before the command's end is read: the count
    /// is looked at every 20 ms while the command runs (until the cgroup is gone, or the count dropped), so
    /// that the kill is still known then.
    pub fn whole(sandbox: Cgroup) -> Option<OomCount> {
        let before = sandbox.oom_kills().ok()?;
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
        let watch = (sandbox.clone(), std::sync::Arc::downgrade(&seen));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let (cgroup, seen) = watch;
                loop {
                    tokio::time::sleep(OOM_LOOK_EVERY).await;
                    let (Some(seen), Ok(n)) = (seen.upgrade(), cgroup.oom_kills()) else { return };
                    seen.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        Some(OomCount { cgroup: sandbox, before, seen: Some(seen) })
    }

    /// Whether the OOM killer killed a process of the command since it started (false when not counted).
    pub fn killed(count: Option<&OomCount>) -> bool {
        count.is_some_and(|c| {
            let now = c.cgroup.oom_kills().ok();
            let seen = c.seen.as_ref().map(|s| s.load(std::sync::atomic::Ordering::Relaxed));
            now.max(seen).is_some_and(|n| n > c.before)
        })
    }
}

/// Exit code in the shell's manner for how a command ended: its own code, 128 + a signal, or 125.
pub fn exit_code(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 125,
    }
}
