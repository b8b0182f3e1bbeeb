//! Hibernation on a real daemon with the real CRIU: a sandbox's processes written to disk and their memory
//! released, then woken (by `berth wake` or by any activity) with the same process tree, memory, listening
//! socket and /tmp; through a daemon restart; refused, with the sandbox running on, when it holds what cannot
//! go to disk; after an idle time; and removed leaving nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn record(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server holding state only in its memory: 32 MiB of bytes and a count of the requests it answered, on
/// 127.0.0.1:8000 inside the sandbox, with a file it keeps open in /tmp.
const SERVER: &str = r#"
import hashlib, os, socket
block = bytearray(os.urandom(1 << 20)) * 32
digest = hashlib.sha256(block).hexdigest()[:16]
log = open("/tmp/served", "a")
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000)); s.listen(8)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    log.write(f"{n}\n"); log.flush()
    c.sendall(f"{n} {digest} {hashlib.sha256(block).hexdigest()[:16]} {os.getpid()}\n".encode()); c.close()
"#;

/// Make a character device node in /tmp; prints the errno it failed with (or `made`).
const MKNOD: &str = "import os, stat\ntry:\n    os.mknod('/tmp/null', stat.S_IFCHR | 0o600, os.makedev(1, 3)); print('made')\n\
                     except OSError as e:\n    print(e.errno)";

const ASK: &str =
    "import socket; c = socket.create_connection(('127.0.0.1', 8000)); print(c.recv(200).decode().strip())";

/// Start the server in a sandbox and wait until it answers; returns the sandbox's id.
fn serving(d: &Daemon, create: &[&str]) -> String {
    let id = d.create(create);
    let (status, body) = d.files("PUT", &id, "files", "/workspace/server.py", "", SERVER.as_bytes());
    assert!((200..300).contains(&status), "{status} {}", String::from_utf8_lossy(&body));
    // In the background of an exec that ends (a detached exec still running holds streams that lead to berth).
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "python3 /workspace/server.py >/dev/null 2>&1 &"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("the server", Duration::from_secs(20), || ask(d, &id).is_some());
    id
}

/// One request to the server: (requests answered, digest at start, digest now, server pid).
fn ask(d: &Daemon, id: &str) -> Option<(u64, String, String, String)> {
    let out = d.berth(&["exec", id, "--", "python3", "-c", ASK]);
    if !out.status.success() {
        return None;
    }
    let line = text(&out.stdout);
    let mut f = line.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.into(), f.next()?.into(), f.next()?.into()))
}

/// Host processes in sandbox `id`'s cgroups.
fn processes_of(id: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| std::fs::read_to_string(e.path().join("cgroup")).is_ok_and(|c| c.contains(&format!("/berth/{id}"))))
        .count()
}

#[test]
fn a_hibernated_sandbox_holds_no_memory_and_wakes_where_it_was() {
    let mut d = Daemon::start();
    let id = serving(&d, &[]);
    let (n, digest, now, pid) = ask(&d, &id).unwrap();
    assert_eq!(digest, now);
    assert!(processes_of(&id) >= 2, "init and the server run in the sandbox's cgroup");

    let out = d.berth(&["hibernate", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["state"], "hibernated");
    assert!(h["pid"].is_null() && h["hibernated_at_ms"].as_u64().is_some(), "{h}");
    assert_eq!(processes_of(&id), 0, "a hibernated sandbox has no process left, so no memory");
    assert!(d.root().join("hibernate").join(&id).join("manifest.json").exists(), "its image is on disk");
    let listed = text(&d.berth(&["ls"]).stdout);
    assert!(listed.lines().any(|l| l.contains(&id) && l.contains("hibernated")), "{listed}");
    // Looking at it does not wake it; hibernating again changes nothing.
    let _ = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert!(d.berth(&["hibernate", &id]).status.success());
    assert_eq!(record(&d, &id)["state"], "hibernated");

    // Through a daemon restart it stays hibernated.
    d.kill();
    d.spawn();
    assert_eq!(record(&d, &id)["state"], "hibernated", "a restarted daemon keeps it hibernated");

    // An exec wakes it: the same server process, its memory and its count, its listening socket, its /tmp.
    let (n2, digest2, now2, pid2) = ask(&d, &id).expect("the woken server answers");
    assert_eq!((n2, &digest2, &now2, &pid2), (n + 1, &digest, &digest, &pid), "it goes on where it was");
    let served = text(&d.berth(&["exec", &id, "--", "cat", "/tmp/served"]).stdout);
    assert_eq!(served.lines().count() as u64, n2, "its open file in /tmp was kept: {served}");
    let r = record(&d, &id);
    assert_eq!((r["state"].as_str(), r["last_activity"].as_str()), (Some("running"), Some("exec")), "{r}");
    assert!(r["hibernated_at_ms"].is_null());
    let journal = text(&d.berth(&["journal", &id]).stdout);
    assert!(journal.contains("hibernate") && journal.contains("wake"), "{journal}");
    // Its time asleep is metered as such.
    let usage: Value = serde_json::from_slice(&d.berth(&["usage", &id, "--json"]).stdout).unwrap();
    assert!(usage["hibernated_seconds"].as_f64().unwrap() > 0.0, "{usage}");

    // Its root and /usr are as writable as before (the woken overlays write as the sandbox's root).
    let wrote = d.berth(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo w > /etc/woken && echo u > /usr/local/woken && cat /etc/woken /usr/local/woken",
    ]);
    assert_eq!(text(&wrote.stdout), "w\nu\n", "{}", text(&wrote.stderr));

    // What berth masks is masked still: an empty directory that cannot be written.
    let masked = d.berth(&["exec", &id, "--", "sh", "-c", "ls -A /proc/acpi /sys/firmware; touch /proc/acpi/x"]);
    assert!(
        !masked.status.success() && text(&masked.stdout).trim_end().lines().all(|l| l.ends_with(':') || l.is_empty())
    );

    // Commands started after the wake are under init's landlock rules again (init executed itself anew):
    // making a device node is refused by landlock (EACCES), not only by the user namespace (EPERM).
    let mknod = d.berth(&["exec", &id, "--", "python3", "-c", MKNOD]);
    assert_eq!(text(&mknod.stdout).trim(), "13", "{}", text(&mknod.stderr));

    // A woken sandbox hibernates again, and wakes again where it was, as often as asked.
    for round in 1..=2 {
        let out = d.berth(&["hibernate", &id]);
        assert!(out.status.success(), "hibernation {} after a wake: {}", round, text(&out.stderr));
        assert_eq!(processes_of(&id), 0);
        assert!(d.berth(&["wake", &id]).status.success());
        let (n3, digest3, now3, pid3) = ask(&d, &id).expect("the server answers after another wake");
        assert_eq!((n3, &digest3, &now3, &pid3), (n2 + round, &digest, &digest, &pid), "round {round}");
    }
    assert!(d.berth(&["wake", &id]).status.success(), "waking an awake sandbox changes nothing");
}

#[test]
fn what_cannot_go_to_disk_is_named_and_the_sandbox_runs_on() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let out = d.berth(&["exec", &id, "--detach", "--", "sleep", "60"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("execs or shells are running") && body.contains("sleep 60"), "{body}");
    assert_eq!(record(&d, &id)["state"], "running");
    assert!(d.berth(&["exec", &id, "--", "true"]).status.success());
    // `berth wake` brings one back explicitly.
    let other = d.create(&[]);
    assert!(d.berth(&["exec", &other, "--", "sh", "-c", "echo 41 > /tmp/n"]).status.success());
    assert!(d.berth(&["hibernate", &other]).status.success());
    let out = d.berth(&["wake", &other, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let w: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((w["state"].as_str(), w["last_activity"].as_str()), (Some("running"), Some("wake")), "{w}");
    assert_eq!(text(&d.berth(&["exec", &other, "--", "cat", "/tmp/n"]).stdout).trim(), "41");
    // A nonsense idle time is refused with a sentence.
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"idle_hibernate_seconds": -1}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("idle_hibernate_seconds must be a positive number of seconds"), "{body}");
    // A missing one is not found.
    let (status, body) = d.http("POST", "/v1/sandboxes/000000000000/wake", "");
    assert_eq!(status, 404, "{body}");
}

#[test]
fn an_idle_sandbox_hibernates_and_a_file_call_wakes_it() {
    let d = Daemon::start();
    let id = d.create(&["--idle-hibernate", "1s"]);
    assert_eq!(record(&d, &id)["idle_hibernate_seconds"], 1.0);
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", "echo kept > /tmp/note"]).status.success());
    wait_for("idle hibernation", Duration::from_secs(30), || record(&d, &id)["state"] == "hibernated");
    let (status, body) = d.files("GET", &id, "files", "/tmp/note", "", b"");
    assert_eq!((status, body.as_slice()), (200, b"kept\n".as_slice()));
    let r = record(&d, &id);
    assert_eq!((r["state"].as_str(), r["last_activity"].as_str()), (Some("running"), Some("files")), "{r}");
}

#[test]
fn a_hibernated_sandbox_removed_leaves_nothing() {
    let d = Daemon::start();
    let id = d.create(&[]);
    assert!(d.berth(&["hibernate", &id]).status.success());
    let image = d.root().join("hibernate").join(&id);
    assert!(image.join("manifest.json").exists());
    let manifest: Value = serde_json::from_slice(&std::fs::read(image.join("manifest.json")).unwrap()).unwrap();
    let reservation = format!("/run/berth/ids/{}.reserved", manifest["slot"]);
    assert!(std::path::Path::new(&reservation).exists(), "its id block is kept for it");
    let out = d.berth(&["rm", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!image.exists(), "its image goes");
    assert!(!std::path::Path::new(&reservation).exists(), "its id block is free again");
    let kept = std::fs::read_dir(d.root().join("hibernate/.init")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(kept, 0, "the copy of init's binary no image needs goes too");
    assert!(!d.root().join("pool/sandboxes").join(&id).exists(), "its files go");
    let (status, _) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 404);
}

#[test]
fn an_ephemeral_sandbox_does_not_wake_after_its_host_restarted_and_a_persistent_one_does() {
    let mut d = Daemon::start();
    let ephemeral = d.create(&[]);
    let persistent = d.create(&["--persistent"]);
    for id in [&ephemeral, &persistent] {
        assert!(d.berth(&["exec", id, "--", "sh", "-c", "echo kept > /workspace/note"]).status.success());
        assert!(d.berth(&["hibernate", id]).status.success());
    }
    // A host restart, as the daemon finds it: the kernel's boot id differs from the one in the images.
    d.kill();
    for id in [&ephemeral, &persistent] {
        let path = d.root().join("hibernate").join(id).join("manifest.json");
        let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(m["boot_id"].as_str().is_some_and(|b| !b.is_empty()), "{m}");
        m["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    }
    d.spawn();
    // The ephemeral one's files were never synced to disk (its overlay is volatile): it is gone, and says why.
    let (status, _) = d.http("GET", &format!("/v1/sandboxes/{ephemeral}"), "");
    assert_eq!(status, 404);
    assert!(!d.root().join("hibernate").join(&ephemeral).exists(), "its image went with it");
    let journal = text(&d.berth(&["journal", &ephemeral]).stdout);
    assert!(journal.contains("host restarted while it hibernated"), "{journal}");
    // The persistent one wakes with its processes and files.
    assert_eq!(record(&d, &persistent)["state"], "hibernated");
    let note = d.berth(&["exec", &persistent, "--", "cat", "/workspace/note"]);
    assert_eq!(text(&note.stdout), "kept\n", "{}", text(&note.stderr));
}
