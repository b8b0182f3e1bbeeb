//! One exec: start it through init, pump its output through the budget to the client and through a larger
//! one to its log, enforce its timeout on the server, and report how it ended.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth_api::{ExecFrame, ExecResult, Stream};
use berth_init::protocol::{Attached, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};

use berth_runtime::cgroup::Cgroup;

use crate::EngineError;
use crate::exec_log::ExecLog;
use crate::launch::{self, Outcome, kill_tree};
use crate::output_budget::OutputBudget;
use crate::session::Session;
use crate::sleep_until;

/// Default bytes of output sent to a client.
pub const DEFAULT_MAX_OUTPUT: u64 = 64 * 1024;
/// How long output keeps being collected after the command itself ended (its background children may
/// still hold the pipes).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);

/// What the exec needs to run.
pub struct ExecPlan {
    pub exec_id: String,
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub workdir: String,
    /// Uid and gid inside the sandbox.
    pub ids: (u32, u32),
    pub timeout: Option<Duration>,
    pub max_output: u64,
    pub log: PathBuf,
    /// Most bytes of output its log keeps (head and tail; a marker where the middle was dropped).
    pub max_log: u64,
    /// The exec's own cgroup (inside the sandbox's): its whole tree, whatever sessions or process groups
    /// it makes, is killed through it.
    pub cgroup: Option<Cgroup>,
    /// Where its tree's OOM kills are counted.
    pub oom: Option<launch::OomCount>,
    /// Data for the command's stdin (closed after it); `None`: stdin is /dev/null.
    pub stdin: Option<String>,
    /// Its stdin stays open, fed by what `Running::input` sends, until that sends `Input::Close`.
    pub stdin_open: bool,
    /// The sandbox's secrets, replaced in the output before it goes anywhere (client and log alike).
    pub redactor: Option<berth_secrets::Redactor>,
    /// The sandbox's pause clock: time paused does not count against the timeout.
    pub pause: Option<Arc<crate::engine::pause::PauseClock>>,
}

/// A started exec: its frames, a switch that kills it, and the line to its supervisor around a hibernation.
pub struct Running {
    pub frames: mpsc::Receiver<ExecFrame>,
    pub kill: watch::Sender<bool>,
    pub done: watch::Receiver<Option<ExecResult>>,
    pub park: mpsc::UnboundedSender<Park>,
    /// Where input for an open stdin goes (`ExecPlan::stdin_open`).
    pub input: Option<mpsc::UnboundedSender<Input>>,
}

/// Input for an exec's open stdin.
pub enum Input {
    Data(Vec<u8>),
    /// Close it: the command reads its end.
    Close,
}

/// What an exec's supervisor is asked around a hibernation of its sandbox (see `exec_hibernation`).
pub enum Park {
    /// The sandbox is about to be written to disk: take its end (init gone) for a sleep, not a death. Refused,
    /// with why, by an exec streaming to a client or still being fed its stdin.
    Hold(oneshot::Sender<Result<(), String>>),
    /// The sandbox is on disk: read what the old pipes still hold, then hand over the exec's state and stop
    /// (`None`: it had ended before the dump).
    Sleep(oneshot::Sender<Option<crate::exec_hibernation::Asleep>>),
    /// The hibernation failed: go on as before.
    Release,
}

/// Start an exec; returns once init has started it (or said it could not).
pub async fn start(session: Arc<Session>, plan: ExecPlan) -> Result<Running, EngineError> {
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let piped = plan.stdin.is_some() || plan.stdin_open;
    let stdin = match piped {
        true => Some(
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| berth_sys::SysError::new("create a pipe", e))?,
        ),
        false => None,
    };
    let started_at = Instant::now();
    let mut fds: Vec<_> = stdin.iter().map(|(r, _)| r.as_fd()).collect();
    fds.extend([out_w.as_fd(), err_w.as_fd()]);
    let cmd =
        launch::Command { argv: &plan.argv, env: &plan.env, cwd: &plan.workdir, ids: plan.ids, tty: false, pty: None };
    let attached = Attached { stdin: piped, stdout: true, stderr: true };
    let launched = match launch::launch(&session, &cmd, attached, &fds, plan.cgroup.as_ref()).await {
        Ok(l) => l,
        Err(e) => {
            launch::release_cgroup(plan.cgroup, false).await;
            return Err(e);
        }
    };
    drop(fds);
    let stdin_fed = Arc::new(AtomicBool::new(!piped));
    let mut input = None;
    if let Some((r, w)) = stdin {
        drop(r);
        berth_sys::fd::set_nonblocking(&w, true)?;
        let mut w = pipe::Sender::from_owned_fd(w).map_err(|e| berth_sys::SysError::new("watch a pipe", e))?;
        let fed = Arc::clone(&stdin_fed);
        let data = plan.stdin.clone().unwrap_or_default();
        let mut more = match plan.stdin_open {
            true => {
                let (tx, rx) = mpsc::unbounded_channel();
                input = Some(tx);
                Some(rx)
            }
            false => None,
        };
        // A command that stops reading early closes the pipe; that is its business, not an error.
        tokio::spawn(async move {
            let mut open = w.write_all(data.as_bytes()).await.is_ok();
            while open && let Some(rx) = more.as_mut() {
                match rx.recv().await {
                    Some(Input::Data(d)) => open = w.write_all(&d).await.is_ok(),
                    Some(Input::Close) | None => break,
                }
            }
            drop(w);
            fed.store(true, Ordering::SeqCst);
        });
    }
    drop((out_w, err_w));
    let (frames_tx, frames) = mpsc::channel(256);
    let (kill, kill_rx) = watch::channel(false);
    let (done_tx, done) = watch::channel(None);
    let (park, park_rx) = mpsc::unbounded_channel();
    let (num, events) = (launched.num, launched.events);
    let pid = match launched.outcome {
        Outcome::Started(pid) => pid,
        Outcome::Failed { code, message } => {
            let result = ExecResult::without_run(&plan.exec_id, code, None, message);
            let _ = tokio::fs::write(&plan.log, b"").await;
            let _ = frames_tx.send(ExecFrame::Exit(result.clone())).await;
            let _ = done_tx.send(Some(result));
            launch::release_cgroup(plan.cgroup, false).await;
            return Ok(Running { frames, kill, done, park, input: None });
        }
    };
    let _ = frames_tx.send(ExecFrame::Started { exec_id: plan.exec_id.clone(), pid }).await;
    // Big writes: a tokio file does each write on a blocking thread, so small ones cost a thread hop each.
    let file = match tokio::fs::File::create(&plan.log).await {
        Ok(f) => f,
        Err(e) => {
            // No log, no exec: stop what was started rather than run it unrecorded.
            kill_tree(&session, num, plan.cgroup.as_ref());
            session.unregister(num);
            launch::release_cgroup(plan.cgroup, true).await;
            return Err(EngineError::Log(e));
        }
    };
    let ends = Ends { stdin_fed, park: park_rx, kill: kill_rx, done: done_tx };
    let pump = Pump {
        session,
        num,
        events,
        exec_id: plan.exec_id,
        pipes: [Some(out_r), Some(err_r)],
        log: ExecLog::new(file, plan.max_log),
        budget: OutputBudget::new(plan.max_output),
        redact: plan.redactor.map(|r| [r.clone(), r]),
        total: 0,
        timeout: plan.timeout,
        pause: plan.pause,
        cgroup: plan.cgroup,
        oom: plan.oom,
        over_memory: false,
        client: Some(frames_tx),
        started_at,
    };
    tokio::spawn(pump.run(ends));
    Ok(Running { frames, kill, done, park, input })
}

fn pipe_pair() -> Result<(pipe::Receiver, OwnedFd), EngineError> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| berth_sys::SysError::new("create a pipe", e))?;
    Ok((watch_pipe(r)?, w))
}

/// The read end of an output pipe, watched by tokio.
pub(crate) fn watch_pipe(r: OwnedFd) -> Result<pipe::Receiver, EngineError> {
    berth_sys::fd::set_nonblocking(&r, true)?;
    // A larger pipe means fewer, larger reads when a command writes fast (best effort).
    let _ = rustix::pipe::fcntl_setpipe_size(&r, READ_CHUNK);
    pipe::Receiver::from_owned_fd(r).map_err(|e| berth_sys::SysError::new("watch a pipe", e).into())
}

/// An exec's running state: what its supervisor pumps, and what a hibernation carries over.
pub(crate) struct Pump {
    pub session: Arc<Session>,
    /// Its request id with init.
    pub num: u64,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub exec_id: String,
    /// Its stdout and stderr, while open.
    pub pipes: [Option<pipe::Receiver>; 2],
    pub log: ExecLog,
    /// The output a client is sent.
    pub budget: OutputBudget,
    /// One redactor per stream: a secret split across two reads of one stream is still caught.
    pub redact: Option<[berth_secrets::Redactor; 2]>,
    /// Bytes of output in all.
    pub total: u64,
    /// Time running it may still take, from now (time paused or hibernated does not count).
    pub timeout: Option<Duration>,
    pub pause: Option<Arc<crate::engine::pause::PauseClock>>,
    pub cgroup: Option<Cgroup>,
    pub oom: Option<launch::OomCount>,
    /// Init killed it for going over the sandbox's memory limit (where init holds the limit: gVisor).
    pub over_memory: bool,
    /// The client the frames stream to; gone once it stops listening (and for a detached exec).
    pub client: Option<mpsc::Sender<ExecFrame>>,
    pub started_at: Instant,
}

/// How the supervisor is reached and how it reports.
pub(crate) struct Ends {
    /// Whether its stdin has all been written (or it has none).
    pub stdin_fed: Arc<AtomicBool>,
    pub park: mpsc::UnboundedReceiver<Park>,
    pub kill: watch::Receiver<bool>,
    pub done: watch::Sender<Option<ExecResult>>,
}

impl Pump {
    /// Pump the output to the log and the client until the exec ends (then report it on `done`), or until
    /// its sandbox has been hibernated (then hand its state to whoever asked).
    pub(crate) async fn run(mut self, mut ends: Ends) {
        let mut utf8 = Utf8Carry::default();
        let mut seq = 0u64;
        let mut bufs = [vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]];
        let mut deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let timed_from = tokio::time::Instant::now();
        let paused_from = self.pause.as_ref().map_or(0, |c| c.paused_ms());
        let mut exit: Option<(Option<i32>, Option<i32>)> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let (mut timed_out, mut killed) = (false, false);
        // Around a hibernation: held (init's end is a sleep), asked to sleep (and by when), init gone.
        let (mut held, mut sleeping, mut init_gone, mut park_open) = (false, None, false, true);
        let mut sleep_by: Option<tokio::time::Instant> = None;
        // The pipes the command still had when it was held: CRIU's names for them, given new ones at the wake.
        let mut held_pipes = [None, None];

        loop {
            let open = self.pipes.iter().any(Option::is_some);
            if !open && exit.is_some() {
                break;
            }
            if sleeping.is_some() && !open && init_gone {
                break;
            }
            if exit.is_some() && drain_until.is_none() {
                drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            let [out, err] = &mut self.pipes;
            let [buf_o, buf_e] = &mut bufs;
            let got: Option<(Stream, usize)> = tokio::select! {
                r = read_open(out, buf_o) => match r { Ok(0) | Err(_) => { *out = None; None } Ok(n) => Some((Stream::Stdout, n)) },
                r = read_open(err, buf_e) => match r { Ok(0) | Err(_) => { *err = None; None } Ok(n) => Some((Stream::Stderr, n)) },
                ev = self.events.recv(), if exit.is_none() && !init_gone => {
                    match ev {
                        Some(Event::Exited { code, signal, .. }) => exit = Some((code, signal)),
                        Some(Event::OverMemory { .. }) => self.over_memory = true,
                        Some(_) => {}
                        // Written to disk, not dead: it goes on after the wake.
                        None if held => init_gone = true,
                        None => exit = Some((None, Some(9))),
                    }
                    None
                }
                msg = ends.park.recv(), if park_open => {
                    match msg {
                        Some(Park::Hold(reply)) => {
                            let why = if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
                                Err("its output streams to a client".to_string())
                            } else if !ends.stdin_fed.load(Ordering::SeqCst) {
                                Err("its stdin is still being written".to_string())
                            } else {
                                Ok(())
                            };
                            held = why.is_ok();
                            held_pipes = [&*out, &*err].map(|p| p.as_ref().and_then(|p| rustix::fs::fstat(p).ok()).map(|st| st.st_ino));
                            let _ = reply.send(why);
                        }
                        Some(Park::Sleep(reply)) => {
                            sleeping = Some(reply);
                            sleep_by = Some(tokio::time::Instant::now() + SLEEP_DRAIN);
                        }
                        Some(Park::Release) => {
                            held = false;
                            if init_gone {
                                exit = Some((None, Some(9)));
                            }
                        }
                        None => {
                            park_open = false;
                            held = false;
                            if init_gone {
                                exit = Some((None, Some(9)));
                            }
                        }
                    }
                    None
                }
                _ = sleep_until(deadline), if deadline.is_some() && !timed_out && exit.is_none() && !held => {
                    // Time paused is given back: the timeout counts time the sandbox ran.
                    let left = match (&self.pause, self.timeout) {
                        (Some(clock), Some(t)) => crate::engine::pause::remaining(clock, timed_from, paused_from, t),
                        _ => None,
                    };
                    match left {
                        Some(left) => deadline = Some(tokio::time::Instant::now() + left),
                        None => {
                            timed_out = true;
                            kill_tree(&self.session, self.num, self.cgroup.as_ref());
                        }
                    }
                    None
                }
                changed = ends.kill.changed(), if !killed && exit.is_none() && !held => {
                    if changed.is_ok() && *ends.kill.borrow() {
                        killed = true;
                        kill_tree(&self.session, self.num, self.cgroup.as_ref());
                    }
                    None
                }
                _ = sleep_until(drain_until), if drain_until.is_some() => break,
                // Pipes that a process outside the sandbox would still hold are not waited for.
                _ = sleep_until(sleep_by), if sleep_by.is_some() && exit.is_none() => {
                    (*out, *err) = (None, None);
                    init_gone = true;
                    None
                }
            };
            let Some((stream, n)) = got else { continue };
            let raw = if stream == Stream::Stdout { &bufs[0][..n] } else { &bufs[1][..n] };
            if let Some(live) = self.take(stream, raw).await {
                seq += 1;
                let frame = ExecFrame::Output { stream, seq, data: utf8.decode(stream, &live) };
                // A client that stops reading must not stall the exec (nor its timeout): after a while it is
                // treated as gone, and the exec goes on into its log.
                if let Some(tx) = &self.client
                    && !matches!(tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await, Ok(Ok(())))
                {
                    self.client = None;
                }
            }
            // A read that did not fill the buffer means the command paused: make the log current (for `logs`
            // and followers). A command writing flat out fills every read, and the log is written in big blocks.
            if n < READ_CHUNK {
                let _ = self.log.flush().await;
            }
        }
        if exit.is_none()
            && let Some(reply) = sleeping.take()
        {
            let left = match (&self.pause, self.timeout) {
                (Some(clock), Some(t)) => Some(
                    crate::engine::pause::remaining(clock, timed_from, paused_from, t)
                        .unwrap_or(Duration::from_millis(1)),
                ),
                (None, Some(t)) => Some(t.saturating_sub(timed_from.elapsed()).max(Duration::from_millis(1))),
                _ => None,
            };
            self.release_redacted(&mut None).await;
            self.timeout = left;
            let _ = reply.send(crate::exec_hibernation::Asleep::take(self, ends, held_pipes).await);
            return;
        }
        self.session.unregister(self.num);
        // What the redactors held back (a possible start of a secret) is released, redacted, at the end.
        self.release_redacted(&mut Some((&mut utf8, &mut seq))).await;
        let log_bytes_dropped = self.log.finish().await;
        let dropped = self.budget.dropped();
        if let Some(tx) = &self.client {
            if dropped > 0 {
                let _ =
                    tokio::time::timeout(CLIENT_STALL, tx.send(ExecFrame::Truncated { dropped_bytes: dropped })).await;
            }
            for (stream, chunk) in self.budget.finish() {
                seq += 1;
                let chunk = [utf8.flush(stream), chunk].concat();
                let frame = ExecFrame::Output { stream, seq, data: String::from_utf8_lossy(&chunk).into_owned() };
                let _ = tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await;
            }
        }
        let (code, signal) = exit.unwrap_or((None, Some(9)));
        let exit_code = if timed_out { 124 } else { launch::exit_code(code, signal) };
        let result = ExecResult {
            exec_id: self.exec_id,
            exit_code,
            signal,
            duration_ms: self.started_at.elapsed().as_millis() as u64,
            timed_out,
            killed,
            bytes_dropped: dropped,
            output_bytes: self.total,
            log_bytes_dropped,
            oom_killed: self.over_memory || launch::OomCount::killed(self.oom.as_ref()),
            error: None,
        };
        if let Some(tx) = self.client.take() {
            let _ = tokio::time::timeout(CLIENT_STALL, tx.send(ExecFrame::Exit(result.clone()))).await;
            // The client's stream ends with its exit frame, not after the cgroup's removal below (on cgroup v1,
            // a millisecond or more of rmdirs).
            drop(tx);
        }
        let _ = ends.done.send(Some(result));
        // An exec whose tree is all gone leaves no cgroup; one with background processes keeps it until they
        // end or the sandbox does.
        launch::release_cgroup(self.cgroup, timed_out || killed).await;
    }

    /// Count, redact and log output of `stream`; returns what the client may be sent now.
    async fn take(&mut self, stream: Stream, raw: &[u8]) -> Option<Vec<u8>> {
        self.total += raw.len() as u64;
        let redacted;
        let data = match self.redact.as_mut() {
            Some(r) => {
                redacted = r[Utf8Carry::slot(stream)].push(raw);
                &redacted[..]
            }
            None => raw,
        };
        let _ = self.log.write(stream, data).await;
        self.budget.push(stream, data)
    }

    /// What the redactors hold back, redacted, into the log (and to the client, with its frame numbering).
    async fn release_redacted(&mut self, client: &mut Option<(&mut Utf8Carry, &mut u64)>) {
        let Some(r) = self.redact.as_mut() else { return };
        let tails = [Stream::Stdout, Stream::Stderr].map(|s| (s, r[Utf8Carry::slot(s)].finish()));
        for (stream, tail) in tails {
            if tail.is_empty() {
                continue;
            }
            let _ = self.log.write(stream, &tail).await;
            if let Some(live) = self.budget.push(stream, &tail)
                && let (Some(tx), Some((utf8, seq))) = (&self.client, client.as_mut())
            {
                **seq += 1;
                let frame = ExecFrame::Output { stream, seq: **seq, data: utf8.decode(stream, &live) };
                let _ = tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await;
            }
        }
    }
}

/// Read from a pipe while it is open; never ready once it is closed.
async fn read_open(pipe: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match pipe {
        Some(p) => p.read(buf).await,
        None => std::future::pending().await,
    }
}

/// How long a supervisor reads what the pipes of a hibernated exec still hold before it gives up on them.
const SLEEP_DRAIN: Duration = Duration::from_secs(5);

/// The most read from an output pipe at once.
const READ_CHUNK: usize = 256 * 1024;

/// How long a client may stop reading before the exec stops sending to it.
const CLIENT_STALL: Duration = Duration::from_secs(10);

/// UTF-8 across reads: a character split between two reads is decoded whole, not as two replacement
/// characters.
#[derive(Default)]
struct Utf8Carry {
    pending: [Vec<u8>; 2],
}

impl Utf8Carry {
    fn slot(stream: Stream) -> usize {
        usize::from(stream == Stream::Stderr)
    }

    fn decode(&mut self, stream: Stream, bytes: &[u8]) -> String {
        let mut all = std::mem::take(&mut self.pending[Self::slot(stream)]);
        all.extend_from_slice(bytes);
        let keep = match std::str::from_utf8(&all) {
            Ok(_) => 0,
            // An incomplete sequence at the very end waits for the next read.
            Err(e) if e.error_len().is_none() => all.len() - e.valid_up_to(),
            Err(_) => 0,
        };
        let tail = all.split_off(all.len() - keep);
        self.pending[Self::slot(stream)] = tail;
        String::from_utf8_lossy(&all).into_owned()
    }

    /// What is still held for `stream`.
    fn flush(&mut self, stream: Stream) -> Vec<u8> {
        std::mem::take(&mut self.pending[Self::slot(stream)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_between_reads_is_decoded_whole() {
        let mut u = Utf8Carry::default();
        let snowman = "☃".as_bytes();
        assert_eq!(u.decode(Stream::Stdout, &[b'a', snowman[0]]), "a");
        assert_eq!(u.decode(Stream::Stderr, b"e"), "e", "streams carry separately");
        assert_eq!(u.decode(Stream::Stdout, &snowman[1..]), "☃");
        assert_eq!(u.decode(Stream::Stdout, &[0xff, b'x']), "\u{fffd}x", "invalid bytes are still replaced");
        assert_eq!(u.decode(Stream::Stdout, &[snowman[0]]), "");
        assert_eq!(u.flush(Stream::Stdout), vec![snowman[0]]);
    }
}
