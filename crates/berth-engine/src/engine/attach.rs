//! Execs whose streams the caller brings (an interactive shell's terminal) rather than pipes the engine
//! makes: they are execs of the sandbox like any other (an exec id, their own cgroup, a journal record,
//! lifecycle events, `ps` and `kill`), but the caller runs their I/O and reports how they ended.

use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::Arc;

use berth_api::{EventKind, ExecResult};
use berth_init::protocol::{Attached, Event};
use berth_runtime::cgroup::Cgroup;
use tokio::sync::{mpsc, watch};

use super::{Engine, ExecEntry, now_ms};
use crate::EngineError;
use crate::journal;
use crate::launch::{self, Outcome};
use crate::session::Session;
use berth_runtime::spec::BASE_ENV;

/// An exec started on the caller's descriptors. The caller watches `events` for its exit, obeys `kill`
/// (`berth kill`), and sends its result on `done` when it has ended, which records it.
pub(crate) struct AttachedExec {
    pub exec_id: String,
    pub session: Arc<Session>,
    /// Its request id with init (for signals).
    pub num: u64,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub outcome: Outcome,
    pub cgroup: Option<Cgroup>,
    /// Where its tree's OOM kills are counted.
    pub oom: Option<launch::OomCount>,
    /// Where its output goes, for `berth logs`.
    pub log: PathBuf,
    /// Most bytes of output its log keeps (head and tail, a marker between).
    pub max_log: u64,
    pub kill: watch::Receiver<bool>,
    pub done: watch::Sender<Option<ExecResult>>,
    pub started_at: std::time::Instant,
    /// The sandbox's secrets, replaced in what the terminal shows before it goes anywhere.
    pub redactor: Option<berth_secrets::Redactor>,
}

/// Whose terminal an attached exec runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TerminalOn {
    /// The one the caller gives (a pseudo-terminal of the sandbox's devpts).
    Given,
    /// One init opens inside, of this size.
    Init(berth_init::protocol::Winsize),
}

/// Who an attached exec runs as, and where: root in /workspace unless told.
#[derive(Debug, Clone, Default)]
pub(crate) struct Who {
    account: Option<super::users::Account>,
    workdir: Option<String>,
}

impl Who {
    pub(crate) fn new(account: Option<super::users::Account>, workdir: Option<String>) -> Who {
        Who { account, workdir }
    }

    fn ids(&self) -> (u32, u32) {
        self.account.as_ref().map_or((0, 0), |a| (a.uid, a.gid))
    }

    /// Its working directory: the one asked for, else the user's home, else /workspace.
    fn workdir(&self) -> String {
        match (&self.workdir, self.account.as_ref().and_then(|a| a.home.clone())) {
            (Some(w), _) => w.clone(),
            (None, Some(home)) => home,
            (None, None) => "/workspace".to_string(),
        }
    }
}

impl Engine {
    /// Start `argv` in sandbox `id` on a terminal, as and where `who` says, with the sandbox's environment
    /// and `env` on top. On [`TerminalOn::Given`], `stdio` is the terminal (its stdin, stdout and stderr, and
    /// its controlling terminal); on [`TerminalOn::Init`], init opens the terminal inside, of that size, and
    /// `stdio` is one stream socket it copies the terminal to.
    pub(crate) async fn exec_attached(
        &self,
        id: &str,
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        who: &Who,
        stdio: &[BorrowedFd<'_>],
        on: TerminalOn,
    ) -> Result<AttachedExec, EngineError> {
        let (tty, pty) = match on {
            TerminalOn::Given => (true, None),
            TerminalOn::Init(size) => (false, Some(size)),
        };
        if argv.first().is_none_or(String::is_empty) {
            return Err(EngineError::invalid("argv must name a command"));
        }
        let live = self.live_or_wake(id, "shell").await?;
        self.touch(&live, "shell").await?;
        let (sid, isolation) = {
            let r = live.record.lock().await;
            (r.id.clone(), r.isolation)
        };
        let starting = self.admit_exec(&live, &sid).await?;
        let workdir = who.workdir();
        let mut full: BTreeMap<String, String> = BASE_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        for (k, v) in who.account.iter().flat_map(super::users::Account::env) {
            match v {
                Some(v) => full.insert(k.to_string(), v),
                None => full.remove(k),
            };
        }
        full.insert("PWD".into(), workdir.clone());
        for (k, v) in live.env.iter().chain(env.iter()) {
            berth_runtime::spec::check_env(k, v).map_err(|e| EngineError::invalid(e.to_string()))?;
            full.insert(k.clone(), v.clone());
        }
        let env_list: Vec<String> = full.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let n = live.next_exec.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let exec_id = format!("x{n}");
        let logs = self.root.join("logs").join(&sid);
        tokio::fs::create_dir_all(&logs).await.map_err(EngineError::Log)?;
        let log = logs.join(format!("{exec_id}.log"));
        let cgroup = self.command_cgroup(&sid, &exec_id, isolation)?;
        let oom = self.oom_count(&sid, cgroup.as_ref(), isolation);
        let started_at = std::time::Instant::now();
        let started_at_ms = now_ms();
        let cmd = launch::Command { argv: &argv, env: &env_list, cwd: &workdir, ids: who.ids(), tty, pty };
        let attached = Attached { stdin: true, stdout: pty.is_none(), stderr: pty.is_none() };
        let launched = launch::launch(&live.session, &cmd, attached, stdio, cgroup.as_ref()).await?;
        let env_names: Vec<&String> = live.env.keys().chain(env.keys()).collect();
        live.note(
            "exec",
            serde_json::json!({"exec_id": exec_id, "argv": argv, "workdir": workdir, "env_names": env_names, "tty": tty}),
            serde_json::json!({"started": matches!(launched.outcome, Outcome::Started(_))}),
        );
        self.events.emit(&sid, EventKind::ExecStarted, Some(exec_id.clone()), None);
        let (kill_tx, kill) = watch::channel(false);
        let (done, done_rx) = watch::channel::<Option<ExecResult>>(None);
        let (events, journal_live, mut finished) = (Arc::clone(&self.events), Arc::clone(&live), done_rx.clone());
        let (sid2, eid, log_path) = (sid.clone(), exec_id.clone(), log.clone());
        tokio::spawn(async move {
            let waited = finished.wait_for(|r| r.is_some()).await.map(|r| r.clone());
            if let Ok(result) = waited {
                if let Some(res) = &result {
                    // The idle clocks start again from a shell's end, not its start.
                    journal_live.record.lock().await.last_activity_ms = super::now_ms();
                    let kind = if res.killed { EventKind::ExecKilled } else { EventKind::ExecFinished };
                    events.emit(&sid2, kind, Some(eid.clone()), Some(res.exit_code));
                }
                let digest = journal::file_digest_async(log_path.clone()).await;
                journal_live.note(
                    "exec_finished",
                    serde_json::json!({"exec_id": eid}),
                    serde_json::json!({"result": result, "log": log_path, "log_sha256": digest}),
                );
            }
        });
        live.execs.lock().await.insert(
            exec_id.clone(),
            ExecEntry { argv, started_at_ms, kill: kill_tx, done: done_rx, park: None, recorder: None, input: None },
        );
        // Listed: counted as running by its entry from here.
        drop(starting);
        Ok(AttachedExec {
            exec_id,
            session: Arc::clone(&live.session),
            num: launched.num,
            events: launched.events,
            outcome: launched.outcome,
            cgroup,
            oom,
            log,
            max_log: self.bounds.max_log_bytes,
            kill,
            done,
            started_at,
            redactor: live.redactor.clone().filter(|r| !r.is_empty()),
        })
    }
}
