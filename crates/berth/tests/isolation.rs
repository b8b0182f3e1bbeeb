//! The daemon's sandboxes behind each isolation: what a user relies on (exec, files, egress, the session
//! token, limits, pause, persistence, fork of files, teardown) holds the same on gVisor as on namespaces,
//! through the same API; what gVisor sandboxes do not do yet says so in one sentence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// Run an exec through the API; its frames.
fn exec(d: &Daemon, id: &str, req: Value) -> Vec<Value> {
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/execs"), &req.to_string());
    assert_eq!(status, 200, "{body}");
    body.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn output(frames: &[Value], stream: &str) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "output" && f["stream"] == stream)
        .map(|f| f["data"].as_str().unwrap())
        .collect()
}

fn exit(frames: &[Value]) -> Value {
    frames.iter().find(|f| f["type"] == "exit").cloned().unwrap_or_else(|| panic!("no exit frame: {frames:?}"))
}

fn inspect(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

on_each_daemon_isolation! {
    /// The sandbox runs behind the daemon's isolation, says so, and sees the kernel that isolation gives.
    fn a_sandbox_runs_behind_the_daemons_isolation(d, iso) {
        let id = d.create(&[]);
        assert_eq!(inspect(d, &id)["isolation"], iso);
        let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let seen = d.sh(&id, "uname -r");
        assert_eq!(seen.trim() == host.trim(), iso == "namespaces", "{iso} sandbox saw kernel {seen}");
        // The other isolation, asked for by name, overrides the daemon's.
        let other = if iso == "gvisor" { "namespaces" } else { "gvisor" };
        let id2 = d.create(&["--isolation", other]);
        assert_eq!(inspect(d, &id2)["isolation"], other);
        let seen = d.sh(&id2, "uname -r");
        assert_eq!(seen.trim() == host.trim(), other == "namespaces", "{other} sandbox saw kernel {seen}");
    }
}

on_each_daemon_isolation! {
    /// stdout and stderr come apart, stdin arrives, the exit code is the command's.
    fn an_exec_streams_its_output_takes_stdin_and_exits_with_its_code(d, _iso) {
        let id = d.create(&[]);
        let frames = exec(
            d,
            &id,
            serde_json::json!({"argv": ["sh", "-c", "cat; echo to-err >&2; exit 3"], "stdin": "the input\n"}),
        );
        assert_eq!(output(&frames, "stdout"), "the input\n");
        assert_eq!(output(&frames, "stderr"), "to-err\n");
        assert_eq!(exit(&frames)["exit_code"], 3);
        // A missing command is 127 with a sentence, as in a shell.
        let frames = exec(d, &id, serde_json::json!({"argv": ["no-such-command"]}));
        assert_eq!(exit(&frames)["exit_code"], 127, "{frames:?}");
    }
}

on_each_daemon_isolation! {
    /// A timeout kills the command and what it started in the background, server-side.
    fn a_timeout_kills_the_whole_tree(d, _iso) {
        let id = d.create(&[]);
        let frames = exec(
            d,
            &id,
            serde_json::json!({"argv": ["sh", "-c", "sleep 300 & echo $! > /tmp/bg; wait"], "timeout_seconds": 1.0}),
        );
        let end = exit(&frames);
        assert_eq!(end["exit_code"], 124, "{end}");
        assert_eq!(end["timed_out"], true);
        let gone = d.berth(&["exec", &id, "--", "sh", "-c", "kill -0 $(cat /tmp/bg)"]);
        assert_eq!(gone.status.code(), Some(1), "the background sleeper outlived the timeout");
    }
}

on_each_daemon_isolation! {
    /// A timeout reaches what left the command's process group too (setsid), seen from inside the sandbox.
    fn a_timeout_kills_what_left_the_process_group(d, _iso) {
        let id = d.create(&[]);
        let script = "setsid sleep 301 & setsid sh -c 'sleep 302 & wait' & sleep 303";
        let out = d.berth(&["exec", &id, "--timeout", "1s", "--", "sh", "-c", script]);
        assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
        let left = || d.sh(&id, "ps -e -o args= | grep -c '^sleep 30[123]' || true").trim().to_string();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while left() != "0" {
            assert!(std::time::Instant::now() < deadline, "sleepers outlived the timeout: {}", d.sh(&id, "ps -e -o pid,args"));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

on_each_daemon_isolation! {
    /// An exec killed from another process ends, with what it started.
    fn an_exec_is_killed_from_another_process(d, _iso) {
        let id = d.create(&[]);
        let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", "sleep 300 & sleep 300"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let exec_id = text(&out.stdout).trim().to_string();
        let kill = d.berth(&["kill", &id, &exec_id]);
        assert!(kill.status.success(), "{}", text(&kill.stderr));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let state = loop {
            let execs = d.execs(&id);
            let x = execs.iter().find(|e| e["exec_id"] == exec_id.as_str()).unwrap().clone();
            if !x["result"].is_null() || std::time::Instant::now() > deadline {
                break x;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(state["result"]["killed"], true, "{state}");
        assert_eq!(d.sh(&id, "ps -e -o comm= | grep -c '^sleep$' || true").trim(), "0", "a sleeper outlived the kill");
    }
}

on_each_daemon_isolation! {
    /// Past the output budget the client gets the head and tail with a marker; the log keeps everything.
    fn the_output_budget_truncates_visibly_and_the_log_keeps_it_all(d, _iso) {
        let id = d.create(&[]);
        let frames = exec(
            d,
            &id,
            serde_json::json!({"argv": ["sh", "-c", "seq 1 20000"], "max_output_bytes": 2000}),
        );
        let dropped: u64 = frames.iter().filter(|f| f["type"] == "truncated").map(|f| f["dropped_bytes"].as_u64().unwrap()).sum();
        assert!(dropped > 90_000, "{dropped}");
        assert!(output(&frames, "stdout").ends_with("20000\n"), "the tail is kept");
        let exec_id = exit(&frames)["exec_id"].as_str().unwrap().to_string();
        let logs = d.berth(&["logs", &id, &exec_id]);
        assert_eq!(text(&logs.stdout).lines().count(), 20000);
    }
}

on_each_daemon_isolation! {
    /// The files API and the sandbox's commands see the same files, both ways, in the workspace, in /tmp and
    /// in the root.
    fn the_files_api_and_the_sandbox_see_the_same_files(d, _iso) {
        let id = d.create(&[]);
        for dir in ["/workspace", "/tmp", "/etc"] {
            let path = format!("{dir}/from-host");
            let (status, _) = d.files("PUT", &id, "files", &path, "", b"written by the host\n");
            assert!((200..300).contains(&status), "{path}: {status}");
            assert_eq!(d.sh(&id, &format!("cat {path}")), "written by the host\n", "{path}");
            // Written again: the sandbox sees the new contents, not what it read before.
            let (status, _) = d.files("PUT", &id, "files", &path, "", b"again\n");
            assert!((200..300).contains(&status), "{path}: {status}");
            assert_eq!(d.sh(&id, &format!("cat {path}")), "again\n", "{path}");
            d.sh(&id, &format!("echo written inside > {dir}/from-inside"));
            let (status, body) = d.files("GET", &id, "files", &format!("{dir}/from-inside"), "", b"");
            assert_eq!((status, text(&body)), (200, "written inside\n".to_string()), "{dir}");
        }
        // The sandbox's files stay its own: the files API does not leave its root.
        let (status, _) = d.files("GET", &id, "files", "/../../../etc/shadow", "", b"");
        assert_ne!(status, 200);
    }
}

/// An HTTP server on the host's loopback answering `body`; its port.
fn upstream(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    port
}

on_each_daemon_isolation! {
    /// Egress goes through the sandbox's proxy: what the policy names gets out, the rest is refused, and both
    /// are in the egress log.
    fn egress_is_default_deny_through_the_proxy_and_logged(d, _iso) {
        let port = upstream("hello from upstream");
        let rule = format!("allowed.test:{port}");
        let id = d.create(&["--allow-net", &rule, "--add-host", "allowed.test:127.0.0.1", "--add-host", "other.test:127.0.0.1"]);
        let fetch = |url: String| text(&d.berth(&["exec", &id, "--", "python3", "-c", common::FETCH, &url]).stdout).trim().to_string();
        assert_eq!(fetch(format!("http://allowed.test:{port}/")), "200 hello from upstream");
        assert!(fetch(format!("http://other.test:{port}/")).starts_with("403"), "a host the policy does not name");
        let out = d.berth(&["net", "log", &id, "--json"]);
        let log: Vec<Value> = serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone();
        let verdicts: Vec<(String, String)> = log
            .iter()
            .map(|r| (r["host"].as_str().unwrap().to_string(), r["verdict"].as_str().unwrap().to_string()))
            .collect();
        assert!(verdicts.contains(&("allowed.test".into(), "allowed".into())), "{verdicts:?}");
        assert!(verdicts.contains(&("other.test".into(), "denied".into())), "{verdicts:?}");
        let allowed = log.iter().find(|r| r["verdict"] == "allowed").unwrap();
        assert!(allowed["exec"].as_str().is_some_and(|e| e.starts_with('x')), "the attempt names its exec: {allowed}");
        // Nothing but the proxy: a direct connection to the host's loopback server does not get there.
        let direct = d.berth(&["exec", &id, "--", "python3", "-c",
            &format!("import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('reached')\nexcept OSError as e:\n    print('refused')")]);
        assert_eq!(text(&direct.stdout).trim(), "refused");
    }
}

on_each_daemon_isolation! {
    /// The session token reaches berth's API from inside, sees its own sandbox, and dies with it.
    fn the_session_token_reaches_the_api_from_inside(d, iso) {
        let id = d.create(&[]);
        let script = r#"
import json, os, urllib.request
req = urllib.request.Request(os.environ["BERTH_API"] + "/v1/sandboxes/" + os.environ["BERTH_SANDBOX_ID"],
                             headers={"Authorization": "Bearer " + os.environ["BERTH_TOKEN"]})
r = json.load(urllib.request.urlopen(req, timeout=10))
print(r["id"], r["isolation"])
"#;
        let out = d.berth(&["exec", &id, "--", "python3", "-c", script]);
        assert_eq!(text(&out.stdout).trim(), format!("{id} {iso}"), "{}", text(&out.stderr));
    }
}

on_each_daemon_isolation! {
    /// A memory limit holds: going over it is an OOM kill (137) of the command, named as such, behind either
    /// isolation; the sandbox and its other processes go on.
    fn the_memory_limit_holds(d, iso) {
        let id = d.create(&["--memory", "256M"]);
        let frames = exec(d, &id, serde_json::json!({"argv": ["python3", "-c", "b = bytearray(400 << 20); print('allocated')"]}));
        let end = exit(&frames);
        assert_eq!(end["exit_code"], 137, "{frames:?}");
        assert_eq!(end["oom_killed"], true, "{end}");
        assert_eq!(output(&frames, "stdout"), "");
        // The command is killed and the sandbox goes on: behind namespaces by the kernel's OOM killer, behind
        // gVisor (whose kernel has none) by init, which holds the limit inside (docs/security.md).
        assert_eq!(d.sh(&id, "echo still here"), "still here\n");
        // A command started before the hog lives through it too; the hog was the one that held the most.
        let frames = exec(d, &id, serde_json::json!({"argv": ["sh", "-c", "sleep 30 & echo started"]}));
        assert_eq!(output(&frames, "stdout"), "started\n");
        let hog = exec(d, &id, serde_json::json!({"argv": ["python3", "-c", "x = []\nwhile True: x.append(b'x' * (1 << 20))"]}));
        assert_eq!(exit(&hog)["oom_killed"], true, "{hog:?}");
        assert_eq!(d.sh(&id, "grep -lx sleep /proc/[0-9]*/comm >/dev/null && echo sleeping"), "sleeping\n", "{iso}");
        let fine = exec(d, &id, serde_json::json!({"argv": ["true"]}));
        assert_eq!(exit(&fine)["oom_killed"], false, "the flag is the exec's own: {fine:?}");
    }
}

on_each_daemon_isolation! {
    /// A disk quota holds: a write past it fails inside, and the sandbox works again once it frees space.
    fn the_disk_quota_holds(d, _iso) {
        let id = d.create(&["--disk", "64M"]);
        d.assert_quota_holds(&id);
    }
}

on_each_daemon_isolation! {
    /// A pids limit holds: a fork bomb gets no further than it, and the sandbox goes on.
    fn the_pids_limit_holds(d, _iso) {
        let id = d.create(&["--pids", "32"]);
        let out = d.berth(&["exec", &id, "--", "python3", "-c", common::FORK_BOMB]);
        let said = text(&out.stdout);
        let started: u32 = said.split_whitespace().next().unwrap_or_else(|| panic!("{said} {}", text(&out.stderr))).parse().unwrap();
        assert!(started < 32, "started {started} processes under a limit of 32");
        assert!(started > 5, "the fork bomb could not start even a few: {said}");
        assert_eq!(d.sh(&id, "echo still here"), "still here\n");
    }
}

on_each_daemon_isolation! {
    /// Paused, a sandbox is frozen and says so; resumed, its processes go on where they were.
    fn pause_freezes_and_resume_continues(d, _iso) {
        let id = d.create(&[]);
        d.sh(&id, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done) >/dev/null 2>&1 &");
        let read = || {
            let (s, b) = d.files("GET", &id, "files", "/tmp/count", "", b"");
            assert_eq!(s, 200);
            text(&b).trim().parse::<u64>().unwrap()
        };
        // The loop runs in the background: its first count may come after the exec that started it has ended.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while d.files("GET", &id, "files", "/tmp/count", "", b"").0 != 200 {
            assert!(std::time::Instant::now() < deadline, "the counter did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = d.berth(&["pause", &id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(inspect(d, &id)["state"], "paused");
        let resume = d.berth(&["resume", &id]);
        assert!(resume.status.success(), "{}", text(&resume.stderr));
        assert_eq!(inspect(d, &id)["state"], "running");
        let before = read();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while read() <= before {
            assert!(std::time::Instant::now() < deadline, "the counter did not go on after resume");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

on_each_daemon_isolation! {
    /// A persistent sandbox keeps its workspace and root changes through stop and start.
    fn a_persistent_sandbox_keeps_its_files_through_stop_and_start(d, iso) {
        let id = d.create(&["--persistent"]);
        d.sh(&id, "echo kept > /workspace/note; echo root-too > /etc/berth-note");
        assert!(d.berth(&["stop", &id]).status.success());
        assert_eq!(inspect(d, &id)["state"], "stopped");
        let start = d.berth(&["start", &id]);
        assert!(start.status.success(), "{}", text(&start.stderr));
        assert_eq!(d.sh(&id, "cat /workspace/note /etc/berth-note"), "kept\nroot-too\n");
        assert_eq!(inspect(d, &id)["isolation"], iso, "start keeps the isolation it was created with");
    }
}

on_each_daemon_isolation! {
    /// A fork of the files copies them, copy-on-write, into a child behind the same isolation.
    fn a_fork_of_files_copies_them_into_a_child_behind_the_same_isolation(d, iso) {
        let id = d.create(&[]);
        d.sh(&id, "echo parent > /workspace/theory");
        let out = d.berth(&["fork", &id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let child = text(&out.stdout).trim().to_string();
        assert_eq!(inspect(d, &child)["isolation"], iso);
        assert_eq!(d.sh(&child, "cat /workspace/theory; echo child > /workspace/theory"), "parent\n");
        assert_eq!(d.sh(&id, "cat /workspace/theory"), "parent\n", "the child's change reached the parent");
    }
}

on_each_daemon_isolation! {
    /// Removal goes through the same teardown, with a receipt whose leak check is clean.
    fn removal_leaves_a_clean_receipt(d, _iso) {
        let id = d.create(&[]);
        d.sh(&id, "echo out > /workspace/result; sleep 300 >/dev/null 2>&1 &");
        let out = d.berth(&["rm", &id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let receipt = d.berth(&["receipt", &id, "--json"]);
        let r: Value = serde_json::from_slice(&receipt.stdout).unwrap_or_else(|_| panic!("{}", text(&receipt.stderr)));
        assert_eq!(r["clean"], true, "{r}");
        assert!(!r["revoked"].as_array().unwrap().is_empty(), "{r}");
    }
}

/// A daemon whose sandboxes default to gVisor.
fn gvisor_daemon() -> Daemon {
    Daemon::start_with(&["--isolation", "gvisor"])
}

#[test]
fn what_gvisor_sandboxes_do_not_do_yet_says_so_in_one_sentence() {
    let d = gvisor_daemon();
    let id = d.create(&[]);
    // A fork with its processes (a checkpoint of them).
    let out = d.berth(&["fork", &id, "--with-processes"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("a gVisor sandbox's running processes cannot be checkpointed"),
        "{}",
        text(&out.stderr)
    );
    // The sandbox is untouched by all of it.
    assert_eq!(d.sh(&id, "echo fine"), "fine\n");
    assert_eq!(inspect(&d, &id)["state"], "running");
}

#[test]
fn an_isolation_the_host_lacks_is_an_error_never_a_fallback() {
    let d = Daemon::start_with_env(&[("BERTH_RUNSC", "/nonexistent/runsc")]);
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"isolation": "gvisor"}"#);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("isolation gvisor: /nonexistent/runsc"), "{body}");
    assert!(d.ids().is_empty(), "a sandbox was made anyway");
    let (_, info) = d.http("GET", "/v1/info", "");
    let info: Value = serde_json::from_str(&info).unwrap();
    let gvisor = info["isolations"].as_array().unwrap().iter().find(|i| i["isolation"] == "gvisor").unwrap();
    assert_eq!(gvisor["available"], false, "{gvisor}");
    assert_eq!(info["isolation"], "namespaces");
    // An isolation berth does not know is the request's error.
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"isolation": "firecracker"}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("namespaces") && body.contains("gvisor"), "the error names what there is: {body}");
    // A daemon told to default to a backend the host lacks does not start.
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--socket")
        .arg(dir.path().join("sock"))
        .args(["daemon", "--isolation", "gvisor", "--storage", "none"])
        .env("BERTH_RUNSC", "/nonexistent/runsc")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--isolation gvisor: /nonexistent/runsc"), "{}", text(&out.stderr));
}

#[test]
fn the_daemon_says_which_isolations_this_host_offers() {
    let d = gvisor_daemon();
    let (status, info) = d.http("GET", "/v1/info", "");
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["isolation"], "gvisor");
    let names: Vec<(&str, bool)> = info["isolations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["isolation"].as_str().unwrap(), i["available"].as_bool().unwrap()))
        .collect();
    assert_eq!(names, [("namespaces", true), ("gvisor", true)]);
}
