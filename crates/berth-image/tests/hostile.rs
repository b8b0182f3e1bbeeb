//! Hostile archives: none may write outside the destination, and each trick is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;

use berth_image::{ImportError, Options, Report, import};
use common::*;
use tar::EntryType;

fn run(s: &Scratch, layer: Vec<u8>) -> Report {
    let source = s.write("layer.tar", &layer);
    let report = import(&source, &s.dest, &Options { id_shift: SHIFT, ..Options::default() }).unwrap();
    s.assert_untouched();
    report
}

fn rejected(report: &Report, path: &str, reason: &str) -> bool {
    report.rejected.iter().any(|r| r.path == path && r.reason.contains(reason))
}

#[test]
fn dot_dot_entries_are_rejected() {
    let s = Scratch::new();
    let report = run(&s, Tar::new().file("../x", "x").file("a/../../y", "y").file("ok", "ok").bytes());
    assert_eq!(tree(&s.dest), ["ok"]);
    assert!(rejected(&report, "../x", "escapes the image (..)"), "{:?}", report.rejected);
    assert!(rejected(&report, "a/../../y", "escapes the image (..)"));
    assert!(!s.outside.join("p/x").exists());
}

#[test]
fn absolute_paths_are_made_relative_and_reported() {
    let s = Scratch::new();
    let report = run(&s, Tar::new().file("/abs", "x").file("./rel", "y").dir("/").bytes());
    assert_eq!(tree(&s.dest), ["abs", "rel"]);
    assert!(rejected(&report, "/abs", "absolute path; written as abs"));
    assert_eq!(report.rejected.len(), 1, "./ prefixes and / itself are normal: {:?}", report.rejected);
}

#[test]
fn writes_through_a_planted_symlink_are_rejected() {
    let s = Scratch::new();
    let outside = s.outside.display().to_string();
    let layer = Tar::new()
        .symlink("evil", &outside)
        .file("evil/file", "pwned")
        .symlink("up", "../../")
        .file("up/file2", "pwned")
        .dir("d/")
        .symlink("d/link", &outside)
        .dir("d/link/tmp/")
        .file("d/link/tmp/x", "pwned")
        .hardlink("evil/hard", "d/link")
        .file("evil/.wh.anything", "")
        .bytes();
    let report = run(&s, layer);
    assert_eq!(
        tree(&s.dest),
        ["d/".to_string(), format!("d/link -> {outside}"), format!("evil -> {outside}"), "up -> ../../".into()]
    );
    for path in ["evil/file", "up/file2", "d/link/tmp/", "d/link/tmp/x", "evil/hard"] {
        assert!(rejected(&report, path, "symlink"), "{path}: {:?}", report.rejected);
    }
}

#[test]
fn symlink_replaced_by_a_directory_is_not_followed() {
    // A later entry names the symlink itself as a directory: the symlink is replaced, never followed.
    let s = Scratch::new();
    let layer = Tar::new().symlink("evil", &s.outside.display().to_string()).dir("evil/").file("evil/f", "ok").bytes();
    run(&s, layer);
    assert_eq!(tree(&s.dest), ["evil/", "evil/f"]);
}

#[test]
fn hard_links_must_stay_inside() {
    let s = Scratch::new();
    let layer = Tar::new()
        .hardlink("passwd", "../../etc/passwd")
        .hardlink("passwd2", "/etc/passwd")
        .dir("etc/")
        .file("etc/shadow", "inside")
        .hardlink("shadow", "/etc/shadow")
        .hardlink("dir", "etc")
        .symlink("sl", "/etc/passwd")
        .hardlink("sl2", "sl")
        .bytes();
    let report = run(&s, layer);
    assert_eq!(tree(&s.dest), ["etc/", "etc/shadow", "shadow", "sl -> /etc/passwd", "sl2 -> /etc/passwd"]);
    assert!(rejected(&report, "passwd", "hard link to outside"), "{:?}", report.rejected);
    assert!(rejected(&report, "passwd2", "not in the image"));
    assert!(rejected(&report, "dir", "hard link to a directory"));
    assert_eq!(meta(&s.dest.join("shadow")).ino(), meta(&s.dest.join("etc/shadow")).ino());
}

#[test]
fn device_nodes_are_skipped_and_fifos_created() {
    let s = Scratch::new();
    let layer = Tar::new()
        .raw(b"dev/null", EntryType::Char, b"", b"", 0o666, 0)
        .raw(b"dev/sda", EntryType::Block, b"", b"", 0o660, 0)
        .raw(b"run/fifo", EntryType::Fifo, b"", b"", 0o620, 0)
        .bytes();
    let report = run(&s, layer);
    assert_eq!(tree(&s.dest), ["run/", "run/fifo|"], "refused entries do not even create their parents");
    assert!(rejected(&report, "dev/null", "device node"));
    assert!(rejected(&report, "dev/sda", "device node"));
    assert_eq!(mode(&s.dest.join("run/fifo")), 0o620);
    assert_eq!(mode(&s.dest.join("run")), 0o755, "implicit directories are 0755");
    assert_eq!(meta(&s.dest.join("run")).uid(), SHIFT, "and owned by the image's root");
}

#[test]
fn setuid_and_setgid_bits_are_stripped() {
    let s = Scratch::new();
    let layer = Tar::new()
        .raw(b"bin/su", EntryType::Regular, b"", b"elf", 0o4755, 0)
        .raw(b"bin/wall", EntryType::Regular, b"", b"elf", 0o2755, 0)
        .raw(b"bin/both", EntryType::Regular, b"", b"elf", 0o6755, 0)
        .raw(b"var/mail/", EntryType::Directory, b"", b"", 0o2775, 8)
        .raw(b"tmp/", EntryType::Directory, b"", b"", 0o1777, 0)
        .bytes();
    let report = run(&s, layer);
    assert_eq!(mode(&s.dest.join("bin/su")), 0o755);
    assert_eq!(mode(&s.dest.join("bin/wall")), 0o755);
    assert_eq!(mode(&s.dest.join("bin/both")), 0o755);
    assert_eq!(mode(&s.dest.join("var/mail")), 0o2775, "setgid directories only pass on their group");
    assert_eq!(mode(&s.dest.join("tmp")), 0o1777);
    assert!(rejected(&report, "bin/su", "setuid bit removed"));
    assert!(rejected(&report, "bin/wall", "setgid bit removed"));
    assert!(rejected(&report, "bin/both", "setuid and setgid bits removed"));
    assert_eq!(report.rejected.len(), 3, "{:?}", report.rejected);
}

#[test]
fn only_user_xattrs_are_kept() {
    let s = Scratch::new();
    let cap = b"\x01\x00\x00\x02\x00\x20\x00\x00\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    let layer = Tar::new()
        .pax(&[("SCHILY.xattr.security.capability", cap), ("SCHILY.xattr.user.note", b"hi\nthere")])
        .file("bin/ping", "elf")
        .bytes();
    let report = run(&s, layer);
    let path = s.dest.join("bin/ping");
    let mut buf = [0u8; 64];
    assert!(rustix::fs::getxattr(&path, "security.capability", &mut buf[..]).is_err());
    let n = rustix::fs::getxattr(&path, "user.note", &mut buf[..]).unwrap();
    assert_eq!(&buf[..n], b"hi\nthere");
    assert!(rejected(&report, "bin/ping", "xattr security.capability dropped"), "{:?}", report.rejected);
}

#[test]
fn huge_ids_become_nobody() {
    let s = Scratch::new();
    let layer = Tar::new()
        .raw(b"f", EntryType::Regular, b"", b"x", 0o644, 1_000_000)
        .raw(b"g", EntryType::Regular, b"", b"x", 0o644, 65535)
        .pax(&[("uid", b"4294967296"), ("gid", b"7")])
        .file("h", "x")
        .bytes();
    let report = run(&s, layer);
    assert_eq!((meta(&s.dest.join("f")).uid(), meta(&s.dest.join("f")).gid()), (SHIFT + 65534, SHIFT + 65534));
    assert_eq!(meta(&s.dest.join("g")).uid(), SHIFT + 65535);
    assert_eq!((meta(&s.dest.join("h")).uid(), meta(&s.dest.join("h")).gid()), (SHIFT + 65534, SHIFT + 7));
    assert!(rejected(&report, "f", "uid 1000000 is outside"));
    assert!(rejected(&report, "f", "gid 1000000 is outside"));
    assert!(rejected(&report, "h", "uid 4294967296 is outside"));
}

#[test]
fn whiteouts_cannot_reach_outside() {
    let s = Scratch::new();
    std::fs::write(s.outside.join("keep"), "x").unwrap();
    let outside = s.outside.display().to_string();
    let layer = Tar::new()
        .symlink("evil", &outside)
        .file("evil/.wh.keep", "")
        .file("evil/.wh..wh..opq", "")
        .file(".wh.evil", "")
        .file("x/../.wh.dest", "")
        .dir("kept/")
        .file("kept/.wh..", "")
        .file("kept/.wh...", "")
        .bytes();
    let source = s.write("layer.tar", &layer);
    let report = import(&source, &s.dest, &Options::default()).unwrap();
    assert!(s.outside.join("keep").exists());
    // Whiteouts never hide what their own layer wrote, so the symlink stays.
    assert_eq!(tree(&s.dest), [format!("evil -> {outside}"), "kept/".into()]);
    assert!(rejected(&report, "evil/.wh.keep", "symlink"), "{:?}", report.rejected);
    assert!(rejected(&report, "evil/.wh..wh..opq", "symlink"));
    assert!(rejected(&report, "x/../.wh.dest", "escapes"));
    assert!(rejected(&report, "kept/.wh..", "names no entry"));
}

#[test]
fn file_and_byte_limits() {
    let s = Scratch::new();
    let mut t = Tar::new();
    for i in 0..10 {
        t.file(&format!("f{i}"), "0123456789");
    }
    let source = s.write("layer.tar", &t.bytes());
    let few = Options { max_files: 5, ..Options::default() };
    assert!(matches!(import(&source, &s.dest, &few), Err(ImportError::TooManyFiles { limit: 5 })));

    let s = Scratch::new();
    let source = s.write("layer.tar", &t.bytes());
    let small = Options { max_bytes: 95, ..Options::default() };
    let err = import(&source, &s.dest, &small).unwrap_err();
    assert!(matches!(err, ImportError::TooManyBytes { limit: 95 }), "{err}");
    assert!(err.to_string().contains("more than 95 bytes"));

    // Directories created implicitly count too: one entry cannot create thousands of them.
    let s = Scratch::new();
    let deep = format!("{}f", "d/".repeat(50));
    let source = s.write("layer.tar", &Tar::new().pax(&[("path", deep.as_bytes())]).file("x", "").bytes());
    let few = Options { max_files: 20, ..Options::default() };
    assert!(matches!(import(&source, &s.dest, &few), Err(ImportError::TooManyFiles { .. })));
}

#[test]
fn oversized_extended_headers_are_refused_not_buffered() {
    let s = Scratch::new();
    let mut t = Tar::new();
    let huge = vec![b'a'; 2 << 20];
    t.raw(b"././@LongLink", EntryType::GNULongName, b"", &huge, 0o644, 0).file("x", "x");
    let source = s.write("layer.tar", &t.bytes());
    let err = import(&source, &s.dest, &Options::default()).unwrap_err();
    assert!(matches!(err, ImportError::Corrupt { .. } | ImportError::UnknownFormat { .. }), "{err}");
}

#[test]
fn gzip_bomb_stops_at_the_byte_limit() {
    // 16 MiB of zeros as one file compresses to ~16 KiB; the declared size alone stops it.
    let s = Scratch::new();
    let zeros = vec![0u8; 16 << 20];
    let layer = gzip(&Tar::new().raw(b"zeros", EntryType::Regular, b"", &zeros, 0o644, 0).bytes());
    let source = s.write("bomb.tar.gz", &layer);
    let o = Options { max_bytes: 1 << 20, ..Options::default() };
    assert!(matches!(import(&source, &s.dest, &o), Err(ImportError::TooManyBytes { .. })));
    assert!(tree(&s.dest).is_empty());
}

#[test]
fn whiteouts_in_a_later_layer_do_not_follow_a_lower_layers_symlink() {
    let s = Scratch::new();
    std::fs::write(s.outside.join("keep"), "x").unwrap();
    let layout = s.tmp.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    let outside = s.outside.display().to_string();
    let one = Tar::new().symlink("evil", &outside).symlink("evil2", &outside).dir("d/").file("d/f", "1").bytes();
    let two = Tar::new()
        .file("evil/.wh.keep", "")
        .file("evil/.wh..wh..opq", "")
        .file(".wh.evil2", "")
        .symlink("d2", &outside)
        .file("d/.wh..wh..opq", "")
        .bytes();
    let m = manifest(&layout, "amd64", &[plain_layer(one), gz_layer(two)]);
    finish_layout(&layout, vec![m]);
    let report = import(&layout, &s.dest, &Options::default()).unwrap();
    assert!(s.outside.join("keep").exists());
    assert_eq!(tree(&s.dest), ["d/".to_string(), format!("d2 -> {outside}"), format!("evil -> {outside}")]);
    assert!(rejected(&report, "evil/.wh.keep", "symlink"), "{:?}", report.rejected);
    assert!(rejected(&report, "evil/.wh..wh..opq", "symlink"));
}
