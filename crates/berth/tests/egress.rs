//! Default-deny egress, end to end: a sandbox reaches only what its policy names, through the proxy berth runs
//! for it, with every attempt logged; live changes; learn mode; session tokens. Upstream servers listen on
//! the host's loopback only, reached through `--add-host` (the host's loopback is otherwise out of reach).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::daemon::{Daemon, tcp_http};
use common::text;
use serde_json::Value;

/// An HTTP server on the host's loopback that answers every request with `body`, and echoes raw bytes on a
/// CONNECT tunnel's other end. Returns its port.
fn upstream(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                let Ok(n) = conn.read(&mut buf) else { return };
                if buf[..n].starts_with(b"GET ") {
                    let reply =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                    let _ = conn.write_all(reply.as_bytes());
                } else {
                    // Echo: a tunnel's bytes come back.
                    let _ = conn.write_all(&buf[..n]);
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            });
        }
    });
    port
}

fn fetch(d: &Daemon, id: &str, url: &str) -> String {
    let out = d.berth(&["exec", id, "--", "python3", "-c", common::FETCH, url]);
    text(&out.stdout).trim().to_string()
}

fn log(d: &Daemon, id: &str) -> Vec<Value> {
    let out = d.berth(&["net", "log", id, "--json"]);
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

on_each_daemon_isolation! {
    fn only_what_the_policy_names_gets_out_and_every_attempt_is_logged(d, _iso) {
        let port = upstream("hello from upstream");
        let allowed = format!("api.test:{port}");
        let id = d.create(&[
            "--allow-net",
            &format!("{allowed},*.glob.test"),
            "--deny-net",
            "bad.glob.test",
            "--add-host",
            "api.test:127.0.0.1",
            "--add-host",
            "a.glob.test:127.0.0.1",
            "--add-host",
            "bad.glob.test:127.0.0.1",
            "--add-host",
            "other.test:127.0.0.1",
        ]);
        assert_eq!(fetch(d, &id, &format!("http://api.test:{port}/")), "200 hello from upstream");
        assert_eq!(fetch(d, &id, &format!("http://a.glob.test:{port}/")), "200 hello from upstream", "a glob rule");
        // A rule's port is its only port.
        let wrong_port = fetch(d, &id, &format!("http://api.test:{}/", port + 1));
        assert!(wrong_port.starts_with("403 denied"), "{wrong_port}");
        // Deny wins over an allow glob.
        let denied = fetch(d, &id, &format!("http://bad.glob.test:{port}/"));
        assert!(denied.starts_with("403 denied") && denied.contains("bad.glob.test"), "{denied}");
        // Not named at all.
        let other = fetch(d, &id, &format!("http://other.test:{port}/"));
        assert!(other.starts_with("403 denied"), "{other}");
        // The host's loopback is not reachable by address, through the proxy or around it.
        let loopback = fetch(d, &id, &format!("http://127.0.0.1:{port}/"));
        assert!(loopback.starts_with("error"), "NO_PROXY sends loopback direct, to the sandbox's own: {loopback}");
        let raw = format!(
            "import socket\ns=socket.create_connection(('127.0.0.1',3128))\ns.sendall(b'GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n')\nprint(s.recv(100).split(b' ')[1].decode())"
        );
        let via_proxy = d.berth(&["exec", &id, "--", "python3", "-c", &raw]);
        assert_eq!(text(&via_proxy.stdout).trim(), "403");

        // HTTPS: the TLS server name must be the host the tunnel was opened to.
        let sni = format!(
            r#"
import socket, ssl
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context()
try:
    ctx.wrap_socket(s, server_hostname="exfil.example").do_handshake()
    print("handshake")
except (ssl.SSLError, OSError) as e:
    print("refused")
"#
        );
        let out = d.berth(&["exec", &id, "--", "python3", "-c", &sni]);
        assert_eq!(text(&out.stdout), "HTTP/1.1 200 Connection Established\nrefused\n", "{}", text(&out.stderr));

        let records = log(d, &id);
        assert!(
            records.iter().any(|r| r["verdict"] == "denied" && r["reason"].as_str().unwrap().contains("exfil.example")),
            "the SNI mismatch is logged: {records:?}"
        );
        let verdicts: Vec<(String, String)> = records
            .iter()
            .map(|r| (r["host"].as_str().unwrap().to_string(), r["verdict"].as_str().unwrap().to_string()))
            .collect();
        assert!(verdicts.contains(&("api.test".into(), "allowed".into())), "{verdicts:?}");
        assert!(verdicts.contains(&("bad.glob.test".into(), "denied".into())), "{verdicts:?}");
        let ok = records.iter().find(|r| r["verdict"] == "allowed").unwrap();
        assert_eq!(ok["rule"], allowed.as_str());
        assert_eq!(ok["exec"], "x1", "the attempt names the exec that made it: {ok}");
        assert!(ok["bytes_down"].as_u64().unwrap() > 0);
        let bad = records.iter().find(|r| r["host"] == "bad.glob.test").unwrap();
        assert_eq!(bad["rule"], "bad.glob.test");
    }
}

on_each_daemon_isolation! {
    fn raw_sockets_udp_icmp_and_other_sandboxes_are_out_of_reach(d, _iso) {
        let a = d.create(&["--dangerously-allow-all-net"]);
        let b = d.create(&[]);
        // B serves on its own loopback; A cannot reach it (each sandbox has its own network namespace).
        let _server =
            d.cmd(&["exec", "--detach", &b, "--", "python3", "-m", "http.server", "9000", "--bind", "127.0.0.1"]).output();
        // The server is up when B can reach it (python's start can take seconds on a loaded machine).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut got = fetch(d, &b, "http://127.0.0.1:9000/");
        while !got.starts_with("200") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            got = fetch(d, &b, "http://127.0.0.1:9000/");
        }
        assert_eq!(got.split(' ').next(), Some("200"), "B reaches its own server: {got}");
        assert!(fetch(d, &a, "http://127.0.0.1:9000/").starts_with("error"));
        let probe = r#"
import socket
for name, make in [("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                   ("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))]:
    try:
        s = make(); s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("1.1.1.1", 0)); print(name, "sent")
    except OSError as e:
        print(name, "blocked")
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("1.1.1.1", 53)); print("udp sent")
except OSError as e:
    print("udp blocked")
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3); print("tcp connected")
except OSError as e:
    print("tcp blocked")
"#;
        let out = d.berth(&["exec", &a, "--", "python3", "-c", probe]);
        assert_eq!(text(&out.stdout), "raw blocked\nicmp blocked\nudp blocked\ntcp blocked\n", "{}", text(&out.stderr));
    }
}

on_each_daemon_isolation! {
    fn live_allow_and_deny_take_effect_and_a_deny_closes_open_connections(d, _iso) {
        let port = upstream("live");
        let rule = format!("live.test:{port}");
        let id = d.create(&["--add-host", "live.test:127.0.0.1"]);
        assert!(fetch(d, &id, &format!("http://live.test:{port}/")).starts_with("403 denied"), "none by default");
        let allowed = d.berth(&["net", "allow", &id, &rule]);
        assert!(allowed.status.success(), "{}", text(&allowed.stderr));
        assert_eq!(fetch(d, &id, &format!("http://live.test:{port}/")), "200 live");

        // A CONNECT tunnel held open (echoing), then a deny: the tunnel is closed.
        let tunnel = format!(
            r#"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT live.test:{port} HTTP/1.1\r\nHost: live.test:{port}\r\n\r\n")
print(s.recv(200).split(b"\r\n")[0].decode(), flush=True)
s.sendall(b"ping"); print(s.recv(10).decode(), flush=True)
open("/tmp/ready", "w").close()
s.settimeout(20)
try:
    while True:
        d = s.recv(10)
        if not d:
            print("closed", flush=True); break
except Exception as e:
    print("timeout", e, flush=True)
"#
        );
        let child =
            d.cmd(&["exec", &id, "--", "python3", "-c", &tunnel]).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while d.berth(&["exec", &id, "--", "test", "-e", "/tmp/ready"]).status.code() != Some(0) {
            assert!(Instant::now() < deadline, "the tunnel did not open");
            std::thread::sleep(Duration::from_millis(50));
        }
        let denied: Value = serde_json::from_slice(&d.berth(&["net", "deny", &id, &rule, "--json"]).stdout).unwrap();
        assert_eq!(denied["closed"], 1, "{denied}");
        let out = common::daemon::wait_output(child, Duration::from_secs(15));
        assert_eq!(text(&out.stdout), "HTTP/1.1 200 Connection Established\nping\nclosed\n");
        assert!(fetch(d, &id, &format!("http://live.test:{port}/")).starts_with("403 denied"));
        let inspect: Value = serde_json::from_slice(&d.berth(&["inspect", &id, "--json"]).stdout).unwrap();
        assert_eq!(inspect["network"]["deny"][0], rule.as_str());

        let bad = d.berth(&["net", "allow", &id, "not a rule"]);
        assert_eq!(bad.status.code(), Some(125), "{}", text(&bad.stderr));
        assert!(text(&bad.stderr).contains("network rule \"not a rule\" contains white space"), "{}", text(&bad.stderr));
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{id}/net"), r#"{"allow":[]}"#).0, 400);
    }
}

on_each_daemon_isolation! {
    fn learn_mode_records_and_suggests_the_allowlist_the_run_needed(d, _iso) {
        let port = upstream("learned");
        let id = d.create(&["--net", "learn", "--add-host", "one.test:127.0.0.1", "--add-host", "two.test:127.0.0.1"]);
        assert_eq!(fetch(d, &id, &format!("http://one.test:{port}/")), "200 learned");
        assert_eq!(fetch(d, &id, &format!("http://two.test:{port}/a")), "200 learned");
        assert_eq!(fetch(d, &id, &format!("http://one.test:{port}/b")), "200 learned");
        let out = d.berth(&["net", "suggest", &id]);
        assert_eq!(text(&out.stdout).trim(), format!("one.test:{port},two.test:{port}"));
        // Enforcing the suggestion lets the same run through and nothing else.
        let suggested = text(&out.stdout).trim().to_string();
        let enforced = d.create(&[
            "--allow-net",
            &suggested,
            "--add-host",
            "one.test:127.0.0.1",
            "--add-host",
            "three.test:127.0.0.1",
        ]);
        assert_eq!(fetch(d, &enforced, &format!("http://one.test:{port}/")), "200 learned");
        assert!(fetch(d, &enforced, &format!("http://three.test:{port}/")).starts_with("403"));
    }
}

#[test]
fn a_session_token_sees_only_its_sandbox_and_stops_working_at_teardown() {
    let api_port = common::free_port();
    let d = Daemon::start_with(&["--listen", &format!("127.0.0.1:{api_port}")]);
    let id = d.create(&["--memory", "256M"]);
    let other = d.create(&[]);
    let token = text(&d.berth(&["exec", &id, "--", "printenv", "BERTH_TOKEN"]).stdout).trim().to_string();
    assert!(token.starts_with("berth_s_"), "{token}");
    let addr = format!("127.0.0.1:{api_port}");
    let call = |method: &str, path: &str, body: &str| tcp_http(&addr, method, path, Some(&token), body);
    assert_eq!(call("GET", &format!("/v1/sandboxes/{id}"), "").0, 200, "it may inspect itself");
    assert_eq!(call("GET", &format!("/v1/sandboxes/{other}"), "").0, 401, "not another sandbox");
    assert_eq!(call("DELETE", &format!("/v1/sandboxes/{other}"), "").0, 401);
    // The list shows it its own sandbox (and its children, below), not the other one.
    let (status, listed) = call("GET", "/v1/sandboxes", "");
    assert!(status == 200 && listed.contains(&id) && !listed.contains(&other), "{listed}");
    assert_eq!(call("POST", &format!("/v1/sandboxes/{id}/execs"), r#"{"argv":["true"]}"#).0, 401);
    // A child: within its owner's limits, usable by the token, removed with its owner.
    let (status, body) = call("POST", "/v1/sandboxes", r#"{"memory_bytes": 1073741824}"#);
    assert_eq!(status, 400, "more memory than its owner: {body}");
    let (status, body) = call("POST", "/v1/sandboxes", "{}");
    assert_eq!(status, 201, "{body}");
    let child: Value = serde_json::from_str(&body).unwrap();
    let child_id = child["id"].as_str().unwrap().to_string();
    assert_eq!(child["owner"], id.as_str());
    assert_eq!(child["memory_bytes"], 256 << 20);
    let (status, _) = call("POST", &format!("/v1/sandboxes/{child_id}/execs"), r#"{"argv":["true"]}"#);
    assert_eq!(status, 200);
    // It cannot widen what a child may reach or hold, nor make more sandboxes than its share.
    assert_eq!(call("POST", &format!("/v1/sandboxes/{child_id}/net"), r#"{"allow":["example.com"]}"#).0, 401);
    assert_eq!(call("POST", &format!("/v1/sandboxes/{child_id}/fork"), r#"{"count":2}"#).0, 401);
    let (status, body) = call("POST", "/v1/sandboxes", "{}");
    assert_eq!(status, 400, "its first child holds all its memory: {body}");
    let (status, body) = call("POST", "/v1/sandboxes", r#"{"volumes":[{"name":"v","target":"/v"}]}"#);
    assert_eq!(status, 400, "{body}");

    // The same API from inside the sandbox, at BERTH_API.
    let inside = d.berth(&[
        "exec", &id, "--", "python3", "-c",
        "import os,urllib.request,json; r=urllib.request.Request(os.environ['BERTH_API']+'/v1/sandboxes/'+os.environ['BERTH_SANDBOX_ID'], headers={'Authorization':'Bearer '+os.environ['BERTH_TOKEN']}); print(json.load(urllib.request.urlopen(r))['id'])",
    ]);
    assert_eq!(text(&inside.stdout).trim(), id, "{}", text(&inside.stderr));

    let rm = d.berth(&["rm", &id, "--json"]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    let receipts: Value = serde_json::from_slice(&rm.stdout).unwrap();
    let receipt = &receipts[0];
    assert!(receipt["revoked"].as_array().unwrap().iter().any(|r| r.as_str().unwrap().starts_with("session token")));
    assert!(receipt["steps"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().contains(&child_id)), "{receipt}");
    assert_eq!(call("GET", &format!("/v1/sandboxes/{id}"), "").0, 401, "the token stopped working");
    assert!(!d.ids().contains(&child_id), "its child went with it");
}

#[test]
fn a_session_ends_with_its_runtime_even_when_nobody_removed_it() {
    let api_port = common::free_port();
    let d = Daemon::start_with(&["--listen", &format!("127.0.0.1:{api_port}")]);
    let id = d.create(&[]);
    let token = text(&d.berth(&["exec", &id, "--", "printenv", "BERTH_TOKEN"]).stdout).trim().to_string();
    let addr = format!("127.0.0.1:{api_port}");
    let status = |token: &str| tcp_http(&addr, "GET", &format!("/v1/sandboxes/{id}"), Some(token), "").0;
    assert_eq!(status(&token), 200);
    let inspect: Value = serde_json::from_slice(&d.berth(&["inspect", &id, "--json"]).stdout).unwrap();
    let pid = inspect["pid"].as_i64().unwrap() as i32;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.ids().contains(&id) {
        assert!(Instant::now() < deadline, "the ended sandbox is still listed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(&token), 401, "its token went with it");
}

/// Inside a sandbox: hold 128 API connections (each after one answered request) and 128 CONNECT tunnels to
/// `cap.test:PORT` (each after an echoed ping), 256 in all; then say what one more connection to each port
/// gets when it sends nothing; then, once /tmp/go exists, close two of each and open one more of each.
const HOLD: &str = r#"
import os, socket, sys, time
PORT = int(sys.argv[1])
TOKEN, ME = os.environ["BERTH_TOKEN"], os.environ["BERTH_SANDBOX_ID"]

def head(s):
    out = b""
    while b"\r\n\r\n" not in out:
        d = s.recv(4096)
        if not d:
            return None
        out += d
    return out

def api():
    try:
        s = socket.create_connection(("127.0.0.1", 3129), timeout=30)
        s.sendall(("GET /v1/sandboxes/%s HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n" % (ME, TOKEN)).encode())
        got = head(s)
        if got is None or not got.startswith(b"HTTP/1.1 200"):
            return None
        top, body = got.split(b"\r\n\r\n", 1)
        length = [int(l.split(b":")[1]) for l in top.split(b"\r\n") if l.lower().startswith(b"content-length:")][0]
        while len(body) < length:
            body += s.recv(4096)
        return s
    except OSError:
        return None

def tunnel():
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
        s.sendall(("CONNECT cap.test:%d HTTP/1.1\r\nHost: cap.test:%d\r\n\r\n" % (PORT, PORT)).encode())
        got = head(s)
        if got is None or not got.startswith(b"HTTP/1.1 200"):
            return None
        s.sendall(b"ping")
        return s if s.recv(4) == b"ping" else None
    except OSError:
        return None

def unanswered(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        d = s.recv(200)
        return "closed" if d == b"" else "answered " + d.split(b"\r\n")[0].decode()
    except socket.timeout:
        return "held open"
    except OSError as e:
        return "error %s" % e
    finally:
        s.close()

def again(make):
    deadline = time.time() + 30
    while time.time() < deadline:
        s = make()
        if s is not None:
            return s
        time.sleep(0.05)
    return None

apis = [api() for _ in range(128)]
tunnels = [tunnel() for _ in range(128)]
print("held", sum(s is not None for s in apis), "api", sum(s is not None for s in tunnels), "proxy", flush=True)
print("257th api", unanswered(3129), flush=True)
print("257th proxy", unanswered(3128), flush=True)
open("/tmp/held", "w").close()
deadline = time.time() + 120
while not os.path.exists("/tmp/go") and time.time() < deadline:
    time.sleep(0.05)
for s in apis[:2] + tunnels[:2]:
    s.close()
print("api again", "served" if again(api) else "refused", flush=True)
print("proxy again", "served" if again(tunnel) else "refused", flush=True)
"#;

#[test]
fn a_sandbox_holds_at_most_256_connections_and_one_more_is_closed_unanswered() {
    // Held API connections sit idle between requests: give them longer than the test.
    let d = Daemon::start_with(&["--header-timeout", "10m"]);
    let port = upstream("not capped");
    let rule = format!("cap.test:{port}");
    let id = d.create(&["--allow-net", &rule, "--add-host", "cap.test:127.0.0.1"]);
    let other = d.create(&["--allow-net", &rule, "--add-host", "cap.test:127.0.0.1"]);
    let mut holder = d
        .cmd(&["exec", &id, "--", "python3", "-c", HOLD, &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while holder.try_wait().unwrap().is_none()
        && d.berth(&["exec", &id, "--", "test", "-e", "/tmp/held"]).status.code() != Some(0)
    {
        assert!(Instant::now() < deadline, "the sandbox did not get to hold its connections");
        std::thread::sleep(Duration::from_millis(100));
    }
    // While the one holds all it may, another sandbox reaches the proxy and the API as ever.
    assert_eq!(fetch(&d, &other, &format!("http://cap.test:{port}/")), "200 not capped");
    let api = "import os,urllib.request,json; r=urllib.request.Request(os.environ['BERTH_API']+'/v1/sandboxes/'+os.environ['BERTH_SANDBOX_ID'], headers={'Authorization':'Bearer '+os.environ['BERTH_TOKEN']}); print(json.load(urllib.request.urlopen(r))['id'])";
    let inside = d.berth(&["exec", &other, "--", "python3", "-c", api]);
    assert_eq!(text(&inside.stdout).trim(), other, "{}", text(&inside.stderr));
    let go = d.berth(&["exec", &id, "--", "touch", "/tmp/go"]);
    assert!(go.status.success(), "{}", text(&go.stderr));
    let out = common::daemon::wait_output(holder, Duration::from_secs(120));
    // Past the cap the connection is closed at once, with no answer: not the API listener's 503 nor the
    // proxy's (its own cap, 128, is full too), nor a wait for a request head.
    assert_eq!(
        text(&out.stdout),
        "held 128 api 128 proxy\n257th api closed\n257th proxy closed\napi again served\nproxy again served\n",
        "{}",
        text(&out.stderr)
    );
}
