//! Trees deeper than the open-file limit (a sandbox can make them) are still removed. In a test binary of
//! its own, because it lowers the process's open-file limit.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::OwnedFd;

use berth_storage::{Mode, Pool};
use common::*;
use rustix::fs::{Mode as FileMode, OFlags};
use rustix::process::{Resource, getrlimit, setrlimit};

fn dig(top: &std::path::Path, depth: usize) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut cur: OwnedFd = rustix::fs::open(top, flags, FileMode::empty()).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&cur, "d", FileMode::from_raw_mode(0o755)).unwrap();
        rustix::fs::mknodat(&cur, "f", rustix::fs::FileType::RegularFile, FileMode::from_raw_mode(0o644), 0).unwrap();
        cur = rustix::fs::openat(&cur, "d", flags, FileMode::empty()).unwrap();
    }
}

#[test]
fn trees_deeper_than_the_open_file_limit_are_removed() {
    require_root();
    let tmp = Tmpfs::new();
    let p = Pool::open(tmp.dir.path()).unwrap();
    assert_eq!(p.mode(), Mode::Copy);
    let shallow = p.path().join("sandboxes/shallow");
    p.create(&shallow).unwrap();
    dig(&shallow, 100);
    p.remove(&shallow).unwrap();
    assert!(!shallow.exists());

    let old = getrlimit(Resource::Nofile);
    setrlimit(Resource::Nofile, rustix::process::Rlimit { current: Some(128), maximum: old.maximum }).unwrap();
    let deep = p.path().join("sandboxes/deep");
    p.create(&deep).unwrap();
    dig(&deep, 1000);
    let removed = p.remove(&deep);
    setrlimit(Resource::Nofile, old).unwrap();
    removed.unwrap();
    assert!(!deep.exists());
}
