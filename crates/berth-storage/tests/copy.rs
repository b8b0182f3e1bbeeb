//! Pools on file systems without subvolumes: copies on tmpfs, reflink copies where blocks can be shared.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::PathBuf;

use berth_storage::{Mode, Pool, StorageError};
use common::*;

#[test]
fn a_tmpfs_data_root_gets_a_copy_pool() {
    require_root();
    let tmp = Tmpfs::new();
    let p = Pool::open(tmp.dir.path()).unwrap();
    assert_eq!(p.mode(), Mode::Copy);
    let info = p.info().unwrap();
    assert_eq!((info.mode, info.quotas, info.loop_file.clone()), (Mode::Copy, false, None));
    assert_eq!(info.size_bytes, 64 * MIB);

    let vol = p.path().join("sandboxes/a");
    p.create(&vol).unwrap();
    populate(&vol);
    // An image pool mounted over the directory pool would hide its volumes.
    let err = Pool::init(tmp.dir.path(), GIB).unwrap_err();
    assert!(matches!(err, StorageError::PoolNotEmpty { .. }), "{err}");
    p.clone_volume(&vol, &p.path().join("snapshots/a/1"), true).unwrap();
    assert_same_tree(&vol, &p.path().join("snapshots/a/1"));
    // No hidden copies are left behind.
    assert_eq!(fs::read_dir(p.path().join("snapshots/a")).unwrap().count(), 1);

    let forks: Vec<PathBuf> = (0..3).map(|i| p.path().join(format!("sandboxes/f{i}"))).collect();
    p.clone_many(&vol, &forks).unwrap();
    fs::write(forks[0].join("upper/a"), b"changed").unwrap();
    assert_eq!(fs::read(vol.join("upper/a")).unwrap().len(), 100_000);
    assert_same_tree(&vol, &forks[1]);

    // Usage is a walk: the 3 MiB file and the 100 kB one (hard-linked, counted once) and some metadata.
    let used = p.usage(&vol).unwrap();
    assert!((3 * MIB + 100_000..4 * MIB).contains(&used), "usage {used}");

    let err = p.set_quota(&vol, Some(MIB)).unwrap_err();
    assert!(matches!(err, StorageError::QuotaUnsupported { .. }), "{err}");
    assert!(err.to_string().contains("berth storage init"), "{err}");

    for v in forks.iter().chain([&vol, &p.path().join("snapshots/a/1")]) {
        p.remove(v).unwrap();
        assert!(fs::symlink_metadata(v).is_err());
    }
    assert!(fs::metadata("/etc/shadow").is_ok());
    assert!(matches!(p.clone_volume(&vol, &forks[0], false).unwrap_err(), StorageError::NotFound { .. }));
}

#[test]
fn a_plain_directory_on_btrfs_can_be_a_reflink_or_copy_pool() {
    require_root();
    let t = TestPool::new(GIB);
    let root = t.at("volumes/root");
    t.pool.create(&root).unwrap();
    let p = Pool::open_as(&root, Mode::Reflink).unwrap();
    assert_eq!(p.mode(), Mode::Reflink);
    let vol = p.path().join("sandboxes/r");
    p.create(&vol).unwrap();
    populate(&vol);
    t.pool.sync().unwrap();
    let before = t.pool.info().unwrap().free_bytes;
    p.clone_volume(&vol, &p.path().join("sandboxes/r2"), false).unwrap();
    assert_same_tree(&vol, &p.path().join("sandboxes/r2"));
    t.pool.sync().unwrap();
    // Data blocks are shared: the 3 MiB file did not take 3 MiB again.
    let after = t.pool.info().unwrap().free_bytes;
    assert!(before.saturating_sub(after) < 2 * MIB, "free space went from {before} to {after}");
    p.remove(&p.path().join("sandboxes/r2")).unwrap();

    let copy = Pool::open_as(&root, Mode::Copy).unwrap();
    assert_eq!(copy.mode(), Mode::Copy);
    let tmp = Tmpfs::new();
    let err = Pool::open_as(tmp.dir.path(), Mode::Btrfs).unwrap_err();
    assert!(matches!(err, StorageError::Unsupported { .. }), "{err}");
}
