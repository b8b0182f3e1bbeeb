//! Timings of the hot path on a btrfs pool: `cargo test -p berth-storage --release --test bench -- --ignored
//! --nocapture`.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Instant, SystemTime};

use common::*;

const FILES: usize = 20_000;
const PER_DIR: usize = 100;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

#[test]
#[ignore = "writes 1 GiB; run by hand for timings"]
fn clone_timings() {
    require_root();
    let t = TestPool::new(4 * GIB);
    let src = t.at("sandboxes/src");
    t.pool.create(&src).unwrap();
    let started = SystemTime::now();
    let size = (GIB as usize) / FILES;
    let mut data = vec![0u8; size];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    for i in 0..FILES {
        let dir = src.join(format!("d{}", i / PER_DIR));
        if i % PER_DIR == 0 {
            fs::create_dir(&dir).unwrap();
        }
        data[0] = i as u8;
        fs::write(dir.join(format!("f{i}")), &data).unwrap();
    }
    t.pool.sync().unwrap();
    println!("filled {FILES} files / {} MiB in {:.0} ms", GIB / MIB, elapsed_ms(started));

    for quotas in [true, false] {
        if !quotas {
            let out = Command::new("btrfs").args(["quota", "disable"]).arg(t.pool.path()).output().unwrap();
            assert!(out.status.success());
            assert!(!t.pool.info().unwrap().quotas);
        }
        let label = if quotas { "quotas on" } else { "quotas off" };
        let mut n = 0;
        let mut next = || {
            n += 1;
            t.at(&format!("snapshots/{}-{n}", if quotas { "q" } else { "n" }))
        };
        for (what, ro) in [("writable clone", false), ("read-only clone", true)] {
            let mut times = Vec::new();
            for _ in 0..7 {
                let dst = next();
                let s = Instant::now();
                t.pool.clone_volume(&src, &dst, ro).unwrap();
                times.push(ms(s));
            }
            println!("{label}: {what} of 20k files / 1 GiB: median {:.1} ms, all {times:.1?}", median(times.clone()));
        }
        // A source with fresh, unflushed writes (a running sandbox being forked).
        let mut times = Vec::new();
        for i in 0..5 {
            fs::write(src.join(format!("dirty-{quotas}-{i}")), vec![1u8; 8 << 20]).unwrap();
            let dst = next();
            let s = Instant::now();
            t.pool.clone_volume(&src, &dst, false).unwrap();
            times.push(ms(s));
        }
        println!("{label}: clone with 8 MiB unflushed in the source: median {:.1} ms", median(times));

        for round in 0..3 {
            let dsts: Vec<PathBuf> = (0..10).map(|_| next()).collect();
            let s = Instant::now();
            t.pool.clone_many(&src, &dsts).unwrap();
            let parallel = ms(s);
            let dsts: Vec<PathBuf> = (0..10).map(|_| next()).collect();
            let s = Instant::now();
            for d in &dsts {
                t.pool.clone_volume(&src, d, false).unwrap();
            }
            let serial = ms(s);
            // Each in a directory of its own: the snapshot ioctl holds the lock of the destination's parent
            // directory until its commit is done, which serializes snapshots into one directory.
            let dsts: Vec<PathBuf> = (0..10).map(|_| next().join("state")).collect();
            let s = Instant::now();
            t.pool.clone_many(&src, &dsts).unwrap();
            let apart = ms(s);
            let dsts: Vec<PathBuf> = (0..10).map(|_| next().join("state")).collect();
            let s = Instant::now();
            for d in &dsts {
                t.pool.clone_volume(&src, d, false).unwrap();
            }
            let apart_serial = ms(s);
            println!(
                "{label}: 10 forks, round {round}: same parent: clone_many {parallel:.1} ms, one by one {serial:.1} ms; \
                 parents of their own: clone_many {apart:.1} ms, one by one {apart_serial:.1} ms"
            );
        }

        let mut creates = Vec::new();
        for i in 0..7 {
            let s = Instant::now();
            t.pool.create(&t.at(&format!("volumes/{label}-{i}"))).unwrap();
            creates.push(ms(s));
        }
        println!("{label}: create empty volume: median {:.2} ms", median(creates));

        let mut removes = Vec::new();
        let all: Vec<PathBuf> = fs::read_dir(t.at("snapshots")).unwrap().map(|e| e.unwrap().path()).collect();
        for d in &all {
            let s = Instant::now();
            t.pool.remove(d).unwrap();
            removes.push(ms(s));
        }
        println!("{label}: remove a clone: median {:.2} ms over {}", median(removes), all.len());
    }
}
