//! One live sandbox as the engine holds it: its record, journal, session with init, and execs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_api::{ExecInfo, ExecResult, Sandbox};
use tokio::sync::{Mutex, watch};

use crate::journal::Journal;
use crate::session::Session;

pub(super) struct Live {
    pub(super) record: Mutex<Sandbox>,
    pub(super) journal: std::sync::Mutex<Journal>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) session: Arc<Session>,
    pub(super) execs: Mutex<BTreeMap<String, ExecEntry>>,
    pub(super) next_exec: std::sync::atomic::AtomicU64,
    /// The first exec number of this daemon: logs numbered below it were left by a previous one.
    pub(super) first_exec: u64,
    /// Execs and shells admitted and not yet in `execs` (see [`Starting`]).
    pub(super) starting: Arc<std::sync::atomic::AtomicUsize>,
    /// Connections open through its previews: like a running exec, they hold its idle clock and keep it from
    /// being written to disk (their sockets lead out of it).
    pub(super) previews_open: Arc<std::sync::atomic::AtomicUsize>,
    /// The sandbox's egress proxy, with its policy.
    pub(super) egress: Arc<berth_egress::Proxy>,
    /// Its secrets' values, kept out of what berth shows of it.
    pub(super) redactor: Option<berth_secrets::Redactor>,
    /// What the daemon meters of it (see `usage`).
    pub(super) meter: std::sync::Mutex<super::usage::Meter>,
    /// Tasks that serve the sandbox (its connections, its egress log); ended with it.
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Time spent paused, for the clocks that count only time running.
    pub(super) pause: Arc<super::pause::PauseClock>,
    /// When its idle hibernation last failed (ms; 0: never), so that the reaper does not retry it until the
    /// next activity.
    pub(super) hibernate_failed_at: std::sync::atomic::AtomicU64,
    /// Its directories being watched (see `watch`).
    pub(super) watches: super::watch::Watches,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for t in tasks.iter() {
                t.abort();
            }
        }
    }
}

pub(super) struct ExecEntry {
    pub(super) argv: Vec<String>,
    pub(super) started_at_ms: u64,
    pub(super) kill: watch::Sender<bool>,
    pub(super) done: watch::Receiver<Option<ExecResult>>,
    /// The line to its supervisor around a hibernation (none for an exec on the caller's streams).
    pub(super) park: Option<tokio::sync::mpsc::UnboundedSender<crate::exec::Park>>,
    /// The task that records its end (see `record_end`), if the engine runs one.
    pub(super) recorder: Option<tokio::task::AbortHandle>,
    /// Where input for its open stdin goes (an exec started with `stdin_open`).
    pub(super) input: Option<tokio::sync::mpsc::UnboundedSender<crate::exec::Input>>,
}

impl Live {
    pub(super) fn new(
        root: &Path,
        bounds: &crate::bounds::Bounds,
        record: Sandbox,
        env: BTreeMap<String, String>,
        session: Arc<Session>,
        egress: Arc<berth_egress::Proxy>,
        redactor: Option<berth_secrets::Redactor>,
    ) -> std::io::Result<Live> {
        let journal = Journal::open_bounded(&journal_path(root, &record.id), bounds.egress_journal_bytes())?;
        let sid = record.id.clone();
        prune_logs(root, &sid, bounds.max_exec_records);
        let first_exec = next_exec_number(root, &sid);
        Ok(Live {
            journal: std::sync::Mutex::new(journal),
            record: Mutex::new(record),
            env,
            session,
            execs: Mutex::new(BTreeMap::new()),
            next_exec: std::sync::atomic::AtomicU64::new(first_exec),
            first_exec,
            starting: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            previews_open: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            egress,
            redactor,
            meter: std::sync::Mutex::new(super::usage::Meter::load(root, &sid)),
            tasks: std::sync::Mutex::new(Vec::new()),
            pause: Arc::default(),
            hibernate_failed_at: std::sync::atomic::AtomicU64::new(0),
            watches: Default::default(),
        })
    }

    /// Keep a task that serves this sandbox; it is aborted when the sandbox is dropped.
    pub(super) fn keep_task(&self, task: tokio::task::JoinHandle<()>) {
        if let Ok(mut t) = self.tasks.lock() {
            t.push(task);
        }
    }

    /// Record an action in the sandbox's journal. A journal that cannot be written is reported on stderr:
    /// the action has happened, and refusing it afterwards would not undo it.
    pub(super) fn note(&self, action: &str, args: serde_json::Value, result: serde_json::Value) {
        self.note_as(&actor(), action, args, result);
    }

    pub(super) fn note_as(&self, actor: &str, action: &str, args: serde_json::Value, result: serde_json::Value) {
        let (args, result) = self.clean(args, result);
        // The sandbox's egress attempts left out since the last record are counted before it, in time order.
        let written = self.journal.lock().map_err(|_| std::io::Error::other("poisoned")).and_then(|mut j| {
            j.flush_dropped("sandbox")?;
            j.append(actor, action, args, result)
        });
        if let Err(e) = written {
            crate::log::warn("cannot write the journal", serde_json::json!({"error": e.to_string(), "action": action}));
        }
    }

    /// Record an egress attempt, within the egress records' share of the journal (past it, counted).
    pub(super) fn note_egress(&self, args: serde_json::Value, result: serde_json::Value) {
        let (args, result) = self.clean(args, result);
        let written = self
            .journal
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))
            .and_then(|mut j| j.append_egress("sandbox", args, result));
        if let Err(e) = written {
            crate::log::warn(
                "cannot write the journal",
                serde_json::json!({"error": e.to_string(), "action": "egress"}),
            );
        }
    }

    /// Bytes in the sandbox's journal.
    pub(super) fn journal_bytes(&self) -> u64 {
        self.journal.lock().map(|j| j.bytes()).unwrap_or(u64::MAX)
    }

    /// A secret's value never reaches the journal (an argv that spells one out, an error that quotes one).
    fn clean(&self, args: serde_json::Value, result: serde_json::Value) -> (serde_json::Value, serde_json::Value) {
        match &self.redactor {
            Some(r) if !r.is_empty() => {
                let clean = |v: serde_json::Value| serde_json::from_str(&r.redact_str(&v.to_string())).unwrap_or(v);
                (clean(args), clean(result))
            }
            _ => (args, result),
        }
    }
}

/// An exec (or shell) admitted and not yet among its sandbox's execs: counted as running until it is, so
/// that execs starting at once cannot pass `--max-running-execs` together. Dropped once it is listed.
pub(super) struct Starting(Arc<std::sync::atomic::AtomicUsize>);

impl Starting {
    pub(super) fn new(starting: &Arc<std::sync::atomic::AtomicUsize>) -> Starting {
        starting.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Starting(Arc::clone(starting))
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The numbers of the exec logs kept on disk for sandbox `id`.
pub(super) fn log_numbers(root: &Path, id: &str) -> Vec<u64> {
    std::fs::read_dir(root.join("logs").join(id))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix('x')?.strip_suffix(".log")?.parse::<u64>().ok()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The next exec number of sandbox `id`: after the highest whose log a previous daemon left, so that exec ids
/// (and their logs and cgroups) are never reused.
fn next_exec_number(root: &Path, id: &str) -> u64 {
    log_numbers(root, id).into_iter().max().unwrap_or(0) + 1
}

/// Keep only the newest `keep` logs a previous daemon left (it kept no more records than that either). The
/// highest stays whatever `keep` is: it holds the next exec number.
fn prune_logs(root: &Path, id: &str, keep: usize) {
    let mut numbers = log_numbers(root, id);
    numbers.sort_unstable_by(|a, b| b.cmp(a));
    for n in numbers.into_iter().skip(keep.max(1)) {
        let _ = std::fs::remove_file(root.join("logs").join(id).join(format!("x{n}.log")));
    }
}

/// The number of exec id `x<N>`, for ordering (`x10` comes after `x9`).
pub(super) fn exec_number(exec_id: &str) -> u64 {
    exec_id.strip_prefix('x').and_then(|n| n.parse().ok()).unwrap_or(0)
}

tokio::task_local! {
    /// Who is asking, for the journal: the token id on the TCP listener; `local` on the unix socket.
    pub static ACTOR: String;
    /// The caller of the request being served, when it came with a token (none on the unix socket).
    static CALLER: super::Caller;
}

/// The actor of the request being served (`local` outside one).
pub fn actor() -> String {
    ACTOR.try_with(String::clone).unwrap_or_else(|_| "local".to_string())
}

/// The caller of the request being served, if it came with a token.
pub fn current_caller() -> Option<super::Caller> {
    CALLER.try_with(Clone::clone).ok()
}

/// Run `f` as `caller`: journaled as its actor, and seeing what it may see.
pub(super) async fn as_caller<F: std::future::Future>(caller: super::Caller, f: F) -> F::Output {
    let actor = caller.actor();
    CALLER.scope(caller, ACTOR.scope(actor, f)).await
}

/// The caller of the request being served (its actor and what it may see), kept to run work as it in a
/// task of its own.
pub struct Carried {
    actor: String,
    caller: Option<super::Caller>,
}

impl Carried {
    pub fn now() -> Carried {
        Carried { actor: actor(), caller: current_caller() }
    }

    pub async fn run<F: std::future::Future>(self, f: F) -> F::Output {
        match self.caller {
            Some(c) => CALLER.scope(c, ACTOR.scope(self.actor, f)).await,
            None => ACTOR.scope(self.actor, f).await,
        }
    }
}

/// `f`, to be run in a task of its own as the caller of the request being served.
pub fn carried<F: std::future::Future>(f: F) -> impl std::future::Future<Output = F::Output> {
    Carried::now().run(f)
}

/// Where sandbox `id`'s journal is kept (it outlives the sandbox).
pub fn journal_path(root: &Path, id: &str) -> PathBuf {
    root.join("journal").join(format!("{id}.jsonl"))
}

impl ExecEntry {
    pub(super) fn info(&self, id: &str) -> ExecInfo {
        let result = self.done.borrow().clone();
        ExecInfo {
            exec_id: id.to_string(),
            argv: self.argv.clone(),
            started_at_ms: self.started_at_ms,
            running: result.is_none(),
            result,
        }
    }
}
