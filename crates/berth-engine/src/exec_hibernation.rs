//! An exec that outlives a hibernation of its sandbox: its supervisor's state handed over when the sandbox
//! is on disk, kept beside the image, and pumped again at the wake from new pipes that CRIU gives the
//! restored command in place of the old ones (see `engine::hibernate_execs`).

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use berth_api::ExecResult;
use berth_runtime::cgroup::Cgroup;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::EngineError;
use crate::exec::{Ends, Park, Pump, watch_pipe};
use crate::exec_log::ExecLog;
use crate::output_budget::OutputBudget;
use crate::session::Session;

/// What is kept on disk of an exec asleep with its sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    pub exec_id: String,
    pub argv: Vec<String>,
    /// Its request id with init, which reports its end under that id after the wake too.
    pub num: u64,
    /// When it started (ms since the epoch), for its duration.
    pub started_at_ms: u64,
    /// Time running it may still take (time hibernated does not count).
    pub timeout_left_ms: Option<u64>,
    /// Bytes of output so far.
    pub total: u64,
    /// The inodes of its stdout and stderr pipes while the command still had them: CRIU names them
    /// `pipe:[INODE]`, and the wake gives it a new pipe for each.
    pub pipes: [Option<u64>; 2],
    /// Its log, which goes on.
    pub log: PathBuf,
}

/// An exec handed over by its supervisor when its sandbox was written to disk.
pub struct Asleep {
    pub saved: Saved,
    /// The state of its log and of its output budget (see [`ExecLog::save`]).
    pub state: Vec<u8>,
    /// Kept in memory while the same daemon runs: whoever waits for its end (a follower of its log) waits on.
    pub done: watch::Sender<Option<ExecResult>>,
    pub kill: watch::Receiver<bool>,
}

impl Asleep {
    /// Take the state of a supervisor that has read its pipes to their end (its sandbox is on disk).
    pub(crate) async fn take(mut pump: Pump, ends: Ends, pipes: [Option<u64>; 2]) -> Option<Asleep> {
        let mut state = Vec::new();
        pump.log.save(&mut state).await.ok()?;
        pump.budget.save(&mut state);
        let ran = pump.started_at.elapsed().as_millis() as u64;
        let saved = Saved {
            exec_id: pump.exec_id,
            argv: Vec::new(),
            num: pump.num,
            started_at_ms: crate::engine::now_ms().saturating_sub(ran),
            timeout_left_ms: pump.timeout.map(|t| t.as_millis().max(1) as u64),
            total: pump.total,
            pipes,
            log: PathBuf::new(),
        };
        Some(Asleep { saved, state, done: ends.done, kill: ends.kill })
    }
}

/// What the wake gives an exec to go on with.
pub struct Wake {
    pub session: Arc<Session>,
    /// The read ends of its new stdout and stderr pipes (none for a stream the command had closed).
    pub pipes: [Option<OwnedFd>; 2],
    pub redactor: Option<berth_secrets::Redactor>,
    pub pause: Arc<crate::engine::pause::PauseClock>,
    pub cgroup: Option<Cgroup>,
    /// Where its tree's OOM kills are counted from the wake on.
    pub oom: Option<crate::launch::OomCount>,
}

/// Pump an exec again after the wake of its sandbox; returns the line to its supervisor.
pub async fn resume(
    saved: &Saved,
    state: &[u8],
    wake: Wake,
    done: watch::Sender<Option<ExecResult>>,
    kill: watch::Receiver<bool>,
) -> Result<mpsc::UnboundedSender<Park>, EngineError> {
    let unreadable = || EngineError::Log(std::io::Error::other(format!("the saved state of exec {}", saved.exec_id)));
    let file = tokio::fs::OpenOptions::new().append(true).open(&saved.log).await.map_err(EngineError::Log)?;
    let mut input = state;
    let log = ExecLog::load(file, &mut input).ok_or_else(unreadable)?;
    let budget = OutputBudget::load(&mut input).ok_or_else(unreadable)?;
    let [out, err] = wake.pipes;
    let pipes = [out.map(watch_pipe).transpose()?, err.map(watch_pipe).transpose()?];
    let events = wake.session.register_as(saved.num);
    let ran = Duration::from_millis(crate::engine::now_ms().saturating_sub(saved.started_at_ms));
    let (park, park_rx) = mpsc::unbounded_channel();
    let pump = Pump {
        session: wake.session,
        num: saved.num,
        events,
        exec_id: saved.exec_id.clone(),
        pipes,
        log,
        budget,
        redact: wake.redactor.map(|r| [r.clone(), r]),
        total: saved.total,
        timeout: saved.timeout_left_ms.map(Duration::from_millis),
        pause: Some(wake.pause),
        cgroup: wake.cgroup,
        oom: wake.oom,
        over_memory: false,
        client: None,
        started_at: Instant::now().checked_sub(ran).unwrap_or_else(Instant::now),
    };
    let ends = Ends { stdin_fed: Arc::new(AtomicBool::new(true)), park: park_rx, kill, done };
    tokio::spawn(pump.run(ends));
    Ok(park)
}
