//! Execs through a hibernation. A detached exec still running when its sandbox hibernates sleeps with it:
//! CRIU writes the command to disk with the write ends of its stdout and stderr pipes, whose read ends berth
//! holds; its supervisor reads what they still hold, then hands over its state (log, output budget, time
//! left), which is kept beside the image in `execs.json` and `exec-<id>.state` (a daemon started meanwhile
//! finds it there). At the wake the daemon makes a new pipe for each, which CRIU gives the restored command in
//! place of the old one (`--inherit-fd fd[N]:pipe:[INODE]`), and pumps the exec again: the same record, log
//! and request id with init, which reports its end. Its stdin is not carried over: what it had been given
//! and not yet read is, then end of file (CRIU keeps a pipe's contents).
//!
//! An exec whose output streams to a client, or whose stdin is still being written, and a shell (its
//! terminal is the caller's) keep the sandbox from hibernating.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use berth_api::ExecResult;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};

use super::{Engine, ExecEntry, Live};
use crate::EngineError;
use crate::exec::Park;
use crate::exec_hibernation::{self, Saved};

/// The file beside the image that lists the execs asleep in it.
const EXECS: &str = "execs.json";

/// What is kept beside the image of execs and contexts.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Sleeping {
    /// Init's host pid when the sandbox hibernated: the code contexts started under it are woken with it.
    init_pid: i32,
    execs: Vec<Saved>,
}

fn state_file(dir: &Path, exec_id: &str) -> std::path::PathBuf {
    dir.join(format!("exec-{exec_id}.state"))
}

/// What this daemon keeps in memory of an exec asleep: the channels whoever waits for its end holds.
struct Keeper {
    done: watch::Sender<Option<ExecResult>>,
    done_rx: watch::Receiver<Option<ExecResult>>,
    kill: watch::Sender<bool>,
    kill_rx: watch::Receiver<bool>,
}

/// The execs asleep in each hibernated sandbox (by sandbox id, then exec id).
#[derive(Default)]
pub(super) struct Kept(std::sync::Mutex<HashMap<String, HashMap<String, Keeper>>>);

/// The new pipes of a wake, and the execs they are for.
pub(super) struct WakePipes {
    /// For the shim: CRIU's name for each old pipe, and the write end of its new one.
    pub(super) shim: Vec<(String, OwnedFd)>,
    /// The read ends, by exec (stdout, stderr).
    ours: Vec<[Option<OwnedFd>; 2]>,
    sleeping: Sleeping,
    states: Vec<Vec<u8>>,
}

/// The execs held for a hibernation (id, the line to its supervisor): released when this is dropped, unless
/// they were put to sleep.
#[derive(Default)]
pub(super) struct Held(Vec<(String, mpsc::UnboundedSender<Park>)>);

impl Drop for Held {
    fn drop(&mut self) {
        for (_, park) in &self.0 {
            let _ = park.send(Park::Release);
        }
    }
}

impl Engine {
    /// Hold the running execs of `live` for a hibernation. When one cannot sleep, the others are released and
    /// the refusal names it.
    pub(super) async fn hold_execs(&self, live: &Arc<Live>, sid: &str) -> Result<Held, EngineError> {
        let execs = live.execs.lock().await;
        let (mut held, mut refused) = (Held::default(), Vec::new());
        for (id, e) in execs.iter().filter(|(_, e)| e.done.borrow().is_none()) {
            let why = match &e.park {
                None => Err("a shell, on the caller's terminal".to_string()),
                Some(park) => {
                    let (tx, rx) = oneshot::channel();
                    // A supervisor that is gone has seen its exec end.
                    if park.send(Park::Hold(tx)).is_err() { Ok(()) } else { rx.await.unwrap_or(Ok(())) }
                }
            };
            match (why, &e.park) {
                (Ok(()), Some(park)) => held.0.push((id.clone(), park.clone())),
                (Ok(()), None) => {}
                (Err(why), _) => refused.push(format!("{id} ({}): {why}", e.argv.join(" "))),
            }
        }
        if refused.is_empty() {
            return Ok(held);
        }
        Err(EngineError::Conflict(format!(
            "sandbox {sid} cannot hibernate while execs or shells are running that stream to berth ({}): their \
             streams lead to berth; wait for them or kill them, and try again (detached execs, whose output \
             only goes to their logs, and processes left in the background are fine)",
            refused.join(", ")
        )))
    }

    /// The sandbox is on disk: its held execs hand over their state, kept beside the image in `dir` and in
    /// this daemon's memory. Returns the ids of those asleep (the others ended before the dump).
    pub(super) async fn put_to_sleep(
        &self,
        live: &Arc<Live>,
        sid: &str,
        dir: &Path,
        mut held: Held,
        init_pid: i32,
    ) -> Vec<String> {
        let held = std::mem::take(&mut held.0);
        let entries: Vec<(String, ExecEntry)> = {
            let mut execs = live.execs.lock().await;
            held.iter().filter_map(|(id, _)| execs.remove(id).map(|e| (id.clone(), e))).collect()
        };
        let mut sleeping = Sleeping { init_pid, execs: Vec::new() };
        let mut kept = HashMap::new();
        for (id, entry) in entries {
            let (tx, rx) = oneshot::channel();
            let asleep = match &entry.park {
                Some(park) if park.send(Park::Sleep(tx)).is_ok() => rx.await.ok().flatten(),
                _ => None,
            };
            let Some(mut asleep) = asleep else {
                // It ended before the dump, and is recorded as it ended.
                continue;
            };
            // Its end is recorded by the sandbox woken in place of this one.
            if let Some(r) = &entry.recorder {
                r.abort();
            }
            asleep.saved.argv = entry.argv.clone();
            asleep.saved.log = self.root.join("logs").join(sid).join(format!("{id}.log"));
            if let Err(e) = tokio::fs::write(state_file(dir, &id), &asleep.state).await {
                crate::log::warn(
                    "cannot keep an exec's state",
                    serde_json::json!({"exec": id, "error": e.to_string()}),
                );
            }
            sleeping.execs.push(asleep.saved);
            kept.insert(id, Keeper { done: asleep.done, done_rx: entry.done, kill: entry.kill, kill_rx: asleep.kill });
        }
        match serde_json::to_vec_pretty(&sleeping) {
            Ok(bytes) => {
                if let Err(e) = tokio::fs::write(dir.join(EXECS), bytes).await {
                    crate::log::warn("cannot keep the execs asleep", serde_json::json!({"error": e.to_string()}));
                }
            }
            Err(e) => crate::log::warn("cannot keep the execs asleep", serde_json::json!({"error": e.to_string()})),
        }
        if let Ok(mut k) = self.asleep.0.lock() {
            k.insert(sid.to_string(), kept);
        }
        sleeping.execs.into_iter().map(|s| s.exec_id).collect()
    }

    /// Before the wake of the sandbox hibernated in `dir`: a new pipe for each output pipe its execs asleep
    /// still had.
    pub(super) fn wake_pipes(&self, dir: &Path) -> Result<WakePipes, EngineError> {
        let sleeping: Sleeping =
            std::fs::read(dir.join(EXECS)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let mut wp =
            WakePipes { shim: Vec::new(), ours: Vec::new(), sleeping: Sleeping::default(), states: Vec::new() };
        wp.sleeping.init_pid = sleeping.init_pid;
        for saved in sleeping.execs {
            let Ok(state) = std::fs::read(state_file(dir, &saved.exec_id)) else { continue };
            let mut ours = [None, None];
            for (i, ino) in saved.pipes.iter().enumerate() {
                let Some(ino) = ino else { continue };
                let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                    .map_err(|e| berth_sys::SysError::new("create a pipe", e))?;
                wp.shim.push((format!("pipe:[{ino}]"), w));
                ours[i] = Some(r);
            }
            wp.ours.push(ours);
            wp.states.push(state);
            wp.sleeping.execs.push(saved);
        }
        Ok(wp)
    }

    /// After the wake of `sid`: its execs asleep go on, among its execs again, and its code contexts are
    /// those of the woken init. Returns the ids of the execs that went on.
    pub(super) async fn resume_execs(&self, sid: &str, wp: WakePipes) -> Vec<String> {
        let mut woken = Vec::new();
        let Ok(live) = self.live(sid).await else { return woken };
        let (pid, isolation) = {
            let r = live.record.lock().await;
            (r.pid, r.isolation)
        };
        let Some(pid) = pid else { return woken };
        self.rehome_contexts(sid, wp.sleeping.init_pid, pid).await;
        let mut kept = self.asleep.0.lock().ok().and_then(|mut k| k.remove(sid)).unwrap_or_default();
        for ((saved, pipes), state) in wp.sleeping.execs.into_iter().zip(wp.ours).zip(wp.states) {
            let keeper = kept.remove(&saved.exec_id).unwrap_or_else(|| {
                let (done, done_rx) = watch::channel(None);
                let (kill, kill_rx) = watch::channel(false);
                Keeper { done, done_rx, kill, kill_rx }
            });
            let cgroup = self.cgroups.as_ref().and_then(|h| h.open(sid).child(&saved.exec_id).ok());
            let oom = self.oom_count(sid, cgroup.as_ref(), isolation);
            let wake = exec_hibernation::Wake {
                session: Arc::clone(&live.session),
                pipes,
                redactor: live.redactor.clone().filter(|r| !r.is_empty()),
                pause: Arc::clone(&live.pause),
                cgroup: cgroup.clone(),
                oom,
            };
            let resumed = exec_hibernation::resume(&saved, &state, wake, keeper.done.clone(), keeper.kill_rx).await;
            let park = match resumed {
                Ok(park) => Some(park),
                Err(e) => {
                    // Not left running unrecorded: its tree is killed, and its record says why it ended.
                    if let Some(cg) = cgroup {
                        let _ = tokio::task::spawn_blocking(move || cg.kill_all()).await;
                    }
                    let _ = keeper
                        .done
                        .send(Some(ended(&saved.exec_id, format!("it could not go on after its sandbox woke: {e}"))));
                    None
                }
            };
            let recorder =
                self.record_end(&live, sid, &saved.exec_id, saved.log.clone(), super::actor(), keeper.done_rx.clone());
            if park.is_some() {
                woken.push(saved.exec_id.clone());
            }
            let entry = ExecEntry {
                argv: saved.argv,
                started_at_ms: saved.started_at_ms,
                kill: keeper.kill,
                done: keeper.done_rx,
                park,
                recorder: Some(recorder),
                input: None,
            };
            live.execs.lock().await.insert(saved.exec_id, entry);
        }
        woken
    }

    /// A hibernated sandbox removed: its execs asleep end with it (whoever waits for them is told).
    pub(super) fn forget_asleep(&self, sid: &str) {
        let Some(kept) = self.asleep.0.lock().ok().and_then(|mut k| k.remove(sid)) else { return };
        for (id, keeper) in kept {
            let result =
                ExecResult { killed: true, ..ended(&id, "its sandbox was removed while it hibernated".into()) };
            let _ = keeper.done.send(Some(result));
        }
    }
}

/// The result of an exec asleep that ended without a report from init, and why.
fn ended(exec_id: &str, why: String) -> ExecResult {
    ExecResult::without_run(exec_id, 137, Some(9), why)
}
