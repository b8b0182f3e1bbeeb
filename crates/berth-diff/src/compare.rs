//! The walk that compares two trees.
//!
//! Both trees are walked together, one directory at a time. A directory that is made of the same layer
//! directories on both sides (for instance one only an image's lower layer holds) cannot differ and is not
//! looked into, so the cost follows the size of the upper layers, not of the image. When the two sides are
//! built on different lower layers, their directories differ and the walk goes through the lowers too.

use std::collections::BTreeSet;

use crate::content::{self, CHUNK, Pool, Task};
use crate::layers::{Entry, Info, Side, Src, View};
use crate::{Change, DiffError, FileType, Kind, Meta, Options, Tree, check_sandbox_path, is_within, join};

/// Compares two trees and returns every changed path, sorted by path (byte order).
///
/// A deleted directory is listed along with everything that was beneath it, and an added directory along
/// with everything beneath it. With `opts.include`, only that sandbox path and what is beneath it are
/// reported and read; the directories leading to it are listed, nothing else.
pub fn diff(old: &Tree, new: &Tree, opts: &Options) -> Result<Vec<Change>, DiffError> {
    if let Some(include) = &opts.include {
        check_sandbox_path("include path", include)?;
    }
    compare_with(old, new, opts, content::workers())
}

/// [`diff`] with a given number of content workers (none: contents are compared on the walk's thread).
fn compare_with(old: &Tree, new: &Tree, opts: &Options, workers: usize) -> Result<Vec<Change>, DiffError> {
    let o = Side::open(old, "old")?;
    let n = Side::open(new, "new")?;
    let mut out = std::thread::scope(|scope| {
        let pool = (workers > 0).then(|| Pool::start(scope, workers));
        let mut walk = Walk {
            old: &o,
            new: &n,
            include: opts.include.as_deref(),
            out: Vec::new(),
            jobs: Vec::new(),
            pool: pool.as_ref(),
            bufs: (Vec::new(), Vec::new()),
        };
        let walked = walk.run();
        let mut out = walk.out;
        // Wait for the workers even when the walk failed, so no descriptor outlives the call.
        let compared = pool.map_or(Ok(Vec::new()), Pool::finish);
        walked?;
        out.extend(compared?);
        Ok::<_, DiffError>(out)
    })?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A directory still to compare, with where each side's entries come from (`None`: absent on that side).
struct Job {
    path: String,
    old: Option<Src>,
    new: Option<Src>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Reported and looked into.
    In,
    /// On the way to the include path: looked into, not reported.
    Ancestor,
    /// Neither.
    Out,
}

struct Walk<'s, 'p> {
    old: &'s Side,
    new: &'s Side,
    include: Option<&'s str>,
    out: Vec<Change>,
    /// Directories still to visit; a stack rather than recursion, as sandboxed code can nest directories
    /// deeper than any call stack.
    jobs: Vec<Job>,
    /// Workers comparing contents, if any; otherwise contents are compared here, with these buffers.
    pool: Option<&'p Pool<'p>>,
    bufs: (Vec<u8>, Vec<u8>),
}

/// How two entries of one path compare, as far as metadata tells.
enum Verdict {
    Same,
    Differs,
    /// Two regular files of equal size and mode that are not known to be the same file.
    ReadContents,
}

/// One side's entry with the directory view that can read it.
type Seen<'a, 's> = Option<(&'a View<'s>, &'a str, &'a Entry)>;

fn dir_meta(info: &Info) -> Meta {
    Meta { file_type: info.file_type, mode: info.mode, size: info.size, symlink_target: None }
}

impl Walk<'_, '_> {
    fn scope(&self, path: &str) -> Scope {
        match self.include {
            None => Scope::In,
            Some(inc) if is_within(path, inc) => Scope::In,
            Some(inc) if is_within(inc, path) => Scope::Ancestor,
            Some(_) => Scope::Out,
        }
    }

    fn run(&mut self) -> Result<(), DiffError> {
        self.root()?;
        while let Some(job) = self.jobs.pop() {
            self.visit(job)?;
        }
        Ok(())
    }

    fn root(&mut self) -> Result<(), DiffError> {
        let (a, b) = (self.old.root()?, self.new.root()?);
        let report = self.scope("/") == Scope::In;
        match (&a, &b) {
            (Some(a), None) if report => self.push("/", Kind::Deleted, Some(dir_meta(&a.info)), None),
            (None, Some(b)) if report => self.push("/", Kind::Added, None, Some(dir_meta(&b.info))),
            (Some(a), Some(b)) if report && !a.info.synthetic && !b.info.synthetic && a.info.mode != b.info.mode => {
                self.push("/", Kind::Modified, Some(dir_meta(&a.info)), Some(dir_meta(&b.info)));
            }
            _ => {}
        }
        if a.is_some() || b.is_some() {
            let job = Job { path: "/".to_owned(), old: a.and_then(|e| e.child), new: b.and_then(|e| e.child) };
            self.jobs.push(job);
        }
        Ok(())
    }

    fn push(&mut self, path: &str, kind: Kind, old: Option<Meta>, new: Option<Meta>) {
        self.out.push(Change { path: path.to_owned(), kind, old, new });
    }

    fn visit(&mut self, job: Job) -> Result<(), DiffError> {
        let va = job.old.as_ref().map(|src| self.old.open_dir(src, &job.path)).transpose()?;
        let vb = job.new.as_ref().map(|src| self.new.open_dir(src, &job.path)).transpose()?;
        if let (Some(a), Some(b)) = (&va, &vb)
            && !self.old.has_mount_below(&job.path)
            && !self.new.has_mount_below(&job.path)
            && a.identity().is_some()
            && a.identity() == b.identity()
        {
            return Ok(());
        }
        let la = va.as_ref().map(View::list).transpose()?.unwrap_or_default();
        let lb = vb.as_ref().map(View::list).transpose()?.unwrap_or_default();
        let names: BTreeSet<&String> = la.keys().chain(lb.keys()).collect();
        for name in names {
            let a = la.get(name).and_then(|e| va.as_ref().map(|v| (v, name.as_str(), e)));
            let b = lb.get(name).and_then(|e| vb.as_ref().map(|v| (v, name.as_str(), e)));
            self.entry(join(&job.path, name), a, b)?;
        }
        Ok(())
    }

    fn entry(&mut self, path: String, a: Seen<'_, '_>, b: Seen<'_, '_>) -> Result<(), DiffError> {
        let scope = self.scope(&path);
        if scope == Scope::Out {
            return Ok(());
        }
        let report = scope == Scope::In;
        let (old_child, new_child) = (a.and_then(|(_, _, e)| e.child.clone()), b.and_then(|(_, _, e)| e.child.clone()));
        match (a, b) {
            (Some((v, name, e)), None) if report => self.push(&path, Kind::Deleted, Some(v.meta(name, e)?), None),
            (None, Some((v, name, e))) if report => self.push(&path, Kind::Added, None, Some(v.meta(name, e)?)),
            (Some(a), Some(b)) if report => match self.verdict(a, b)? {
                Verdict::Same => {}
                Verdict::Differs => {
                    let (old, new) = (a.0.meta(a.1, a.2)?, b.0.meta(b.1, b.2)?);
                    self.push(&path, Kind::Modified, Some(old), Some(new));
                }
                Verdict::ReadContents => self.contents(path.clone(), a, b)?,
            },
            _ => {}
        }
        if old_child.is_some() || new_child.is_some() {
            self.jobs.push(Job { path, old: old_child, new: new_child });
        }
        Ok(())
    }

    /// How two entries of one path compare in type, permission bits and link target, and whether their
    /// contents must be read to tell.
    fn verdict(&self, a: (&View<'_>, &str, &Entry), b: (&View<'_>, &str, &Entry)) -> Result<Verdict, DiffError> {
        let (ia, ib) = (&a.2.info, &b.2.info);
        let same_file = ia.key == ib.key && ia.size == ib.size;
        let differs = ia.format != ib.format
            || (ia.mode != ib.mode && !(ia.file_type == FileType::Dir && (ia.synthetic || ib.synthetic)))
            || match ia.file_type {
                FileType::Dir => false,
                FileType::Other => ia.rdev != ib.rdev,
                FileType::Symlink => !same_file && a.0.link_target(a.1, a.2)? != b.0.link_target(b.1, b.2)?,
                FileType::File => !same_file && ia.size != ib.size,
            };
        Ok(if differs {
            Verdict::Differs
        } else if ia.file_type == FileType::File && !same_file && ia.size > 0 {
            Verdict::ReadContents
        } else {
            Verdict::Same
        })
    }

    /// Compares two regular files' contents, on a worker or here. A file that vanished or was swapped since
    /// it was listed counts as changed.
    fn contents(
        &mut self,
        path: String,
        a: (&View<'_>, &str, &Entry),
        b: (&View<'_>, &str, &Entry),
    ) -> Result<(), DiffError> {
        let (old, new) = (a.0.meta(a.1, a.2)?, b.0.meta(b.1, b.2)?);
        let task = Task { path, old, new, a: a.0.file_ref(a.1, a.2)?, b: b.0.file_ref(b.1, b.2)? };
        if let Some(pool) = self.pool {
            pool.send(task);
            return Ok(());
        }
        if self.bufs.0.is_empty() {
            self.bufs = (vec![0; CHUNK], vec![0; CHUNK]);
        }
        if !content::compare(&task, &mut self.bufs.0, &mut self.bufs.1)? {
            self.out.push(Change { path: task.path, kind: Kind::Modified, old: Some(task.old), new: Some(task.new) });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn contents_compare_alike_with_and_without_workers() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for dir in [&a, &b] {
            std::fs::create_dir(dir).unwrap();
            for i in 0..200 {
                std::fs::write(dir.join(format!("f{i}")), format!("file {i}\n").repeat(i + 1)).unwrap();
            }
        }
        std::fs::write(b.join("f7"), "FILE 7\n".repeat(8)).unwrap();
        std::fs::write(b.join("f150"), "file 150\n".repeat(150) + "file 15X\n").unwrap();
        let (old, new) = (Tree::plain("/", &a), Tree::plain("/", &b));
        for workers in [0, 1, 3] {
            let changes = compare_with(&old, &new, &Options::default(), workers).unwrap();
            let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
            assert_eq!(paths, ["/f150", "/f7"], "{workers} workers");
            assert!(changes.iter().all(|c| c.kind == Kind::Modified && c.old.as_ref().unwrap().size > 0));
        }
    }
}
