//! Applying one tar layer onto the image, whiteouts included.
//!
//! OCI whiteouts: an entry `DIR/.wh.NAME` deletes `DIR/NAME` and `DIR/.wh..wh..opq` empties `DIR`. Both apply
//! to what *lower* layers left, never to what this layer wrote (the image spec says so, and image builders
//! write the opaque marker anywhere among a directory's entries), so the writer remembers this layer's paths
//! and a whiteout prunes around them. Whiteout entries themselves are never written.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode};
use rustix::io::Errno;

use crate::Progress;
use crate::error::ImportError;
use crate::safefs::{self, READ_DIR, WalkError};
use crate::tarstream::{Kind, Skip, TarReader};
use crate::writer::{Body, Meta, Writer, is_fatal, normalize};

const WHITEOUT: &[u8] = b".wh.";
const OPAQUE: &[u8] = b".wh..wh..opq";

impl Writer<'_> {
    /// Starts a layer (numbered from 1) for progress reports and whiteout bookkeeping.
    pub(crate) fn begin_layer(&mut self, layer: usize, layers: usize, total: u64, what: String) {
        self.layer = layer;
        self.layers = layers;
        self.total = total;
        self.what = what;
        self.written.clear();
        self.ancestors.clear();
        self.counter.set(0);
        self.emit();
    }

    /// Reports the current layer as fully read.
    pub(crate) fn end_layer(&mut self) {
        self.counter.set(self.counter.get().max(self.total));
        self.emit();
    }

    /// Reports progress when at least 4 MiB more were consumed since the last report.
    pub(crate) fn tick(&mut self) {
        if self.counter.get() >= self.last_emit + (4 << 20) {
            self.emit();
        }
    }

    pub(crate) fn emit(&mut self) {
        let done = self.counter.get();
        self.last_emit = done;
        if let Some(report) = self.progress {
            report(Progress { layer: self.layer, layers: self.layers, bytes_done: done, bytes_total: self.total });
        }
    }

    /// Applies every entry of `tar` in order.
    pub(crate) fn apply_tar<R: Skip>(&mut self, tar: &mut TarReader<R>) -> Result<(), ImportError> {
        loop {
            let entry = match tar.next_entry() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => return Err(ImportError::Corrupt { what: self.what.clone(), source: e }),
            };
            self.charge(entry.size)?;
            let raw = entry.path.as_slice();
            let (path, absolute) = match normalize(raw) {
                Ok(p) => p,
                Err(reason) => {
                    self.reject(raw, reason);
                    continue;
                }
            };
            if absolute && !path.as_os_str().is_empty() {
                self.reject(raw, format!("absolute path; written as {}", path.display()));
            }
            if path.file_name().is_some_and(|n| n.as_bytes().starts_with(WHITEOUT)) {
                self.whiteout(raw, &path)?;
                continue;
            }
            let meta = Meta {
                uid: entry.uid,
                gid: entry.gid,
                mode: entry.mode,
                mtime: entry.mtime,
                xattrs: entry.xattrs.clone(),
            };
            let body = match entry.kind {
                Kind::File => Body::File(&mut *tar as &mut dyn Read),
                Kind::Dir => Body::Dir,
                Kind::Symlink => Body::Symlink(entry.link.clone()),
                Kind::HardLink => Body::HardLink(entry.link.clone()),
                Kind::Fifo => Body::Fifo,
                Kind::Char | Kind::Block => Body::Refuse("device node; skipped".into()),
                Kind::Sparse => Body::Refuse("GNU sparse file, which berth does not read; skipped".into()),
                Kind::Other(t) => Body::Refuse(format!("unsupported entry type {:?}; skipped", char::from(t))),
            };
            self.put(raw, &path, body, &meta)?;
            self.tick();
        }
        self.emit();
        Ok(())
    }

    /// Applies a whiteout entry; a failure that says nothing about the host only goes into the report.
    fn whiteout(&mut self, raw: &[u8], path: &Path) -> Result<(), ImportError> {
        match self.whiteout_inner(raw, path) {
            Ok(()) => Ok(()),
            Err(e) if is_fatal(e) => {
                Err(ImportError::Write { path: String::from_utf8_lossy(raw).into_owned(), source: io::Error::from(e) })
            }
            Err(e) => {
                self.reject(raw, format!("whiteout could not be applied ({e}); ignored"));
                Ok(())
            }
        }
    }

    fn whiteout_inner(&mut self, raw: &[u8], path: &Path) -> Result<(), Errno> {
        let name = path.file_name().map(|n| n.as_bytes()).unwrap_or_default();
        let parent = path.parent().unwrap_or(Path::new(""));
        let target = &name[WHITEOUT.len()..];
        let opaque = name == OPAQUE;
        if !opaque && (target.is_empty() || target.starts_with(WHITEOUT)) {
            // `.wh..wh.plnk` and friends are aufs bookkeeping, not deletions.
            return Ok(());
        }
        if !opaque && (target == b"." || target == b"..") {
            self.reject(raw, "whiteout of . or .., which names no entry; ignored");
            return Ok(());
        }
        let dir = match self.root.dir(parent, false) {
            Ok(d) => d,
            Err(WalkError::Missing | WalkError::NotDir { .. }) => return Ok(()),
            Err(WalkError::Symlink { at, .. }) => {
                self.reject(raw, format!("whiteout through the symlink {}; ignored", at.display()));
                return Ok(());
            }
            Err(WalkError::Limit) => return Ok(()),
            Err(WalkError::Io(e)) => return Err(e),
        };
        let victims: Vec<PathBuf> = if opaque {
            let names = safefs::list(dir.as_fd())?;
            names.into_iter().map(|n| parent.join(n)).collect()
        } else {
            vec![parent.join(std::ffi::OsStr::from_bytes(target))]
        };
        for victim in victims {
            self.prune(victim)?;
        }
        Ok(())
    }

    /// Removes `start` as lower layers left it: what this layer wrote stays, directories this layer wrote
    /// into are emptied of everything else, and the rest goes. Walks with a work list, not recursion.
    fn prune(&mut self, start: PathBuf) -> Result<(), Errno> {
        let mut todo = vec![start];
        while let Some(rel) = todo.pop() {
            let Some(name) = rel.file_name() else { continue };
            let Ok(dir) = self.root.dir(rel.parent().unwrap_or(Path::new("")), false) else { continue };
            let st = match rfs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            let ours = self.written.contains(&rel);
            if ours && !is_dir {
                continue;
            }
            if is_dir && (ours || self.ancestors.contains(&rel)) {
                let sub = rfs::openat(&*dir, name, READ_DIR, Mode::empty())?;
                let names = safefs::list(sub.as_fd())?;
                todo.extend(names.into_iter().map(|n| rel.join(n)));
                continue;
            }
            let removed = if is_dir {
                self.root.forget();
                safefs::remove_tree(dir.as_fd(), name)
            } else {
                rfs::unlinkat(&*dir, name, AtFlags::empty())
            };
            removed?;
        }
        Ok(())
    }
}
