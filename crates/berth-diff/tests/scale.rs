//! A tree of 20,000 files with a handful of changes: the diff must find exactly those. The timings are
//! printed (`cargo test --release -p berth-diff --test scale -- --nocapture`) but not asserted: speed is for
//! benchmarks, and a bound loose enough for a busy machine would catch nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use berth_diff::{Options, diff};
use common::{Layer, overlay, plain, summary};

const DIRS: usize = 200;
const PER_DIR: usize = 100;

fn populate(layer: &Layer) {
    for d in 0..DIRS {
        let dir = layer.path.join(format!("pkg{d:03}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..PER_DIR {
            std::fs::write(
                dir.join(format!("mod{f:03}.rs")),
                format!("// module {d}/{f}\npub fn f() -> u32 {{ {f} }}\n"),
            )
            .unwrap();
        }
    }
}

fn change_a_few(layer: &Layer) {
    layer
        .file("pkg007/mod042.rs", "// module 7/42\npub fn f() -> u32 { 43 }\n")
        .file("pkg150/mod000.rs", "// module 150/0\npub fn f() -> u32 { 1 }\n")
        .remove("pkg199/mod099.rs")
        .file("pkg100/new.rs", "pub fn g() {}\n")
        .mode("pkg001/mod001.rs", 0o755);
}

const EXPECTED: [&str; 5] = [
    "M /w/pkg001/mod001.rs",
    "M /w/pkg007/mod042.rs",
    "A /w/pkg100/new.rs",
    "M /w/pkg150/mod000.rs",
    "D /w/pkg199/mod099.rs",
];

fn timed(what: &str, f: impl Fn() -> Vec<berth_diff::Change>) {
    f(); // warm the caches once
    let runs = if cfg!(debug_assertions) { 1 } else { 3 };
    let start = Instant::now();
    for _ in 0..runs {
        assert_eq!(summary(&f()), EXPECTED, "{what}");
    }
    let each = start.elapsed() / runs;
    println!("{what}: {:.1} ms per diff of {} files", each.as_secs_f64() * 1000.0, DIRS * PER_DIR);
}

#[test]
fn twenty_thousand_files_with_few_changes() {
    // In memory when the system offers it: creating and removing 60,000 files on a slow disk would take far
    // longer than the diffs being measured.
    let shm = std::path::Path::new("/dev/shm");
    let tmp = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
    let base = Layer::new(tmp.path(), "base");
    populate(&base);

    // A workspace against a full copy of itself (new inodes, same times): every file's contents are read.
    let copy = base.copy(tmp.path(), "copy");
    change_a_few(&copy);
    timed("plain copy, contents compared", || {
        diff(&plain("/w", &base), &plain("/w", &copy), &Options::default()).unwrap()
    });

    // A snapshot that shares inodes with the live tree (as a hard-linked or reflinked snapshot does):
    // unchanged files are recognized without reading them.
    let linked = tmp.path().join("linked");
    let status = std::process::Command::new("cp").arg("-al").arg(&base.path).arg(&linked).status().unwrap();
    assert!(status.success());
    let linked = Layer { path: linked };
    for rel in ["pkg007/mod042.rs", "pkg150/mod000.rs", "pkg001/mod001.rs"] {
        let bytes = std::fs::read(linked.path.join(rel)).unwrap();
        std::fs::remove_file(linked.path.join(rel)).unwrap();
        std::fs::write(linked.path.join(rel), bytes).unwrap();
    }
    change_a_few(&linked);
    timed("snapshot sharing inodes", || diff(&plain("/w", &base), &plain("/w", &linked), &Options::default()).unwrap());

    // An overlay: the 20,000 files in the image's lower layer, the changes in the upper.
    let (before, after) = (Layer::new(tmp.path(), "before"), Layer::new(tmp.path(), "after"));
    after
        .file("pkg007/mod042.rs", "// module 7/42\npub fn f() -> u32 { 43 }\n")
        .file("pkg150/mod000.rs", "// module 150/0\npub fn f() -> u32 { 1 }\n")
        .whiteout("pkg199/mod099.rs")
        .file("pkg100/new.rs", "pub fn g() {}\n")
        .bytes("pkg001/mod001.rs", &std::fs::read(base.path.join("pkg001/mod001.rs")).unwrap())
        .mode("pkg001/mod001.rs", 0o755);
    timed("overlay over a 20,000-file lower", || {
        diff(&overlay("/w", &[&before, &base]), &overlay("/w", &[&after, &base]), &Options::default()).unwrap()
    });
}
