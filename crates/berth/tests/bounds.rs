//! What one sandbox may take of the host, end to end, each bound set small on a real daemon and hit: an
//! exec's log, the finished exec records kept, the journal and its egress records, the connections through
//! the egress proxy; and `berth info` listing them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn journal(d: &Daemon, id: &str) -> Vec<Value> {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap().as_array().unwrap().clone()
}

/// The frames of `berth exec --json`.
fn exec_frames(d: &Daemon, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["exec", "--json"];
    all.extend_from_slice(args);
    let out = d.berth(&all);
    text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn exit_frame(frames: &[Value]) -> Value {
    frames.iter().find(|f| f["type"] == "exit").cloned().unwrap_or_else(|| panic!("no exit frame: {frames:?}"))
}

#[test]
fn an_exec_log_past_its_bound_keeps_its_head_a_marker_and_its_tail() {
    let d = Daemon::start_with(&["--max-log-bytes", "64K"]);
    let id = d.create(&[]);
    // About 590 KB of numbered lines, nine times the bound.
    let frames = exec_frames(&d, &[&id, "--max-output", "1K", "--", "seq", "1", "100000"]);
    let exit = exit_frame(&frames);
    let dropped = exit["log_bytes_dropped"].as_u64().unwrap();
    let total = exit["output_bytes"].as_u64().unwrap();
    assert_eq!(dropped, total - 64 * 1024, "{exit}");
    let file = std::fs::read(d.root().join("logs").join(&id).join("x1.log")).unwrap();
    let log = text(&file);
    let marker = format!("\n[… {dropped} bytes dropped: this log keeps the first 49152 and the last 16384 bytes");
    assert!(log.contains(&marker), "the marker says what went: {}", &log[49_000..49_400]);
    assert!(log.starts_with("1\n2\n3\n"), "the head is kept");
    assert!(log.ends_with("99999\n100000\n"), "the tail is kept");
    assert!(file.len() < 64 * 1024 + 200, "the log is bounded: {} bytes", file.len());
    // `berth logs` shows the same file.
    let logs = d.berth(&["logs", &id, "x1"]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    assert_eq!(logs.stdout, file);

    // One exec may ask for less, not for more than the daemon's bound.
    let frames = exec_frames(&d, &[&id, "--max-log-bytes", "2K", "--", "seq", "1", "10000"]);
    assert!(exit_frame(&frames)["log_bytes_dropped"].as_u64().unwrap() > 0);
    let small = std::fs::read(d.root().join("logs").join(&id).join("x2.log")).unwrap();
    assert!(small.len() < 2048 + 200, "{} bytes", small.len());
    let more = d.berth(&["exec", &id, "--max-log-bytes", "1M", "--", "true"]);
    assert!(!more.status.success());
    assert!(text(&more.stderr).contains("--max-log-bytes"), "{}", text(&more.stderr));
    // Within the bound nothing is dropped or marked.
    let frames = exec_frames(&d, &[&id, "--", "echo", "short"]);
    assert_eq!(exit_frame(&frames)["log_bytes_dropped"], 0);
    assert_eq!(text(&d.berth(&["logs", &id, "x3"]).stdout), "short\n");
}

#[test]
fn a_shell_log_is_bounded_the_same_way() {
    let d = Daemon::start_with(&["--max-log-bytes", "4K"]);
    let id = d.create(&[]);
    let out = d.shell(&[&id, "--cmd", "seq 1 5000"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = std::fs::read(d.root().join("logs").join(&id).join("x1.log")).unwrap();
    let log = text(&log);
    assert!(log.len() < 4096 + 200, "{} bytes", log.len());
    assert!(log.starts_with("1\r\n2\r\n"), "the head is kept: {}", &log[..20]);
    assert!(log.trim_end().ends_with("4999\r\n5000"), "the tail is kept: {}", &log[log.len() - 40..]);
    assert!(log.contains(" bytes dropped: this log keeps the first 3072 and the last 1024 bytes"), "{log}");
    let record = d.execs(&id).into_iter().find(|e| e["exec_id"] == "x1").unwrap();
    assert!(record["result"]["log_bytes_dropped"].as_u64().unwrap() > 20_000, "{record}");
}

#[test]
fn only_the_newest_finished_exec_records_and_their_logs_are_kept() {
    let d = Daemon::start_with(&["--max-exec-records", "3"]);
    let id = d.create(&[]);
    for i in 1..=6 {
        d.sh(&id, &format!("echo run {i}"));
    }
    let kept: Vec<String> = d.execs(&id).iter().map(|e| e["exec_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(kept.len(), 3, "{kept:?}");
    for old in ["x1", "x2", "x3"] {
        assert!(!kept.contains(&old.to_string()), "{old} should be gone: {kept:?}");
        let logs = d.berth(&["logs", &id, old]);
        assert_ne!(logs.status.code(), Some(0), "the log of {old} is gone with its record");
    }
    let files = std::fs::read_dir(d.root().join("logs").join(&id)).unwrap().count();
    assert_eq!(files, 3, "the logs of removed records are removed");
    assert_eq!(text(&d.berth(&["logs", &id, "x6"]).stdout), "run 6\n");
    // The journal still records every exec.
    let finished = journal(&d, &id).iter().filter(|r| r["action"] == "exec_finished").count();
    assert_eq!(finished, 6);

    // A running exec is never removed, however many finish after it.
    let running = d.berth(&["exec", &id, "--detach", "--", "sleep", "30"]);
    let running = text(&running.stdout).trim().to_string();
    for _ in 0..4 {
        d.sh(&id, "true");
    }
    let kept: Vec<String> = d.execs(&id).iter().map(|e| e["exec_id"].as_str().unwrap().to_string()).collect();
    assert!(kept.contains(&running), "{running} runs and is kept: {kept:?}");
    assert!(kept.len() <= 4, "{kept:?}");
    // A restarted daemon keeps no more of the logs than it would have kept records.
    assert!(d.berth(&["kill", &id, &running]).status.success());
    let mut d = d;
    d.kill();
    d.spawn();
    // The logs the previous daemon left go in turn as new execs start, oldest first.
    for i in 1..=5 {
        d.sh(&id, &format!("echo again {i}"));
    }
    let mut left: Vec<String> = std::fs::read_dir(d.root().join("logs").join(&id))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left.len(), 3, "at most --max-exec-records logs after a restart: {left:?}");
    assert_eq!(text(&d.berth(&["logs", &id, "x16"]).stdout), "again 5\n", "{left:?}");
}

#[test]
fn a_full_journal_refuses_file_and_network_changes_too() {
    let d = Daemon::start_with(&["--max-journal-bytes", "64K"]);
    let id = d.create(&[]);
    let jpath = d.root().join("journal").join(format!("{id}.jsonl"));
    // A long path makes each write's record about 3 KB; writing it again and again fills the journal.
    let path = format!("/tmp/{}f", "d/".repeat(1400));
    let mut refused = None;
    for _ in 0..60 {
        let (status, body) = d.files("PUT", &id, "files", &path, "&parents=true", b"x");
        if status != 200 && status != 201 {
            refused = Some((status, text(&body)));
            break;
        }
    }
    let (status, why) = refused.expect("file writes never filled the journal");
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("--max-journal-bytes") && why.contains("no file is changed"), "{why}");
    let size = std::fs::metadata(&jpath).unwrap().len();
    assert!(size < 64 * 1024 + 4096, "over by at most one write's record: {size}");
    // Nothing is changed unrecorded, whichever way.
    let (status, _) = d.files("PUT", &id, "files", "/tmp/new", "", b"x");
    assert_eq!(status, 409);
    assert_eq!(d.files("POST", &id, "mkdir", "/tmp/newdir", "", b"").0, 409);
    assert_eq!(d.files("DELETE", &id, "files", &path, "", b"").0, 409);
    let net = d.berth(&["net", "allow", &id, "example.com:443"]);
    assert!(!net.status.success());
    assert!(text(&net.stderr).contains("the network policy is not changed"), "{}", text(&net.stderr));
    let snap = d.berth(&["snapshot", &id]);
    assert!(!snap.status.success(), "{}", text(&snap.stdout));
    assert_eq!(std::fs::metadata(&jpath).unwrap().len(), size, "refusals add no records");
    assert_eq!(d.files("GET", &id, "stat", "/tmp/new", "", b"").0, 404);
    assert_eq!(d.files("GET", &id, "stat", "/tmp/newdir", "", b"").0, 404);
    // Ending it is still done and recorded.
    assert!(d.berth(&["rm", &id]).status.success());
    assert_eq!(journal(&d, &id).last().unwrap()["action"], "remove");
}

#[test]
fn past_its_running_exec_bound_a_sandbox_starts_no_more_until_one_ends() {
    let d = Daemon::start_with(&["--max-running-execs", "2"]);
    let id = d.create(&[]);
    let first = d.berth(&["exec", &id, "--detach", "--", "sleep", "60"]);
    let first = text(&first.stdout).trim().to_string();
    assert!(d.berth(&["exec", &id, "--detach", "--", "sleep", "60"]).status.success());
    let third = d.berth(&["exec", &id, "--", "true"]);
    assert!(!third.status.success());
    let why = text(&third.stderr);
    assert!(why.contains("has 2 execs running") && why.contains("--max-running-execs"), "{why}");
    let shell = d.shell(&[&id, "--cmd", "true"], "");
    assert!(!shell.status.success(), "a shell counts too");
    // One ends: the next starts.
    assert!(d.berth(&["kill", &id, &first]).status.success());
    let next = d.berth(&["exec", &id, "--", "echo", "ran"]);
    assert!(next.status.success(), "{}", text(&next.stderr));
    assert_eq!(text(&next.stdout), "ran\n");
}

#[test]
fn a_full_journal_stops_new_execs_but_still_records_the_end() {
    let d = Daemon::start_with(&["--max-journal-bytes", "64K"]);
    let id = d.create(&[]);
    // Each exec's record carries its argv: 20 KB each, so a few fill the journal.
    let long = "x".repeat(20_000);
    let mut refused = None;
    for _ in 0..10 {
        let out = d.berth(&["exec", &id, "--", "echo", &long]);
        if !out.status.success() {
            refused = Some(out);
            break;
        }
    }
    let refused = refused.expect("the journal never filled");
    let why = text(&refused.stderr);
    assert!(why.contains("journal") && why.contains("--max-journal-bytes"), "{why}");
    let size = std::fs::metadata(d.root().join("journal").join(format!("{id}.jsonl"))).unwrap().len();
    // Over by at most the records of the last exec, which started within the bound.
    assert!(size < 64 * 1024 + 2 * 20_500, "{size}");
    // Nothing ran unrecorded: every started exec has its finish recorded; the chain holds.
    let records = journal(&d, &id);
    let started = records.iter().filter(|r| r["action"] == "exec").count();
    assert_eq!(records.iter().filter(|r| r["action"] == "exec_finished").count(), started);
    assert!(d.berth(&["journal", &id, "--verify"]).status.success());
    assert!(d.berth(&["rm", &id]).status.success());
    assert_eq!(journal(&d, &id).last().unwrap()["action"], "remove");
}

/// Send `n` proxy requests to a host the policy refuses, from inside sandbox `id`.
fn denied_requests(d: &Daemon, id: &str, n: u32) {
    let script = format!(
        r#"
import os, socket
host, port = os.environ["HTTP_PROXY"].rsplit("/", 1)[1].split(":")
for i in range({n}):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"CONNECT denied-%d.test:443 HTTP/1.1\r\n\r\n" % i)
    s.recv(4096)
    s.close()
"#
    );
    let out = d.berth(&["exec", id, "--", "python3", "-c", &script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn egress_records_past_their_share_are_counted_and_the_count_is_recorded() {
    let d = Daemon::start_with(&["--max-journal-bytes", "64K"]);
    let id = d.create(&[]);
    // Half the journal, 32 KiB, holds well under 200 egress records.
    denied_requests(&d, &id, 200);
    // The next record of the sandbox's own actions comes after the count of what was left out.
    d.sh(&id, "true");
    let records = journal(&d, &id);
    let written = records.iter().filter(|r| r["action"] == "egress").count();
    assert!(written > 10 && written < 200, "{written} egress records");
    let full: Vec<&Value> = records.iter().filter(|r| r["action"] == "egress_log_full").collect();
    assert_eq!(full.len(), 1, "one record marks the point");
    assert_eq!(full[0]["result"]["share_bytes"], 32 * 1024);
    let dropped: u64 = records
        .iter()
        .filter(|r| r["action"] == "egress_dropped")
        .map(|r| r["result"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(written as u64 + dropped, 200, "every attempt is written or counted");
    assert!(records.iter().filter(|r| r["action"] == "egress_dropped").all(|r| r["actor"] == "sandbox"));
    assert!(d.berth(&["journal", &id, "--verify"]).status.success());
    let log = d.berth(&["net", "log", &id, "--json"]);
    assert_eq!(serde_json::from_slice::<Value>(&log.stdout).unwrap().as_array().unwrap().len(), written);
    // Core records still go in past the egress share.
    assert!(d.berth(&["exec", &id, "--", "true"]).status.success());
}

/// An upstream on the host's loopback that holds each connection open.
fn holding_upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    let _ = conn.write_all(&buf[..n]);
                }
            });
        }
    });
    port
}

#[test]
fn past_its_proxy_connection_bound_a_sandbox_gets_a_503_and_the_attempt_is_journaled() {
    let d = Daemon::start_with(&["--max-proxy-connections", "2"]);
    let port = holding_upstream();
    let id = d.create(&["--allow-net", &format!("up.test:{port}"), "--add-host", "up.test:127.0.0.1"]);
    let script = format!(
        r#"
import os, socket
host, port = os.environ["HTTP_PROXY"].rsplit("/", 1)[1].split(":")
held = []
for i in range(3):
    s = socket.create_connection((host, int(port)))
    s.sendall(b"CONNECT up.test:{port} HTTP/1.1\r\n\r\n")
    head = s.recv(4096).decode()
    print(head.split("\r\n")[0])
    for line in head.split("\r\n"):
        if line.startswith("X-Berth-Egress"):
            print(line)
    held.append(s)
"#
    );
    let out = d.berth(&["exec", &id, "--", "python3", "-c", &script]);
    let said = text(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines[0].starts_with("HTTP/1.1 200") && lines[1].starts_with("HTTP/1.1 200"), "{said}");
    assert!(lines[2].starts_with("HTTP/1.1 503"), "{said}");
    assert!(lines[3].contains("the sandbox has 2 connections open through its proxy"), "{said}");
    let log = d.berth(&["net", "log", &id, "--json"]);
    let log: Vec<Value> = serde_json::from_slice::<Value>(&log.stdout).unwrap().as_array().unwrap().clone();
    assert!(log.iter().any(|r| r["reason"].as_str().unwrap().contains("the most it may have")), "{log:?}");
}

#[test]
fn berth_info_lists_the_daemons_bounds() {
    let d = Daemon::start_with(&["--max-log-bytes", "2M", "--max-lookups", "4"]);
    let out = d.berth(&["info"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bounds = info["bounds"].as_array().unwrap();
    let row = |name: &str| bounds.iter().find(|b| b["resource"] == name).unwrap_or_else(|| panic!("no {name} row"));
    assert_eq!(row("exec log")["bound"], "2 MiB per exec or shell");
    assert!(row("host-name lookups")["bound"].as_str().unwrap().starts_with("4 in progress per sandbox"));
    for b in bounds {
        for field in ["resource", "bound", "set_by", "note"] {
            assert!(!b[field].as_str().unwrap().is_empty(), "{b}");
        }
    }
    assert!(info["bounds_from"].as_str().unwrap().contains("the daemon at"));
    // --json: the same object, on one line.
    let out = d.berth(&["info", "--json"]);
    assert_eq!(text(&out.stdout).trim().lines().count(), 1, "{}", text(&out.stdout));
    let one: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((one["bounds"].clone(), one["version"].clone()), (info["bounds"].clone(), info["version"].clone()));
    // A bound that cannot work is refused at start, naming its flag.
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--socket")
        .arg(dir.path().join("berth.sock"))
        .args(["daemon", "--max-lookups", "100"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let bad = common::daemon::wait_output(child, std::time::Duration::from_secs(20));
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("--max-lookups"), "{}", text(&bad.stderr));
}

#[test]
fn a_sandbox_that_asks_for_no_limits_gets_the_daemons_memory_and_process_limits() {
    let d = Daemon::start_with(&["--default-memory", "64M", "--default-pids", "48"]);
    let id = d.create(&[]);
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    let sb: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sb["memory_bytes"], 64 << 20, "{sb}");
    assert_eq!(sb["pids"], 48, "{sb}");
    // Memory past the default: the sandbox's own process is OOM-killed (SIGKILL), the host is untouched.
    let out = d.berth(&["exec", &id, "--", "python3", "-c", "b = bytearray(256 << 20); print(len(b))"]);
    assert_eq!(out.status.code(), Some(137), "{} {}", text(&out.stdout), text(&out.stderr));
    // A fork bomb stops at the process limit: fork fails inside, and the sandbox still answers.
    let out = d.berth(&[
        "exec",
        &id,
        "--",
        "python3",
        "-c",
        "import os, time\nn = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('refused after', n, e.errno)",
    ]);
    let said = text(&out.stdout);
    assert!(said.starts_with("refused after "), "{said} {}", text(&out.stderr));
    let forked: u64 = said.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(forked < 48, "{said}");
    assert!(d.berth(&["exec", &id, "--", "true"]).status.success() || forked > 0);
    // A sandbox's own limits win over the defaults; `none` lifts the default.
    let own = d.create(&["--memory", "128M", "--pids", "100"]);
    let (_, body) = d.http("GET", &format!("/v1/sandboxes/{own}"), "");
    let sb: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((sb["memory_bytes"].clone(), sb["pids"].clone()), (Value::from(128u64 << 20), Value::from(100)));
    let (_, info) = d.http("GET", "/v1/info", "");
    assert!(info.contains("64 MiB per sandbox unless it asks for another limit"), "{info}");
    let free = Daemon::start_with(&["--default-memory", "none", "--default-pids", "none"]);
    let id = free.create(&[]);
    let (_, body) = free.http("GET", &format!("/v1/sandboxes/{id}"), "");
    let sb: Value = serde_json::from_str(&body).unwrap();
    assert!(sb["memory_bytes"].is_null() && sb["pids"].is_null(), "{sb}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["daemon", "--default-memory", "1K"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("--default-memory must be at least"), "{}", text(&bad.stderr));
}

#[test]
fn past_keep_removed_the_oldest_removed_sandboxes_journal_receipt_and_record_go() {
    let d = Daemon::start_with(&["--keep-removed", "2"]);
    let ids: Vec<String> = (0..3).map(|_| d.create(&[])).collect();
    for id in &ids {
        assert!(d.berth(&["rm", id]).status.success());
    }
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{}/receipt", ids[0]), "");
    assert_eq!(status, 404, "the oldest receipt went: {body}");
    let (status, _) = d.http("GET", &format!("/v1/sandboxes/{}/journal", ids[0]), "");
    assert_eq!(status, 404, "the oldest journal went");
    assert!(!d.root().join("journal").join(format!("{}.jsonl", ids[0])).exists());
    for id in &ids[1..] {
        let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/receipt"), "");
        assert_eq!(status, 200, "{body}");
        let (status, _) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        assert_eq!(status, 200);
    }
    let (_, info) = d.http("GET", "/v1/info", "");
    assert!(info.contains("the newest 2 removed sandboxes"), "{info}");
}
