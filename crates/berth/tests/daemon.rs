//! The daemon, its API and the exec model, end to end: a real daemon on a private socket, real sandboxes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::{Daemon, tcp_http};
use common::text;
use serde_json::Value;

#[test]
fn create_exec_ls_rm_through_the_cli() {
    let d = Daemon::start();
    let id = d.create(&["--name", "first", "--memory", "256M", "--label", "team=core"]);
    assert_eq!(id.len(), 12, "create prints only the id: {id:?}");
    assert_eq!(d.ids(), std::slice::from_ref(&id));
    let out = d.berth(&["exec", "first", "--", "sh", "-c", "echo out; echo err >&2; hostname; exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "out\nfirst\n");
    assert_eq!(text(&out.stderr), "err\n");
    // State persists between execs of one sandbox.
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", "echo kept > /workspace/f"]).status.success());
    assert_eq!(text(&d.berth(&["exec", &id, "--", "cat", "/workspace/f"]).stdout), "kept\n");
    let inspect: Value = serde_json::from_slice(&d.berth(&["inspect", "first"]).stdout).unwrap();
    assert_eq!(inspect["labels"]["team"], "core");
    assert_eq!(inspect["memory_bytes"], 256 << 20);
    let taken = d.berth(&["create", "--name", "first"]);
    assert_ne!(taken.status.code(), Some(0));
    assert!(text(&taken.stderr).contains("already used"), "{}", text(&taken.stderr));
    let rm = d.berth(&["rm", &id]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    assert!(d.ids().is_empty());
    assert_eq!(d.http("GET", &format!("/v1/sandboxes/{id}"), "").0, 404);
}

#[test]
fn server_side_timeout_kills_the_tree_and_output_is_capped_with_the_log_intact() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let needle = format!("sleep {}", 6000 + std::process::id() % 1000);
    let out = d.berth(&["exec", &id, "--timeout", "1s", "--", "sh", "-c", &format!("{needle} & {needle}")]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::host_processes_with(&needle).is_empty() {
        assert!(Instant::now() < deadline, "the timed-out exec's processes are still running");
        std::thread::sleep(Duration::from_millis(20));
    }

    let out = d.berth(&["exec", &id, "--max-output", "4K", "--", "seq", "1", "20000"]);
    assert_eq!(out.status.code(), Some(0));
    let shown = text(&out.stdout);
    assert!(shown.len() <= 4096, "sent {} bytes with a 4K budget", shown.len());
    assert!(shown.starts_with("1\n2\n3\n"), "the head is kept");
    assert!(shown.ends_with("19999\n20000\n"), "the tail is kept");
    assert!(text(&out.stderr).contains("bytes dropped"), "{}", text(&out.stderr));
    let ps: Value = serde_json::from_slice(&d.berth(&["ps", &id, "--json"]).stdout).unwrap();
    let exec_id = ps.as_array().unwrap().last().unwrap()["exec_id"].as_str().unwrap().to_string();
    let log = d.berth(&["logs", &id, &exec_id]);
    let full: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(text(&log.stdout), full, "the log holds the whole output");
}

#[test]
fn detached_exec_is_cancelled_from_another_process() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", "echo started; exec sleep 600"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exec_id = text(&out.stdout).trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = text(&d.berth(&["logs", &id, &exec_id]).stdout);
        if log == "started\n" {
            break;
        }
        assert!(log.is_empty() && Instant::now() < deadline, "the detached exec's log: {log:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = d.berth(&["kill", &id, &exec_id]);
    assert!(kill.status.success(), "{}", text(&kill.stderr));
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", &id, "--json"]).stdout).unwrap();
    assert!(journal.as_array().unwrap().iter().any(|r| r["action"] == "kill"), "a kill is journaled: {journal}");
    let ps: Value = serde_json::from_slice(&d.berth(&["ps", &id, "--json"]).stdout).unwrap();
    let e = &ps.as_array().unwrap()[0];
    assert_eq!(e["running"], false);
    assert_eq!(e["result"]["killed"], true);
}

#[test]
fn bad_requests_get_4xx_never_5xx() {
    let d = Daemon::start();
    for (method, path, body, status) in [
        ("POST", "/v1/sandboxes", "{not json", 400),
        ("POST", "/v1/sandboxes", r#"{"memroy_bytes": 1}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"pids": "many"}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"name": "bad name"}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"cpus": -2}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"memory_bytes": 1024}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"image": "nope"}"#, 404),
        ("POST", "/v1/sandboxes", r#"{"mounts": [{"host": "/nonexistent-berth", "target": "/x"}]}"#, 400),
        ("POST", "/v1/sandboxes", r#"{"mounts": [{"host": "/etc", "target": "/x"}]}"#, 400),
        ("GET", "/v1/sandboxes/nope", "", 404),
        ("DELETE", "/v1/sandboxes/nope", "", 404),
        ("POST", "/v1/sandboxes/nope/execs", r#"{"argv": ["true"]}"#, 404),
        ("GET", "/v1/nothing-here", "", 404),
    ] {
        let (got, body_text) = d.http(method, path, body);
        assert_eq!(got, status, "{method} {path} {body}: {body_text}");
        let err: Value = serde_json::from_str(&body_text).unwrap_or_else(|_| panic!("{body_text}"));
        assert!(err["error"]["code"].is_string() && err["error"]["message"].is_string(), "{body_text}");
    }
    let huge = format!(r#"{{"name": "{}"}}"#, "x".repeat(2 << 20));
    assert_eq!(d.http("POST", "/v1/sandboxes", &huge).0, 413);
    let id = d.create(&[]);
    for body in [r#"{"argv": []}"#, r#"{"argv": ["true"], "timeout_seconds": -1}"#, r#"{"argv": "true"}"#] {
        let (got, text_) = d.http("POST", &format!("/v1/sandboxes/{id}/execs"), body);
        assert_eq!(got, 400, "{body}: {text_}");
    }
}

#[test]
fn ttl_and_idle_timeout_are_enforced_without_a_client() {
    let d = Daemon::start();
    let ttl = d.create(&["--ttl", "1s"]);
    let idle = d.create(&["--idle-timeout", "1s"]);
    let keep = d.create(&[]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while d.ids().len() > 1 {
        assert!(Instant::now() < deadline, "expired sandboxes were not reaped: {:?}", d.ids());
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = d.ids();
    assert_eq!(left, [keep]);
    assert!(!left.contains(&ttl) && !left.contains(&idle));
}

#[test]
fn a_sigkilled_daemon_is_replaced_and_readopts_its_sandboxes() {
    let mut d = Daemon::start();
    let id = d.create(&["--name", "survivor", "--env", "KEPT=yes"]);
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", "echo before > /workspace/state"]).status.success());
    d.kill();
    let no_daemon = d.berth(&["ls"]);
    assert_eq!(no_daemon.status.code(), Some(125));
    assert!(text(&no_daemon.stderr).contains("no berth daemon at"), "{}", text(&no_daemon.stderr));
    d.spawn();
    assert_eq!(d.ids(), std::slice::from_ref(&id));
    let out = d.berth(&["exec", "survivor", "--", "sh", "-c", "cat /workspace/state; echo $KEPT"]);
    assert_eq!(text(&out.stdout), "before\nyes\n", "the files and the sandbox's env survive: {}", text(&out.stderr));
    // Exec ids continue where the previous daemon left off: no log is overwritten.
    let ps: Value = serde_json::from_slice(&d.berth(&["ps", &id, "--json"]).stdout).unwrap();
    assert_eq!(ps[0]["exec_id"], "x2", "{ps}");
}

#[test]
fn the_journal_records_every_action_and_verify_catches_an_edit() {
    let d = Daemon::start();
    let id = d.create(&["--name", "audited", "--env", "API_TOKEN=s3cret-value"]);
    assert!(d.berth(&["exec", &id, "--", "echo", "hello"]).status.success());
    assert!(d.berth(&["rm", &id]).status.success());
    // The journal outlives the sandbox.
    let out = d.berth(&["journal", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let records: Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions: Vec<&str> = records.as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["create", "exec", "exec_finished", "remove"]);
    let all = text(&out.stdout);
    assert!(all.contains("API_TOKEN"), "env names are recorded");
    assert!(!all.contains("s3cret-value"), "env values never are");
    let finished = &records[2]["result"];
    assert_eq!(finished["log_sha256"].as_str().unwrap().len(), 64);
    assert!(d.berth(&["journal", &id, "--verify"]).status.success());

    // Edit one record on disk: verification fails and says where.
    let path = d.dir.path().join("root/journal").join(format!("{id}.jsonl"));
    let edited = std::fs::read_to_string(&path).unwrap().replacen("\"echo\"", "\"rm -rf /\"", 1);
    std::fs::write(&path, edited).unwrap();
    let out = d.berth(&["journal", &id, "--verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("record 2"), "{}", text(&out.stdout));
}

#[test]
fn a_retry_with_the_same_idempotency_key_acts_once() {
    let d = Daemon::start();
    let post = |key: &str, body: &str| {
        let headers = format!("Content-Type: application/json\r\nIdempotency-Key: {key}\r\n");
        let (_, body) = d.request("POST", "/v1/sandboxes", &headers, body.as_bytes());
        serde_json::from_slice::<Value>(&body).unwrap()
    };
    let first = post("create-1", r#"{"name": "once"}"#);
    let again = post("create-1", r#"{"name": "once"}"#);
    assert_eq!(first["id"], again["id"], "the retry must return the first result");
    assert_eq!(d.ids().len(), 1, "and must not create a second sandbox");
    let other = post("create-2", r#"{"name": "twice"}"#);
    assert_ne!(other["id"], first["id"]);
    assert_eq!(d.ids().len(), 2);
}

#[test]
fn the_daemon_serves_its_openapi_description() {
    let d = Daemon::start();
    let (status, body) = d.http("GET", "/v1/openapi.json", "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, berth_api::OPENAPI);
    let spec: Value = serde_json::from_str(&body).unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1."), "{}", spec["openapi"]);
    assert!(spec["paths"]["/v1/sandboxes/{id}/execs"]["post"].is_object());
}

#[test]
fn events_report_the_lifecycle_live() {
    let d = Daemon::start();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--socket")
        .arg(d.socket())
        .args(["events", "-f", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(follower.stdout.take().unwrap());
    let mut kinds = Vec::new();
    let mut next_kind = |kinds: &mut Vec<String>, id: &str| {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0, "the event stream ended: {kinds:?}");
        let ev: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(ev["sandbox"], id);
        kinds.push(ev["kind"].as_str().unwrap().to_string());
    };
    // A follower is sent the recent events first, so this one sees the creation however late it subscribed;
    // once it has, it is subscribed, and everything after must reach it live.
    let id = d.create(&[]);
    next_kind(&mut kinds, &id);
    assert_eq!(d.berth(&["exec", &id, "--timeout", "1s", "--", "sleep", "5"]).status.code(), Some(124));
    assert!(d.berth(&["exec", &id, "--", "true"]).status.success());
    assert!(d.berth(&["rm", &id]).status.success());
    while kinds.last().map(String::as_str) != Some("removed") {
        next_kind(&mut kinds, &id);
    }
    follower.kill().unwrap();
    follower.wait().unwrap();
    assert_eq!(kinds, ["created", "exec_started", "exec_timed_out", "exec_started", "exec_finished", "removed"]);
}

#[test]
fn tcp_requires_a_token_and_cannot_mint_one() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let (status, body) = tcp_http(&addr, "GET", "/v1/sandboxes", None, "");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("unauthorized"), "{body}");
    assert_eq!(tcp_http(&addr, "GET", "/v1/sandboxes", Some("berth_not-a-token"), "").0, 401);

    let out = d.berth(&["token", "create", "--name", "ci"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_string();
    assert!(token.starts_with("berth_"));
    let (status, body) = tcp_http(&addr, "GET", "/v1/sandboxes", Some(&token), "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "[]");
    // What a token holder does is journaled under the token's id.
    let (status, body) = tcp_http(&addr, "POST", "/v1/sandboxes", Some(&token), r#"{"name": "via-tcp"}"#);
    assert_eq!(status, 201, "{body}");
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", "via-tcp", "--json"]).stdout).unwrap();
    assert!(journal[0]["actor"].as_str().unwrap().starts_with("token:"), "{journal}");
    // A token holder cannot mint more tokens over TCP.
    assert_eq!(tcp_http(&addr, "POST", "/v1/tokens", Some(&token), "").0, 404);
    for file in ["root/berth.db", "root/berth.db-wal"] {
        let stored = std::fs::read(d.dir.path().join(file)).unwrap_or_default();
        assert!(!stored.windows(token.len()).any(|w| w == token.as_bytes()), "only the token's digest is kept");
    }
    // Revoked, it stops working at once.
    let tokens: Value = serde_json::from_slice(&d.berth(&["token", "ls", "--json"]).stdout).unwrap();
    let token_id = tokens[0]["id"].as_str().unwrap().to_string();
    assert!(!text(&d.berth(&["token", "ls"]).stdout).contains(&token), "listing never shows the secret");
    assert!(d.berth(&["token", "rm", &token_id]).status.success());
    assert_eq!(tcp_http(&addr, "GET", "/v1/sandboxes", Some(&token), "").0, 401);
    assert_eq!(d.berth(&["token", "rm", &token_id]).status.code(), Some(125), "revoking twice is an error");
}

#[test]
fn a_timeout_kills_processes_that_left_the_process_group() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let needle = format!("sleep {}", 9000 + std::process::id() % 1000);
    // setsid puts the sleeper in a session (and process group) of its own: only the exec's cgroup holds it.
    let script = format!("setsid {needle} & setsid sh -c '{needle} & wait' & {needle}");
    let out = d.berth(&["exec", &id, "--timeout", "1s", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        common::host_processes_with(&needle).is_empty()
    });
    assert!(gone, "processes of a timed-out exec survived: {:?}", common::host_processes_with(&needle));
    // The sandbox itself lives on.
    assert_eq!(text(&d.berth(&["exec", &id, "--", "echo", "alive"]).stdout), "alive\n");
}

#[test]
fn exec_takes_stdin_from_the_client() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--socket")
        .arg(d.socket())
        .args(["exec", "-i", &id, "--", "sh", "-c", "tr a-z A-Z; echo done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"piped in\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "PIPED IN\ndone\n");
    // Without -i the command's stdin is empty, not the client's.
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "cat; echo eof"]);
    assert_eq!(text(&out.stdout), "eof\n");
}

#[test]
fn a_daemon_killed_mid_exec_restarts_consistent() {
    let mut d = Daemon::start();
    let id = d.create(&[]);
    let needle = format!("sleep {}", 10000 + std::process::id() % 1000);
    let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", &format!("echo started; exec {needle}")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // (Polled: the exec starts after the request returns, and a process in the middle of exec can briefly show
    // no command line.)
    let deadline = Instant::now() + Duration::from_secs(20);
    while common::host_processes_with(&needle).len() != 1 {
        assert!(Instant::now() < deadline, "the sandbox's process is not visible on the host");
        std::thread::sleep(Duration::from_millis(10));
    }
    d.kill();
    d.spawn();
    // The sandbox comes back, works, and removing it takes everything the lost exec left running.
    assert_eq!(d.ids(), std::slice::from_ref(&id));
    assert_eq!(text(&d.berth(&["exec", &id, "--", "echo", "ok"]).stdout), "ok\n");
    assert!(d.berth(&["rm", &id]).status.success());
    assert!(common::host_processes_with(&needle).is_empty());
    assert!(d.ids().is_empty());
}

#[test]
fn idempotency_and_lost_sandboxes_survive_a_daemon_restart() {
    let mut d = Daemon::start();
    let create = |d: &Daemon, key: &str| {
        let headers = format!("Content-Type: application/json\r\nIdempotency-Key: {key}\r\n");
        let (_, body) = d.request("POST", "/v1/sandboxes", &headers, br#"{"name": "kept"}"#);
        let v: Value = serde_json::from_slice(&body).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let kept = create(&d, "restart-1");
    let doomed = d.create(&[]);
    d.kill();
    // The doomed sandbox's supervisor dies while no daemon runs (as in a crash): its sandbox goes with it.
    let root = d.dir.path().join("root").display().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(" shim") && cmdline.contains(&root) {
            let pid: i32 = e.file_name().to_str().unwrap().parse().unwrap();
            let sock = d.dir.path().join(format!("root/run/shims/{doomed}.sock"));
            if std::fs::metadata(&sock).is_ok() && shim_serves(pid, &doomed) {
                rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid).unwrap(),
                    rustix::process::Signal::KILL,
                )
                .unwrap();
            }
        }
    }
    d.spawn();
    assert_eq!(d.ids(), std::slice::from_ref(&kept));
    assert_eq!(create(&d, "restart-1"), kept, "a retry after a restart returns the first result");
    assert_eq!(d.ids().len(), 1);
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", &doomed, "--json"]).stdout).unwrap();
    let last = journal.as_array().unwrap().last().unwrap();
    assert_eq!(last["action"], "lost", "{journal}");
}

/// Whether shim `pid` supervises sandbox `id` (its init's cgroup is named after the sandbox).
fn shim_serves(pid: i32, id: &str) -> bool {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .any(|c| std::fs::read_to_string(format!("/proc/{c}/cgroup")).map(|cg| cg.contains(id)).unwrap_or(false))
}

#[test]
fn a_sandbox_whose_init_dies_is_reported_ended() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let inspect: Value = serde_json::from_slice(&d.berth(&["inspect", &id]).stdout).unwrap();
    let pid = inspect["pid"].as_i64().unwrap() as i32;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.ids().is_empty() {
        assert!(Instant::now() < deadline, "a sandbox whose init died is still listed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", &id, "--json"]).stdout).unwrap();
    assert_eq!(journal.as_array().unwrap().last().unwrap()["action"], "ended", "{journal}");
    assert!(common::berth_cgroups().iter().all(|p| !p.ends_with(&id)), "its cgroups must be gone");
}

#[test]
fn logs_follow_an_exec_until_it_ends() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.3; done"]);
    let exec_id = text(&out.stdout).trim().to_string();
    let follow = d.berth(&["logs", "-f", &id, &exec_id]);
    assert!(follow.status.success(), "{}", text(&follow.stderr));
    assert_eq!(text(&follow.stdout), "line1\nline2\nline3\n", "follow returns once the exec has ended");
}

/// Host pids of the shims serving this daemon's data root.
fn shims_of(d: &Daemon) -> Vec<i32> {
    let root = d.dir.path().join("root").display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let cmdline =
            String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default()).replace('\0', " ");
        if cmdline.contains(" shim") && cmdline.contains(&root) {
            out.push(pid);
        }
    }
    out
}

/// When the daemon is killed during a create.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// A fixed time after the request is sent: early stages, before any shim.
    After(u64),
    /// As soon as the create's shim runs, before the daemon answers.
    ShimStarted,
}

#[test]
fn a_daemon_killed_mid_create_restarts_consistent() {
    let mut d = Daemon::start();
    let rounds = [1, 4, 12, 40].map(KillAt::After).into_iter().chain([KillAt::ShimStarted; 6]);
    // Kills that provably landed inside a create: its shim was running and the daemon had not answered.
    let mut mid_create = 0;
    for at in rounds {
        let shims_before = shims_of(&d).len();
        // Ask for a sandbox; the answer is empty when the daemon died before giving one.
        let socket = d.socket();
        let asker = std::thread::spawn(move || {
            let mut answer = String::new();
            if let Ok(mut s) = UnixStream::connect(socket) {
                let body = "{}";
                let req = format!(
                    "POST /v1/sandboxes HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(req.as_bytes());
                let _ = s.read_to_string(&mut answer);
            }
            answer
        });
        let shim_seen = match at {
            KillAt::After(ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                false
            }
            KillAt::ShimStarted => {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    if shims_of(&d).len() > shims_before {
                        break true;
                    }
                    if asker.is_finished() {
                        break false;
                    }
                    assert!(Instant::now() < deadline, "the create started no shim and gave no answer");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        d.kill();
        let answer = asker.join().unwrap();
        if shim_seen && answer.is_empty() {
            mid_create += 1;
        }
        d.spawn();
        // Whatever got made is either a listed, working sandbox or gone: no shim serves an unlisted one.
        // (A shim the killed daemon had started but not yet adopted is adopted once it is a few seconds old.)
        let deadline = Instant::now() + Duration::from_secs(20);
        let listed = loop {
            let (listed, shims) = (d.ids(), shims_of(&d));
            if listed.len() == shims.len() {
                break listed;
            }
            assert!(Instant::now() < deadline, "{at:?}: {} shims for {} listed sandboxes", shims.len(), listed.len());
            std::thread::sleep(Duration::from_millis(100));
        };
        for id in &listed {
            assert_eq!(text(&d.berth(&["exec", id, "--", "echo", "ok"]).stdout), "ok\n", "{at:?}");
        }
    }
    assert!(mid_create > 0, "no kill landed inside a create: each answered before its shim was seen");
    assert!(d.berth(&["rm", "--all"]).status.success());
    assert!(shims_of(&d).is_empty());
}

#[test]
fn an_oversized_or_failing_exec_is_refused_and_the_sandbox_lives_on() {
    let d = Daemon::start();
    let id = d.create(&[]);
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", "echo keep > /workspace/state"]).status.success());
    let huge = "a".repeat(70_000);
    let out = d.berth(&["exec", &id, "--", "echo", &huge]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("at most"), "{}", text(&out.stderr));
    // A command that cannot start leaves no cgroup behind.
    assert_eq!(d.berth(&["exec", &id, "--", "/nonexistent-berth-cmd"]).status.code(), Some(127));
    let leftover: Vec<_> = common::berth_cgroups()
        .into_iter()
        .filter(|p| p.ends_with(&id))
        .flat_map(|p| std::fs::read_dir(p).unwrap())
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(leftover.is_empty(), "exec cgroups left: {leftover:?}");
    assert_eq!(text(&d.berth(&["exec", &id, "--", "cat", "/workspace/state"]).stdout), "keep\n");
}
