//! Behaviours the documents promise of daemon sandboxes, each checked on its own: clocks (TTL, idle) that run
//! while a sandbox is stopped or the daemon is down, limits (memory, processes, CPU) and landlock on sandboxes
//! the daemon made, what `stop` ends, and the bounds on what a session token may make.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, tcp_http};
use common::text;
use serde_json::Value;

/// Poll `done` every 100 ms until it holds, failing with `what` after `secs` seconds.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn state(d: &Daemon, id: &str) -> String {
    let v: Value = serde_json::from_slice(&d.berth(&["inspect", id, "--json"]).stdout).unwrap_or(Value::Null);
    v["state"].as_str().unwrap_or("").to_string()
}

/// Whether `child` has exited, without waiting.
fn ended(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_some()
}

#[test]
fn a_stopped_sandbox_whose_ttl_runs_out_is_removed() {
    let d = Daemon::start();
    // Long enough that a loaded host still stops it before the TTL runs out.
    let id = d.create(&["--ttl", "8s", "--persistent"]);
    let stopped = d.berth(&["stop", &id]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    assert_eq!(state(&d, &id), "stopped");
    wait_for(30, "a stopped sandbox outlived its TTL", || !d.ids().contains(&id));
}

#[test]
fn what_expired_while_the_daemon_was_down_is_reaped_at_start() {
    let mut d = Daemon::start();
    let expiring = d.create(&["--ttl", "2s"]);
    let keep = d.create(&[]);
    d.kill();
    // Let the TTL run out with nobody watching (the shims live on), then start a new daemon.
    std::thread::sleep(Duration::from_secs(3));
    d.spawn();
    wait_for(20, "a sandbox that expired while the daemon was down was not reaped", || !d.ids().contains(&expiring));
    assert_eq!(d.ids(), [keep], "only the expired one goes");
    let journal = d.berth(&["journal", &expiring]);
    assert!(text(&journal.stdout).contains("ttl"), "its journal says why: {}", text(&journal.stdout));
}

#[test]
fn a_running_exec_keeps_a_sandbox_from_being_idle() {
    let d = Daemon::start();
    let id = d.create(&["--idle-timeout", "2s"]);
    // One exec that lasts longer than the idle timeout: the sandbox is busy, not idle, for all of it.
    let out = d.berth(&["exec", &id, "--", "sleep", "5"]);
    assert!(out.status.success(), "the exec was cut short: {}", text(&out.stderr));
    assert!(d.ids().contains(&id), "a sandbox running an exec was removed as idle");
    wait_for(30, "the idle sandbox was never removed", || !d.ids().contains(&id));
}

#[test]
fn each_exec_restarts_the_idle_clock() {
    let d = Daemon::start();
    let id = d.create(&["--idle-timeout", "3s"]);
    // Short execs half a second apart for longer than the timeout: each one starts the clock again.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let out = d.berth(&["exec", &id, "--", "true"]);
        assert!(out.status.success(), "the sandbox went while in use: {}", text(&out.stderr));
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(d.ids().contains(&id));
    wait_for(30, "the sandbox was never removed once left alone", || !d.ids().contains(&id));
}

#[test]
fn a_running_shell_keeps_a_sandbox_from_being_idle_and_stop_ends_execs_and_shells() {
    let d = Daemon::start();
    let id = d.create(&["--idle-timeout", "2s", "--persistent"]);
    let mut exec = d.cmd(&["exec", &id, "--", "sleep", "1000"]).stdout(Stdio::null()).spawn().unwrap();
    let mut shell = d.cmd(&["shell", &id]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    shell.stdin.as_mut().unwrap().write_all(b"echo ready; sleep 1000\n").unwrap();
    wait_for(20, "the exec and the shell did not start", || {
        let ps: Value = serde_json::from_slice(&d.berth(&["ps", &id, "--json"]).stdout).unwrap_or(Value::Null);
        ps.as_array().is_some_and(|a| a.len() >= 2)
    });
    // Well past the idle timeout, both still hold it.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(state(&d, &id), "running", "a sandbox with a running exec and shell was treated as idle");
    assert!(!ended(&mut exec) && !ended(&mut shell));

    let stopped = d.berth(&["stop", &id]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    wait_for(20, "stop left the exec's client waiting", || ended(&mut exec));
    wait_for(20, "stop left the shell open", || ended(&mut shell));
    assert!(!exec.wait().unwrap().success(), "an exec ended by stop does not read as a success");
    assert_eq!(state(&d, &id), "stopped");
    let ps: Value = serde_json::from_slice(&d.berth(&["ps", &id, "--json"]).stdout).unwrap_or(Value::Null);
    assert!(
        ps.as_array().is_none_or(|a| a.iter().all(|e| e["state"] != "running")),
        "execs still running in a stopped sandbox: {ps}"
    );
}

/// The `exit` frame of `berth exec --json`'s output (its result).
fn exit_frame(out: &std::process::Output) -> Value {
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|f| f["type"] == "exit")
        .unwrap_or_else(|| panic!("no exit frame in {} {}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn memory_and_pids_limits_hold_on_daemon_sandboxes() {
    let d = Daemon::start();
    let id = d.create(&["--memory", "64M", "--pids", "32"]);
    let hog = d.berth(&["exec", &id, "--json", "--", "python3", "-c", "x = bytearray(512 << 20); print('survived')"]);
    assert_eq!(hog.status.code(), Some(137), "{} {}", text(&hog.stdout), text(&hog.stderr));
    assert!(!text(&hog.stdout).contains("survived"));
    let result = exit_frame(&hog);
    assert_eq!((&result["exit_code"], &result["oom_killed"]), (&Value::from(137), &Value::from(true)), "{result}");
    assert!(d.ids().contains(&id), "the sandbox outlives the process the limit killed");
    // The flag is the exec's own: the next one, in the same sandbox, was not killed.
    let fine = exit_frame(&d.berth(&["exec", &id, "--json", "--", "true"]));
    assert_eq!((&fine["exit_code"], &fine["oom_killed"]), (&Value::from(0), &Value::from(false)), "{fine}");
    let listed = d.execs(&id);
    let hog_id = result["exec_id"].as_str().unwrap();
    let hog_info = listed.iter().find(|e| e["exec_id"] == hog_id).expect("the hog is in the execs list");
    assert_eq!(hog_info["result"]["oom_killed"], true, "the list keeps it too: {hog_info}");

    let out = d.berth(&["exec", &id, "--", "python3", "-c", common::FORK_BOMB]);
    let counts: Vec<u32> = text(&out.stdout).split_whitespace().filter_map(|n| n.parse().ok()).collect();
    assert_eq!(counts.len(), 2, "{} {}", text(&out.stdout), text(&out.stderr));
    assert!(counts[0] >= 10, "the bomb should have filled the limit, started {}", counts[0]);
    assert!(counts[0] < 200, "every fork succeeded despite the limit");
    assert!(counts[1] <= 32, "{} processes with a limit of 32", counts[1]);
}

#[test]
fn a_session_token_makes_at_most_eight_sandboxes_and_a_childs_token_makes_none() {
    let api_port = common::free_port();
    let d = Daemon::start_with(&["--listen", &format!("127.0.0.1:{api_port}")]);
    // Each child takes a share of its owner's memory and processes, so the owner has room for eight.
    let owner = d.create(&["--memory", "4G", "--pids", "1024"]);
    let token_of = |id: &str| text(&d.berth(&["exec", id, "--", "printenv", "BERTH_TOKEN"]).stdout).trim().to_string();
    const CHILD: &str = r#"{"memory_bytes": 268435456, "pids": 64}"#;
    let addr = format!("127.0.0.1:{api_port}");
    let create = |token: &str| {
        let (status, body) = tcp_http(&addr, "POST", "/v1/sandboxes", Some(token), CHILD);
        (status, serde_json::from_str::<Value>(body.trim()).unwrap_or(Value::Null))
    };
    let token = token_of(&owner);
    let mut children = Vec::new();
    for n in 0..8 {
        let (status, body) = create(&token);
        assert_eq!(status, 201, "child {n}: {body}");
        children.push(body["id"].as_str().unwrap().to_string());
    }
    let (status, body) = create(&token);
    assert_eq!(status, 409, "a ninth child: {body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("the most it may have"), "{body}");

    let (status, body) = create(&token_of(&children[0]));
    assert_eq!(status, 409, "a child's own token: {body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("cannot make sandboxes of its own"), "{body}");
    assert_eq!(d.ids().len(), 9, "nothing was made by the refused requests");

    let rm = d.berth(&["rm", &owner]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    assert!(d.ids().is_empty(), "the children go with their owner: {:?}", d.ids());
}

on_each_daemon_isolation! {
    fn cpu_limit_holds_on_daemon_sandboxes(d, _iso) {
        // The same two-second spin in a sandbox with a twentieth of a core and in one without a limit, each
        // measured by what the host charged the sandbox's cgroup for it (under gVisor the command's own CPU
        // time is its kernel's account, not the host's). Relative, not against a fixed figure: limited, the
        // spin should cost a twentieth of what the free one does (less on a busy host, where the free one gets
        // less), and must cost less than half of it.
        const SPIN: &str = "import time\nend = time.monotonic() + 2\nwhile time.monotonic() < end:\n    pass\n";
        let charged = |id: &str| -> f64 {
            let out = d.berth(&["usage", id, "--json"]);
            serde_json::from_slice::<Value>(&out.stdout).unwrap()["cpu_seconds"].as_f64().unwrap()
        };
        let burned = |id: &str| {
            let before = charged(id);
            let out = d.berth(&["exec", id, "--", "python3", "-c", SPIN]);
            assert!(out.status.success(), "{} {}", text(&out.stdout), text(&out.stderr));
            ((charged(id) - before) * 1000.0) as u64
        };
        let limited_id = d.create(&["--cpus", "0.05"]);
        let free_id = d.create(&[]);
        let free = burned(&free_id);
        let limited = burned(&limited_id);
        assert!(free > 0, "the unlimited spin burned no CPU");
        assert!(limited * 2 < free, "limited to 0.05 cores the spin burned {limited} ms, unlimited {free} ms");
    }
}

#[test]
fn daemon_sandboxes_show_their_landlock_status_and_are_under_its_rules() {
    let d = Daemon::start();
    let id = d.create(&[]);
    // This host's kernel has landlock ABI 6 or later: every rule of berth's set is enforced, as berth info says
    // and the sandbox's record shows.
    let info: Value = serde_json::from_slice(&d.berth(&["--root", d.root().to_str().unwrap(), "info"]).stdout).unwrap();
    assert!(info["landlock_abi"].as_i64().unwrap() >= 6, "{info}");
    assert_eq!(info["sandbox_landlock"], "enforced", "{info}");
    let record: Value = serde_json::from_slice(&d.berth(&["inspect", &id, "--json"]).stdout).unwrap();
    assert_eq!(record["landlock"], "enforced", "{record}");
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["landlock"], "enforced", "{body}");

    // And they are applied: root inside may not make a device node. The user namespace alone refuses that
    // with EPERM ("Operation not permitted"); landlock refuses it first, with EACCES ("Permission denied").
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "id -u; mknod /tmp/x c 1 3"]);
    assert_eq!(out.status.code(), Some(1), "{} {}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout), "0\n", "the command runs as the sandbox's root");
    assert_eq!(text(&out.stderr).trim(), "mknod: /tmp/x: Permission denied");
    let made = d.berth(&["exec", &id, "--", "test", "-e", "/tmp/x"]);
    assert_eq!(made.status.code(), Some(1), "no node was made: {}", text(&made.stderr));
}

#[test]
fn a_ttl_is_changed_from_now_and_enforced() {
    let d = Daemon::start();
    let id = d.create(&["--ttl", "1h"]);
    // None: it stays.
    let out = d.berth(&["ttl", &id, "none", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["expires_at_ms"].is_null(), "{v}");
    // Bad values are refused, with a sentence, and change nothing.
    assert!(!d.berth(&["ttl", &id, "0"]).status.success());
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/ttl"), r#"{"ttl_seconds": -5}"#);
    assert!(status == 400 && body.contains("ttl_seconds must be positive"), "{status} {body}");
    let (status, body) = d.http("POST", "/v1/sandboxes/nope/ttl", r#"{"ttl_seconds": 5}"#);
    assert_eq!(status, 404, "{body}");
    // Two seconds from now: the reaper removes it then, with nobody asking, and says why.
    let out = d.berth(&["ttl", &id, "2s"]);
    assert!(out.status.success() && text(&out.stdout).contains("is removed in"), "{}", text(&out.stdout));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while d.ids().contains(&id) {
        assert!(std::time::Instant::now() < deadline, "the new TTL was not enforced");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, receipt) = d.http("GET", &format!("/v1/sandboxes/{id}/receipt"), "");
    assert!(receipt.contains("\"reason\":\"reaped\""), "{receipt}");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert_eq!(journal.matches("\"action\":\"ttl\"").count(), 2, "{journal}");
}

#[test]
fn a_running_exec_takes_input_on_its_open_stdin() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let body = r#"{"argv": ["sh", "-c", "read a; echo got:$a; cat; echo end"], "detach": true, "stdin_open": true}"#;
    let (status, started) = d.http("POST", &format!("/v1/sandboxes/{id}/execs"), body);
    assert_eq!(status, 201, "{started}");
    let exec = serde_json::from_str::<serde_json::Value>(&started).unwrap()["exec_id"].as_str().unwrap().to_string();
    let stdin = format!("/v1/sandboxes/{id}/execs/{exec}/stdin");
    assert_eq!(d.http_bytes("POST", &stdin, b"first\n").0, 204);
    assert_eq!(d.http_bytes("POST", &format!("{stdin}?close=true"), b"more\n").0, 204);
    let log = format!("/v1/sandboxes/{id}/execs/{exec}/log?follow=true");
    let (status, out) = d.http("GET", &log, "");
    assert_eq!((status, out.as_str()), (200, "got:first\nmore\nend\n"));
    // Ended: it takes no more, and says why; nor does an exec started without stdin_open, or none at all.
    let (status, body) = d.http_bytes("POST", &stdin, b"late");
    assert!(status == 409 && String::from_utf8_lossy(&body).contains("has ended"), "{status}");
    let (_, quiet) =
        d.http("POST", &format!("/v1/sandboxes/{id}/execs"), r#"{"argv": ["sleep", "30"], "detach": true}"#);
    let quiet = serde_json::from_str::<serde_json::Value>(&quiet).unwrap()["exec_id"].as_str().unwrap().to_string();
    let (status, body) = d.http_bytes("POST", &format!("/v1/sandboxes/{id}/execs/{quiet}/stdin"), b"x");
    assert!(status == 409 && String::from_utf8_lossy(&body).contains("without stdin_open"), "{status}");
    assert_eq!(d.http_bytes("POST", &format!("/v1/sandboxes/{id}/execs/x999/stdin"), b"x").0, 404);
    assert_eq!(d.http_bytes("POST", &format!("{stdin}?shut=1"), b"x").0, 400);
    // The journal has the byte counts, never the bytes.
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert_eq!(journal.matches("\"action\":\"stdin\"").count(), 2, "{journal}");
    assert!(!journal.contains("first") && journal.contains("\"bytes\":6"), "{journal}");
}
