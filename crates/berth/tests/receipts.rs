//! Teardown with a receipt: outputs out (with digests), the workspace's patch, records flushed, destroy, and a
//! leak check; kept after the sandbox is gone, and the same sequence for a TTL that runs out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn sha256_hex(data: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    text(&out.stdout).split_whitespace().next().unwrap().to_string()
}

#[test]
fn rm_prints_a_receipt_with_outputs_their_digests_and_a_clean_leak_check() {
    let d = Daemon::start();
    let id = d.create(&["--output", "/workspace/dist/*.txt", "--output", "/workspace/**/report.json"]);
    d.sh(&id, "mkdir -p /workspace/dist /workspace/a/b && echo artefact > /workspace/dist/one.txt && echo no > /workspace/dist/skip.bin && echo '{}' > /workspace/a/b/report.json && ln -s /etc/passwd /workspace/dist/link.txt");
    let rm = d.berth(&["rm", &id]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    let out = text(&rm.stdout);
    assert!(out.contains("leak check: clean"), "{out}");
    assert!(out.contains(&format!("output /workspace/dist/one.txt sha256:{}", sha256_hex(b"artefact\n"))), "{out}");

    let receipt: Value = serde_json::from_slice(&d.berth(&["receipt", &id, "--json"]).stdout).unwrap();
    assert_eq!(receipt["clean"], true, "{receipt}");
    assert_eq!(receipt["reason"], "remove");
    let outputs: Vec<&str> =
        receipt["outputs"].as_array().unwrap().iter().map(|o| o["path"].as_str().unwrap()).collect();
    assert_eq!(outputs, ["/workspace/a/b/report.json", "/workspace/dist/one.txt"], "a symlink is never followed out");
    for o in receipt["outputs"].as_array().unwrap() {
        let saved = std::fs::read(o["saved_as"].as_str().unwrap()).unwrap();
        assert_eq!(o["sha256"].as_str().unwrap(), sha256_hex(&saved));
    }
    let patch = std::fs::read_to_string(receipt["patch"]["saved_as"].as_str().unwrap()).unwrap();
    assert!(patch.contains("+artefact"), "{patch}");
    assert!(receipt["flushed"]["journal"].as_u64().unwrap() >= 2);
    // The order of the steps is the contract: outputs, records, destroy.
    let steps: Vec<&str> = receipt["steps"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let at =
        |needle: &str| steps.iter().position(|s| s.contains(needle)).unwrap_or_else(|| panic!("{needle}: {steps:?}"));
    assert!(
        at("output files") < at("flushed")
            && at("flushed") < at("killed")
            && at("killed") < at("removed the sandbox's files")
    );

    assert_eq!(d.http("GET", "/v1/sandboxes/0123456789ab/receipt", "").0, 404);
    let bad = d.berth(&["create", "--output", "/etc/shadow"]);
    assert!(text(&bad.stderr).contains("under /workspace"), "{}", text(&bad.stderr));
}

#[test]
fn a_ttl_that_runs_out_goes_through_the_same_teardown() {
    let d = Daemon::start();
    // Long enough that a create slowed by a loaded host still leaves time for the exec before the TTL ends.
    let id = d.create(&["--ttl", "4s", "--output", "/workspace/*.log"]);
    d.sh(&id, "echo done > /workspace/run.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !d.ids().is_empty() {
        assert!(Instant::now() < deadline, "the TTL did not end the sandbox");
        std::thread::sleep(Duration::from_millis(100));
    }
    let receipt: Value = serde_json::from_slice(&d.berth(&["receipt", &id, "--json"]).stdout).unwrap();
    assert_eq!(receipt["reason"], "reaped");
    assert_eq!(receipt["clean"], true, "{receipt}");
    assert_eq!(receipt["outputs"][0]["path"], "/workspace/run.log");
}

#[test]
fn a_leftover_the_teardown_cannot_remove_makes_the_receipt_unclean_and_names_it() {
    let d = Daemon::start();
    let id = d.create(&[]);
    d.sh(&id, "echo hello");
    // An immutable file among the sandbox's exec logs: the teardown cannot remove them, and must say so.
    let logs = d.root().join("logs").join(&id);
    std::fs::create_dir_all(&logs).unwrap();
    let pinned = logs.join("pinned");
    std::fs::write(&pinned, "kept").unwrap();
    let chattr = |flag: &str| {
        let out = std::process::Command::new("chattr").arg(flag).arg(&pinned).output().unwrap();
        assert!(out.status.success(), "chattr {flag}: {}", text(&out.stderr));
    };
    chattr("+i");

    let rm = d.berth(&["rm", &id]);
    let receipt: Value = serde_json::from_slice(&d.berth(&["receipt", &id, "--json"]).stdout).unwrap();
    // Cleaned up before asserting, so that a failure leaves nothing behind either.
    chattr("-i");
    std::fs::remove_dir_all(&logs).unwrap();

    assert!(!rm.status.success(), "rm of a sandbox that leaked succeeded: {}", text(&rm.stdout));
    assert!(text(&rm.stderr).contains("not everything was cleaned up: its exec logs"), "{}", text(&rm.stderr));
    assert_eq!(receipt["clean"], false, "{receipt}");
    assert_eq!(receipt["leftovers"], serde_json::json!(["its exec logs"]), "{receipt}");
    assert!(d.ids().is_empty(), "the sandbox is still listed after rm");
}

#[test]
fn the_test_harness_leak_check_finds_a_mount_and_a_claim_left_behind() {
    // Every daemon test ends with this check: it must see what it is there to see, not report clean always.
    let d = Daemon::start();
    // (The running daemon itself is among what it reports: the harness runs it only after the daemon stopped.)
    let stray = d.root().join("stray-mount");
    std::fs::create_dir(&stray).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "stray", stray.to_str().unwrap()]).output();
    let claim = d.root().join("sandboxes").join("0123456789ab");
    std::fs::create_dir_all(&claim).unwrap();
    let left = common::leaks::daemon_leftovers(&d.root());
    // Undo both before asserting, so the harness's own check at the end sees a clean root either way.
    let _ = std::process::Command::new("umount").arg(&stray).output();
    let _ = std::fs::remove_dir(&stray);
    let _ = std::fs::remove_dir(&claim);
    assert!(mounted.unwrap().status.success());
    assert!(left.iter().any(|l| l.contains("stray-mount")), "the mount was not reported: {left:?}");
    assert!(left.iter().any(|l| l.contains("0123456789ab")), "the claim was not reported: {left:?}");
}

#[test]
fn the_test_harness_leak_check_finds_snapshot_and_volume_files_the_daemon_does_not_list() {
    let dir = tempfile::tempdir().unwrap();
    for path in [
        "pool/snapshots/0123456789ab",
        "pool/snapshots/ba9876543210",
        "pool/volumes/kept",
        "pool/volumes/stray",
        "hibernate/.snapshot-ba9876543210",
        "hibernate/.snapshot-0123456789ab",
        "hibernate/.fork-ba9876543210",
        "hibernate/.init",
        "hibernate/aaaaaaaaaaaa",
    ] {
        std::fs::create_dir_all(dir.path().join(path)).unwrap();
    }
    let kept = common::leaks::Kept {
        snapshots: vec!["ba9876543210".into()],
        fork_snapshots: Vec::new(),
        volumes: vec!["kept".into()],
    };
    assert_eq!(
        common::leaks::storage_leftovers(dir.path(), &kept),
        [
            "pool/snapshots/0123456789ab",
            "pool/volumes/stray",
            "hibernate/.fork-ba9876543210",
            "hibernate/.snapshot-0123456789ab",
            "hibernate/aaaaaaaaaaaa"
        ]
    );
}
