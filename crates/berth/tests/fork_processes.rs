//! Forks with processes on a real daemon with the real CRIU: a running program's memory and its files go on
//! in the parent and in each child from the same instant, then diverge; each child runs under a host id
//! block, cgroup and host name of its own; removing a child leaves the parent as it was; and what cannot be
//! checkpointed is refused with a sentence, the parent running on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::daemon::Daemon;
use common::server::{ask, serving};
use common::text;
use serde_json::Value;

fn record(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The host uid of sandbox `id`'s init, seen from the host, and the first host id its user namespace maps.
fn host_ids(d: &Daemon, id: &str) -> (u64, u64) {
    let pid = record(d, id)["pid"].as_u64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().next().unwrap();
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let lower = map.split_whitespace().nth(1).unwrap();
    (uid.parse().unwrap(), lower.parse().unwrap())
}

#[test]
fn a_fork_with_processes_goes_on_in_every_copy_from_the_same_instant() {
    let d = Daemon::start();
    let parent = serving(&d, &[], 8, "/workspace/served");
    let (n, digest, now, pid) = ask(&d, &parent).unwrap();
    assert_eq!(digest, now);
    // A change of the root file system's, owned by a user inside (the overlay's upper layer is cloned).
    d.sh(&parent, "echo kept > /etc/forked-marker && chown 1000:1000 /etc/forked-marker");

    let out = d.berth(&["fork", &parent, "-n", "2", "--with-processes", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let forked: Value = serde_json::from_slice(&out.stdout).unwrap();
    let children: Vec<String> =
        forked["sandboxes"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    assert_eq!((children.len(), &forked["errors"]), (2, &serde_json::json!([])), "{forked}");
    for (c, s) in children.iter().zip(forked["sandboxes"].as_array().unwrap()) {
        assert_eq!((s["state"].as_str(), s["parent"].as_str()), (Some("running"), forked["parent"].as_str()), "{s}");
        assert_ne!(c, &parent);
    }

    // Every copy goes on from the count it had: the same server process, its memory, its listening socket.
    assert_eq!(ask(&d, &parent).unwrap(), (n + 1, digest.clone(), digest.clone(), pid.clone()));
    for c in &children {
        assert_eq!(
            ask(&d, c).expect("the forked server answers"),
            (n + 1, digest.clone(), digest.clone(), pid.clone())
        );
    }
    // Then each its own way.
    assert_eq!(ask(&d, &parent).unwrap().0, n + 2);
    assert_eq!(ask(&d, &parent).unwrap().0, n + 3);
    assert_eq!(ask(&d, &children[0]).unwrap().0, n + 2);
    // Its files were cloned in the instant of its memory: the count it wrote is the count it holds.
    let lines = |id: &str| d.sh(id, "cat /workspace/served").lines().count() as u64;
    assert_eq!((lines(&parent), lines(&children[0]), lines(&children[1])), (n + 3, n + 2, n + 1));

    // Each child is a sandbox of its own: its host ids, its cgroup, its host name.
    let (puid, pmap) = host_ids(&d, &parent);
    assert_eq!(puid, pmap, "root inside is the first id of the block");
    let mut blocks = vec![pmap];
    for c in &children {
        let (uid, map) = host_ids(&d, c);
        assert_eq!(uid, map);
        assert!(!blocks.contains(&map), "child {c} shares a host id block: {blocks:?} {map}");
        assert!(blocks.iter().all(|b| b.abs_diff(map) >= 65536), "blocks overlap: {blocks:?} {map}");
        blocks.push(map);
        let cpid = record(&d, c)["pid"].as_u64().unwrap();
        let cgroups = std::fs::read_to_string(format!("/proc/{cpid}/cgroup")).unwrap();
        assert!(cgroups.contains(&format!("/berth/{c}")) && !cgroups.contains(&parent), "{cgroups}");
        let name = record(&d, c)["name"].as_str().unwrap().to_string();
        assert_eq!(d.sh(c, "hostname; cat /etc/hostname"), format!("{name}\n{name}\n"));
        assert_eq!(d.sh(c, "stat -c %u /workspace/served"), "0\n", "its files are its own root's");
        assert_eq!(d.sh(c, "stat -c %u:%g /etc/forked-marker; cat /etc/forked-marker"), "1000:1000\nkept\n");
        let as_user = "setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'echo mine >> /etc/forked-marker'";
        assert_eq!(d.sh(c, &format!("{as_user} && tail -1 /etc/forked-marker")), "mine\n", "user's file is user's");
        assert_eq!(d.sh(c, "echo new > /usr/local/forked && stat -c %u /usr/local/forked"), "0\n", "/usr is writable");
    }
    assert_eq!(d.sh(&parent, "hostname").trim(), record(&d, &parent)["name"].as_str().unwrap());
    let journal = text(&d.berth(&["journal", &parent]).stdout);
    assert!(journal.contains("fork") && journal.contains("with_processes"), "{journal}");

    // A child removed leaves the parent as it was; no image is left behind.
    let out = d.berth(&["rm", &children[0]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(ask(&d, &parent).unwrap().0, n + 4);
    assert_eq!(ask(&d, &children[1]).unwrap().0, n + 2);
    // A parent forked with its processes once is forked so again.
    let out = d.berth(&["fork", &parent, "--with-processes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again = text(&out.stdout).trim().to_string();
    assert_eq!(ask(&d, &again).unwrap().0, n + 5);
    assert_eq!(ask(&d, &parent).unwrap().0, n + 5);
    let images: Vec<String> = std::fs::read_dir(d.root().join("hibernate"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".init")
        .collect();
    assert!(images.is_empty(), "{images:?}");
}

#[test]
fn what_cannot_be_forked_with_processes_is_named_and_the_parent_runs_on() {
    let d = Daemon::start();
    let id = d.create(&[]);
    d.sh(&id, "echo 7 > /tmp/n");
    let out = d.berth(&["exec", &id, "--detach", "--", "sleep", "60"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let path = format!("/v1/sandboxes/{id}/fork");
    let (status, body) = d.http("POST", &path, r#"{"with_processes": true}"#);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot be forked with its processes while execs or shells are running"), "{body}");
    assert!(body.contains("sleep 60"), "{body}");
    assert_eq!(record(&d, &id)["state"], "running");
    assert_eq!(d.sh(&id, "cat /tmp/n"), "7\n");
    assert_eq!(d.ids(), vec![id.clone()], "nothing was forked");
    // Its files alone still fork.
    let (status, body) = d.http("POST", &path, r#"{"count": 1}"#);
    assert_eq!(status, 201, "{body}");

    // A woken sandbox is checkpointed for a fork exactly when it could hibernate again; refused, it says why
    // and runs on.
    let other = d.create(&[]);
    d.sh(&other, "echo 8 > /tmp/n");
    assert!(d.berth(&["hibernate", &other]).status.success());
    assert!(d.berth(&["wake", &other]).status.success());
    let out = d.berth(&["fork", &other, "--with-processes"]);
    if out.status.success() {
        let child = text(&out.stdout).trim().to_string();
        assert_eq!(d.sh(&child, "cat /tmp/n"), "8\n");
        assert!(d.berth(&["hibernate", &other]).status.success(), "it forks with its processes, so it hibernates");
    } else {
        let why = text(&out.stderr);
        assert!(why.contains("could not be forked with its processes, and runs on as it was"), "{why}");
        assert_eq!(record(&d, &other)["state"], "running");
        assert_eq!(d.sh(&other, "cat /tmp/n"), "8\n");
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{other}/hibernate"), "");
        assert_eq!(status, 409, "it does not hibernate either: {body}");
    }
    // A hibernated one is not running.
    let asleep = d.create(&[]);
    let out = d.berth(&["hibernate", &asleep]);
    assert!(out.status.success(), "hibernate: {}", text(&out.stderr));
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{asleep}/fork"), r#"{"with_processes": true}"#);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("hibernated") && body.contains("only a running sandbox"), "{body}");
    assert_eq!(record(&d, &asleep)["state"], "hibernated");
    let (status, body) = d.http("POST", &path, r#"{"with_processes": 1}"#);
    assert_eq!(status, 400, "a field of the wrong type is refused: {body}");
}

#[test]
fn a_backend_that_cannot_checkpoint_running_processes_refuses_before_anything_is_frozen() {
    let d = Daemon::start_with(&["--isolation", "gvisor"]);
    let id = d.create(&[]);
    d.sh(&id, "echo 9 > /tmp/n");
    let journal_before = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "").1;
    for (route, body) in [("fork", r#"{"with_processes": true}"#), ("snapshots", r#"{"with_processes": true}"#)] {
        let (status, answer) = d.http("POST", &format!("/v1/sandboxes/{id}/{route}"), body);
        assert_eq!(status, 503, "{route}: {answer}");
        assert!(answer.contains("a gVisor sandbox's running processes cannot be checkpointed"), "{answer}");
        assert!(answer.contains("leave out --with-processes"), "{answer}");
    }
    // Nothing was frozen, nothing made: it runs on, and neither a fork nor a snapshot was recorded.
    assert_eq!(record(&d, &id)["state"], "running");
    assert_eq!(d.sh(&id, "cat /tmp/n"), "9\n");
    assert_eq!(d.ids(), vec![id.clone()]);
    let (_, snapshots) = d.http("GET", "/v1/snapshots", "");
    assert_eq!(snapshots.trim(), "[]", "{snapshots}");
    let journal_after = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "").1;
    let added: Vec<Value> = serde_json::from_str::<Vec<Value>>(&journal_after).unwrap()
        [serde_json::from_str::<Vec<Value>>(&journal_before).unwrap().len()..]
        .to_vec();
    assert!(added.iter().all(|r| r["action"] == "exec" || r["action"] == "exec_finished"), "{added:?}");
    // Its files alone fork.
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/fork"), r#"{"count": 1}"#);
    assert_eq!(status, 201, "{body}");
}

#[test]
fn a_snapshot_with_processes_starts_sandboxes_that_continue_them() {
    let d = Daemon::start();
    let id = serving(&d, &[], 8, "/workspace/served");
    let (n, digest, _, pid) = ask(&d, &id).unwrap();
    let out = d.berth(&["snapshot", &id, "--with-processes", "--name", "warm", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let snap: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((snap["with_processes"].as_bool(), snap["origin"].as_str()), (Some(true), Some("snapshot")), "{snap}");
    let image = d.root().join("hibernate").join(format!(".snapshot-{}", snap["id"].as_str().unwrap()));
    assert!(image.join("manifest.json").exists(), "its checkpoint is kept");
    assert_eq!(ask(&d, &id).unwrap().0, n + 1, "the sandbox runs on");

    // Its sandbox gone, the snapshot still starts sandboxes that go on from its instant, each its own.
    assert!(d.berth(&["rm", &id]).status.success());
    let mut made = vec![];
    for _ in 0..2 {
        let c = d.create(&["--from", "warm"]);
        assert_eq!(d.sh(&c, "wc -l < /workspace/served").trim(), n.to_string(), "the snapshot's files");
        assert_eq!(ask(&d, &c).expect("the server answers"), (n + 1, digest.clone(), digest.clone(), pid.clone()));
        assert_eq!(ask(&d, &c).unwrap().0, n + 2);
        assert_eq!(record(&d, &c)["parent"], snap["id"]);
        made.push(c);
    }
    let (a, b) = (host_ids(&d, &made[0]), host_ids(&d, &made[1]));
    assert_ne!(a.1, b.1, "each has a host id block of its own");
    // Another image is refused with a sentence.
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"from_snapshot": "warm", "image": "nope"}"#);
    assert!(status == 400 || status == 404, "{status} {body}");

    // The snapshot's checkpoint goes with it.
    for c in &made {
        assert!(d.berth(&["rm", c]).status.success());
    }
    let out = d.berth(&["snapshot", "rm", "warm"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!image.exists(), "its checkpoint is removed with it");
}
