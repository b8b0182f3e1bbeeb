//! Watching a directory of a sandbox on a real daemon, behind both isolations: `berth watch` (the API's
//! `GET /v1/sandboxes/{id}/watch`) reports what a sandbox's own processes create, write, rename, chmod and
//! remove, recursively, as it happens (inotify inside, through init); ends with a reason when the directory
//! goes or the sandbox hibernates; survives a fork with processes; refuses what is not a directory; and a
//! client that hangs up frees its watch (the 64-watch bound is hit, then freed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// `berth watch --json` running, and its lines as they come.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<Value>,
}

impl Watching {
    fn start(d: &Daemon, args: &[&str]) -> Watching {
        let mut all = vec!["watch", "--json"];
        all.extend_from_slice(args);
        let mut child = d.cmd(&all).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(serde_json::from_str::<Value>(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        let w = Watching { child, lines };
        let ready = w.next().expect("the watch said nothing");
        assert_eq!(ready["type"], "ready", "{ready}");
        w
    }

    fn next(&self) -> Option<Value> {
        self.lines.recv_timeout(Duration::from_secs(20)).ok()
    }

    /// Lines until one `until` accepts (included).
    fn until(&self, mut until: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let Some(ev) = self.next() else { break };
            let done = until(&ev);
            seen.push(ev);
            if done {
                return seen;
            }
        }
        panic!("the awaited event did not come; saw {seen:?}");
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is(ev: &Value, kind: &str, path: &str) -> bool {
    ev["type"] == kind && ev["path"] == path
}

fn position(seen: &[Value], kind: &str, path: &str) -> usize {
    seen.iter().position(|e| is(e, kind, path)).unwrap_or_else(|| panic!("no {kind} {path} in {seen:?}"))
}

/// The status line of `GET path`, with the connection left open (a watch's stream).
fn open_stream(d: &Daemon, path: &str) -> (u16, UnixStream) {
    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: berth\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, s)
}

on_each_daemon_isolation! {
fn a_watch_reports_what_the_sandbox_changes_as_it_happens(d, iso) {
    let id = d.create(&["--name", "watched"]);
    d.sh(&id, "mkdir -p /workspace/w/old");
    let w = Watching::start(d, &[&id, "w", "--recursive"]);
    d.sh(&id, "cd /workspace/w && echo 1 > a.txt && echo 2 >> a.txt && mkdir sub && echo x > sub/b \
               && mv old new && echo y > new/c && chmod 600 a.txt && rm a.txt");
    let seen = w.until(|e| is(e, "remove", "a.txt"));
    let created = position(&seen, "create", "a.txt");
    assert!(created < position(&seen, "write", "a.txt"), "{iso}: {seen:?}");
    assert!(seen.iter().any(|e| is(e, "create", "sub") && e["dir"] == true), "{seen:?}");
    // The directory made after the watch began is watched too, and so is one moved within it.
    position(&seen, "create", "sub/b");
    let renamed = &seen[position(&seen, "rename", "new")];
    assert_eq!((renamed["from"].as_str(), renamed["dir"].as_bool()), (Some("old"), Some(true)), "{renamed}");
    position(&seen, "create", "new/c");
    assert!(position(&seen, "chmod", "a.txt") < position(&seen, "remove", "a.txt"), "{seen:?}");
    // Every field is on every line.
    assert_eq!(seen[created], serde_json::json!({"type": "create", "path": "a.txt", "from": null, "dir": false, "reason": null}));

    // A watch without --recursive sees its own entries only.
    let top = Watching::start(d, &[&id, "/workspace/w"]);
    d.sh(&id, "echo z > /workspace/w/sub/deep && echo t > /workspace/w/top");
    let seen = top.until(|e| is(e, "create", "top"));
    assert!(!seen.iter().any(|e| e["path"].as_str().is_some_and(|p| p.starts_with("sub/"))), "{seen:?}");
    drop(top);

    // Removing the directory ends the watch, saying so.
    d.sh(&id, "rm -r /workspace/w");
    let seen = w.until(|e| e["type"] == "end");
    let end = seen.last().unwrap();
    assert!(end["reason"].as_str().unwrap().contains("/workspace/w was removed"), "{end}");
    assert!(seen.iter().any(|e| is(e, "remove", "sub") || is(e, "remove", "new")), "{seen:?}");

    // Refusals, each with a status and a sentence.
    d.sh(&id, "mkdir -p /workspace/w && echo f > /workspace/f && mkdir -m 700 /workspace/private");
    let watch = |query: &str| {
        let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/watch?{query}"), "");
        (status, serde_json::from_str::<Value>(&body).unwrap_or(Value::Null))
    };
    let (status, e) = watch("path=/workspace/f");
    assert_eq!(status, 409, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not a directory"), "{e}");
    assert_eq!(watch("path=/workspace/nope").0, 404);
    assert_eq!(watch("path=workspace").0, 400);
    assert_eq!(watch("path=/workspace/../etc").0, 400);
    assert_eq!(watch("path=/workspace&depth=3").0, 400, "an unknown parameter");
    assert_eq!(watch("path=/workspace&user=ghost").0, 400);
    let (status, e) = watch("path=/workspace/private&user=user");
    assert_eq!(status, 409, "{iso}: root's private directory is not the user's to list: {e}");
    assert_eq!(d.http("GET", "/v1/sandboxes/nosuch/watch?path=/workspace", "").0, 404);
    let out = d.berth(&["watch", &id, "/workspace/f"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("not a directory"), "{}", text(&out.stderr));

    // Bounded, a watch answers by itself: after its time, or its first change.
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/watch?path=/workspace/w&timeout_seconds=0.3"), "");
    let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(status, 200, "{body}");
    assert_eq!((lines[0]["type"].as_str(), lines.len()), (Some("ready"), 2), "{body}");
    assert_eq!(lines[1]["reason"], "timeout_seconds passed");
    let first = std::thread::scope(|s| {
        let waiting = s.spawn(|| d.http("GET", &format!("/v1/sandboxes/{id}/watch?path=/workspace/w&max_events=1&timeout_seconds=60"), ""));
        for n in 0..50 {
            if waiting.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            d.sh(&id, &format!("touch /workspace/w/t{n}"));
        }
        waiting.join().unwrap()
    });
    let lines: Vec<Value> = first.1.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!((lines[1]["type"].as_str(), lines[2]["reason"].as_str()), (Some("create"), Some("max_events changes were reported")));
    for bad in ["timeout_seconds=0", "timeout_seconds=-1", "quiet_seconds=100000", "max_events=0"] {
        let (status, e) = watch(&format!("path=/workspace/w&{bad}"));
        assert_eq!(status, 400, "{bad}: {e}");
    }

    // At most 64 at once; a client that hangs up frees its watch.
    let path = format!("/v1/sandboxes/{id}/watch?path=/workspace/w");
    let mut held = Vec::new();
    for n in 0..64 {
        let (status, s) = open_stream(d, &path);
        assert_eq!(status, 200, "watch {n}");
        held.push(s);
    }
    let (status, e) = watch("path=/workspace/w");
    assert_eq!(status, 409, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("64 directories watched"), "{e}");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, s) = open_stream(d, &path);
        if status == 200 {
            drop(s);
            break;
        }
        assert!(Instant::now() < deadline, "hung-up watches were not freed: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Watches are journaled, with their paths.
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    let journal: Vec<Value> = serde_json::from_str(&journal).unwrap();
    let watches: Vec<&Value> = journal.iter().filter(|r| r["action"] == "watch").collect();
    assert_eq!(watches[0]["args"], serde_json::json!({"path": "/workspace/w", "recursive": true, "user": null}));
    d.berth(&["rm", &id]);
}
}

on_each_daemon_isolation! {
fn a_watch_outlives_a_fork_and_ends_when_the_sandbox_hibernates(d, iso) {
    let id = d.create(&["--name", "watched-sleep"]);
    let w = Watching::start(d, &[&id, "/workspace"]);
    d.sh(&id, "echo 1 > /workspace/before");
    w.until(|e| is(e, "create", "before"));
    // A fork with processes checkpoints the sandbox: its watch is lifted for that, and put back.
    if iso == "namespaces" {
        let out = d.berth(&["fork", &id, "--with-processes", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        d.sh(&id, "echo 2 > /workspace/after-fork");
        w.until(|e| is(e, "create", "after-fork"));
    }
    let out = d.berth(&["hibernate", &id]);
    assert!(out.status.success(), "{iso}: {}", text(&out.stderr));
    let seen = w.until(|e| e["type"] == "end");
    assert!(seen.last().unwrap()["reason"].as_str().unwrap().contains("hibernated"), "{seen:?}");
    // Woken, it is watched again from scratch.
    let again = Watching::start(d, &[&id, "/workspace"]);
    d.sh(&id, "echo 3 > /workspace/after-wake");
    again.until(|e| is(e, "create", "after-wake"));
    d.berth(&["rm", &id]);
}
}
