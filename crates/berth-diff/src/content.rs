//! Comparing the contents of files that may differ.
//!
//! Most of a diff's time goes to files whose metadata cannot tell (a copied tree has new inodes): each must
//! be opened and read on both sides. On a machine with more than one CPU the walk hands those pairs to
//! worker threads and carries on listing directories; the workers open and compare them. A bounded queue
//! keeps the number of directories held open small.

use std::fs::File;
use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crate::layers::FileRef;
use crate::{Change, DiffError, Kind, Meta};

/// Contents are compared in chunks of this size.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Pairs waiting for a worker, at most.
const QUEUE: usize = 64;

/// One pair of regular files of equal size to compare.
pub(crate) struct Task {
    pub(crate) path: String,
    pub(crate) old: Meta,
    pub(crate) new: Meta,
    pub(crate) a: FileRef,
    pub(crate) b: FileRef,
}

/// How many workers to start: none on a single CPU.
pub(crate) fn workers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    if cpus < 2 { 0 } else { cpus }
}

/// Worker threads comparing [`Task`]s; their changes are collected by [`Pool::finish`].
pub(crate) struct Pool<'scope> {
    tx: SyncSender<Task>,
    handles: Vec<ScopedJoinHandle<'scope, Outcome>>,
}

/// A worker's changes, and the first error it met.
type Outcome = (Vec<Change>, Option<DiffError>);

impl<'scope> Pool<'scope> {
    pub(crate) fn start<'env>(scope: &'scope Scope<'scope, 'env>, workers: usize) -> Self {
        let (tx, rx) = sync_channel(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let handles = (0..workers)
            .map(|_| {
                let rx = Arc::clone(&rx);
                scope.spawn(move || work(&rx))
            })
            .collect();
        Self { tx, handles }
    }

    /// Queues a pair, waiting while the queue is full.
    pub(crate) fn send(&self, task: Task) {
        // Sending fails only when every worker is gone, which only a panic does; joining reports it.
        let _ = self.tx.send(task);
    }

    /// Waits for every queued pair and returns the ones that differ.
    pub(crate) fn finish(self) -> Result<Vec<Change>, DiffError> {
        drop(self.tx);
        let mut changes = Vec::new();
        let mut first_error = None;
        for handle in self.handles {
            let (found, error) = handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            changes.extend(found);
            first_error = first_error.or(error);
        }
        first_error.map_or(Ok(changes), Err)
    }
}

fn work(rx: &Mutex<Receiver<Task>>) -> Outcome {
    let (mut ba, mut bb) = (vec![0; CHUNK], vec![0; CHUNK]);
    let mut changes = Vec::new();
    let mut error = None;
    loop {
        let task = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(_) => break,
        };
        let Ok(task) = task else { break };
        if error.is_some() {
            continue;
        }
        match compare(&task, &mut ba, &mut bb) {
            Ok(true) => {}
            Ok(false) => {
                changes.push(Change { path: task.path, kind: Kind::Modified, old: Some(task.old), new: Some(task.new) })
            }
            Err(e) => error = Some(e),
        }
    }
    (changes, error)
}

/// Whether the pair holds the same bytes; a file that is gone or no longer the one listed counts as changed.
pub(crate) fn compare(task: &Task, ba: &mut [u8], bb: &mut [u8]) -> Result<bool, DiffError> {
    let (Some(mut fa), Some(mut fb)) = (task.a.open()?, task.b.open()?) else { return Ok(false) };
    same_streams(&mut fa, &mut fb, task.old.size, ba, bb).map_err(|(which, source)| {
        let file = if which == 0 { &task.a } else { &task.b };
        DiffError::Read { side: file.side, path: file.path.clone(), source }
    })
}

/// Whether two files of `size` bytes (as listed) hold the same bytes, read in chunks the size of the
/// buffers (which must be equal). Reading stops at `size`, sparing a read that would only find the end.
/// An error says which file failed: 0 for `fa`, 1 for `fb`.
fn same_streams(
    fa: &mut File,
    fb: &mut File,
    size: u64,
    ba: &mut [u8],
    bb: &mut [u8],
) -> Result<bool, (usize, std::io::Error)> {
    let mut left = size;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(ba.len());
        let na = fill(fa, &mut ba[..want]).map_err(|e| (0, e))?;
        let nb = fill(fb, &mut bb[..want]).map_err(|e| (1, e))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na < want {
            return Ok(true);
        }
        left -= want as u64;
    }
    Ok(true)
}

/// Reads until `buf` is full or the file ends.
fn fill(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(len)
}
