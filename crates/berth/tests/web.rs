//! The web view on a real daemon with a TCP listener: driven in headless Chromium (Debian's, through
//! Playwright's `playwright-core`, both installed by `scripts/setup`) as a person uses it, and its login
//! held to its bounds over raw HTTP: the cookie needs its key, a page of another origin is refused, a logout
//! or a revoked token ends it, a session token's login sees its own sandboxes only, and berth's cookies never
//! reach a sandbox through a preview.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// One raw HTTP/1.1 request with extra header lines: (status, head, body).
fn req(addr: &str, method: &str, path: &str, headers: &str, body: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (status, head.to_string(), body.to_string())
}

fn mint(d: &Daemon) -> (String, String) {
    let out = d.berth(&["token", "create", "--name", "web", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["id"].as_str().unwrap().to_string(), v["token"].as_str().unwrap().to_string())
}

/// Log in with `token`: (the cookie's `name=value`, the key, the whole `Set-Cookie` line).
fn login(addr: &str, token: &str) -> (String, String, String) {
    let (status, head, body) = req(addr, "POST", "/ui/login", "", &serde_json::json!({ "token": token }).to_string());
    assert_eq!(status, 200, "{body}");
    let set = head.lines().find(|l| l.to_ascii_lowercase().starts_with("set-cookie:")).unwrap().to_string();
    let cookie = set.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_string();
    let key = serde_json::from_str::<Value>(&body).unwrap()["key"].as_str().unwrap().to_string();
    (cookie, key, set)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_web_view_in_a_real_browser() {
    let npm = repo().join("target/npm");
    assert!(
        npm.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed under {}: run scripts/setup",
        npm.display()
    );
    let chromium = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].into_iter().find(|p| Path::new(p).exists());
    let chromium = chromium.expect("Debian's chromium is not installed: run scripts/setup");
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let (token_id, token) = mint(&d);
    let id = d.create(&["--name", "watched"]);
    d.sh(&id, "echo 'written by the test' > /workspace/notes.txt; mkdir /workspace/sub; echo 'one level down' > /workspace/sub/inner.txt");
    let exec = d.berth(&[
        "exec",
        "-d",
        &id,
        "--",
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done",
    ]);
    let exec = text(&exec.stdout).trim().to_string();
    assert!(exec.starts_with('x'), "{exec}");

    let mut cmd = Command::new("node");
    cmd.arg(repo().join("crates/berth/tests/web/view.mjs"))
        .env("BERTH_URL", format!("http://{addr}/"))
        .env("BERTH_TOKEN", &token)
        .env("BERTH_SANDBOX", &id)
        .env("BERTH_EXEC", &exec)
        .env("CHROMIUM", chromium)
        .env("NPM_DIR", &npm);
    // `BERTH_WEB_SHOTS=docs/img cargo test --test web` writes the screenshots the docs show.
    if let Ok(dir) = std::env::var("BERTH_WEB_SHOTS") {
        cmd.env("SHOTS", repo().join(dir));
    }
    let out = common::daemon::wait_output(
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap(),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "the browser's run failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert!(seen["refused"].as_str().unwrap().contains("not a token of this daemon"), "{seen}");
    let listed = seen["listed"].as_str().unwrap();
    assert!(listed.contains("watched") && listed.contains("running") && listed.contains('%'), "{listed}");
    // The output grew while the page watched it.
    assert!(seen["ticks_later"].as_u64().unwrap() >= seen["ticks_first"].as_u64().unwrap() + 2, "{seen}");
    assert!(seen["killed"].as_str().unwrap().contains("killed"), "{seen}");
    assert!(seen["terminal"].as_str().unwrap().contains("connected"), "{seen}");
    assert!(seen["egress"].as_str().unwrap().contains("blocked.example:80denied"), "{seen}");
    assert!(seen["policy"].as_str().unwrap().contains("pypi.org:443"), "{seen}");
    assert!(seen["journal"].as_str().unwrap().starts_with("verified:"), "{seen}");
    assert!(seen["file"].as_str().unwrap().contains("written by the test"), "{seen}");
    assert!(seen["inner"].as_str().unwrap().contains("one level down"), "{seen}");
    assert!(seen["diff"].as_str().unwrap().contains("/workspace/notes.txt"), "{seen}");
    assert!(seen["receipt"].as_str().unwrap().starts_with("clean"), "{seen}");
    assert_eq!(seen["page_errors"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["stored"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["cookie_readable"], "", "{seen}");

    // What the page did, it did through the API with the token: the journal says so, and the daemon agrees.
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    let journal: Vec<Value> = serde_json::from_str(&journal).unwrap();
    let by = |action: &str| journal.iter().filter(|r| r["action"] == action).cloned().collect::<Vec<_>>();
    let actor = format!("token:{token_id}");
    let kill = by("kill");
    assert!(kill.iter().any(|r| r["args"]["exec_id"] == exec.as_str() && r["actor"] == actor.as_str()), "{kill:?}");
    let shells: Vec<Value> = by("exec").into_iter().filter(|r| r["args"]["tty"] == true).collect();
    assert!(shells.iter().any(|r| r["actor"] == actor.as_str()), "no shell of the token in the journal: {shells:?}");
    assert!(by("net").iter().any(|r| r["args"]["allow"][0] == "pypi.org:443"), "no policy change in the journal");
    assert!(by("remove").iter().any(|r| r["actor"] == actor.as_str()), "no removal in the journal");
    let (_, log) = d.http("GET", &format!("/v1/sandboxes/{id}/net/log"), "");
    assert!(log.contains("\"host\":\"blocked.example\"") && log.contains("\"verdict\":\"denied\""), "{log}");
    assert!(d.ids().is_empty(), "the page's removal left {:?}", d.ids());
}

#[test]
fn a_web_login_needs_its_cookie_its_key_and_its_own_origin() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let (token_id, token) = mint(&d);

    // The page itself needs no token, and may load nothing from elsewhere.
    let (status, head, body) = req(&addr, "GET", "/", "", "");
    assert_eq!(status, 200);
    assert!(body.contains("/ui/app.js") && head.contains("content-security-policy: default-src 'none'"), "{head}");
    for asset in ["/ui/app.js", "/ui/api.js", "/ui/term.js", "/ui/app.css", "/ui/icon.svg"] {
        assert_eq!(req(&addr, "GET", asset, "", "").0, 200, "{asset}");
    }
    assert_eq!(req(&addr, "GET", "/ui/nothing.js", "", "").0, 404);

    // Bad logins: a wrong token, a body that is not one, another site's page.
    let (status, _, body) = req(&addr, "POST", "/ui/login", "", r#"{"token":"berth_nope"}"#);
    assert!(status == 401 && body.contains("not a token of this daemon"), "{status} {body}");
    let (status, _, body) = req(&addr, "POST", "/ui/login", "", r#"{"tok":"x"}"#);
    assert!(status == 400 && body.contains("a login is"), "{status} {body}");
    let evil = "Origin: http://evil.test\r\n";
    let (status, _, body) = req(&addr, "POST", "/ui/login", evil, &format!(r#"{{"token":"{token}"}}"#));
    assert!(status == 401 && body.contains("web view's own page"), "{status} {body}");

    let (cookie, key, set) = login(&addr, &token);
    for part in ["HttpOnly", "SameSite=Strict", "Path=/v1/", "Max-Age="] {
        assert!(set.contains(part), "{set}");
    }
    let both = format!("Cookie: {cookie}\r\nX-Berth-Key: {key}\r\n");
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &both, "").0, 200);
    // Its own origin (what the browser sends) is fine; any other is not, even with both halves.
    let own = format!("{both}Origin: http://{addr}\r\n");
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &own, "").0, 200);
    let (status, _, body) = req(&addr, "GET", "/v1/sandboxes", &format!("{both}{evil}"), "");
    assert!(status == 401 && body.contains("another origin"), "{status} {body}");
    let (status, _, body) = req(&addr, "GET", "/v1/sandboxes", &format!("{both}Origin: null\r\n"), "");
    assert!(status == 401, "{status} {body}");
    // The cookie alone (what a same-origin page served by a sandbox would have) is not enough.
    let (status, _, body) = req(&addr, "GET", "/v1/sandboxes", &format!("Cookie: {cookie}\r\n"), "");
    assert!(status == 401 && body.contains("needs its key"), "{status} {body}");
    let (status, _, _) =
        req(&addr, "GET", "/v1/sandboxes", &format!("Cookie: {cookie}\r\nX-Berth-Key: {token}\r\n"), "");
    assert_eq!(status, 401);
    // Nor the key alone.
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &format!("X-Berth-Key: {key}\r\n"), "").0, 401);

    // The key in the query (event streams and WebSockets cannot send headers) is taken out before the route
    // sees it: the shell's strict query takes it, and answers as it does to any request without an upgrade.
    let id = d.create(&["--name", "viewed"]);
    let cookie_only = format!("Cookie: {cookie}\r\n");
    let (status, _, body) = req(&addr, "GET", &format!("/v1/events?berth_key={key}"), &cookie_only, "");
    assert!(status == 200 && body.contains("\"created\""), "{status} {body}");
    let (status, _, body) =
        req(&addr, "GET", &format!("/v1/sandboxes/{id}/shell?berth_key={key}&rows=30"), &cookie_only, "");
    assert!(status == 400 && body.contains("WebSocket"), "{status} {body}");
    // What a login does is journaled as its token's.
    let (status, _, body) = req(&addr, "POST", &format!("/v1/sandboxes/{id}/execs"), &both, r#"{"argv":["true"]}"#);
    assert_eq!(status, 200, "{body}");
    let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert!(journal.contains(&format!("\"actor\":\"token:{token_id}\"")), "{journal}");

    // A logout ends it: the page's, which sends its key (the cookie is for /v1/ only), or one with the cookie.
    let (status, head, _) = req(&addr, "POST", "/ui/logout", &format!("X-Berth-Key: {key}\r\n"), "");
    assert!(status == 204 && head.contains("Max-Age=0"), "{head}");
    let (status, _, body) = req(&addr, "GET", "/v1/sandboxes", &both, "");
    assert!(status == 401 && body.contains("log in again"), "{status} {body}");
    let (cookie, key, _) = login(&addr, &token);
    assert_eq!(req(&addr, "POST", "/ui/logout", &format!("Cookie: {cookie}\r\n"), "").0, 204);
    let both = format!("Cookie: {cookie}\r\nX-Berth-Key: {key}\r\n");
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &both, "").0, 401);

    // So does revoking its token.
    let (cookie, key, _) = login(&addr, &token);
    let both = format!("Cookie: {cookie}\r\nX-Berth-Key: {key}\r\n");
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &both, "").0, 200);
    assert!(d.berth(&["token", "rm", &token_id]).status.success());
    assert_eq!(req(&addr, "GET", "/v1/sandboxes", &both, "").0, 401);
}

#[test]
fn a_session_tokens_login_sees_its_own_sandboxes_only() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let own = d.create(&["--name", "agent"]);
    let other = d.create(&["--name", "someone-else"]);
    let session = text(&d.berth(&["exec", &own, "--", "printenv", "BERTH_TOKEN"]).stdout).trim().to_string();
    let (status, _, body) = req(&addr, "POST", "/ui/login", "", &format!(r#"{{"token":"{session}"}}"#));
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["sandbox"], own.as_str());
    let (cookie, key, _) = login(&addr, &session);
    let both = format!("Cookie: {cookie}\r\nX-Berth-Key: {key}\r\n");

    // A child it makes is its own too.
    let (status, _, body) = req(&addr, "POST", "/v1/sandboxes", &both, r#"{"name":"agent-child"}"#);
    assert_eq!(status, 201, "{body}");
    let child = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let ids = |path: &str| -> Vec<String> {
        let (status, _, body) = req(&addr, "GET", path, &both, "");
        assert_eq!(status, 200, "{path}: {body}");
        let v: Vec<Value> = serde_json::from_str(&body).unwrap();
        let mut ids: Vec<String> =
            v.iter().map(|x| x["id"].as_str().or(x["sandbox"].as_str()).unwrap().to_string()).collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let mut mine = vec![own.clone(), child.clone()];
    mine.sort();
    assert_eq!(ids("/v1/sandboxes"), mine);
    assert_eq!(ids("/v1/usage"), mine);
    assert_eq!(ids("/v1/events"), mine);
    // The API token's list has the other one too; the session's login cannot look at it.
    assert!(d.ids().contains(&other));
    let (status, _, body) = req(&addr, "GET", &format!("/v1/sandboxes/{other}"), &both, "");
    assert!(status == 401 && body.contains("session token"), "{status} {body}");
}

/// A server on 127.0.0.1:8000 that answers every request with the `Cookie` header it got.
const ECHO_COOKIES: &str = r#"
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('cookies=' + str(self.headers.get('Cookie'))).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
HTTPServer(('127.0.0.1', 8000), H).serve_forever()
"#;

#[test]
fn berths_cookies_never_reach_a_sandbox_through_a_preview() {
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let id = d.create(&["--name", "served"]);
    d.sh(&id, &format!("cat > /tmp/echo.py <<'EOF'\n{ECHO_COOKIES}\nEOF"));
    let started = d.berth(&["exec", "-d", &id, "--", "python3", "/tmp/echo.py"]);
    assert!(started.status.success());
    let url = text(&d.berth(&["expose", &id, "8000"]).stdout).trim().to_string();
    let path = &url[url.find("/preview/").unwrap()..];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let cookies = "Cookie: theirs=1; berth_web=the-login; other=2\r\n";
    let (status, body) = loop {
        let (status, _, body) = req(&addr, "GET", path, cookies, "");
        if status == 200 || std::time::Instant::now() > deadline {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "cookies=theirs=1; other=2");
}
