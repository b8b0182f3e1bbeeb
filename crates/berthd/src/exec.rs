//! One exec: start it through init, pump its output through the budget to the client and through a larger
//! one to its log, enforce its timeout on the server, and report how it ended.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_api::{ExecFrame, ExecResult, Stream};
use berth_init::protocol::{Attached, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};

use berth_runtime::cgroup::Cgroup;

use crate::EngineError;
use crate::budget::Budget;
use crate::exec_log::ExecLog;
use crate::launch::{self, Outcome, kill_tree};
use crate::session::Session;

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
    pub timeout: Option<Duration>,
    pub max_output: u64,
    pub log: PathBuf,
    /// Most bytes of output its log keeps (head and tail; a marker where the middle was dropped).
    pub max_log: u64,
    /// The exec's own cgroup (inside the sandbox's): its whole tree, whatever sessions or process groups
    /// it makes, is killed through it.
    pub cgroup: Option<Cgroup>,
    /// Data for the command's stdin (closed after it); `None`: stdin is /dev/null.
    pub stdin: Option<String>,
    /// The sandbox's secrets, replaced in the output before it goes anywhere (client and log alike).
    pub redactor: Option<berth_secrets::Redactor>,
    /// The sandbox's pause clock: time paused does not count against the timeout.
    pub pause: Option<Arc<crate::engine::pause::PauseClock>>,
}

/// A started exec: its frames, and a switch that kills it.
pub struct Running {
    pub frames: mpsc::Receiver<ExecFrame>,
    pub kill: watch::Sender<bool>,
    pub done: watch::Receiver<Option<ExecResult>>,
}

/// Start an exec; returns once init has started it (or said it could not).
pub async fn start(session: Arc<Session>, plan: ExecPlan) -> Result<Running, EngineError> {
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;
    let stdin = match &plan.stdin {
        Some(_) => Some(
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| berth_sys::SysError::new("create a pipe", e))?,
        ),
        None => None,
    };
    let started_at = Instant::now();
    let mut fds: Vec<_> = stdin.iter().map(|(r, _)| r.as_fd()).collect();
    fds.extend([out_w.as_fd(), err_w.as_fd()]);
    let cmd = launch::Command { argv: &plan.argv, env: &plan.env, cwd: &plan.workdir, tty: false };
    let attached = Attached { stdin: plan.stdin.is_some(), stdout: true, stderr: true };
    let launched = match launch::launch(&session, &cmd, attached, &fds, plan.cgroup.as_ref()).await {
        Ok(l) => l,
        Err(e) => {
            launch::release_cgroup(plan.cgroup, false).await;
            return Err(e);
        }
    };
    drop(fds);
    if let (Some((r, w)), Some(data)) = (stdin, plan.stdin.clone()) {
        drop(r);
        berth_sys::fd::set_nonblocking(&w, true)?;
        let mut w = pipe::Sender::from_owned_fd(w).map_err(|e| berth_sys::SysError::new("watch a pipe", e))?;
        // A command that stops reading early closes the pipe; that is its business, not an error.
        tokio::spawn(async move {
            let _ = w.write_all(data.as_bytes()).await;
        });
    }
    drop((out_w, err_w));
    let (frames_tx, frames) = mpsc::channel(256);
    let (kill, kill_rx) = watch::channel(false);
    let (done_tx, done) = watch::channel(None);
    let (num, events) = (launched.num, launched.events);
    let pid = match launched.outcome {
        Outcome::Started(pid) => pid,
        Outcome::Failed { code, message } => {
            let result = ExecResult {
                exec_id: plan.exec_id.clone(),
                exit_code: code,
                signal: None,
                duration_ms: 0,
                timed_out: false,
                killed: false,
                bytes_dropped: 0,
                output_bytes: 0,
                log_bytes_dropped: 0,
                error: Some(message),
            };
            let _ = tokio::fs::write(&plan.log, b"").await;
            let _ = frames_tx.send(ExecFrame::Exit(result.clone())).await;
            let _ = done_tx.send(Some(result));
            launch::release_cgroup(plan.cgroup, false).await;
            return Ok(Running { frames, kill, done });
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
    let log = ExecLog::new(file, plan.max_log);
    tokio::spawn(supervise(session, num, events, plan, (out_r, err_r), log, frames_tx, kill_rx, done_tx, started_at));
    Ok(Running { frames, kill, done })
}

fn pipe_pair() -> Result<(pipe::Receiver, OwnedFd), EngineError> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| berth_sys::SysError::new("create a pipe", e))?;
    berth_sys::fd::set_nonblocking(&r, true)?;
    // A larger pipe means fewer, larger reads when a command writes fast (best effort).
    let _ = rustix::pipe::fcntl_setpipe_size(&r, READ_CHUNK);
    let r = pipe::Receiver::from_owned_fd(r).map_err(|e| berth_sys::SysError::new("watch a pipe", e))?;
    Ok((r, w))
}

#[allow(clippy::too_many_arguments)]
async fn supervise(
    session: Arc<Session>,
    num: u64,
    mut events: mpsc::UnboundedReceiver<Event>,
    plan: ExecPlan,
    (mut out, mut err): (pipe::Receiver, pipe::Receiver),
    mut log: ExecLog,
    frames: mpsc::Sender<ExecFrame>,
    mut kill_rx: watch::Receiver<bool>,
    done: watch::Sender<Option<ExecResult>>,
    started_at: Instant,
) {
    let mut budget = Budget::new(plan.max_output);
    // One redactor per stream: a secret split across two reads of one stream is still caught.
    let mut redact = plan.redactor.clone().map(|r| [r.clone(), r]);
    let mut utf8 = Utf8Carry::default();
    let mut seq = 0u64;
    let mut total = 0u64;
    let (mut out_open, mut err_open) = (true, true);
    let (mut buf_o, mut buf_e) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let mut deadline = plan.timeout.map(|t| tokio::time::Instant::now() + t);
    let (timed_from, paused_from) = (tokio::time::Instant::now(), plan.pause.as_ref().map_or(0, |c| c.paused_ms()));
    let mut exit: Option<(Option<i32>, Option<i32>)> = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let (mut timed_out, mut killed) = (false, false);
    // The client may go away; the exec and its log go on regardless.
    let mut client = Some(frames);

    while out_open || err_open || exit.is_none() {
        if exit.is_some() && drain_until.is_none() {
            drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
        }
        let got: Option<(Stream, usize)> = tokio::select! {
            r = out.read(&mut buf_o), if out_open => match r { Ok(0) | Err(_) => { out_open = false; None } Ok(n) => Some((Stream::Stdout, n)) },
            r = err.read(&mut buf_e), if err_open => match r { Ok(0) | Err(_) => { err_open = false; None } Ok(n) => Some((Stream::Stderr, n)) },
            ev = events.recv(), if exit.is_none() => {
                match ev {
                    Some(Event::Exited { code, signal, .. }) => exit = Some((code, signal)),
                    Some(_) => {}
                    None => exit = Some((None, Some(9))),
                }
                None
            }
            _ = sleep_until(deadline), if deadline.is_some() && !timed_out && exit.is_none() => {
                // Time paused is given back: the timeout counts time the sandbox ran.
                let left = match (&plan.pause, plan.timeout) {
                    (Some(clock), Some(t)) => crate::engine::pause::remaining(clock, timed_from, paused_from, t),
                    _ => None,
                };
                match left {
                    Some(left) => deadline = Some(tokio::time::Instant::now() + left),
                    None => {
                        timed_out = true;
                        kill_tree(&session, num, plan.cgroup.as_ref());
                    }
                }
                None
            }
            changed = kill_rx.changed(), if !killed && exit.is_none() => {
                if changed.is_ok() && *kill_rx.borrow() {
                    killed = true;
                    kill_tree(&session, num, plan.cgroup.as_ref());
                }
                None
            }
            _ = sleep_until(drain_until), if drain_until.is_some() => break,
        };
        let Some((stream, n)) = got else { continue };
        let raw = if stream == Stream::Stdout { &buf_o[..n] } else { &buf_e[..n] };
        total += n as u64;
        let redacted;
        let data = match redact.as_mut() {
            Some(r) => {
                redacted = r[Utf8Carry::slot(stream)].push(raw);
                &redacted[..]
            }
            None => raw,
        };
        let _ = log.write(stream, data).await;
        // A read that did not fill the buffer means the command paused: make the log current (for `logs`
        // and followers). A command writing flat out fills every read, and the log is written in big blocks.
        if n < READ_CHUNK {
            let _ = log.flush().await;
        }
        if let Some(live) = budget.push(stream, data) {
            seq += 1;
            let frame = ExecFrame::Output { stream, seq, data: utf8.decode(stream, &live) };
            // A client that stops reading must not stall the exec (nor its timeout): after a while it is
            // treated as gone, and the exec goes on into its log.
            if let Some(tx) = &client
                && !matches!(tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await, Ok(Ok(())))
            {
                client = None;
            }
        }
    }
    session.unregister(num);
    // What the redactors held back (a possible start of a secret) is released, redacted, at the end.
    if let Some(r) = redact.as_mut() {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let tail = r[Utf8Carry::slot(stream)].finish();
            if !tail.is_empty() {
                let _ = log.write(stream, &tail).await;
                if let Some(live) = budget.push(stream, &tail)
                    && let Some(tx) = &client
                {
                    seq += 1;
                    let frame = ExecFrame::Output { stream, seq, data: utf8.decode(stream, &live) };
                    let _ = tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await;
                }
            }
        }
    }
    let log_bytes_dropped = log.finish().await;
    let dropped = budget.dropped();
    if let Some(tx) = &client {
        if dropped > 0 {
            let _ = tokio::time::timeout(CLIENT_STALL, tx.send(ExecFrame::Truncated { dropped_bytes: dropped })).await;
        }
        for (stream, chunk) in budget.finish() {
            seq += 1;
            let chunk = [utf8.flush(stream), chunk].concat();
            let frame = ExecFrame::Output { stream, seq, data: String::from_utf8_lossy(&chunk).into_owned() };
            let _ = tokio::time::timeout(CLIENT_STALL, tx.send(frame)).await;
        }
    }
    let (code, signal) = exit.unwrap_or((None, Some(9)));
    let exit_code = if timed_out { 124 } else { launch::exit_code(code, signal) };
    let result = ExecResult {
        exec_id: plan.exec_id,
        exit_code,
        signal,
        duration_ms: started_at.elapsed().as_millis() as u64,
        timed_out,
        killed,
        bytes_dropped: dropped,
        output_bytes: total,
        log_bytes_dropped,
        error: None,
    };
    if let Some(tx) = &client {
        let _ = tokio::time::timeout(CLIENT_STALL, tx.send(ExecFrame::Exit(result.clone()))).await;
    }
    let _ = done.send(Some(result));
    // An exec whose tree is all gone leaves no cgroup; one with background processes keeps it until they
    // end or the sandbox does.
    launch::release_cgroup(plan.cgroup, timed_out || killed).await;
}

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

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
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
