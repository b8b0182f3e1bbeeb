//! Patches are checked by applying them: `git apply` and `patch -p1` on a copy of the old tree must give
//! the new tree, which `diff` then finds identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use berth_diff::{DiffError, Options, Tree, diff, write_patch, write_patch_under};
use common::{Layer, overlay, plain, run, summary};

fn patch_of(old: &Tree, new: &Tree) -> String {
    let changes = diff(old, new, &Options::default()).unwrap();
    let mut out = Vec::new();
    write_patch(old, new, &changes, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// An old tree and a new one with every kind of change git can carry; `swaps` adds a directory replaced by
/// a file and the reverse, which GNU patch cannot apply.
fn scenario(tmp: &std::path::Path, swaps: bool) -> (Layer, Layer) {
    let lines: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    let old = Layer::new(tmp, "old");
    old.file("README.md", "# Project\n\nSome words.\n")
        .file("src/main.rs", &lines)
        .file("src/lib.rs", "pub fn gone() {}\n")
        .file("bin/run.sh", "#!/bin/sh\necho run\n")
        .file("bin/app", "#!/bin/sh\necho old\n")
        .mode("bin/app", 0o755)
        .file("docs/with space.md", "spaced\n")
        .file("noeol.txt", "a\nb")
        .file("empty.txt", "")
        .file("café.txt", "crème\n")
        .link("link", "README.md")
        .link("link-gone", "README.md")
        .file("was-file", "I was a file\n")
        .file("was-dir/a.txt", "a\n")
        .file("was-dir/b/c.txt", "c\n")
        .file("file-to-link", "plain\n")
        .link("link-to-file", "README.md");
    let new = old.copy(tmp, "new");
    let edited: String =
        (1..=40).map(|i| if i == 3 || i == 30 { format!("LINE {i}\n") } else { format!("line {i}\n") }).collect();
    new.file("README.md", "# Project\n\nSome more words.\n")
        .file("src/main.rs", &format!("{edited}line 41\n"))
        .remove("src/lib.rs")
        .mode("bin/run.sh", 0o755)
        .file("bin/app", "#!/bin/sh\necho new\n")
        .file("docs/with space.md", "spaced out\n")
        .file("noeol.txt", "a\nb\nc")
        .remove("empty.txt")
        .file("new-empty", "")
        .file("café.txt", "brûlée\n")
        .link("link", "src/main.rs")
        .remove("link-gone")
        .link("link-new", "bin/app")
        .remove("file-to-link")
        .link("file-to-link", "README.md")
        .remove("link-to-file")
        .file("link-to-file", "now plain\n")
        .file("added/nested/file.txt", "fresh\n");
    if swaps {
        new.remove("was-file")
            .file("was-file/inner.txt", "now a directory\n")
            .remove("was-dir")
            .file("was-dir", "now a file\n");
    }
    (old, new)
}

/// Applies `patch` to a copy of `old` with `program` and checks the result equals `new`.
fn applies(tmp: &std::path::Path, old: &Layer, new: &Layer, patch: &str, program: &str, name: &str) {
    let target = old.copy(tmp, name);
    std::fs::write(tmp.join(format!("{name}.patch")), patch).unwrap();
    let file = format!("../{name}.patch");
    match program {
        "git" => run(&target.path, "git", &["apply", "-p1", &file], None),
        _ => run(&target.path, "patch", &["-p1", "--batch", "--quiet", "-i", &file], None),
    };
    let left = diff(&plain("/", &target), &plain("/", new), &Options::default()).unwrap();
    assert!(left.is_empty(), "{program} left differences: {:?}\n{patch}", summary(&left));
}

#[test]
fn patches_apply_with_git_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let (old, new) = scenario(tmp.path(), true);
    let patch = patch_of(&plain("/", &old), &plain("/", &new));
    assert!(patch.contains("diff --git a/bin/run.sh b/bin/run.sh\nold mode 100644\nnew mode 100755\n"), "{patch}");
    assert!(patch.contains("diff --git a/link b/link\nindex 42061c01a1c70097d1e4579f29a5adf40abdec95..f61f2815f4f1356418c703b7cff9cda871d67990 120000\n--- a/link\n+++ b/link\n@@ -1 +1 @@\n-README.md\n\\ No newline at end of file\n+src/main.rs\n\\ No newline at end of file\n"), "{patch}");
    assert!(patch.contains("diff --git a/new-empty b/new-empty\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\ndiff"), "{patch}");
    assert!(patch.contains("--- a/docs/with space.md\t\n"), "{patch}");
    // Removals come first, so the file was-file is gone before was-file/inner.txt is created.
    let removal = patch.find("diff --git a/was-file b/was-file\ndeleted file mode").unwrap();
    let creation = patch.find("diff --git a/was-file/inner.txt").unwrap();
    assert!(removal < creation);
    applies(tmp.path(), &old, &new, &patch, "git", "by-git");
}

#[test]
fn patches_apply_with_patch_p1() {
    let tmp = tempfile::tempdir().unwrap();
    let (old, new) = scenario(tmp.path(), false);
    let patch = patch_of(&plain("/", &old), &plain("/", &new));
    applies(tmp.path(), &old, &new, &patch, "patch", "by-patch");
}

#[test]
fn overlay_patches_apply_to_the_lower_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = Layer::new(tmp.path(), "lower");
    lower.file("etc/hosts", "127.0.0.1 localhost\n").file("etc/motd", "hello\n").file("opt/a/b", "b\n");
    let empty = Layer::new(tmp.path(), "empty");
    let upper = Layer::new(tmp.path(), "upper");
    upper
        .whiteout("etc/motd")
        .file("etc/hosts", "127.0.0.1 localhost\n10.0.0.1 db\n")
        .opaque("opt/a")
        .file("opt/a/c", "c\n");
    let (old, new) = (overlay("/", &[&empty, &lower]), overlay("/", &[&upper, &lower]));
    let patch = patch_of(&old, &new);
    let expected = lower.copy(tmp.path(), "expected");
    expected
        .remove("etc/motd")
        .file("etc/hosts", "127.0.0.1 localhost\n10.0.0.1 db\n")
        .remove("opt/a/b")
        .file("opt/a/c", "c\n");
    applies(tmp.path(), &lower, &expected, &patch, "git", "overlay");
}

#[test]
fn paths_are_relative_to_the_root_or_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    let new = Layer::new(tmp.path(), "new");
    new.file("src/x.rs", "fn x() {}\n");
    let (o, n) = (plain("/workspace", &old), plain("/workspace", &new));
    let changes = diff(&o, &n, &Options::default()).unwrap();
    let mut rooted = Vec::new();
    write_patch(&o, &n, &changes, &mut rooted).unwrap();
    let rooted = String::from_utf8(rooted).unwrap();
    assert!(rooted.starts_with("diff --git a/workspace/src/x.rs b/workspace/src/x.rs\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..dc615e9d0b74a23c06b9141cc55a91da49b7beda\n--- /dev/null\n+++ b/workspace/src/x.rs\n@@ -0,0 +1 @@\n+fn x() {}\n"), "{rooted}");
    let mut under = Vec::new();
    write_patch_under(&o, &n, &changes, "/workspace", &mut under).unwrap();
    let under = String::from_utf8(under).unwrap();
    assert_eq!(under, rooted.replace("/workspace/", "/"));
    let mut elsewhere = Vec::new();
    write_patch_under(&o, &n, &changes, "/srv", &mut elsewhere).unwrap();
    assert!(elsewhere.is_empty());
}

#[test]
fn binary_files_are_named_not_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    old.bytes("blob.bin", b"\x00\x01\x02").bytes("latin1.txt", b"caf\xe9\n");
    let new = old.copy(tmp.path(), "new");
    new.bytes("blob.bin", b"\x00\x01\x03").bytes("latin1.txt", b"caf\xe9s\n").bytes("added.bin", b"\x7fELF\x00");
    let big = "x".repeat(8 * 1024 * 1024 + 1);
    new.file("huge.txt", &big);
    let patch = patch_of(&plain("/", &old), &plain("/", &new));
    let zero = "0".repeat(40);
    assert_eq!(
        patch,
        format!(
            "diff --git a/added.bin b/added.bin\nnew file mode 100644\nindex {zero}..c4684259327857de1b8c643c2b78c282da991fb4\n\
             Binary files /dev/null and b/added.bin differ\n\
             diff --git a/blob.bin b/blob.bin\n\
             index 8352675d67aed6625ece79af41c27fdb4ee2e867..1592e5c60f1a460928916dc5681fee1a9bd10868 100644\n\
             Binary files a/blob.bin and b/blob.bin differ\n\
             diff --git a/huge.txt b/huge.txt\nnew file mode 100644\nindex {zero}..12f9a8baba8e938168eec61f7d1de631b417f6d9\n\
             Binary files /dev/null and b/huge.txt differ\n\
             diff --git a/latin1.txt b/latin1.txt\n\
             index 6f83395d973c448cdb70a7b21f7fc8018797acf6..0a7fcfe56b3bba62dd1d4356b8f9cffb533384e6 100644\n\
             Binary files a/latin1.txt and b/latin1.txt differ\n"
        )
    );
}

#[test]
fn hostile_links_appear_as_their_target_text() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "TOP SECRET\n").unwrap();
    let old = Layer::new(tmp.path(), "old");
    old.file("config", "ok\n").file("dir/file", "inside\n");
    let new = old.copy(tmp.path(), "new");
    new.remove("config").link("config", secret.to_str().unwrap()).link("shadow", "/etc/shadow");
    let patch = patch_of(&plain("/", &old), &plain("/", &new));
    assert!(!patch.contains("TOP SECRET"), "{patch}");
    let link_id = run(tmp.path(), "git", &["hash-object", "--stdin"], Some(secret.to_str().unwrap().as_bytes()));
    let link_id = link_id.trim();
    assert!(patch.contains(&format!("new file mode 120000\nindex {}..{}\n--- /dev/null\n+++ b/config\n@@ -0,0 +1 @@\n+{}\n\\ No newline at end of file\n", "0".repeat(40), link_id, secret.display())), "{patch}");
    assert!(patch.contains("+/etc/shadow\n\\ No newline at end of file\n"), "{patch}");

    // A tree that changes between the diff and the patch is refused rather than read through a link.
    let changes = diff(&plain("/", &old), &plain("/", &new), &Options::default()).unwrap();
    new.remove("dir").link("dir", tmp.path().to_str().unwrap());
    new.file("secret", "x");
    let changes: Vec<_> = changes
        .into_iter()
        .chain([berth_diff::Change {
            path: "/dir/file".to_owned(),
            kind: berth_diff::Kind::Modified,
            old: Some(berth_diff::Meta {
                file_type: berth_diff::FileType::File,
                mode: 0o644,
                size: 7,
                symlink_target: None,
            }),
            new: Some(berth_diff::Meta {
                file_type: berth_diff::FileType::File,
                mode: 0o644,
                size: 11,
                symlink_target: None,
            }),
        }])
        .collect();
    let err = write_patch(&plain("/", &old), &plain("/", &new), &changes, &mut Vec::new()).unwrap_err();
    assert!(matches!(err, DiffError::Changed { .. }), "{err}");
}
