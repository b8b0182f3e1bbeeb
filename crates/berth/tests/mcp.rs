//! berth's MCP server, driven by the official MCP client (the `mcp` package, installed by scripts/setup into
//! target/venv) through tests/mcp/client.py: over stdio (`berth --socket S mcp`), over streamable HTTP at
//! `/mcp` on the TCP listener with an API token and with a sandbox's session token, and from inside a sandbox
//! at `$BERTH_API/mcp` with its session token; and the desktop's tools on a sandbox with a desktop. The
//! script checks each answer; this side checks its errors against the API's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{Daemon, wait_output};
use common::text;
use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

fn python() -> PathBuf {
    let python = workspace().join("target/venv/bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import importlib.metadata as m; print(m.version('mcp'))"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(installed, "the mcp package is missing from target/venv: run scripts/setup, which installs it (pinned)");
    python
}

/// Run client.py with `args` and return the report it prints.
fn client(args: &[&str]) -> Value {
    let child = Command::new(python())
        .arg(script_dir().join("client.py"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(240));
    assert!(out.status.success(), "client.py {args:?} failed:\n{}{}", text(&out.stdout), text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("client.py printed {e}: {}", text(&out.stdout)))
}

/// The message of the API's error answer to a request over the socket.
fn api_sentence(d: &Daemon, method: &str, path: &str, body: &str) -> String {
    let (status, body) = d.http(method, path, body);
    assert!(status >= 400, "{method} {path}: {status} {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["error"]["message"].as_str().unwrap().to_string()
}

/// What a whole session saw of errors is what the API says.
fn check_session_errors(d: &Daemon, report: &Value) {
    let missing = &report["unknown_sandbox"];
    assert_eq!(missing["text"], api_sentence(d, "GET", "/v1/sandboxes/nope", ""), "{report}");
    assert_eq!(missing["structured"]["error"]["code"], "not_found", "{report}");
    assert_eq!(missing["structured"]["status"], 404, "{report}");
    // A file the session had removed: the API's sentence for that path in any sandbox.
    let scratch = d.create(&[]);
    let gone = api_sentence(d, "GET", &format!("/v1/sandboxes/{scratch}/stat?path=/workspace/src/hello.txt"), "");
    assert_eq!(report["gone"], gone, "{report}");
    let bad_language =
        api_sentence(d, "POST", &format!("/v1/sandboxes/{scratch}/contexts"), r#"{"language": "cobol"}"#);
    assert_eq!(report["bad_language"], bad_language, "{report}");
    let rm = d.berth(&["rm", &scratch]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    let small = api_sentence(d, "POST", "/v1/sandboxes", r#"{"memory_bytes": 1000}"#);
    assert_eq!(report["small_memory"], small, "{report}");
    assert!(d.ids().is_empty(), "the session's sandboxes are removed: {:?}", d.ids());
}

/// The journal of sandbox `id` (removed or not), as the API serves it.
fn journal(d: &Daemon, id: &str) -> Vec<Value> {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap().as_array().unwrap().clone()
}

fn record<'a>(journal: &'a [Value], action: &str) -> &'a Value {
    journal.iter().find(|r| r["action"] == action).unwrap_or_else(|| panic!("no {action} record: {journal:?}"))
}

#[test]
fn a_session_over_stdio() {
    let d = Daemon::start();
    let berth = env!("CARGO_BIN_EXE_berth");
    // An earlier protocol's handshake too, as most MCP hosts still speak it.
    let legacy = client(&["stdio", berth, d.socket().to_str().unwrap(), "session", "legacy"]);
    check_session_errors(&d, &legacy);
    assert_ne!(legacy["protocol"], "2026-07-28", "{legacy}");
    let report = client(&["stdio", berth, d.socket().to_str().unwrap(), "session"]);
    check_session_errors(&d, &report);
    // Each tool call was an API request: the budgeted exec is in the removed sandbox's journal as the API
    // recorded it, with the tool's default timeout.
    let journal = journal(&d, report["removed"][1].as_str().unwrap());
    let exec = journal
        .iter()
        .find(|r| r["action"] == "exec" && r["args"]["argv"] == serde_json::json!(["seq", "1", "3000"]))
        .unwrap_or_else(|| panic!("no exec of seq: {journal:?}"));
    assert_eq!((&exec["args"]["max_output_bytes"], &exec["args"]["timeout_seconds"]), (&200.into(), &300.0.into()));
    assert_eq!(exec["actor"], "local");
    // The file tools' changes are journaled as the API's: the move there and back.
    let moves: Vec<&Value> = journal.iter().filter(|r| r["action"] == "move_file").collect();
    assert_eq!(moves.len(), 2, "{moves:?}");
    assert_eq!(
        (&moves[0]["args"]["to"], &moves[1]["args"]["overwrite"]),
        (&"/workspace/hello-moved.txt".into(), &true.into())
    );
}

/// One raw request to `/mcp` on the TCP listener, with `auth` as its Authorization header (or none).
fn post_mcp(addr: &str, auth: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    (resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), resp)
}

#[test]
fn a_session_over_streamable_http_with_a_token() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let minted = d.berth(&["token", "create", "--name", "mcp", "--json"]);
    assert!(minted.status.success(), "{}", text(&minted.stderr));
    let minted: Value = serde_json::from_slice(&minted.stdout).unwrap();
    let token = minted["token"].as_str().unwrap();

    // /mcp is a TCP route like any other: no token, or a wrong one, is the listener's 401.
    for auth in [None, Some("Bearer berth_not-a-token".to_string())] {
        let (status, answer) = post_mcp(&addr, auth.as_deref());
        assert_eq!(status, 401, "{answer}");
        assert!(answer.contains(r#""code":"unauthorized""#), "{answer}");
    }

    let url = format!("http://{addr}/mcp");
    let legacy = client(&["http", &url, token, "session", "legacy"]);
    check_session_errors(&d, &legacy);
    assert_ne!(legacy["protocol"], "2026-07-28", "{legacy}");
    let report = client(&["http", &url, token, "session"]);
    check_session_errors(&d, &report);
    // The tools' calls carried the caller's token: the API journaled them as that token's.
    let journal = journal(&d, report["removed"][1].as_str().unwrap());
    assert_eq!(record(&journal, "create")["actor"], format!("token:{}", minted["id"].as_str().unwrap()));

    // A sandbox's session token works on this listener too, with its scope.
    let owner = d.create(&["--name", "owner"]);
    d.create(&["--name", "other"]);
    let session_token = d.sh("owner", "printf %s \"$BERTH_TOKEN\"");
    let scoped = client(&["http", &url, &session_token, "scoped", "legacy"]);
    check_scoped(&d, &owner, &scoped);
}

#[test]
fn a_tenants_token_reaches_its_own_tenant_only() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    for t in ["acme", "rival"] {
        let made = d.berth(&["tenant", "create", t]);
        assert!(made.status.success(), "{}", text(&made.stderr));
    }
    let minted = d.berth(&["token", "create", "--name", "acme-mcp", "--tenant", "acme", "--json"]);
    assert!(minted.status.success(), "{}", text(&minted.stderr));
    let minted: Value = serde_json::from_slice(&minted.stdout).unwrap();
    d.create(&["--name", "ours", "--tenant", "acme"]);
    let theirs = d.create(&["--name", "theirs", "--tenant", "rival"]);
    d.create(&["--name", "nobodys"]);

    let url = format!("http://{addr}/mcp");
    let report = client(&["http", &url, minted["token"].as_str().unwrap(), "tenant"]);
    assert_eq!(report["listed"], serde_json::json!(["ours"]), "{report}");
    // Every refusal is the API's own sentence for a sandbox that does not exist.
    let unknown = api_sentence(&d, "GET", "/v1/sandboxes/theirs-never-made", "").replace("theirs-never-made", "theirs");
    for call in ["inspect", "exec", "remove"] {
        assert!(report[call].as_str().unwrap().contains(&unknown), "{call}: {report}");
    }
    // Nothing of the other tenant's sandbox changed.
    assert_eq!(d.sh("theirs", "ls -A /workspace"), "");
    assert_eq!(d.sh(&theirs, "echo intact"), "intact\n");
}

/// What a session token's client saw: the API's refusals, word for word, and a child made as the owner's.
fn check_scoped(d: &Daemon, owner: &str, report: &Value) {
    for (key, method, path) in [
        ("other", "GET", "/v1/sandboxes/other"),
        ("own_exec", "POST", "/v1/sandboxes/owner/execs"),
        ("fork", "POST", "/v1/sandboxes/kid/fork"),
    ] {
        let expected = format!(
            "a session token may inspect its own sandbox ({owner}) and create, use and remove sandboxes of its \
             own; {method} {path} is not one of those"
        );
        assert_eq!(report[key], expected, "{report}");
    }
    // The child was made with the session token (journaled as the owner's session) and is gone.
    let kid = report["kid"].as_str().unwrap();
    let mut mine = vec![owner.to_string(), kid.to_string()];
    mine.sort();
    assert_eq!(report["listed"], serde_json::json!(mine), "{report}");
    assert_eq!(record(&journal(d, kid), "create")["actor"], format!("session:{owner}"));
    assert!(!d.ids().contains(&kid.to_string()), "{:?}", d.ids());
}

#[test]
fn a_session_token_from_inside_a_sandbox_gets_its_scope() {
    let d = Daemon::start();
    // The client and its packages, read-only inside; the sandbox's python3 is the host's.
    let site = std::fs::read_dir(workspace().join("target/venv/lib"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.join("mcp").is_dir())
        .expect("mcp in target/venv: run scripts/setup");
    python();
    let mounts = [format!("{}:/opt/site:ro", site.display()), format!("{}:/opt/mcp:ro", script_dir().display())];
    let owner = d.create(&["--name", "owner", "--mount", &mounts[0], "--mount", &mounts[1]]);
    d.create(&["--name", "other"]);
    let run = "PYTHONPATH=/opt/site exec python3 /opt/mcp/client.py http \"$BERTH_API/mcp\" \"$BERTH_TOKEN\" scoped";
    let out = d.berth(&["exec", "owner", "--timeout", "240s", "--", "sh", "-c", run]);
    assert!(out.status.success(), "client.py inside the sandbox:\n{}{}", text(&out.stdout), text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_scoped(&d, &owner, &report);
}

#[test]
fn a_desktop_is_seen_and_used_through_its_tools() {
    let d = Daemon::start();
    let id = d.create(&["--desktop", "--resolution", "1600x1000", "--memory", "1G"]);
    let berth = env!("CARGO_BIN_EXE_berth");
    let report = client(&["stdio", berth, d.socket().to_str().unwrap(), "desktop", "auto", &id]);
    // A point off the screenshot is the API's refusal, word for word, as a tool error.
    let off =
        r#"{"actions": [{"action": "click", "x": 700, "y": 10}], "coordinates_in": {"width": 640, "height": 400}}"#;
    let sentence = api_sentence(&d, "POST", &format!("/v1/sandboxes/{id}/desktop/actions"), off);
    assert!(sentence.contains("off the 640x400 screen"), "{sentence}");
    let seen = &report["off_screen"];
    assert_eq!(seen["text"], sentence, "{report}");
    assert_eq!(seen["structured"]["error"]["code"], "invalid_request", "{report}");
    assert_eq!(seen["structured"]["status"], 400, "{report}");
    // Each tool call was an API request, journaled as the API's: the screenshots by their size, the click
    // with the screenshot's size it came in and the pointer where it put it on the screen.
    let journal = journal(&d, &id);
    let desktop: Vec<&Value> = journal.iter().filter(|r| r["action"] == "desktop").collect();
    let sizes: Vec<(&Value, &Value)> = desktop
        .iter()
        .filter(|r| r["args"]["action"] == "screenshot")
        .map(|r| (&r["result"]["width"], &r["result"]["height"]))
        .collect();
    assert_eq!(sizes, [(&1280.into(), &800.into()), (&640.into(), &400.into())], "{desktop:?}");
    let click = desktop.iter().find(|r| r["args"]["actions"].is_array()).expect("the click's record");
    assert_eq!(click["args"]["coordinates_in"], serde_json::json!({"width": 640, "height": 400}), "{click}");
    assert_eq!(click["result"]["cursor"], serde_json::json!({"x": 800, "y": 500}), "{click}");
    assert!(d.berth(&["rm", &id]).status.success());
}
