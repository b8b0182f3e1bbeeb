//! What a list of changes amounts to for git, under one sandbox directory.
//!
//! The patch writer and the export both work from this plan, so a patch printed with a prefix and a branch
//! exported with the same prefix always hold the same files.

use std::fs::File;

use crate::layers::Side;
use crate::{Change, DiffError, FileType, Meta, check_sandbox_path, is_within};

/// Contents of at most this size that are valid UTF-8 without NUL are text in a patch.
pub(crate) const TEXT_LIMIT: u64 = 8 << 20;

/// How git stores an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blob {
    /// A regular file; git keeps only the owner's execute bit.
    File { exec: bool },
    /// A symbolic link, stored as its target text.
    Link,
}

impl Blob {
    fn of(meta: Option<&Meta>) -> Option<Blob> {
        let meta = meta?;
        match meta.file_type {
            FileType::File => Some(Blob::File { exec: meta.mode & 0o100 != 0 }),
            FileType::Symlink => Some(Blob::Link),
            FileType::Dir | FileType::Other => None,
        }
    }

    /// The git mode, as it appears in patches and trees.
    pub(crate) fn mode(self) -> &'static str {
        match self {
            Blob::File { exec: false } => "100644",
            Blob::File { exec: true } => "100755",
            Blob::Link => "120000",
        }
    }
}

/// One path git sees change.
#[derive(Debug, Clone)]
pub(crate) struct Item<'c> {
    /// Absolute sandbox path.
    pub(crate) path: &'c str,
    /// Path relative to the plan's root: the path in the patch and in the repository.
    pub(crate) rel: String,
    /// What git held before (`None`: the path is created).
    pub(crate) old: Option<Blob>,
    /// What git holds after (`None`: the path is removed).
    pub(crate) new: Option<Blob>,
}

/// `path` relative to `root`, unless it is outside it, is `root` itself, or has a `.git` component (which
/// git refuses to track).
fn relative(path: &str, root: &str) -> Option<String> {
    let rel = if root == "/" { path.strip_prefix('/')? } else { path.strip_prefix(root)?.strip_prefix('/')? };
    if rel.is_empty() || rel.split('/').any(|c| c.eq_ignore_ascii_case(".git")) {
        return None;
    }
    Some(rel.to_owned())
}

/// The items for `changes` under `root`, in the order they must be applied: first every removal (including
/// the old half of a file that became a link or the reverse), then every creation and modification, each
/// sorted by path. Removing first lets a file replace a directory and a directory replace a file.
pub(crate) fn plan<'c>(changes: &'c [Change], root: &str) -> Result<Vec<Item<'c>>, DiffError> {
    check_sandbox_path("prefix", root)?;
    let mut removals = Vec::new();
    let mut writes = Vec::new();
    for change in changes {
        if !is_within(&change.path, root) {
            continue;
        }
        let Some(rel) = relative(&change.path, root) else { continue };
        let (old, new) = (Blob::of(change.old.as_ref()), Blob::of(change.new.as_ref()));
        let path = change.path.as_str();
        match (old, new) {
            (None, None) => {}
            (Some(o), Some(n)) if matches!(o, Blob::File { .. }) != matches!(n, Blob::File { .. }) => {
                removals.push(Item { path, rel: rel.clone(), old, new: None });
                writes.push(Item { path, rel, old: None, new });
            }
            (Some(_), None) => removals.push(Item { path, rel, old, new }),
            _ => writes.push(Item { path, rel, old, new }),
        }
    }
    removals.sort_by(|a, b| a.rel.cmp(&b.rel));
    writes.sort_by(|a, b| a.rel.cmp(&b.rel));
    removals.extend(writes);
    Ok(removals)
}

/// An entry's contents as git stores them, read without following links.
pub(crate) enum Content {
    /// A link's target.
    Link(Vec<u8>),
    /// A regular file, open for reading, and its size.
    File(File, u64),
}

/// Opens the entry at `path` in `side`, which must still be of the kind the change list says.
pub(crate) fn open(side: &Side, path: &str, blob: Blob) -> Result<Content, DiffError> {
    let changed = || DiffError::Changed { side: side.name, path: path.to_owned() };
    let found = side.locate(path)?.ok_or_else(changed)?;
    match (blob, found.entry.info.file_type) {
        (Blob::Link, FileType::Symlink) => Ok(Content::Link(found.view.link_target(&found.name, &found.entry)?)),
        (Blob::File { .. }, FileType::File) => {
            Ok(Content::File(found.view.open_file(&found.name, &found.entry)?, found.entry.info.size))
        }
        _ => Err(changed()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Kind;

    fn meta(file_type: FileType, mode: u32) -> Option<Meta> {
        Some(Meta { file_type, mode, size: 0, symlink_target: None })
    }

    fn change(path: &str, kind: Kind, old: Option<Meta>, new: Option<Meta>) -> Change {
        Change { path: path.to_owned(), kind, old, new }
    }

    #[test]
    fn removals_come_first_and_paths_are_relative() {
        let changes = vec![
            change("/w/a", Kind::Modified, meta(FileType::File, 0o644), meta(FileType::Dir, 0o755)),
            change("/w/a/x", Kind::Added, None, meta(FileType::File, 0o755)),
            change("/w/b", Kind::Modified, meta(FileType::Symlink, 0o777), meta(FileType::File, 0o644)),
            change("/w/c", Kind::Deleted, meta(FileType::File, 0o644), None),
            change("/w/d", Kind::Added, None, meta(FileType::Dir, 0o755)),
            change("/w/.git/HEAD", Kind::Added, None, meta(FileType::File, 0o644)),
            change("/other", Kind::Added, None, meta(FileType::File, 0o644)),
            change("/w", Kind::Modified, meta(FileType::Dir, 0o755), meta(FileType::Dir, 0o700)),
        ];
        let items = plan(&changes, "/w").unwrap();
        let got: Vec<(&str, Option<Blob>, Option<Blob>)> =
            items.iter().map(|i| (i.rel.as_str(), i.old, i.new)).collect();
        let file = |exec| Some(Blob::File { exec });
        assert_eq!(
            got,
            vec![
                ("a", file(false), None),
                ("b", Some(Blob::Link), None),
                ("c", file(false), None),
                ("a/x", None, file(true)),
                ("b", None, file(false)),
            ]
        );
        let all = plan(&changes, "/").unwrap();
        assert!(all.iter().any(|i| i.rel == "other"));
        assert!(plan(&changes, "w").is_err());
    }
}
