//! What changed in a sandbox's file system.
//!
//! A sandbox's file system is a set of overlayfs mount points, each a writable upper directory over
//! read-only lower directories, and a workspace that is a plain directory. Both sides of a comparison are
//! described the same way ([`Tree`]), so a snapshot against the live sandbox, a sandbox against its image
//! (an empty upper) and two forks of one sandbox are all one call to [`diff`].
//!
//! Everything under a tree was written by untrusted code, so nothing here ever follows a symbolic link inside
//! a layer: directories are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the layer's
//! root, files are pinned with `O_PATH | O_NOFOLLOW` relative to their directory and opened only once known
//! to be regular files, and a symbolic link is only ever read as its target text. A link to `/etc/shadow`
//! is reported as a link, never read.
//!
//! # Cost
//!
//! A directory made of the same layer directories on both sides is not looked into, so comparing two
//! sandboxes on one image costs in proportion to their upper layers. Files whose `(dev, ino, size, mtime,
//! ctime)` match are the same file (or an unchanged snapshot copy) and are not read; files of different
//! sizes differ; the rest are compared chunk by chunk, on worker threads when there is more than one CPU.
//!
//! # What is reported
//!
//! - Paths are absolute sandbox paths (`/workspace/src/main.rs`), sorted by byte order, so a directory comes
//!   before everything beneath it.
//! - A deleted directory is listed, and so is every entry that was beneath it (each [`Kind::Deleted`]);
//!   likewise everything beneath an added directory is listed as added. A patch or a commit needs each file.
//! - A directory is [`Kind::Modified`] only when its permission bits change; new or removed entries inside it
//!   are reported as those entries.
//! - A path whose type changed (a file replaced by a directory, a link by a file) is one
//!   [`Kind::Modified`] change whose `old` and `new` metadata have different [`FileType`]s.
//! - Owners and timestamps are ignored: ids are shifted inside a sandbox and times say nothing about content.
//!
//! # Overlay markers
//!
//! In the top layer of a mount with more than one layer, a character device 0:0, or an empty regular file
//! with the xattr `user.overlay.whiteout` or `trusted.overlay.whiteout`, is a whiteout (the path is deleted
//! from the layers below), and a directory whose `user.overlay.opaque` or `trusted.overlay.opaque` xattr is
//! `y` hides everything the lower layers hold under it. A mount with a single layer is a plain directory, and
//! lower layers are always plain. Redirected directories and metacopy files are not supported.
//!
//! # Patches and export
//!
//! [`write_patch`] prints a git-style patch (as `git diff --full-index` would) whose paths are relative to
//! the sandbox root (`a/workspace/src/main.rs`), so it applies with `git apply` or `patch -p1` in a copy of
//! the sandbox's root. [`write_patch_under`] makes paths relative to a sandbox directory instead
//! (`a/src/main.rs` for `/workspace`), which is exactly what [`export`] with the same `prefix` commits: the
//! branch's `git diff BASE BRANCH` touches the same files with the same contents. Both leave out what git
//! cannot hold: directories (an added empty directory), special files, permission bits other than the
//! owner's execute bit, and any path with a `.git` component. A binary file is named in a patch
//! (`Binary files a/x and b/x differ`) but only carried by an export. GNU patch cannot replace a directory
//! with a file or the reverse; `git apply` can.
#![forbid(unsafe_code)]

mod compare;
mod content;
mod export;
mod layers;
mod myers;
mod nofollow;
mod patch;
mod plan;
mod sha1;

use std::path::PathBuf;

pub use compare::diff;
pub use export::{ExportOptions, Exported, export};
pub use patch::{write_patch, write_patch_under};

/// One side of a comparison: the sandbox's file system as a set of layered mount points.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// The mount points, in any order; each `at` may appear once.
    pub mounts: Vec<Layered>,
}

impl Tree {
    /// A tree of the given mount points.
    pub fn new(mounts: Vec<Layered>) -> Self {
        Self { mounts }
    }

    /// A tree with one plain directory mounted at `at`, such as a workspace on its own.
    pub fn plain(at: impl Into<String>, dir: impl Into<PathBuf>) -> Self {
        Self { mounts: vec![Layered::new(at, vec![dir.into()])] }
    }
}

/// A mount point: `at` is an absolute sandbox path ("/", "/usr", "/workspace"); `layers` are listed top
/// first. Only the top layer of a mount with more than one layer can hold whiteouts and opaque markers.
/// Deeper mount points shadow shallower ones: a mount at "/usr" hides the `usr` of the mount at "/".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layered {
    /// Absolute, normalized sandbox path of the mount point.
    pub at: String,
    /// Host directories, top (the writable upper) first.
    pub layers: Vec<PathBuf>,
}

impl Layered {
    /// A mount point at `at` made of `layers`, top first.
    pub fn new(at: impl Into<String>, layers: Vec<PathBuf>) -> Self {
        Self { at: at.into(), layers }
    }
}

/// How a path differs between the two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Present only in the new tree.
    Added,
    /// Present in both, with a different type, permission bits, link target or content.
    Modified,
    /// Present only in the old tree.
    Deleted,
}

impl Kind {
    /// A lowercase word for output: `added`, `modified` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Modified => "modified",
            Kind::Deleted => "deleted",
        }
    }
}

/// The type of a file system entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Other,
}

impl FileType {
    /// A lowercase word for output: `file`, `dir`, `symlink` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::File => "file",
            FileType::Dir => "dir",
            FileType::Symlink => "symlink",
            FileType::Other => "other",
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Absolute sandbox path.
    pub path: String,
    /// Added, modified or deleted.
    pub kind: Kind,
    /// The entry in the old tree (`None` when added).
    pub old: Option<Meta>,
    /// The entry in the new tree (`None` when deleted).
    pub new: Option<Meta>,
}

/// What is compared of an entry: owners and timestamps are not part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The entry's type.
    pub file_type: FileType,
    /// Permission bits, including setuid, setgid and sticky (`mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes of a file, length of a link's target; 0 for directories and special files.
    pub size: u64,
    /// The target of a symbolic link, exactly as stored.
    pub symlink_target: Option<String>,
}

/// What to compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Only report this sandbox path and what is beneath it, e.g. "/workspace". Outside it, only the
    /// directories leading to it are listed.
    pub include: Option<String>,
}

/// Why a diff, patch or export failed.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// A tree or option names a sandbox path that is not absolute and normalized.
    #[error("{what} {path:?} is not an absolute sandbox path without \".\", \"..\", empty or trailing components")]
    BadSandboxPath {
        /// What the path was given as ("mount point", "include path", "prefix").
        what: &'static str,
        /// The path as given.
        path: String,
    },
    /// A tree lists a mount point twice or a mount point without layers.
    #[error("the mount point {at} {problem}")]
    BadMount {
        /// The mount point.
        at: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A layer directory could not be opened.
    #[error("cannot open the layer directory {}: {source}", path.display())]
    OpenLayer {
        /// The host directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An entry of a tree could not be read.
    #[error("cannot read {path} in the {side} tree: {source}")]
    Read {
        /// Which tree: "old" or "new".
        side: &'static str,
        /// The sandbox path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A name or link target is not UTF-8, which a change list, a patch and a commit cannot carry faithfully.
    #[error("{path} in the {side} tree has a name or link target that is not valid UTF-8")]
    NotUtf8 {
        /// Which tree: "old" or "new".
        side: &'static str,
        /// The sandbox path, with invalid bytes replaced.
        path: String,
    },
    /// A path no longer matches what the change list says, because the tree changed after the diff.
    #[error("{path} in the {side} tree changed after it was compared; compare again")]
    Changed {
        /// Which tree: "old" or "new".
        side: &'static str,
        /// The sandbox path.
        path: String,
    },
    /// Writing the patch failed.
    #[error("cannot write the patch: {0}")]
    Write(#[source] std::io::Error),
    /// The export's repository path is not the top of a git repository.
    #[error("{} is not a git repository (give the top directory of a work tree, or a bare repository)", path.display())]
    NotARepo {
        /// The path given.
        path: PathBuf,
    },
    /// The branch name is not one git accepts.
    #[error("{branch:?} is not a valid git branch name")]
    BadBranch {
        /// The name given.
        branch: String,
    },
    /// The branch already exists; export only ever creates branches.
    #[error("the branch {branch} already exists in {}; choose another name or delete it first", repo.display())]
    BranchExists {
        /// The branch name.
        branch: String,
        /// The repository.
        repo: PathBuf,
    },
    /// The base does not name a commit.
    #[error("{base:?} does not name a commit in {}", repo.display())]
    BadBase {
        /// The base given.
        base: String,
        /// The repository.
        repo: PathBuf,
    },
    /// The author's name or email is empty or holds characters git cannot store.
    #[error("the author {field} {value:?} must be non-empty and hold no '<', '>' or newline")]
    BadAuthor {
        /// "name" or "email".
        field: &'static str,
        /// The value given.
        value: String,
    },
    /// The git program could not be started.
    #[error("cannot run git (is it installed and on PATH?): {0}")]
    GitMissing(#[source] std::io::Error),
    /// A git command failed.
    #[error("git {step} failed: {message}")]
    Git {
        /// What was being done.
        step: &'static str,
        /// What git said.
        message: String,
    },
    /// A temporary file for the export could not be made.
    #[error("cannot create a temporary index for the export: {0}")]
    TempDir(#[source] std::io::Error),
}

/// Checks that `path` is absolute and normalized: "/" or "/a/b" with no empty, "." or ".." component.
pub(crate) fn check_sandbox_path(what: &'static str, path: &str) -> Result<(), DiffError> {
    let bad = || DiffError::BadSandboxPath { what, path: path.to_owned() };
    if path == "/" {
        return Ok(());
    }
    let Some(rest) = path.strip_prefix('/') else { return Err(bad()) };
    if rest.split('/').any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0')) {
        return Err(bad());
    }
    Ok(())
}

/// `dir` joined with the single component `name`.
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") }
}

/// Whether `path` is `dir` or beneath it.
pub(crate) fn is_within(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths_must_be_normalized() {
        for good in ["/", "/workspace", "/a/b.c/d"] {
            assert!(check_sandbox_path("x", good).is_ok(), "{good}");
        }
        for bad in ["", "workspace", "/a/", "//a", "/a/./b", "/a/../b", "/.."] {
            assert!(check_sandbox_path("x", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn within_respects_component_boundaries() {
        assert!(is_within("/workspace/x", "/workspace"));
        assert!(is_within("/workspace", "/workspace"));
        assert!(!is_within("/workspace2", "/workspace"));
        assert!(is_within("/etc", "/"));
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
