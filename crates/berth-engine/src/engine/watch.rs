//! Watching a directory of a running sandbox, as an engine operation: init holds an inotify instance inside
//! (see `berth_init::watch`) and writes its events to a socket whose other end is read here, checked (init's
//! output is untrusted) and handed to the caller as typed [`WatchEvent`]s, `ready` first.
//!
//! A watch is passive: it is not activity, so it does not keep a sandbox from going idle. Around a
//! checkpoint of the running sandbox (a fork or snapshot with processes) its watches are lifted and put back
//! (a checkpoint must find no inotify instance, no socket from outside); a hibernation ends them, with an
//! `end` that says so, as does the sandbox stopping or the directory being removed.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_api::{WatchEvent, WatchKind};
use berth_init::protocol::{Event, Request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::Engine;
use super::live::Live;
use crate::EngineError;
use crate::files::{FileError, Got, parse_path};
use crate::session::Session;

/// Most watches a sandbox holds at once (init's own bound is the same).
pub const MAX_WATCHES: usize = berth_init::watch::MAX_WATCHES;
/// The longest event line init may send.
const MAX_LINE: usize = 8 * 1024;
/// How long init has to answer a watch, or to lift one.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Numbers watches in their sandbox's list.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What the engine tells a running watch.
pub(super) enum Control {
    /// Lift it (init closes its inotify instance and socket), then say so.
    Lift(oneshot::Sender<()>),
    /// Put a lifted watch back.
    Restore,
    /// End it, for this reason.
    End(String),
    /// Answer once every change made before this was asked is in the watch's events.
    Flush(oneshot::Sender<()>),
}

/// A sandbox's running watches, by number.
pub(super) type Watches = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Control>>>>;

/// A watch's events. Dropping it ends the watch.
pub struct DirWatch {
    pub events: mpsc::Receiver<WatchEvent>,
    control: mpsc::UnboundedSender<Control>,
}

impl DirWatch {
    /// Returns once every change made in the sandbox before this call is in `events` (init takes what the
    /// kernel has queued and marks its end): for a caller that asks "what changed until now".
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.control.send(Control::Flush(ack)).is_ok() {
            let _ = tokio::time::timeout(ANSWER_WITHIN, done).await;
        }
    }
}

/// One watch in place in init: its request number, its events on the control socket, its lines.
struct Armed {
    num: u64,
    events: mpsc::UnboundedReceiver<Event>,
    lines: BufReader<UnixStream>,
}

impl Engine {
    /// Watch directory `path` (absolute) of sandbox `id`, and with `recursive` every directory under it; as
    /// `user` when given (who must be able to list it). Starting a watch is activity: it wakes a paused or
    /// hibernated sandbox. Journaled as `watch`.
    pub async fn watch_dir(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
        user: Option<&str>,
    ) -> Result<DirWatch, EngineError> {
        let path = format!("/{}", parse_path(path)?.join("/"));
        let fs = self.files(id, user).await?;
        let at = path.clone();
        // As the caller could list it: the directory is looked at through the files API first.
        match tokio::task::spawn_blocking(move || fs.get(&at)).await {
            Ok(Ok(Got::Dir(_))) => {}
            Ok(Ok(Got::File(_))) => return Err(FileError::Conflict(format!("{path} is not a directory")).into()),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(FileError::Internal("looking at the directory failed".into()).into()),
        }
        let live = self.live_or_wake(id, "watch").await?;
        self.touch(&live, "watch").await?;
        let registry = Arc::clone(&live.watches);
        let key = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // In the list before it is armed: a checkpoint that comes meanwhile lifts it as soon as it is.
        let (control_tx, control) = mpsc::unbounded_channel();
        {
            let mut held = registry.lock().unwrap_or_else(|e| e.into_inner());
            if held.len() >= MAX_WATCHES {
                return Err(EngineError::Conflict(format!(
                    "sandbox {id} already has {MAX_WATCHES} directories watched: end one first"
                )));
            }
            held.insert(key, control_tx.clone());
        }
        let armed = match arm(&live.session, &path, recursive).await {
            Ok(a) => a,
            Err(e) => {
                registry.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                return Err(e);
            }
        };
        live.note(
            "watch",
            serde_json::json!({"path": path, "recursive": recursive, "user": user}),
            serde_json::json!({}),
        );
        let (tx, events) = mpsc::channel(256);
        let session = Arc::clone(&live.session);
        tokio::spawn(async move {
            let end = pump(&session, &path, recursive, armed, control, &tx).await;
            registry.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
            if let Some(reason) = end {
                let _ = tx.send(WatchEvent::end(reason)).await;
            }
        });
        Ok(DirWatch { events, control: control_tx })
    }

    /// Lift every watch of `live` (before a checkpoint): when this returns, init holds none of them.
    pub(super) async fn lift_watches(&self, live: &Live) {
        let acks: Vec<oneshot::Receiver<()>> = {
            let held = live.watches.lock().unwrap_or_else(|e| e.into_inner());
            held.values()
                .filter_map(|c| {
                    let (ack, done) = oneshot::channel();
                    c.send(Control::Lift(ack)).ok().map(|()| done)
                })
                .collect()
        };
        for done in acks {
            let _ = tokio::time::timeout(ANSWER_WITHIN, done).await;
        }
    }

    /// Put the lifted watches of `live` back (the checkpoint is taken, or failed).
    pub(super) fn restore_watches(&self, live: &Live) {
        for c in live.watches.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = c.send(Control::Restore);
        }
    }

    /// End every watch of `live`, saying why.
    pub(super) fn end_watches(&self, live: &Live, reason: &str) {
        for c in live.watches.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = c.send(Control::End(reason.to_string()));
        }
    }
}

/// Ask init for a watch, and wait for it to be in place.
async fn arm(session: &Arc<Session>, path: &str, recursive: bool) -> Result<Armed, EngineError> {
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| berth_sys::SysError::new("make a watch's socket", e))?;
    ours.set_nonblocking(true).map_err(|e| berth_sys::SysError::new("make a watch's socket", e))?;
    let lines =
        BufReader::new(UnixStream::from_std(ours).map_err(|e| berth_sys::SysError::new("read a watch's socket", e))?);
    let (num, mut events) = session.register();
    let req = Request::Watch { id: num, path: path.to_string(), recursive };
    if let Err(e) = session.send(&req, &[theirs.as_fd()]) {
        session.unregister(num);
        return Err(e);
    }
    drop(theirs);
    let answer = tokio::time::timeout(ANSWER_WITHIN, events.recv()).await;
    if let Ok(Some(Event::Watching { .. })) = answer {
        return Ok(Armed { num, events, lines });
    }
    session.unregister(num);
    Err(match answer {
        Ok(Some(Event::Failed { code, message, .. })) => refusal(code, message),
        Ok(_) => EngineError::InitGone,
        Err(_) => EngineError::Conflict(format!("the sandbox's init did not answer a watch of {path} in time")),
    })
}

/// The error a watch init refused deserves (`code` is an errno).
fn refusal(code: i32, message: String) -> EngineError {
    match code {
        2 => FileError::NotFound(message).into(),
        20 | 13 => FileError::Conflict(message).into(),
        22 => FileError::Invalid(message).into(),
        _ => EngineError::Conflict(message),
    }
}

/// Hand the watch's events on until it ends; the reason it ended, unless the caller went away.
async fn pump(
    session: &Arc<Session>,
    path: &str,
    recursive: bool,
    armed: Armed,
    mut control: mpsc::UnboundedReceiver<Control>,
    tx: &mpsc::Sender<WatchEvent>,
) -> Option<String> {
    if tx.send(WatchEvent::of(WatchKind::Ready)).await.is_err() {
        unwatch(session, armed).await;
        return None;
    }
    let mut armed = Some(armed);
    let mut line = Vec::new();
    // Flushes asked of init, answered in order as its marks come.
    let mut flushes: std::collections::VecDeque<oneshot::Sender<()>> = Default::default();
    loop {
        let Some(a) = armed.as_mut() else {
            // Lifted: wait to be put back, or ended.
            match control.recv().await {
                Some(Control::Restore) => match arm(session, path, recursive).await {
                    Ok(a) => armed = Some(a),
                    Err(e) => return Some(format!("the watch could not be put back after a checkpoint: {e}")),
                },
                Some(Control::End(reason)) => return Some(reason),
                Some(Control::Lift(ack) | Control::Flush(ack)) => {
                    let _ = ack.send(());
                }
                None => return None,
            }
            continue;
        };
        tokio::select! {
            () = tx.closed() => {
                unwatch(session, armed.take()?).await;
                return None;
            }
            got = read_line(&mut a.lines, &mut line) => match got {
                Ok(Some(Line::Flushed)) => {
                    if let Some(ack) = flushes.pop_front() {
                        let _ = ack.send(());
                    }
                }
                Ok(Some(Line::Event(ev))) => {
                    if tx.send(ev).await.is_err() {
                        unwatch(session, armed.take()?).await;
                        return None;
                    }
                }
                // Init closed it: its reason follows on the control socket.
                Ok(None) => {
                    let a = armed.take()?;
                    return Some(ended(session, a).await);
                }
                Err(e) => {
                    unwatch(session, armed.take()?).await;
                    return Some(e);
                }
            },
            ev = a.events.recv() => match ev {
                // Init ended it: what it wrote before is still read, to its end.
                Some(Event::Unwatched { .. }) | None => {
                    let mut a = armed.take()?;
                    while let Ok(Ok(Some(got))) =
                        tokio::time::timeout(Duration::from_secs(1), read_line(&mut a.lines, &mut line)).await
                    {
                        if let Line::Event(ev) = got
                            && tx.send(ev).await.is_err()
                        {
                            break;
                        }
                    }
                    session.unregister(a.num);
                    return Some(match ev {
                        Some(Event::Unwatched { reason, .. }) => reason,
                        _ => "the sandbox stopped".into(),
                    });
                }
                Some(_) => {}
            },
            c = control.recv() => match c {
                Some(Control::Lift(ack)) => {
                    unwatch(session, armed.take()?).await;
                    // Lifted, it holds nothing more from before: those who wait for a flush have it.
                    flushes.drain(..).for_each(|f| {
                        let _ = f.send(());
                    });
                    let _ = ack.send(());
                }
                Some(Control::End(reason)) => {
                    unwatch(session, armed.take()?).await;
                    return Some(reason);
                }
                Some(Control::Restore) => {}
                Some(Control::Flush(ack)) => match session.send(&Request::Flush { id: a.num }, &[]) {
                    Ok(()) => flushes.push_back(ack),
                    Err(_) => {
                        let _ = ack.send(());
                    }
                },
                None => {
                    unwatch(session, armed.take()?).await;
                    return None;
                }
            },
        }
    }
}

/// End an armed watch from this side, and wait until init has let it go.
async fn unwatch(session: &Session, a: Armed) {
    let Armed { num, mut events, lines } = a;
    drop(lines);
    if session.send(&Request::Unwatch { id: num }, &[]).is_ok() {
        let _ = tokio::time::timeout(ANSWER_WITHIN, async {
            while let Some(ev) = events.recv().await {
                if matches!(ev, Event::Unwatched { .. }) {
                    break;
                }
            }
        })
        .await;
    }
    session.unregister(num);
}

/// Why init ended a watch whose socket it closed.
async fn ended(session: &Session, mut a: Armed) -> String {
    let reason = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match a.events.recv().await {
                Some(Event::Unwatched { reason, .. }) => return reason,
                Some(_) => {}
                None => return "the sandbox stopped".to_string(),
            }
        }
    })
    .await
    .unwrap_or_else(|_| "the watch ended".to_string());
    session.unregister(a.num);
    reason
}

/// A line init wrote on a watch's socket.
enum Line {
    Event(WatchEvent),
    /// The end of what the kernel had queued when a flush was asked.
    Flushed,
}

/// The next line, checked: `Ok(None)` at the socket's end. Safe to cancel (in a `select!`): what was read of
/// a line stays in `line` for the next call.
async fn read_line(lines: &mut BufReader<UnixStream>, line: &mut Vec<u8>) -> Result<Option<Line>, String> {
    let room = MAX_LINE.saturating_sub(line.len()) as u64;
    let n = (&mut *lines)
        .take(room)
        .read_until(b'\n', line)
        .await
        .map_err(|e| format!("reading the watch's events: {e}"))?;
    let bad = || "init sent a malformed watch event, and the watch was ended".to_string();
    if line.last() != Some(&b'\n') {
        // The end of the socket, or a line longer than any event.
        return if n == 0 && line.is_empty() { Ok(None) } else { Err(bad()) };
    }
    let text = std::mem::take(line);
    if text == b"{\"type\":\"flushed\"}\n" {
        return Ok(Some(Line::Flushed));
    }
    let ev: WatchEvent = serde_json::from_slice(&text).map_err(|_| bad())?;
    let relative = |p: &Option<String>| {
        p.as_deref().is_none_or(|p| {
            !p.is_empty()
                && !p.starts_with('/')
                && !p.contains('\0')
                && !p.split('/').any(|c| c == ".." || c.is_empty())
        })
    };
    let fits = match ev.kind {
        WatchKind::Ready | WatchKind::End => false,
        WatchKind::Overflow => ev.path.is_none(),
        WatchKind::Rename => ev.path.is_some() && ev.from.is_some(),
        _ => ev.path.is_some() && ev.from.is_none(),
    };
    if !fits || ev.reason.is_some() || !relative(&ev.path) || !relative(&ev.from) {
        return Err(bad());
    }
    Ok(Some(Line::Event(ev)))
}

/// Where a bounded watch (see [`DirWatch::bounded`]) stops by itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchLimits {
    /// After this long, whatever came.
    pub timeout: Option<Duration>,
    /// Once this many changes were reported.
    pub max_events: Option<u64>,
    /// This long after the last change, once there was one.
    pub quiet: Option<Duration>,
}

impl DirWatch {
    /// The same watch, ended (with an `end` saying which) at the first of `limits`: for a caller that makes
    /// one bounded call ("tell me what changes in the next minute", "wait for the first change").
    pub fn bounded(self, limits: WatchLimits) -> DirWatch {
        let DirWatch { mut events, control } = self;
        let (tx, bounded) = mpsc::channel(256);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let deadline = limits.timeout.map(|t| started + t);
            let (mut changes, mut last) = (0u64, None);
            loop {
                let quiet_at = last.zip(limits.quiet).map(|(l, q)| l + q);
                let wake = match (deadline, quiet_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let ev = tokio::select! {
                    () = tx.closed() => return,
                    ev = events.recv() => ev,
                    () = crate::sleep_until(wake) => {
                        let reason = match quiet_at.filter(|q| deadline.is_none_or(|d| *q < d)) {
                            Some(_) => "quiet_seconds passed without a change",
                            None => "timeout_seconds passed",
                        };
                        let _ = tx.send(WatchEvent::end(reason)).await;
                        return;
                    }
                };
                let Some(ev) = ev else { return };
                let kind = ev.kind;
                if tx.send(ev).await.is_err() || kind == WatchKind::End {
                    return;
                }
                if !matches!(kind, WatchKind::Ready | WatchKind::Overflow) {
                    changes += 1;
                    last = Some(tokio::time::Instant::now());
                }
                if limits.max_events.is_some_and(|m| changes >= m) {
                    let _ = tx.send(WatchEvent::end("max_events changes were reported")).await;
                    return;
                }
            }
        });
        DirWatch { events: bounded, control }
    }
}
