//! Many clients at once against one daemon: creates at the same instant, with and without names, and a short
//! soak of agent-like loops (`berth bench --soak`) that must end with no errors and nothing left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Barrier;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

const CLIENTS: usize = 20;

/// `CLIENTS` threads, each on its own connection, POST `body` to /v1/sandboxes at the same instant: the
/// answers, in no particular order.
fn create_at_once(d: &Daemon, body: &str) -> Vec<(u16, Value)> {
    let barrier = Barrier::new(CLIENTS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let (status, body) = d.http("POST", "/v1/sandboxes", body);
                    (status, serde_json::from_str(&body).unwrap_or(Value::String(body)))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The entries of a directory under the data root (none if it does not exist).
fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn twenty_unnamed_creates_at_once_all_succeed_with_their_own_names() {
    let d = Daemon::start();
    let answers = create_at_once(&d, "{}");
    for (status, body) in &answers {
        assert_eq!(*status, 201, "an unnamed create failed: {body}");
    }
    let ids: BTreeSet<&str> = answers.iter().map(|(_, b)| b["id"].as_str().unwrap()).collect();
    let names: BTreeSet<&str> = answers.iter().map(|(_, b)| b["name"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), CLIENTS, "ids given twice: {ids:?}");
    assert_eq!(names.len(), CLIENTS, "names given twice: {names:?}");
    let listed: BTreeSet<String> = d.ids().into_iter().collect();
    assert_eq!(listed, ids.iter().map(|s| s.to_string()).collect());
    // Each is reachable by its generated name.
    let (_, first) = &answers[0];
    let name = first["name"].as_str().unwrap();
    assert_eq!(d.sh(name, "hostname").trim(), name);
    let rm = d.berth(&["rm", "--all"]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    assert!(d.ids().is_empty());
}

#[test]
fn twenty_creates_of_one_name_at_once_give_it_to_exactly_one() {
    let d = Daemon::start();
    let answers = create_at_once(&d, r#"{"name":"contested"}"#);
    let won: Vec<&Value> = answers.iter().filter(|(s, _)| *s == 201).map(|(_, b)| b).collect();
    assert_eq!(won.len(), 1, "the name went to {} creates: {answers:?}", won.len());
    for (status, body) in answers.iter().filter(|(s, _)| *s != 201) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["error"]["code"], "conflict", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"contested\" is already used"), "{message}");
    }
    let winner = won[0]["id"].as_str().unwrap().to_string();
    // The losers left nothing: one sandbox listed, one set of files, one shim, one log directory.
    assert_eq!(d.ids(), vec![winner.clone()]);
    let root = d.root();
    assert_eq!(entries(&root.join("pool/sandboxes")), BTreeSet::from([winner.clone()]));
    assert_eq!(entries(&root.join("run/shims")), BTreeSet::from([format!("{winner}.sock")]));
    let logs = entries(&root.join("logs"));
    assert!(logs.iter().all(|l| *l == winner), "logs of sandboxes that were never made: {logs:?}");
    // Once the winner is gone, the name is free again.
    assert!(d.berth(&["rm", &winner]).status.success());
    let again = d.create(&["--name", "contested"]);
    assert_ne!(again, winner);
}

#[test]
fn a_short_soak_ends_without_errors_or_leftovers() {
    let d = Daemon::start();
    let out = d.berth(&[
        "bench",
        "--soak",
        "--clients",
        "4",
        "--loops",
        "12",
        "--duration",
        "120s",
        "--settle",
        "0.5s",
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {} {}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(report["errors"], 0, "{}", report["errors_by_kind"]);
    assert_eq!(report["leftovers"], serde_json::json!([]), "{}", report["leftovers"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(report["loops"], 12);
    // Ten execs a loop, and one more in each fork's child.
    assert!(report["execs"].as_u64().unwrap() >= 120, "{report}");
    // The first loop of the first client snapshots and forks: its snapshot and its fork's.
    assert!(report["snapshots"].as_u64().unwrap() >= 2, "{report}");
    assert!(d.ids().is_empty(), "sandboxes listed after the soak: {:?}", d.ids());
    // A removed sandbox's journal and receipt are kept, one each.
    let sandboxes = report["sandboxes"].as_u64().unwrap();
    assert_eq!(report["kept_by_design"]["receipts"], sandboxes);
}

#[test]
fn a_soak_whose_daemon_dies_counts_the_errors_and_fails() {
    let mut d = Daemon::start();
    let soak = d
        .cmd(&["bench", "--soak", "--clients", "2", "--duration", "60s", "--settle", "0.1s", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Let some loops start, then take the daemon away under them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while d.ids().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the soak made no sandbox");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    d.kill();
    let out = common::daemon::wait_output(soak, std::time::Duration::from_secs(60));
    // Back up, it takes over the sandboxes the soak could not remove, and removes them when dropped. A shim
    // that was still building its sandbox when the daemon died is adopted once its socket is 5 s old: wait
    // for that, so that it goes with the rest.
    d.spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let ids = d.ids();
        let shims: Vec<String> = std::fs::read_dir(d.root().join("run/shims"))
            .map(|e| {
                e.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock").map(String::from)).collect()
            })
            .unwrap_or_default();
        if shims.iter().all(|s| ids.contains(s)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "shims {shims:?} were not adopted; the daemon lists {ids:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["errors"].as_u64().unwrap() > 0, "{report}");
    let kinds = report["errors_by_kind"].as_object().unwrap();
    assert!(kinds.keys().any(|k| k.ends_with("cannot connect")), "{kinds:?}");
    assert!(!report["leftovers"].as_array().unwrap().is_empty(), "{report}");
}
