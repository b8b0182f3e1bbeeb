//! Pause and resume on a real daemon: processes frozen with their memory and state, continued where they
//! were; wake on demand by an exec, a file call or a context run; the idle clock that pauses and the noise that
//! must not keep a sandbox awake; timeouts that do not count paused time; a paused sandbox through a daemon
//! restart, a snapshot and a removal.
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

/// The counter a background loop in the sandbox writes, read on the host from the sandbox's files (a read
/// through the API would be activity and wake it).
fn count(d: &Daemon, id: &str) -> u64 {
    let path = d.root().join("pool/sandboxes").join(id).join("workspace/count");
    std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn counting(d: &Daemon) -> String {
    let id = d.create(&[]);
    let out = d.berth(&[
        "exec",
        &id,
        "--detach",
        "--",
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); echo $i > /workspace/count; sleep 0.05; done",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for("the counter", Duration::from_secs(10), || count(d, &id) > 3);
    id
}

#[test]
fn a_paused_sandbox_stops_still_and_resumes_where_it_was() {
    let mut d = Daemon::start();
    let id = counting(&d);
    let out = d.berth(&["pause", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let paused: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(paused["state"], "paused");
    assert!(paused["paused_at_ms"].as_u64().is_some());
    let at = count(&d, &id);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(count(&d, &id), at, "a paused sandbox's processes do not run");
    // Pausing again changes nothing; looking at it does not wake it.
    assert!(d.berth(&["pause", &id]).status.success());
    let _ = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    let _ = d.http("GET", "/v1/sandboxes", "");
    assert_eq!(record(&d, &id)["state"], "paused");

    // Through a daemon restart it stays paused, then resumes.
    d.kill();
    d.spawn();
    assert_eq!(record(&d, &id)["state"], "paused", "a restarted daemon keeps it paused");
    assert_eq!(count(&d, &id), at);
    let out = d.berth(&["resume", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resumed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((resumed["state"].as_str(), resumed["last_activity"].as_str()), (Some("running"), Some("resume")));
    wait_for("the counter to go on", Duration::from_secs(10), || count(&d, &id) > at + 2);
    let n: u64 = text(&d.berth(&["exec", &id, "--", "cat", "/workspace/count"]).stdout).trim().parse().unwrap();
    assert!(n > at, "it continued from {at}, not from the start: {n}");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert!(journal.contains("\"pause\"") && journal.contains("\"resume\""));
    // The time paused is metered as such, and not as running time.
    let (_, usage) = d.http("GET", &format!("/v1/sandboxes/{id}/usage"), "");
    let usage: Value = serde_json::from_str(&usage).unwrap();
    assert!(usage["paused_seconds"].as_f64().unwrap() >= 0.5, "{usage}");
    // A paused sandbox can be removed, cleanly.
    assert!(d.berth(&["pause", &id]).status.success());
    let out = d.berth(&["rm", &id, "--json"]);
    let receipts: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(receipts[0]["clean"], true, "{receipts}");
}

#[test]
fn any_activity_wakes_a_paused_sandbox_and_says_what_it_was() {
    let d = Daemon::start();
    let id = counting(&d);
    for (call, cause) in [("exec", "exec"), ("files", "files"), ("context", "context")] {
        assert!(d.berth(&["pause", &id]).status.success());
        let at = count(&d, &id);
        let t = Instant::now();
        match call {
            "exec" => assert_eq!(text(&d.berth(&["exec", &id, "--", "echo", "awake"]).stdout), "awake\n"),
            "files" => {
                let (status, _) = d.files("GET", &id, "files", "/workspace/count", "", b"");
                assert_eq!(status, 200);
            }
            _ => assert!(d.berth(&["context", "create", &id]).status.success()),
        }
        let r = record(&d, &id);
        assert_eq!((r["state"].as_str(), r["last_activity"].as_str()), (Some("running"), Some(cause)), "{call}");
        eprintln!("woken by {call} in {:?}", t.elapsed());
        wait_for("the counter to go on", Duration::from_secs(10), || count(&d, &id) > at);
    }
}

#[test]
fn the_idle_clock_pauses_and_background_noise_does_not_keep_it_awake() {
    let d = Daemon::start();
    let id = d.create(&["--idle-pause", "1500ms"]);
    // Noise: a process busy inside that tries egress over and over (started by an exec that has ended), and
    // reads of the sandbox's record, journal and events. None of it is activity.
    let noise = "(while true; do curl -s -o /dev/null http://example.com/; sleep 0.1; done) >/dev/null 2>&1 & exit 0";
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", noise]).status.success());
    let started = Instant::now();
    wait_for("an idle pause", Duration::from_secs(20), || {
        let _ = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        let _ = d.http("GET", "/v1/events", "");
        record(&d, &id)["state"] == "paused"
    });
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let (_, log) = d.http("GET", &format!("/v1/sandboxes/{id}/net/log"), "");
    assert!(log.contains("example.com"), "the noise did reach the proxy: {log}");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert!(journal.contains("\"reason\":\"idle\""), "{journal}");
    // Woken by an exec, and paused again by the clock.
    assert_eq!(text(&d.berth(&["exec", &id, "--", "echo", "hi"]).stdout), "hi\n");
    assert_eq!(record(&d, &id)["state"], "running");
    wait_for("a second idle pause", Duration::from_secs(20), || record(&d, &id)["state"] == "paused");
}

#[test]
fn time_paused_does_not_count_against_an_exec_timeout_or_an_active_only_ttl() {
    let d = Daemon::start();
    // The TTL is well past the exec's timeout even when a loaded host takes seconds to start the exec (time
    // running before the pause counts against both).
    let id = d.create(&["--ttl", "8s", "--ttl-active-only"]);
    let expires = record(&d, &id)["expires_at_ms"].as_u64().unwrap();
    let runner = d
        .cmd(&["exec", &id, "--timeout", "4s", "--", "sh", "-c", "while true; do sleep 0.1; done"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the exec to run", Duration::from_secs(20), || {
        let (_, execs) = d.http("GET", &format!("/v1/sandboxes/{id}/execs"), "");
        serde_json::from_str::<Value>(&execs).is_ok_and(|v| v[0]["running"] == true)
    });
    assert!(d.berth(&["pause", &id]).status.success());
    let (_, execs) = d.http("GET", &format!("/v1/sandboxes/{id}/execs"), "");
    assert_eq!(serde_json::from_str::<Value>(&execs).unwrap()[0]["running"], true, "paused before its timeout");
    // The time paused is the behaviour under test: a wait, not a race.
    std::thread::sleep(Duration::from_millis(8500));
    // Paused past both the exec's timeout and the TTL's first deadline: nothing fired.
    assert_eq!(record(&d, &id)["state"], "paused");
    assert!(d.berth(&["resume", &id]).status.success());
    let (_, execs) = d.http("GET", &format!("/v1/sandboxes/{id}/execs"), "");
    assert_eq!(serde_json::from_str::<Value>(&execs).unwrap()[0]["running"], true, "still running after the pause");
    let out = common::daemon::wait_output(runner, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(124), "the timeout fired after 4 s of running time, not before");
    let later = record(&d, &id)["expires_at_ms"].as_u64().unwrap();
    assert!(later >= expires + 8400, "the TTL moved by the time paused: {expires} -> {later}");
    // Bad input: a sandbox that is not running cannot be paused; unknown ones are 404.
    let (status, body) = d.http("POST", "/v1/sandboxes/nope/pause", "");
    assert_eq!(status, 404, "{body}");
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"idle_pause_seconds": -1}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("idle_pause_seconds"), "{body}");
}

/// A paused sandbox being forked with its processes stays frozen until the fork is done: an exec that comes
/// meanwhile waits for the fork, then resumes it (never thaws it in the middle of the checkpoint).
#[test]
fn activity_on_a_paused_sandbox_mid_fork_waits_for_the_fork() {
    let d = Daemon::start();
    let id = d.create(&[]);
    d.sh(&id, "echo 5 > /tmp/n");
    assert!(d.berth(&["pause", &id]).status.success());
    let images = d.root().join("hibernate");
    let fork_and_exec = std::thread::scope(|s| {
        let fork = s.spawn(|| d.berth(&["fork", &id, "--with-processes"]));
        // The fork's image directory appears once it holds the sandbox.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut caught = false;
        while Instant::now() < deadline && !fork.is_finished() {
            let made =
                std::fs::read_dir(&images).map(|dir| dir.flatten().any(|e| e.file_name() != ".init")).unwrap_or(false);
            if made {
                caught = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let exec = d.berth(&["exec", &id, "--", "cat", "/tmp/n"]);
        (fork.join().unwrap(), exec, caught)
    });
    let (fork, exec, caught) = fork_and_exec;
    assert!(fork.status.success(), "{}", text(&fork.stderr));
    assert!(exec.status.success(), "{}", text(&exec.stderr));
    assert_eq!(text(&exec.stdout), "5\n");
    assert_eq!(record(&d, &id)["state"], "running", "the exec resumed it");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    let actions: Vec<String> = serde_json::from_str::<Vec<Value>>(&journal)
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap_or_default().to_string())
        .collect();
    let at = |a: &str| actions.iter().rposition(|x| x == a).unwrap_or_else(|| panic!("no {a} in {actions:?}"));
    if caught {
        assert!(at("fork") < at("resume"), "resumed in the middle of the fork: {actions:?}");
    }
    let child = text(&fork.stdout).trim().to_string();
    assert_eq!(d.sh(&child, "cat /tmp/n"), "5\n");
}

/// A paused sandbox whose hibernation fails after it was thawed for the dump is paused again, still frozen
/// where it was: CRIU here is a wrapper that refuses every dump and passes everything else to the real one.
#[test]
fn a_paused_sandbox_whose_hibernation_fails_is_paused_again() {
    let Some(real) = ["/usr/local/sbin/criu", "/usr/sbin/criu", "/sbin/criu"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("CRIU is not installed: run scripts/setup");
    };
    let bin = tempfile::Builder::new().prefix("berth-criu-").tempdir().unwrap();
    let wrapper = bin.path().join("criu");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" dump \"*)\n  while [ $# -gt 0 ]; do [ \"$1\" = -D ] && d=\"$2\"; shift; done\n  \
             echo '(00.001) Error (criu/test.c:1): dump refused by the test' > \"$d/dump.log\"; exit 1;;\nesac\n\
             exec {real} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let d = Daemon::start_with_env(&[("PATH", &path)]);
    let id = counting(&d);
    assert!(d.berth(&["pause", &id]).status.success());
    // Thawed for the attempt, it runs while CRIU tries; refused, it is frozen again.
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("could not hibernate, and runs on as it was"), "{body}");
    assert!(body.contains("dump refused by the test"), "CRIU's own words are passed on: {body}");
    // Its log is kept where the message says, though the image directory is gone.
    let log = body.split("(log: ").nth(1).and_then(|r| r.split(')').next()).unwrap();
    assert!(log.starts_with(&d.root().join("logs").join(&id).display().to_string()), "{log}");
    assert!(std::fs::read_to_string(log).unwrap().contains("dump refused by the test"));
    let r = record(&d, &id);
    assert_eq!(r["state"], "paused", "{r}");
    let still = count(&d, &id);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(count(&d, &id), still, "a sandbox paused again does not run");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    let pauses =
        serde_json::from_str::<Vec<Value>>(&journal).unwrap().iter().filter(|r| r["action"] == "pause").count();
    assert_eq!(pauses, 2, "the pause asked, and the one after the failed hibernation: {journal}");
    // And it resumes as any paused one.
    assert!(d.berth(&["resume", &id]).status.success());
    wait_for("the counter to go on", Duration::from_secs(10), || count(&d, &id) > still + 2);
}
