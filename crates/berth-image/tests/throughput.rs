//! Import speed on a 200 MB layer. Ignored by default; run with
//! `cargo test --release -p berth-image --test throughput -- --ignored --nocapture`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Instant;

use berth_image::{Options, import};
use common::*;

const WORDS: [&str; 16] = [
    "fn", "let", "mut", "self", "return", "match", "Some(x)", "None", "=>", "{", "}", "value", "i += 1;", "\n", "if",
    "else",
];

#[test]
#[ignore]
fn import_a_200_mb_layer() {
    // 12,000 files of 20 KiB and 4 of 2.5 MiB, of words that compress about 3:1 like source code does.
    let mut t = Tar::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut chunk = |len: usize| -> String {
        (0..len / 6)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                WORDS[(seed % WORDS.len() as u64) as usize]
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    for d in 0..120 {
        t.dir(&format!("usr/share/d{d}/"));
        for f in 0..100 {
            t.file(&format!("usr/share/d{d}/f{f}"), &chunk(20 << 10));
        }
    }
    for f in 0..4 {
        t.file(&format!("usr/lib/big{f}"), &chunk(2_500_000));
    }
    let plain = t.bytes();
    let gz = gzip(&plain);
    let zst = zstd(&plain);
    // Scratch areas are kept until the end: deleting 12,000 files just before the next run makes the
    // file system's inode allocation, not the import, the thing being measured.
    let mut kept = Vec::new();
    for (name, data) in [("layer.tar", &plain), ("layer.tar.gz", &gz), ("layer.tar.zst", &zst)] {
        let s = Scratch::new();
        let source = s.write(name, data);
        let start = Instant::now();
        let report = import(&source, &s.dest, &Options::default()).unwrap();
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{name}: {} stored bytes, {} files, {} bytes written in {secs:.2}s = {:.0} MB/s of file data",
            data.len(),
            report.files,
            report.bytes,
            report.bytes as f64 / secs / 1e6
        );
        // The same archive through GNU tar, as a yardstick for what the file system allows.
        let reference = s.tmp.path().join("reference");
        std::fs::create_dir(&reference).unwrap();
        let start = Instant::now();
        let status = std::process::Command::new("tar")
            .args(["-xf", &source.display().to_string(), "-C", &reference.display().to_string()])
            .status();
        if status.is_ok_and(|s| s.success()) {
            println!("{name}: tar -xf took {:.2}s", start.elapsed().as_secs_f64());
        }
        kept.push(s);
    }
}
