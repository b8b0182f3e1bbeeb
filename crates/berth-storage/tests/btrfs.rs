//! A btrfs pool in a loop-mounted image: volumes, snapshots, forks, quotas, removal, remounting.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;

use berth_storage::{Mode, Pool, StorageError};
use common::*;

#[test]
fn init_makes_a_mounted_btrfs_pool_with_quotas() {
    require_root();
    let t = TestPool::new(GIB);
    let info = t.pool.info().unwrap();
    assert_eq!(info.mode, Mode::Btrfs);
    assert!(info.quotas);
    assert_eq!(info.loop_file, Some(t.root.path().join("pool.img")));
    assert!(info.size_bytes > GIB / 2 && info.size_bytes <= GIB, "{info:?}");
    assert!(info.free_bytes > 0 && info.free_bytes <= info.size_bytes);
    for area in ["sandboxes", "snapshots", "volumes", "images"] {
        let meta = fs::symlink_metadata(t.at(area)).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{area}");
    }
    assert_eq!(fs::metadata(t.pool.path()).unwrap().permissions().mode() & 0o777, 0o700);
    // The image is sparse: it takes far less of the host than its size.
    assert!(fs::metadata(t.root.path().join("pool.img")).unwrap().blocks() * 512 < GIB / 4);

    // A second init refuses; opening again finds the mounted pool.
    let again = Pool::init(t.root.path(), GIB).unwrap_err();
    assert!(matches!(again, StorageError::PoolExists { .. }), "{again}");
    let reopened = Pool::open(t.root.path()).unwrap();
    assert_eq!(reopened.info().unwrap(), info);
}

#[test]
fn create_clone_and_remove_volumes() {
    require_root();
    let t = TestPool::new(GIB);
    let p = &t.pool;
    let vol = t.at("sandboxes/a");
    p.create(&vol).unwrap();
    assert_eq!(fs::metadata(&vol).unwrap().ino(), 256, "a volume is a subvolume");
    assert_eq!(fs::metadata(&vol).unwrap().permissions().mode() & 0o777, 0o700);
    fs::write(vol.join("f"), b"one").unwrap();

    // A read-only snapshot: same content, writes fail with EROFS.
    let snap = t.at("snapshots/a/1");
    p.clone_volume(&vol, &snap, true).unwrap();
    assert_eq!(fs::read(snap.join("f")).unwrap(), b"one");
    let err = fs::write(snap.join("f"), b"two").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(rustix::io::Errno::ROFS.raw_os_error()));
    assert_eq!(
        fs::create_dir(snap.join("d")).unwrap_err().raw_os_error(),
        Some(rustix::io::Errno::ROFS.raw_os_error())
    );

    // A writable clone is independent of its source both ways.
    let fork = t.at("sandboxes/b");
    p.clone_volume(&vol, &fork, false).unwrap();
    fs::write(fork.join("f"), b"fork").unwrap();
    fs::write(vol.join("g"), b"later").unwrap();
    assert_eq!(fs::read(vol.join("f")).unwrap(), b"one");
    assert!(!fork.join("g").exists());

    // Restore: a writable clone of the read-only snapshot.
    let restored = t.at("sandboxes/c");
    p.clone_volume(&snap, &restored, false).unwrap();
    fs::write(restored.join("f"), b"restored").unwrap();

    // Removal: the read-only snapshot too; missing is fine; nothing else goes.
    p.remove(&snap).unwrap();
    assert!(!snap.exists());
    p.remove(&snap).unwrap();
    p.remove(&t.at("sandboxes/never")).unwrap();
    p.remove(&t.at("nothing-here/x")).unwrap_err();
    p.remove(&fork).unwrap();
    assert_eq!(fs::read(vol.join("f")).unwrap(), b"one");
    for v in [&vol, &restored] {
        p.remove(v).unwrap();
    }
    assert_eq!(fs::read_dir(t.at("sandboxes")).unwrap().count(), 0);
}

#[test]
fn clones_keep_owners_modes_xattrs_whiteouts_and_links() {
    require_root();
    let t = TestPool::new(GIB);
    let vol = t.at("sandboxes/meta");
    t.pool.create(&vol).unwrap();
    populate(&vol);
    for (dst, ro) in [("snapshots/meta-ro", true), ("sandboxes/meta-rw", false)] {
        t.pool.clone_volume(&vol, &t.at(dst), ro).unwrap();
        assert_same_tree(&vol, &t.at(dst));
    }
    // The escaping symlink was copied as a link, and removal does not follow it.
    t.pool.remove(&t.at("snapshots/meta-ro")).unwrap();
    assert!(fs::metadata("/etc/shadow").is_ok());
}

#[test]
fn quota_stops_writes_at_the_limit() {
    require_root();
    let t = TestPool::new(GIB);
    let vol = t.at("sandboxes/q");
    t.pool.create(&vol).unwrap();
    t.pool.set_quota(&vol, Some(32 * MIB)).unwrap();
    let (written, err) = fill(&vol.join("big"), 256 * MIB);
    assert!(err.is_some(), "writing past the quota must fail");
    let err = err.unwrap();
    let code = err.raw_os_error();
    assert!(
        code == Some(rustix::io::Errno::DQUOT.raw_os_error()) || code == Some(rustix::io::Errno::NOSPC.raw_os_error()),
        "{err}"
    );
    assert!(written <= 40 * MIB, "wrote {written} bytes past a 32 MiB quota");
    t.pool.sync().unwrap();
    let used = t.pool.usage(&vol).unwrap();
    assert!(used <= 40 * MIB, "usage {used}");
    // The host lost no more than what the pool holds.
    let image = fs::metadata(t.root.path().join("pool.img")).unwrap();
    assert!(image.blocks() * 512 < 300 * MIB, "the image takes {} bytes", image.blocks() * 512);

    // A clone inherits the limit; lifting it lets the clone grow.
    let q2 = t.at("sandboxes/q2");
    t.pool.clone_volume(&vol, &q2, false).unwrap();
    fs::remove_file(q2.join("big")).unwrap();
    let (written, err) = fill(&q2.join("more"), 256 * MIB);
    assert!(err.is_some() && written <= 40 * MIB, "the clone wrote {written} bytes");
    t.pool.set_quota(&q2, None).unwrap();
    let (_, err) = fill(&q2.join("more"), 48 * MIB);
    assert!(err.is_none(), "{err:?}");
    t.pool.set_quota(&vol, None).unwrap();
    fs::remove_file(vol.join("big")).unwrap();
    let (_, err) = fill(&vol.join("big"), 48 * MIB);
    assert!(err.is_none(), "{err:?}");
    t.pool.sync().unwrap();
    let used = t.pool.usage(&vol).unwrap();
    assert!((48 * MIB..56 * MIB).contains(&used), "usage {used}");

    // Removing a volume removes its qgroup (at once, or once the kernel has freed the volume's blocks).
    let ids: Vec<u64> = [&vol, &q2]
        .iter()
        .map(|v| berth_sys::btrfs::subvolume_id(fs::File::open(v).unwrap().as_fd()).unwrap())
        .collect();
    t.pool.remove(&vol).unwrap();
    t.pool.remove(&q2).unwrap();
    // A commit wakes the cleaner, which frees deleted subvolumes; `subvolume sync` waits for it.
    t.pool.sync().unwrap();
    let sync = Command::new("btrfs").args(["subvolume", "sync"]).arg(t.pool.path()).output().unwrap();
    assert!(sync.status.success());
    // What the kernel did not remove itself, pruning does; a live volume's group is kept.
    let live = t.at("sandboxes/live");
    t.pool.create(&live).unwrap();
    t.pool.set_quota(&live, Some(32 * MIB)).unwrap();
    let live_id = berth_sys::btrfs::subvolume_id(fs::File::open(&live).unwrap().as_fd()).unwrap();
    // The kernel refuses to remove a group while it still frees its subvolume's blocks, which a loaded host
    // may take a while to do: pruning (which the daemon repeats every minute) removes it once that is done.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let show = loop {
        t.pool.prune_qgroups().unwrap();
        let show = Command::new("btrfs").args(["qgroup", "show", "--raw"]).arg(t.pool.path()).output().unwrap();
        let show = String::from_utf8_lossy(&show.stdout).into_owned();
        let left = ids.iter().any(|id| show.lines().any(|l| l.starts_with(&format!("0/{id} "))));
        if !left || std::time::Instant::now() >= deadline {
            break show;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    for id in ids {
        assert!(!show.lines().any(|l| l.starts_with(&format!("0/{id} "))), "qgroup 0/{id} is left:\n{show}");
    }
    assert!(show.lines().any(|l| l.starts_with(&format!("0/{live_id} "))), "the live volume's group went:\n{show}");
    let (_, err) = fill(&live.join("big"), 64 * MIB);
    assert!(err.is_some(), "the live volume's quota was lost with the pruning");
}

#[test]
fn clone_many_makes_independent_forks_or_none() {
    require_root();
    let t = TestPool::new(GIB);
    let src = t.at("sandboxes/src");
    t.pool.create(&src).unwrap();
    fs::write(src.join("f"), b"src").unwrap();
    let dsts: Vec<PathBuf> = (0..10).map(|i| t.at(&format!("sandboxes/fork-{i}"))).collect();
    t.pool.clone_many(&src, &dsts).unwrap();
    for (i, d) in dsts.iter().enumerate() {
        fs::write(d.join("f"), format!("fork {i}")).unwrap();
    }
    for (i, d) in dsts.iter().enumerate() {
        assert_eq!(fs::read_to_string(d.join("f")).unwrap(), format!("fork {i}"));
        assert_eq!(fs::metadata(d).unwrap().ino(), 256);
    }
    assert_eq!(fs::read_to_string(src.join("f")).unwrap(), "src");
    let names: Vec<String> =
        fs::read_dir(t.at("sandboxes")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 11, "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");

    // One destination exists already: the call fails and leaves none of the new forks.
    let more: Vec<PathBuf> = (0..5).map(|i| t.at(&format!("sandboxes/more-{i}"))).chain([dsts[3].clone()]).collect();
    let err = t.pool.clone_many(&src, &more).unwrap_err();
    assert!(matches!(err, StorageError::Exists { .. }), "{err}");
    for d in &more[..5] {
        assert!(!d.exists(), "{} was left behind", d.display());
    }
    assert_eq!(fs::read_to_string(dsts[3].join("f")).unwrap(), "fork 3");
    let twice = [t.at("sandboxes/x"), t.at("sandboxes/./x")];
    assert!(matches!(t.pool.clone_many(&src, &twice).unwrap_err(), StorageError::Duplicate { .. }));
}

#[test]
fn nested_and_read_only_subvolumes_are_removed() {
    require_root();
    let t = TestPool::new(GIB);
    let vol = t.at("sandboxes/n");
    t.pool.create(&vol).unwrap();
    fs::create_dir_all(vol.join("deep/er")).unwrap();
    fs::write(vol.join("deep/file"), b"x").unwrap();
    let dir = fs::File::open(vol.join("deep/er")).unwrap();
    berth_sys::btrfs::create_subvolume(dir.as_fd(), "inner".as_ref()).unwrap();
    fs::write(vol.join("deep/er/inner/file"), b"x").unwrap();
    let inner = fs::File::open(vol.join("deep/er/inner")).unwrap();
    berth_sys::btrfs::snapshot(inner.as_fd(), dir.as_fd(), "frozen".as_ref(), true).unwrap();
    drop((dir, inner));
    t.pool.remove(&vol).unwrap();
    assert!(!vol.exists());
}

#[test]
fn reopening_an_unmounted_pool_mounts_it_again() {
    require_root();
    let t = TestPool::new(GIB);
    let vol = t.at("volumes/keep");
    t.pool.create(&vol).unwrap();
    fs::write(vol.join("f"), b"kept").unwrap();
    Pool::unmount(t.root.path()).unwrap();
    Pool::unmount(t.root.path()).unwrap();
    assert!(!vol.exists());
    let err = t.pool.create(&t.at("volumes/other")).unwrap_err();
    assert!(matches!(err, StorageError::NotMounted { .. }), "{err}");

    let pool = Pool::open(t.root.path()).unwrap();
    assert_eq!(pool.mode(), Mode::Btrfs);
    assert_eq!(pool.info().unwrap().loop_file, Some(t.root.path().join("pool.img")));
    assert_eq!(fs::read(vol.join("f")).unwrap(), b"kept");
    // The old value works again too: it names the same pool.
    t.pool.clone_volume(&vol, &t.at("volumes/copy"), false).unwrap();

    // Quotas turned off: limits are refused with the command that turns them back on.
    let off = Command::new("btrfs").args(["quota", "disable"]).arg(pool.path()).output().unwrap();
    assert!(off.status.success());
    assert!(!pool.info().unwrap().quotas);
    let err = pool.set_quota(&vol, Some(GIB)).unwrap_err();
    assert!(matches!(err, StorageError::QuotaUnsupported { .. }), "{err}");
    assert!(err.to_string().contains("btrfs quota enable"), "{err}");
    // Usage is then a walk.
    assert!((4096..1 << 20).contains(&pool.usage(&vol).unwrap()));
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    require_root();
    let t = TestPool::new(GIB);
    let p = &t.pool;
    for bad in [t.pool.path().to_path_buf(), t.at("sandboxes"), t.at("elsewhere/x"), t.at("sandboxes/../../x")] {
        let err = p.create(&bad).unwrap_err();
        assert!(matches!(err, StorageError::OutsidePool { .. }), "{err}");
        assert!(err.to_string().contains("sandboxes, snapshots"), "{err}");
    }
    assert!(matches!(p.create(&PathBuf::from("/etc/x")).unwrap_err(), StorageError::OutsidePool { .. }));

    let vol = t.at("sandboxes/v");
    p.create(&vol).unwrap();
    assert!(matches!(p.create(&vol).unwrap_err(), StorageError::Exists { .. }));
    let missing = p.clone_volume(&t.at("sandboxes/none"), &t.at("sandboxes/w"), false).unwrap_err();
    assert!(matches!(missing, StorageError::NotFound { .. }), "{missing}");
    assert!(missing.to_string().contains("sandboxes/none"), "{missing}");
    assert!(matches!(p.clone_volume(&vol, &vol, false).unwrap_err(), StorageError::Exists { .. }));

    // A plain directory is not a volume on btrfs.
    fs::create_dir(t.at("sandboxes/plain")).unwrap();
    let err = p.clone_volume(&t.at("sandboxes/plain"), &t.at("sandboxes/w"), false).unwrap_err();
    assert!(matches!(err, StorageError::NotAVolume { .. }), "{err}");
    assert!(matches!(p.set_quota(&t.at("sandboxes/plain"), Some(MIB)).unwrap_err(), StorageError::NotAVolume { .. }));
    p.remove(&t.at("sandboxes/plain")).unwrap();

    // A symlink on the way is refused, not followed; removing it removes the link only.
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("keep"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), t.at("sandboxes/link")).unwrap();
    let err = p.create(&t.at("sandboxes/link/v")).unwrap_err();
    assert!(matches!(err, StorageError::NotAVolume { .. }), "{err}");
    let err = p.clone_volume(&vol, &t.at("sandboxes/link/v"), false).unwrap_err();
    assert!(matches!(err, StorageError::NotAVolume { .. }), "{err}");
    p.remove(&t.at("sandboxes/link")).unwrap();
    assert!(outside.path().join("keep").exists());
    assert!(fs::symlink_metadata(t.at("sandboxes/link")).is_err());

    // init: too small, and on a data root that is btrfs already.
    let err = Pool::init(outside.path(), 1 << 20).unwrap_err();
    assert!(matches!(err, StorageError::TooSmall { .. }), "{err}");
    p.create(&t.at("volumes/root")).unwrap();
    let err = Pool::init(&t.at("volumes/root"), GIB).unwrap_err();
    assert!(matches!(err, StorageError::AlreadyBtrfs { .. }), "{err}");
    assert!(err.to_string().contains("already on btrfs"), "{err}");
    // Unmounting something that is not a pool image is refused.
    let nested = Pool::open(&t.at("volumes/root")).unwrap();
    assert_eq!(nested.mode(), Mode::Btrfs);
    assert!(Pool::unmount(&t.at("volumes/root")).is_ok(), "nothing mounted there");
}
