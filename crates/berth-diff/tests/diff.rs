//! Change lists of real layer directories: plain workspaces, overlay uppers with whiteouts and opaque
//! directories, several mount points, and trees written to mislead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use berth_diff::{DiffError, FileType, Kind, Layered, Options, Tree, diff};
use common::{Layer, overlay, plain, summary};

fn all() -> Options {
    Options::default()
}

#[test]
fn workspace_adds_modifications_and_deletions() {
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    old.file("same.txt", "unchanged\n")
        .file("edit.txt", "hello\n")
        .file("grow.txt", "a\n")
        .file("gone.txt", "bye\n")
        .file("chmod.sh", "#!/bin/sh\n")
        .file("tree/a/one", "1")
        .file("tree/two", "2")
        .link("ln", "same.txt")
        .link("ln-same", "edit.txt");
    let new = old.copy(tmp.path(), "new");
    new.file("edit.txt", "HELLO\n")
        .file("grow.txt", "a\nb\n")
        .remove("gone.txt")
        .mode("chmod.sh", 0o755)
        .remove("tree")
        .file("added/deep/file", "x")
        .dir("empty")
        .link("ln", "edit.txt");

    let changes = diff(&plain("/workspace", &old), &plain("/workspace", &new), &all()).unwrap();
    assert_eq!(
        summary(&changes),
        [
            "A /workspace/added",
            "A /workspace/added/deep",
            "A /workspace/added/deep/file",
            "M /workspace/chmod.sh",
            "M /workspace/edit.txt",
            "A /workspace/empty",
            "D /workspace/gone.txt",
            "M /workspace/grow.txt",
            "M /workspace/ln",
            "D /workspace/tree",
            "D /workspace/tree/a",
            "D /workspace/tree/a/one",
            "D /workspace/tree/two",
        ]
    );
    let chmod = changes.iter().find(|c| c.path.ends_with("chmod.sh")).unwrap();
    assert_eq!((chmod.old.as_ref().unwrap().mode, chmod.new.as_ref().unwrap().mode), (0o644, 0o755));
    assert_eq!(chmod.old.as_ref().unwrap().size, chmod.new.as_ref().unwrap().size);
    let ln = changes.iter().find(|c| c.path.ends_with("/ln")).unwrap();
    assert_eq!(ln.old.as_ref().unwrap().symlink_target.as_deref(), Some("same.txt"));
    assert_eq!(ln.new.as_ref().unwrap().symlink_target.as_deref(), Some("edit.txt"));
    assert_eq!(ln.new.as_ref().unwrap().file_type, FileType::Symlink);
    let empty = changes.iter().find(|c| c.path.ends_with("empty")).unwrap();
    assert_eq!((empty.kind, empty.new.as_ref().unwrap().file_type), (Kind::Added, FileType::Dir));

    // A tree against itself, and against an identical copy, has no changes.
    assert!(diff(&plain("/workspace", &old), &plain("/workspace", &old), &all()).unwrap().is_empty());
    let twin = old.copy(tmp.path(), "twin");
    assert!(diff(&plain("/workspace", &old), &plain("/workspace", &twin), &all()).unwrap().is_empty());
}

#[test]
fn same_size_edits_and_special_files_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    old.bytes("big.bin", &big).file("abc", "abc");
    let new = old.copy(tmp.path(), "new");
    let mut changed = big.clone();
    changed[250_000] ^= 1;
    // In a plain directory (a single layer) a 0:0 device is an ordinary special file, not a whiteout.
    new.bytes("big.bin", &changed).file("abc", "abd").fifo("pipe").whiteout("wh");
    let changes = diff(&plain("/", &old), &plain("/", &new), &all()).unwrap();
    assert_eq!(summary(&changes), ["M /abc", "M /big.bin", "A /pipe", "A /wh"]);
    assert_eq!(changes[2].new.as_ref().unwrap().file_type, FileType::Other);
    assert_eq!(changes[3].new.as_ref().unwrap().file_type, FileType::Other);
}

/// An image's lower layer with an upper per side, as the sandbox's root overlay has.
fn image(tmp: &std::path::Path) -> Layer {
    let lower = Layer::new(tmp, "lower");
    lower
        .file("etc/hosts", "127.0.0.1 localhost\n")
        .file("etc/passwd", "root:x:0:0\n")
        .file("etc/group", "root:x:0:\n")
        .file("etc/ssl/certs/a.pem", "A")
        .file("etc/ssl/certs/b.pem", "B")
        .file("opt/keep/x", "x")
        .file("opt/keep/y", "y")
        .file("var/data", "file")
        .file("var/dir/inner", "inner")
        .file("bin/sh", "ELF");
    lower
}

#[test]
fn whiteouts_delete_and_uppers_shadow() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let before = Layer::new(tmp.path(), "before");
    let after = Layer::new(tmp.path(), "after");
    after
        .whiteout("etc/hosts")
        .xattr_whiteout("etc/passwd")
        .whiteout("etc/ssl")
        .file("etc/group", "root:x:0:\nstaff:x:50:\n")
        .file("etc/new.conf", "new\n")
        .whiteout("not/in/lower");
    let changes = diff(&overlay("/", &[&before, &lower]), &overlay("/", &[&after, &lower]), &all()).unwrap();
    assert_eq!(
        summary(&changes),
        [
            "M /etc/group",
            "D /etc/hosts",
            "A /etc/new.conf",
            "D /etc/passwd",
            "D /etc/ssl",
            "D /etc/ssl/certs",
            "D /etc/ssl/certs/a.pem",
            "D /etc/ssl/certs/b.pem",
            "A /not",
            "A /not/in",
        ]
    );
    // The reverse comparison undoes it all.
    let back = diff(&overlay("/", &[&after, &lower]), &overlay("/", &[&before, &lower]), &all()).unwrap();
    let undone: Vec<String> = summary(&back);
    assert_eq!(undone.len(), changes.len());
    assert!(undone.contains(&"A /etc/hosts".to_owned()) && undone.contains(&"D /not".to_owned()), "{undone:?}");
}

#[test]
fn opaque_directories_hide_lower_entries_unless_recreated() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let before = Layer::new(tmp.path(), "before");
    let after = Layer::new(tmp.path(), "after");
    after.opaque("opt/keep").file("opt/keep/x", "x").file("opt/keep/z", "z");
    let changes = diff(&overlay("/", &[&before, &lower]), &overlay("/", &[&after, &lower]), &all()).unwrap();
    assert_eq!(summary(&changes), ["D /opt/keep/y", "A /opt/keep/z"]);

    // The trusted form counts too, and an opaque directory in the old upper shows the lower again when gone.
    let marked = Layer::new(tmp.path(), "marked");
    marked.dir("opt/keep");
    let p = marked.path.join("opt/keep");
    rustix::fs::lsetxattr(&p, "trusted.overlay.opaque", b"y", rustix::fs::XattrFlags::empty()).unwrap();
    let changes = diff(&overlay("/", &[&marked, &lower]), &overlay("/", &[&before, &lower]), &all()).unwrap();
    assert_eq!(summary(&changes), ["A /opt/keep/x", "A /opt/keep/y"]);
}

#[test]
fn a_file_replaced_by_a_directory_and_the_reverse() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let before = Layer::new(tmp.path(), "before");
    let after = Layer::new(tmp.path(), "after");
    // overlayfs puts a file over a lower directory as is, and a directory over a lower file as opaque.
    after.file("var/dir", "now a file\n").opaque("var/data").file("var/data/child", "c");
    let changes = diff(&overlay("/", &[&before, &lower]), &overlay("/", &[&after, &lower]), &all()).unwrap();
    assert_eq!(summary(&changes), ["M /var/data", "A /var/data/child", "M /var/dir", "D /var/dir/inner"]);
    let types = |i: usize| (changes[i].old.as_ref().unwrap().file_type, changes[i].new.as_ref().unwrap().file_type);
    assert_eq!(types(0), (FileType::File, FileType::Dir));
    assert_eq!(types(2), (FileType::Dir, FileType::File));
}

#[test]
fn include_limits_what_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let before = Layer::new(tmp.path(), "before");
    let after = Layer::new(tmp.path(), "after");
    after.file("etc/new.conf", "x").file("opt/keep/x", "changed").file("opt/keeper", "k");
    let (o, n) = (overlay("/", &[&before, &lower]), overlay("/", &[&after, &lower]));
    let only = |inc: &str| summary(&diff(&o, &n, &Options { include: Some(inc.to_owned()) }).unwrap());
    assert_eq!(only("/opt/keep"), ["M /opt/keep/x"]);
    assert_eq!(only("/opt"), ["M /opt/keep/x", "A /opt/keeper"]);
    assert_eq!(only("/etc/new.conf"), ["A /etc/new.conf"]);
    assert!(only("/nowhere").is_empty());
    assert_eq!(only("/").len(), 3);
    let bad = diff(&o, &n, &Options { include: Some("opt/".to_owned()) }).unwrap_err();
    assert!(matches!(bad, DiffError::BadSandboxPath { .. }), "{bad}");
}

#[test]
fn deeper_mount_points_shadow_shallower_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let usr_lower = Layer::new(tmp.path(), "usr-lower");
    usr_lower.file("bin/python3", "py").file("lib/libc.so", "c");
    let (root_a, root_b) = (Layer::new(tmp.path(), "root-a"), Layer::new(tmp.path(), "root-b"));
    let (usr_a, usr_b) = (Layer::new(tmp.path(), "usr-a"), Layer::new(tmp.path(), "usr-b"));
    let (ws_a, ws_b) = (Layer::new(tmp.path(), "ws-a"), Layer::new(tmp.path(), "ws-b"));
    // What the root upper holds under /usr and /workspace is hidden by the mounts there.
    root_b.file("usr/hidden", "h").file("workspace/hidden", "h").file("etc/motd", "hi\n");
    usr_b.file("bin/app", "t").whiteout("lib/libc.so");
    ws_a.file("project/README", "old\n");
    ws_b.file("project/README", "new\n");
    let tree = |root: &Layer, usr: &Layer, ws: &Layer| {
        Tree::new(vec![
            Layered::new("/workspace", vec![ws.path.clone()]),
            Layered::new("/", vec![root.path.clone(), lower.path.clone()]),
            Layered::new("/usr", vec![usr.path.clone(), usr_lower.path.clone()]),
        ])
    };
    let changes = diff(&tree(&root_a, &usr_a, &ws_a), &tree(&root_b, &usr_b, &ws_b), &all()).unwrap();
    assert_eq!(
        summary(&changes),
        ["A /etc/motd", "A /usr/bin/app", "D /usr/lib/libc.so", "M /workspace/project/README"]
    );

    // A mount point present on one side only: everything under it is added.
    let without = Tree::new(vec![Layered::new("/", vec![root_a.path.clone(), lower.path.clone()])]);
    let with = Tree::new(vec![
        Layered::new("/", vec![root_a.path.clone(), lower.path.clone()]),
        Layered::new("/srv/data", vec![ws_b.path.clone()]),
    ]);
    let changes = diff(&without, &with, &all()).unwrap();
    assert_eq!(summary(&changes), ["A /srv", "A /srv/data", "A /srv/data/project", "A /srv/data/project/README"]);
}

#[test]
fn different_lower_layers_are_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = image(tmp.path());
    let rebuilt = lower.copy(tmp.path(), "rebuilt");
    rebuilt.file("bin/sh", "ELF2").file("bin/bash", "ELF").remove("opt/keep/y");
    let upper = Layer::new(tmp.path(), "upper");
    upper.file("etc/motd", "same in both\n");
    let upper2 = upper.copy(tmp.path(), "upper2");
    let changes = diff(&overlay("/", &[&upper, &lower]), &overlay("/", &[&upper2, &rebuilt]), &all()).unwrap();
    assert_eq!(summary(&changes), ["A /bin/bash", "M /bin/sh", "D /opt/keep/y"]);
}

#[test]
fn hostile_links_are_reported_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "TOP SECRET\n").unwrap();
    std::fs::create_dir(tmp.path().join("outside")).unwrap();
    std::fs::write(tmp.path().join("outside/loot"), "TOP SECRET\n").unwrap();
    let lower = image(tmp.path());
    let before = Layer::new(tmp.path(), "before");
    let after = Layer::new(tmp.path(), "after");
    after
        .link("etc/passwd", "/etc/shadow")
        .link("etc/hosts", secret.to_str().unwrap())
        // A directory of the lower replaced by a link to a directory outside the tree.
        .link("opt/keep", tmp.path().join("outside").to_str().unwrap());
    let changes = diff(&overlay("/", &[&before, &lower]), &overlay("/", &[&after, &lower]), &all()).unwrap();
    assert_eq!(summary(&changes), ["M /etc/hosts", "M /etc/passwd", "M /opt/keep", "D /opt/keep/x", "D /opt/keep/y"]);
    let passwd = &changes[1].new.as_ref().unwrap();
    assert_eq!((passwd.file_type, passwd.symlink_target.as_deref()), (FileType::Symlink, Some("/etc/shadow")));

    // A whole upper layer whose directories are links: nothing beneath them is listed.
    let trap = Layer::new(tmp.path(), "trap");
    trap.link("etc", "/etc").link("workspace", tmp.path().join("outside").to_str().unwrap());
    let changes = diff(&plain("/", &before), &plain("/", &trap), &all()).unwrap();
    assert_eq!(summary(&changes), ["A /etc", "A /workspace"]);
}

#[test]
fn names_that_are_not_utf8_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    let new = Layer::new(tmp.path(), "new");
    std::fs::write(new.path.join(std::ffi::OsStr::from_bytes(b"bad\xff")), "x").unwrap();
    let err = diff(&plain("/", &old), &plain("/", &new), &all()).unwrap_err();
    assert!(matches!(err, DiffError::NotUtf8 { .. }), "{err}");
}

#[test]
fn bad_trees_are_refused_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let layer = Layer::new(tmp.path(), "l");
    let ok = plain("/", &layer);
    let missing = Tree::plain("/", tmp.path().join("missing"));
    let err = diff(&ok, &missing, &all()).unwrap_err();
    assert!(matches!(err, DiffError::OpenLayer { .. }) && err.to_string().contains("missing"), "{err}");
    let relative = Tree::plain("usr", &layer.path);
    assert!(matches!(diff(&ok, &relative, &all()), Err(DiffError::BadSandboxPath { .. })));
    let twice =
        Tree::new(vec![Layered::new("/", vec![layer.path.clone()]), Layered::new("/", vec![layer.path.clone()])]);
    assert!(matches!(diff(&ok, &twice, &all()), Err(DiffError::BadMount { .. })));
    let empty = Tree::new(vec![Layered::new("/", vec![])]);
    assert!(matches!(diff(&ok, &empty, &all()), Err(DiffError::BadMount { .. })));
}

#[test]
fn very_deep_trees_are_walked() {
    use rustix::fs::{Mode, OFlags};
    let tmp = tempfile::tempdir().unwrap();
    let old = Layer::new(tmp.path(), "old");
    let new = Layer::new(tmp.path(), "new");
    // 3000 levels: longer than PATH_MAX, and deeper than a recursive walk would like.
    let mut fd = rustix::fs::open(&new.path, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    for _ in 0..3000 {
        rustix::fs::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, "d", OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
    }
    let file = rustix::fs::openat(&fd, "leaf", OFlags::CREATE | OFlags::WRONLY, Mode::from_bits_truncate(0o644));
    drop(file.unwrap());
    let changes = diff(&plain("/", &old), &plain("/", &new), &all()).unwrap();
    assert_eq!(changes.len(), 3001);
    assert!(changes.last().unwrap().path.ends_with("/d/leaf"));
}
