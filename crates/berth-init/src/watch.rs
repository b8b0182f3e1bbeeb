//! Watching a directory inside the sandbox (see [`crate::protocol::Request::Watch`]): one inotify instance
//! per watch, read by init's own loop, whose events go out as lines of JSON on the stream socket that came
//! with the request.
//!
//! Like the copies of commands' streams (see [`crate::streams`]), a watch is stepped by the loop, both its
//! descriptors non-blocking: no thread. What the supervisor does not read waits in a bounded buffer; past it
//! init stops reading the inotify queue, which then fills and overflows in the kernel (reported as an
//! `overflow` event), so a watcher that does not read costs init nothing more.
//!
//! Each line is one event: `{"type": T, "path": P}` with `path` relative to the watched directory, and
//! `"dir": true` when it names a directory. `T` is `create`, `write`, `remove`, `rename` (with `from`, the
//! old path, when both ends are in the watch; a move out is a `remove`, a move in a `create`), `chmod`
//! (mode, owner or times changed) or `overflow` (events were lost: look again). Consecutive writes to one
//! file come out as one.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::PollFlags;
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::protocol::Event;

/// Most directories one recursive watch follows.
pub const MAX_DIRS: usize = 10_000;
/// Most watches one init holds at once.
pub const MAX_WATCHES: usize = 64;
/// Event lines held for a supervisor that does not read, before init stops reading the kernel's queue.
const MAX_PENDING: usize = 256 * 1024;

/// Why a watch could not start: an errno-like code (2: no such directory, 20: not a directory, 28: the
/// kernel's watch limit, 7: too many directories) and a sentence.
pub type Refused = (i32, String);

pub struct Watch {
    /// The watched directory, as asked.
    root: String,
    inotify: OwnedFd,
    outside: OwnedFd,
    recursive: bool,
    /// Watch descriptor → the directory's path relative to the root ("" for the root itself).
    dirs: HashMap<i32, String>,
    root_wd: i32,
    pending: Vec<u8>,
    /// The last line added to `pending`, for coalescing writes.
    last: Option<(&'static str, String)>,
    /// Why it ended, found outside a step.
    ended: Option<String>,
}

const DIR_EVENTS: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

impl Watch {
    /// Watch `path` (absolute), and with `recursive` every directory under it, writing events to `outside`.
    pub fn start(path: &str, recursive: bool, outside: OwnedFd) -> Result<Watch, Refused> {
        if !path.starts_with('/') {
            return Err((22, format!("{path:?} is not an absolute path")));
        }
        let kind = rustix::net::sockopt::socket_type(&outside).map_err(|e| (22, format!("a watch's socket: {e}")))?;
        if kind != rustix::net::SocketType::STREAM {
            return Err((22, "a watch's socket is not a stream socket".into()));
        }
        let inotify = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
            .map_err(|e| (e.raw_os_error(), format!("start watching {path}: {e}")))?;
        rustix::fs::fcntl_setfl(&outside, rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| (e.raw_os_error(), format!("a watch's socket: {e}")))?;
        let root_wd = inotify::add_watch(&inotify, path, DIR_EVENTS).map_err(|e| match e {
            Errno::NOENT => (2, format!("{path} does not exist")),
            Errno::NOTDIR => (20, format!("{path} is not a directory")),
            Errno::NOSPC => (28, "the sandbox has used up the kernel's inotify watches".into()),
            Errno::ACCESS => (13, format!("{path} may not be read")),
            e => (e.raw_os_error(), format!("watch {path}: {e}")),
        })?;
        let mut w = Watch {
            root: path.to_string(),
            inotify,
            outside,
            recursive,
            dirs: HashMap::from([(root_wd, String::new())]),
            root_wd,
            pending: Vec::new(),
            last: None,
            ended: None,
        };
        if recursive {
            w.add_tree(path, "", false)?;
        }
        Ok(w)
    }

    /// The descriptors the loop polls for this watch, and what for.
    pub fn interest(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        let mut out = PollFlags::IN | PollFlags::RDHUP;
        if !self.pending.is_empty() {
            out |= PollFlags::OUT;
        }
        let mut fds = vec![(self.outside.as_fd(), out)];
        if self.pending.len() < MAX_PENDING {
            fds.push((self.inotify.as_fd(), PollFlags::IN));
        }
        fds
    }

    /// Take what is ready: the kernel's events, and what the supervisor can take of them. `Some(reason)` when
    /// the watch is over (the supervisor hung up, or the directory went).
    pub fn step(&mut self) -> Option<String> {
        // What was seen before the end is still handed on, as far as the socket takes it now.
        let over = self.ended.take().or_else(|| self.read_events());
        let gone = self.flush();
        over.or(gone)
    }

    /// Take the kernel's queue now and mark its end with a `flushed` line (see `Request::Flush`); the line
    /// goes out with the next step.
    pub fn mark_flushed(&mut self) {
        if let Some(reason) = self.read_events() {
            // Over: the next step reports it (and the mark is not needed).
            self.ended = Some(reason);
            return;
        }
        self.pending.extend_from_slice(b"{\"type\":\"flushed\"}\n");
        self.last = None;
    }

    /// Write what is pending; notice a supervisor that went away.
    fn flush(&mut self) -> Option<String> {
        let mut probe = [0u8; 64];
        match rustix::io::read(&self.outside, &mut probe) {
            Ok(0) => return Some("the watcher went away".into()),
            // The supervisor sends nothing on a watch's socket: anything it sends is dropped.
            Ok(_) | Err(Errno::AGAIN | Errno::INTR) => {}
            Err(e) => return Some(format!("the watch's socket: {e}")),
        }
        while !self.pending.is_empty() {
            match rustix::net::send(&self.outside, &self.pending, rustix::net::SendFlags::NOSIGNAL) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(Errno::AGAIN | Errno::INTR) => break,
                Err(_) => return Some("the watcher went away".into()),
            }
        }
        if self.pending.is_empty() {
            self.last = None;
        }
        None
    }

    fn read_events(&mut self) -> Option<String> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        let mut held: Option<(u32, String, bool)> = None;
        let mut got = Vec::new();
        while self.pending.len() < MAX_PENDING {
            let mut reader = inotify::Reader::new(&self.inotify, &mut buf);
            loop {
                let ev = match reader.next() {
                    Ok(ev) => ev,
                    Err(Errno::AGAIN | Errno::INTR) => break,
                    Err(e) => return Some(format!("reading the directory's events: {e}")),
                };
                got.push((ev.wd(), ev.events(), ev.cookie(), ev.file_name().map(|n| n.to_string_lossy().into_owned())));
                if reader.is_buffer_empty() {
                    break;
                }
            }
            if got.is_empty() {
                break;
            }
            for (wd, flags, cookie, name) in got.drain(..) {
                if let Some(reason) = self.event(wd, flags, cookie, name, &mut held) {
                    return Some(reason);
                }
            }
        }
        // A move whose other end did not follow: out of the watch.
        if let Some((_, path, dir)) = held.take() {
            self.forget_under(&path, dir);
            self.line("remove", &path, None, dir);
        }
        None
    }

    fn event(
        &mut self,
        wd: i32,
        flags: ReadFlags,
        cookie: u32,
        name: Option<String>,
        held: &mut Option<(u32, String, bool)>,
    ) -> Option<String> {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.line("overflow", "", None, false);
            return None;
        }
        let dir = flags.contains(ReadFlags::ISDIR);
        if wd == self.root_wd && flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::IGNORED) {
            return Some(format!("{} was removed", self.root));
        }
        if wd == self.root_wd && flags.contains(ReadFlags::MOVE_SELF) {
            return Some(format!("{} was moved away", self.root));
        }
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            return None;
        }
        let (Some(parent), Some(name)) = (self.dirs.get(&wd), name) else { return None };
        let path = if parent.is_empty() { name } else { format!("{parent}/{name}") };
        // A move's first half waits for its second; anything else means it left the watch.
        if let Some((c, from, was_dir)) = held.take() {
            if flags.contains(ReadFlags::MOVED_TO) && c == cookie {
                self.renamed(&from, &path);
                self.line("rename", &path, Some(&from), dir);
                return None;
            }
            self.forget_under(&from, was_dir);
            self.line("remove", &from, None, was_dir);
        }
        if flags.contains(ReadFlags::MOVED_FROM) {
            *held = Some((cookie, path, dir));
        } else if flags.contains(ReadFlags::CREATE) || flags.contains(ReadFlags::MOVED_TO) {
            self.line("create", &path, None, dir);
            if dir && self.recursive {
                let full = format!("{}/{path}", self.root.trim_end_matches('/'));
                // What was made in it before its watch was in place is reported as made (a moved-in tree
                // is one event).
                if let Err((_, reason)) = self.add_tree(&full, &path, flags.contains(ReadFlags::CREATE)) {
                    return Some(reason);
                }
            }
        } else if flags.contains(ReadFlags::DELETE) {
            self.forget_under(&path, dir);
            self.line("remove", &path, None, dir);
        } else if flags.contains(ReadFlags::MODIFY) {
            self.line("write", &path, None, dir);
        } else if flags.contains(ReadFlags::ATTRIB) {
            self.line("chmod", &path, None, dir);
        }
        None
    }

    /// Watch the directories under `full` (whose relative path is `rel`); with `report`, say what is in
    /// them as created.
    fn add_tree(&mut self, full: &str, rel: &str, report: bool) -> Result<(), Refused> {
        if !rel.is_empty() {
            self.add_dir(full, rel)?;
        }
        let mut todo = vec![(full.to_string(), rel.to_string())];
        while let Some((dir, rel)) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let sub = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if report {
                    self.line("create", &sub, None, is_dir);
                }
                if is_dir {
                    let path = format!("{}/{name}", dir.trim_end_matches('/'));
                    self.add_dir(&path, &sub)?;
                    todo.push((path, sub));
                }
            }
        }
        Ok(())
    }

    fn add_dir(&mut self, full: &str, rel: &str) -> Result<(), Refused> {
        if self.dirs.len() >= MAX_DIRS {
            return Err((7, format!("more than {MAX_DIRS} directories to watch")));
        }
        match inotify::add_watch(&self.inotify, full, DIR_EVENTS | WatchFlags::DONT_FOLLOW) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_string());
                Ok(())
            }
            Err(Errno::NOSPC) => Err((28, "the sandbox has used up the kernel's inotify watches".into())),
            // Gone again, or not a directory after all (a link): nothing to follow.
            Err(_) => Ok(()),
        }
    }

    /// A directory moved within the watch: the paths of those under it follow.
    fn renamed(&mut self, from: &str, to: &str) {
        for rel in self.dirs.values_mut() {
            if rel == from {
                *rel = to.to_string();
            } else if let Some(rest) = rel.strip_prefix(from).and_then(|r| r.strip_prefix('/')) {
                *rel = format!("{to}/{rest}");
            }
        }
    }

    /// A directory left the watch: stop following it and what is under it.
    fn forget_under(&mut self, path: &str, dir: bool) {
        if !dir {
            return;
        }
        let gone: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, rel)| *rel == path || rel.strip_prefix(path).is_some_and(|r| r.starts_with('/')))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            let _ = inotify::remove_watch(&self.inotify, wd);
            self.dirs.remove(&wd);
        }
    }

    fn line(&mut self, kind: &'static str, path: &str, from: Option<&str>, dir: bool) {
        if kind == "write" && self.last.as_ref().is_some_and(|(k, p)| *k == kind && p == path) {
            return;
        }
        let mut v = serde_json::json!({"type": kind});
        if !path.is_empty() {
            v["path"] = path.into();
        }
        if let Some(from) = from {
            v["from"] = from.into();
        }
        if dir {
            v["dir"] = true.into();
        }
        if let Ok(mut text) = serde_json::to_vec(&v) {
            text.push(b'\n');
            self.pending.extend_from_slice(&text);
        }
        self.last = Some((kind, path.to_string()));
    }
}

/// The watches init holds, by request id.
#[derive(Default)]
pub struct Watches(HashMap<u64, Watch>);

impl Watches {
    /// Start watch `id` (see `Request::Watch`): `watching`, or `failed` with an errno and why.
    pub fn start(&mut self, id: u64, path: &str, recursive: bool, fds: Vec<OwnedFd>) -> Event {
        let started = match <[OwnedFd; 1]>::try_from(fds) {
            _ if self.0.contains_key(&id) => Err((22, format!("watch {id} is already in place"))),
            _ if self.0.len() >= MAX_WATCHES => {
                Err((24, format!("the sandbox already has {MAX_WATCHES} directories watched")))
            }
            Ok([outside]) => Watch::start(path, recursive, outside),
            Err(fds) => Err((22, format!("a watch takes one socket, not {}", fds.len()))),
        };
        match started {
            Ok(w) => {
                self.0.insert(id, w);
                Event::Watching { id }
            }
            Err((code, message)) => Event::Failed { id, code, message },
        }
    }

    /// Every watch's descriptors to poll, with its id.
    pub fn interest(&self) -> Vec<(u64, BorrowedFd<'_>, PollFlags)> {
        self.0.iter().flat_map(|(id, w)| w.interest().into_iter().map(|(fd, f)| (*id, fd, f))).collect()
    }

    /// Step watch `id`; its `unwatched` when it is over (it is then gone).
    pub fn step(&mut self, id: u64) -> Option<Event> {
        let reason = self.0.get_mut(&id)?.step()?;
        self.0.remove(&id);
        Some(Event::Unwatched { id, reason })
    }

    /// See [`Watch::mark_flushed`].
    pub fn mark_flushed(&mut self, id: u64) {
        if let Some(w) = self.0.get_mut(&id) {
            w.mark_flushed();
        }
    }

    /// End watch `id` as asked: its `unwatched`, if it was there.
    pub fn end(&mut self, id: u64) -> Option<Event> {
        self.0.remove(&id).map(|_| Event::Unwatched { id, reason: "asked".into() })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Read;

    fn events(w: &mut Watch, theirs: &mut std::os::unix::net::UnixStream) -> Vec<serde_json::Value> {
        assert_eq!(w.step(), None);
        theirs.set_nonblocking(true).unwrap();
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = theirs.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&buf[..n]);
        }
        text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
    }

    #[test]
    fn reports_what_changes_under_a_directory() {
        let dir = std::env::temp_dir().join(format!("berth-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("old")).unwrap();
        let root = dir.to_str().unwrap().to_string();
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = Watch::start(&root, true, ours.into()).unwrap();
        std::fs::write(dir.join("a.txt"), b"1").unwrap();
        std::fs::write(dir.join("a.txt"), b"12").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        let seen = events(&mut w, &mut theirs);
        let kinds: Vec<(&str, &str)> =
            seen.iter().map(|e| (e["type"].as_str().unwrap(), e["path"].as_str().unwrap_or(""))).collect();
        assert_eq!(kinds[0], ("create", "a.txt"), "{seen:?}");
        assert!(kinds.contains(&("write", "a.txt")), "{seen:?}");
        assert!(kinds.contains(&("create", "sub")), "{seen:?}");
        // The new directory is followed, and a tree moved within the watch keeps being followed.
        std::fs::write(dir.join("sub/b"), b"x").unwrap();
        std::fs::rename(dir.join("old"), dir.join("new")).unwrap();
        std::fs::write(dir.join("new/c"), b"x").unwrap();
        std::fs::remove_file(dir.join("a.txt")).unwrap();
        let seen = events(&mut w, &mut theirs);
        let text = serde_json::to_string(&seen).unwrap();
        assert!(text.contains(r#"{"path":"sub/b","type":"create"}"#), "{text}");
        assert!(text.contains(r#"{"dir":true,"from":"old","path":"new","type":"rename"}"#), "{text}");
        assert!(text.contains(r#"{"path":"new/c","type":"create"}"#), "{text}");
        assert!(text.contains(r#"{"path":"a.txt","type":"remove"}"#), "{text}");
        // The directory itself removed ends the watch.
        std::fs::remove_dir_all(&dir).unwrap();
        let mut end = None;
        for _ in 0..10 {
            end = w.step();
            if end.is_some() {
                break;
            }
        }
        assert_eq!(end.unwrap(), format!("{root} was removed"));
    }

    #[test]
    fn a_flush_marks_the_end_of_what_was_queued() {
        let dir = std::env::temp_dir().join(format!("berth-watch-flush-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = Watch::start(dir.to_str().unwrap(), false, ours.into()).unwrap();
        std::fs::write(dir.join("a"), b"1").unwrap();
        w.mark_flushed();
        let seen = events(&mut w, &mut theirs);
        let kinds: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["create", "write", "flushed"], "{seen:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_what_is_not_a_directory() {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let Err((code, message)) = Watch::start("/no/such/dir", false, ours.into()) else { panic!() };
        assert_eq!((code, message.as_str()), (2, "/no/such/dir does not exist"));
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let Err((code, _)) = Watch::start("/proc/self/status", false, ours.into()) else { panic!() };
        assert_eq!(code, 20);
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(Watch::start("tmp", false, ours.into()).err().unwrap().0, 22);
    }

    #[test]
    fn a_watcher_that_hangs_up_ends_the_watch() {
        let dir = std::env::temp_dir();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = Watch::start(dir.to_str().unwrap(), false, ours.into()).unwrap();
        drop(theirs);
        assert_eq!(w.step().as_deref(), Some("the watcher went away"));
    }
}
