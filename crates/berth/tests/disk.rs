//! The bound on sandboxes' files: the pool a daemon makes by itself, the default disk quota, `--disk`,
//! `--storage none`, and `berth storage init` taken up by a running daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn json(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{} {}", text(&out.stdout), text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

#[test]
fn btrfs_pool_quota_holds_and_snapshots_are_copy_on_write() {
    let d = Daemon::start_with_pool("1G");
    let info = json(&d.berth(&["storage", "info", "--json"]));
    assert_eq!(info["mode"], "btrfs");
    assert_eq!(info["quotas"], true);

    let id = d.create(&["--disk", "64M", "--persistent"]);
    d.assert_quota_holds(&id);

    // A fork of a big workspace copies nothing: the pool's free space barely moves.
    let big = d.create(&[]);
    d.sh(&big, "head -c 200M /dev/urandom > /workspace/data");
    let free = |d: &Daemon| {
        // Free space as of the last commit: flush first, so it counts what is written.
        d.sh(&big, "sync");
        json(&d.berth(&["storage", "info", "--json"]))["free_bytes"].as_u64().unwrap()
    };
    let before = free(&d);
    let kids = d.berth(&["fork", &big, "--count", "4"]);
    assert!(kids.status.success(), "{}", text(&kids.stderr));
    let after = free(&d);
    assert!(before.saturating_sub(after) < 50 << 20, "forks used {} bytes", before.saturating_sub(after));

    let too_small = d.berth(&["create", "--disk", "1M"]);
    assert!(text(&too_small.stderr).contains("at least"), "{}", text(&too_small.stderr));
}

/// A daemon whose data root is a tmpfs of its own, so that what it finds there does not depend on the file
/// system that holds the test's temporary directory (on btrfs, a plain data root is already a btrfs pool).
/// Dropped, it drops the daemon (which unmounts its pool) and then the tmpfs.
struct OnTmpfs(Option<Daemon>);

impl OnTmpfs {
    fn start_with(extra: &[&str]) -> OnTmpfs {
        let mut d = Daemon::start_with(extra);
        d.kill();
        std::fs::remove_dir_all(d.root()).unwrap();
        std::fs::create_dir(d.root()).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2G,mode=0700", "berth-test", d.root().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "mount a tmpfs data root: {}", text(&out.stderr));
        let mut on = OnTmpfs(Some(d));
        on.0.as_mut().unwrap().spawn();
        on
    }
}

impl std::ops::Deref for OnTmpfs {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        self.0.as_ref().unwrap()
    }
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        let root = self.root();
        drop(self.0.take());
        let _ = std::process::Command::new("umount").arg("-l").arg(&root).output();
    }
}

#[test]
fn without_a_pool_quotas_are_refused_and_storage_init_takes_effect_at_once() {
    let d = OnTmpfs::start_with(&["--storage", "none", "--default-disk", "32M"]);
    let info = json(&d.berth(&["storage", "info", "--json"]));
    assert_eq!(info["mode"], "copy", "a tmpfs data root with --storage none is a plain directory: {info}");
    let out = d.berth(&["create", "--disk", "1G"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("disk quotas need a btrfs storage pool"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("berth storage init"), "{}", text(&out.stderr));
    assert!(d.ids().is_empty());
    // The daemon says its sandboxes' files are not bounded, and why; so does `berth info`.
    assert_eq!(info["bounded"], false);
    assert!(info["unbounded"].as_str().unwrap().contains("--storage none"), "{info}");
    let host = json(&d.berth(&["--root", d.root().to_str().unwrap(), "info"]));
    assert_eq!(host["storage"]["bounded"], false, "{host}");
    assert!(host["storage"]["unbounded"].as_str().unwrap().contains("not bounded"), "{host}");
    let unbounded = d.create(&[]);
    assert_eq!(json(&d.berth(&["inspect", &unbounded, "--json"]))["disk_bytes"], Value::Null);
    assert!(d.berth(&["rm", &unbounded]).status.success());

    // `berth storage init` through the running daemon: the next sandbox is on the pool, with the default quota.
    let init = d.berth(&["storage", "init", "--size", "1G"]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    let info = json(&d.berth(&["storage", "info", "--json"]));
    assert_eq!((info["mode"].as_str(), info["bounded"].as_bool()), (Some("btrfs"), Some(true)), "{info}");
    assert_eq!(info["default_disk_bytes"], 32 << 20);
    let host = json(&d.berth(&["--root", d.root().to_str().unwrap(), "info"]));
    assert_eq!(host["storage"]["bounded"], true, "{host}");
    let id = d.create(&[]);
    assert_eq!(json(&d.berth(&["inspect", &id, "--json"]))["disk_bytes"], 32 << 20);
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "head -c 64M /dev/zero > /workspace/big; echo rc=$?"]);
    assert!(text(&out.stdout).contains("rc=1"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("quota"), "{}", text(&out.stderr));
    let again = d.berth(&["storage", "init", "--size", "1G"]);
    assert_eq!(again.status.code(), Some(125), "{}", text(&again.stderr));
    assert!(text(&again.stderr).contains("already exists"), "{}", text(&again.stderr));
}

#[test]
fn a_daemon_with_no_options_bounds_every_sandbox_files() {
    let d = Daemon::start_with(&["--default-disk", "48M"]);
    let info = json(&d.berth(&["storage", "info", "--json"]));
    assert_eq!((info["mode"].as_str(), info["quotas"].as_bool()), (Some("btrfs"), Some(true)), "{info}");
    assert_eq!(info["bounded"], true);
    assert!(d.root().join("pool.img").is_file());
    // The pool image is sparse and no larger than half the free space of the data root's file system.
    let img = std::fs::metadata(d.root().join("pool.img")).unwrap();
    assert!(std::os::unix::fs::MetadataExt::blocks(&img) * 512 < img.len());

    // A sandbox made with no options: its workspace and its root changes share its default quota.
    let id = d.create(&["--persistent"]);
    assert_eq!(json(&d.berth(&["inspect", &id, "--json"]))["disk_bytes"], 48 << 20);
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "head -c 100M /dev/zero > /workspace/big; echo rc=$?"]);
    assert!(text(&out.stdout).contains("rc=1"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("Disk quota exceeded"), "{}", text(&out.stderr));
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "head -c 40M /dev/zero > /var/root-change; echo rc=$?"]);
    assert!(!text(&out.stdout).contains("rc=0"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("Disk quota exceeded"), "{}", text(&out.stderr));
    // The daemon and the sandbox go on working; freeing space lets it write again.
    d.sh(&id, "rm -f /workspace/big /var/root-change && sync");
    assert_eq!(d.sh(&id, "echo fine > /workspace/ok && cat /workspace/ok"), "fine\n");
    // --disk changes it for one sandbox; a fork keeps its parent's quota.
    let big = d.create(&["--disk", "200M"]);
    d.sh(&big, "head -c 100M /dev/zero > /workspace/big");
    let kids = json(&d.berth(&["fork", &id, "--json"]));
    let kid = kids["sandboxes"][0]["id"].as_str().unwrap();
    assert_eq!(json(&d.berth(&["inspect", kid, "--json"]))["disk_bytes"], 48 << 20);
}
