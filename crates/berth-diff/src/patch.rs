//! Git-style patches of a change list.
//!
//! The output is what `git diff --full-index` prints: `git apply` and `patch -p1` accept it. Files are
//! removed before anything is created, so a directory can replace a file and the reverse (`git apply`
//! handles that; GNU patch cannot turn a directory into a file or a file into a directory at all). Binary
//! files (more than 8 MiB, not UTF-8, or holding a NUL) get a `Binary files … differ` line, which documents
//! the change but cannot be applied; [`crate::export`] carries them.

use std::io::{Read, Write};

use crate::layers::Side;
use crate::myers::{self, Line};
use crate::plan::{self, Blob, Content, Item, TEXT_LIMIT};
use crate::sha1::{Sha1, blob_id};
use crate::{Change, DiffError, Tree};

/// Lines of context around each hunk, as git and diff default to.
const CONTEXT: usize = 3;

/// Writes a patch of `changes` (from [`crate::diff`] of the same trees) with paths relative to the sandbox
/// root: `a/workspace/src/main.rs`. It applies with `git apply` or `patch -p1` in a copy of the old root.
pub fn write_patch(old: &Tree, new: &Tree, changes: &[Change], out: &mut dyn Write) -> Result<(), DiffError> {
    write_patch_under(old, new, changes, "/", out)
}

/// Writes a patch of the changes under the sandbox directory `root`, with paths relative to it: with
/// `root` "/workspace", `/workspace/src/main.rs` is `a/src/main.rs`. This is the diff that
/// [`crate::export`] commits with the same prefix.
pub fn write_patch_under(
    old: &Tree,
    new: &Tree,
    changes: &[Change],
    root: &str,
    out: &mut dyn Write,
) -> Result<(), DiffError> {
    let items = plan::plan(changes, root)?;
    if items.is_empty() {
        return Ok(());
    }
    let (o, n) = (Side::open(old, "old")?, Side::open(new, "new")?);
    let mut buf = Vec::new();
    for item in &items {
        buf.clear();
        file_patch(&o, &n, item, &mut buf)?;
        out.write_all(&buf).map_err(DiffError::Write)?;
    }
    out.flush().map_err(DiffError::Write)
}

/// An entry's contents for a patch, with its git blob id.
struct Loaded {
    id: String,
    /// The text, or `None` for a binary file (too large, not UTF-8, or holding a NUL).
    text: Option<Vec<u8>>,
}

fn load(side: &Side, path: &str, blob: Blob) -> Result<Loaded, DiffError> {
    let changed = || DiffError::Changed { side: side.name, path: path.to_owned() };
    let read_err = |source| DiffError::Read { side: side.name, path: path.to_owned(), source };
    match plan::open(side, path, blob)? {
        Content::Link(target) => Ok(Loaded { id: blob_id(&target), text: Some(target) }),
        Content::File(mut file, size) if size <= TEXT_LIMIT => {
            let mut bytes = Vec::new();
            (&mut file).take(TEXT_LIMIT + 1).read_to_end(&mut bytes).map_err(read_err)?;
            if bytes.len() as u64 != size {
                return Err(changed());
            }
            let text = !bytes.contains(&0) && std::str::from_utf8(&bytes).is_ok();
            Ok(Loaded { id: blob_id(&bytes), text: text.then_some(bytes) })
        }
        Content::File(mut file, size) => {
            let mut hash = Sha1::blob(size);
            let mut chunk = vec![0; 64 * 1024];
            let mut seen = 0u64;
            loop {
                let n = match file.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(read_err(e)),
                };
                hash.update(&chunk[..n]);
                seen += n as u64;
            }
            if seen != size {
                return Err(changed());
            }
            Ok(Loaded { id: hash.hex(), text: None })
        }
    }
}

/// Quotes a patch path the way git does when it holds a quote, a backslash or a control character.
fn quote(prefix: &str, rel: &str) -> String {
    let name = format!("{prefix}{rel}");
    if !name.bytes().any(|c| c < 0x20 || c == 0x7f || c == b'"' || c == b'\\') {
        return name;
    }
    let mut q = String::from("\"");
    for c in name.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => q.push_str(&format!("\\{:03o}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A `---` or `+++` name: git ends a name holding a space with a tab so `patch` reads all of it.
fn marker_name(name: &str) -> String {
    if name.contains(' ') && !name.starts_with('"') { format!("{name}\t") } else { name.to_owned() }
}

fn file_patch(o: &Side, n: &Side, item: &Item<'_>, buf: &mut Vec<u8>) -> Result<(), DiffError> {
    let (a, b) = (quote("a/", &item.rel), quote("b/", &item.rel));
    let old = item.old.map(|blob| load(o, item.path, blob)).transpose()?;
    let new = item.new.map(|blob| load(n, item.path, blob)).transpose()?;
    let same_content = matches!((&old, &new), (Some(x), Some(y)) if x.id == y.id);
    let mut head = format!("diff --git {a} {b}\n");
    match (item.old, item.new) {
        (None, Some(y)) => head.push_str(&format!("new file mode {}\n", y.mode())),
        (Some(x), None) => head.push_str(&format!("deleted file mode {}\n", x.mode())),
        (Some(x), Some(y)) if x != y => head.push_str(&format!("old mode {}\nnew mode {}\n", x.mode(), y.mode())),
        (Some(_), Some(_)) if same_content => return Ok(()),
        _ => {}
    }
    if !same_content {
        let id = |l: &Option<Loaded>| l.as_ref().map_or_else(|| "0".repeat(40), |l| l.id.clone());
        head.push_str(&format!("index {}..{}", id(&old), id(&new)));
        match (item.old, item.new) {
            (Some(x), Some(y)) if x == y => head.push_str(&format!(" {}\n", x.mode())),
            _ => head.push('\n'),
        }
    }
    buf.extend_from_slice(head.as_bytes());
    if same_content {
        return Ok(());
    }
    let (from, to) = (
        if old.is_some() { a } else { "/dev/null".to_owned() },
        if new.is_some() { b } else { "/dev/null".to_owned() },
    );
    let (old_text, new_text) = match (text(&old), text(&new)) {
        (Some(None), _) | (_, Some(None)) => {
            buf.extend_from_slice(format!("Binary files {from} and {to} differ\n").as_bytes());
            return Ok(());
        }
        (x, y) => (x.flatten().unwrap_or_default(), y.flatten().unwrap_or_default()),
    };
    if old_text.is_empty() && new_text.is_empty() {
        return Ok(());
    }
    buf.extend_from_slice(format!("--- {}\n+++ {}\n", marker_name(&from), marker_name(&to)).as_bytes());
    hunks(old_text, new_text, buf);
    Ok(())
}

/// A side's text: `None` when absent, `Some(None)` when binary.
fn text(loaded: &Option<Loaded>) -> Option<Option<&[u8]>> {
    loaded.as_ref().map(|l| l.text.as_deref())
}

/// Writes unified hunks turning `old` into `new`.
fn hunks(old: &[u8], new: &[u8], buf: &mut Vec<u8>) {
    let la: Vec<&[u8]> = old.split_inclusive(|&c| c == b'\n').collect();
    let lb: Vec<&[u8]> = new.split_inclusive(|&c| c == b'\n').collect();
    let (ia, ib) = myers::intern(&la, &lb);
    let script = myers::script(&ia, &ib);
    let changed: Vec<usize> = (0..script.len()).filter(|&i| !matches!(script[i], Line::Same(_))).collect();
    // Old and new line numbers (0-based) before each script position.
    let mut before = Vec::with_capacity(script.len() + 1);
    let (mut oi, mut ni) = (0, 0);
    for line in &script {
        before.push((oi, ni));
        match line {
            Line::Same(_) => (oi, ni) = (oi + 1, ni + 1),
            Line::Del(_) => oi += 1,
            Line::Ins(_) => ni += 1,
        }
    }
    let mut i = 0;
    while i < changed.len() {
        let mut j = i;
        while j + 1 < changed.len() && changed[j + 1] - changed[j] <= 2 * CONTEXT + 1 {
            j += 1;
        }
        let start = changed[i].saturating_sub(CONTEXT);
        let end = (changed[j] + CONTEXT + 1).min(script.len());
        let hunk = &script[start..end];
        let olen = hunk.iter().filter(|l| !matches!(l, Line::Ins(_))).count();
        let nlen = hunk.iter().filter(|l| !matches!(l, Line::Del(_))).count();
        let (o0, n0) = before[start];
        let range = |first: usize, len: usize| match len {
            0 => format!("{first},0"),
            1 => format!("{}", first + 1),
            _ => format!("{},{len}", first + 1),
        };
        buf.extend_from_slice(format!("@@ -{} +{} @@\n", range(o0, olen), range(n0, nlen)).as_bytes());
        for line in hunk {
            let (mark, text) = match *line {
                Line::Same(k) => (b' ', la[k]),
                Line::Del(k) => (b'-', la[k]),
                Line::Ins(k) => (b'+', lb[k]),
            };
            buf.push(mark);
            buf.extend_from_slice(text);
            if !text.ends_with(b"\n") {
                buf.extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        }
        i = j + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unified(old: &str, new: &str) -> String {
        let mut buf = Vec::new();
        hunks(old.as_bytes(), new.as_bytes(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    #[test]
    fn hunks_match_diff_u() {
        assert_eq!(unified("a\nb\nc\n", "a\nB\nc\n"), "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        assert_eq!(unified("", "x\n"), "@@ -0,0 +1 @@\n+x\n");
        assert_eq!(unified("x\n", ""), "@@ -1 +0,0 @@\n-x\n");
        assert_eq!(unified("x", "x\n"), "@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n");
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=20)
            .map(|i| match i {
                2 => "two\n".to_owned(),
                19 => "nineteen\n".to_owned(),
                i => format!("{i}\n"),
            })
            .collect();
        let got = unified(&old, &new);
        assert!(got.starts_with("@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n"), "{got}");
        assert!(got.contains("@@ -16,5 +16,5 @@\n 16\n 17\n 18\n-19\n+nineteen\n 20\n"), "{got}");
    }

    #[test]
    fn names_are_quoted_like_git() {
        assert_eq!(quote("a/", "src/main.rs"), "a/src/main.rs");
        assert_eq!(quote("b/", "new\nline"), "\"b/new\\nline\"");
        assert_eq!(quote("a/", "q\"b\\"), "\"a/q\\\"b\\\\\"");
        assert_eq!(marker_name("a/with space"), "a/with space\t");
    }
}
