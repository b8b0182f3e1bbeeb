//! The bounds every listener of the API keeps: the unix socket, the TCP listener and a sandbox's API port.
//! A head over the bound is a 431 with an error body, a JSON body over its bound a 413, a client that sends
//! no whole head in time (silent, dripping, or idle on a kept-alive connection) gets a 408 and is cut off,
//! and past the connection cap a new connection gets a 503 and is closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// A connection to one of the daemon's listeners.
trait Conn: Read + Write {
    fn set_timeout(&self, d: Duration);
}
impl Conn for UnixStream {
    fn set_timeout(&self, d: Duration) {
        self.set_read_timeout(Some(d)).unwrap();
    }
}
impl Conn for TcpStream {
    fn set_timeout(&self, d: Duration) {
        self.set_read_timeout(Some(d)).unwrap();
    }
}

/// Everything the server sends until it closes the connection (a guard of 30 s against a server that never
/// does, which fails the caller's assertions rather than hanging).
fn read_to_close(c: &mut dyn Conn) -> String {
    c.set_timeout(Duration::from_secs(30));
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    text(&out)
}

/// The status and the error body's code of a whole answer.
fn status_and_code(answer: &str) -> (u16, String) {
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    (status, v["error"]["code"].as_str().unwrap_or_default().to_string())
}

fn get(path: &str, auth: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: berth\r\n{auth}{extra}Connection: close\r\n\r\n")
}

/// A daemon with a TCP listener and a token for it.
fn with_tcp(extra: &[&str]) -> (Daemon, String, String) {
    let (d, addr) = Daemon::start_with_tcp(extra);
    let out = d.berth(&["token", "create", "--name", "bounds"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let auth = format!("Authorization: Bearer {}\r\n", text(&out.stdout).trim());
    (d, addr, auth)
}

#[test]
fn a_head_over_the_bound_is_431_and_a_body_over_its_bound_413_on_the_socket_and_over_tcp() {
    let (d, addr, auth) = with_tcp(&["--max-header-size", "4k", "--max-body-size", "8k"]);
    let unix = || -> Box<dyn Conn> { Box::new(UnixStream::connect(d.socket()).unwrap()) };
    let tcp = || -> Box<dyn Conn> { Box::new(TcpStream::connect(&addr).unwrap()) };
    for (name, connect, auth) in [("unix", &unix as &dyn Fn() -> Box<dyn Conn>, ""), ("tcp", &tcp, auth.as_str())] {
        // Just under the bound: served.
        let mut c = connect();
        c.write_all(get("/v1/sandboxes", auth, &format!("X-Pad: {}\r\n", "a".repeat(3000))).as_bytes()).unwrap();
        let answer = read_to_close(&mut *c);
        assert_eq!(status_and_code(&answer).0, 200, "{name}: {answer}");
        // Over it: 431 with an error body that says what the bound is.
        let mut c = connect();
        c.write_all(get("/v1/sandboxes", auth, &format!("X-Pad: {}\r\n", "a".repeat(5000))).as_bytes()).unwrap();
        let answer = read_to_close(&mut *c);
        assert_eq!(status_and_code(&answer), (431, "headers_too_large".into()), "{name}: {answer}");
        assert!(answer.contains("at most 4096"), "{name}: {answer}");
        // Far over it (past the parser's own limit, twice the bound): still 431.
        let mut c = connect();
        let _ = c.write_all(get("/v1/sandboxes", auth, &format!("X-Pad: {}\r\n", "a".repeat(20000))).as_bytes());
        assert_eq!(status_and_code(&read_to_close(&mut *c)).0, 431, "{name}");

        // A JSON body over its bound: 413, nothing created.
        let body = format!(r#"{{"labels": {{"pad": "{}"}}}}"#, "b".repeat(9000));
        let mut c = connect();
        let req = format!(
            "POST /v1/sandboxes HTTP/1.1\r\nHost: berth\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = c.write_all(req.as_bytes());
        let answer = read_to_close(&mut *c);
        assert_eq!(status_and_code(&answer), (413, "payload_too_large".into()), "{name}: {answer}");
        assert!(answer.contains("larger than 8192 bytes"), "{name}: {answer}");
        assert!(d.ids().is_empty(), "{name}");
    }
    // A file upload has its own, larger bound: a body over the JSON bound is written.
    let id = d.create(&[]);
    let (status, _) = d.files("PUT", &id, "files", "/workspace/big", "", &vec![7u8; 64 << 10]);
    assert_eq!(status, 201);
    assert_eq!(d.files("GET", &id, "files", "/workspace/big", "", b"").1.len(), 64 << 10);
}

#[test]
fn silent_dripping_and_idle_clients_get_408_and_are_cut_off() {
    let (d, addr, auth) = with_tcp(&["--header-timeout", "1s"]);
    // Silent, on both listeners: nothing sent at all.
    let mut silent_unix = UnixStream::connect(d.socket()).unwrap();
    let mut silent_tcp = TcpStream::connect(&addr).unwrap();
    for (name, c) in [("unix", &mut silent_unix as &mut dyn Conn), ("tcp", &mut silent_tcp)] {
        let answer = read_to_close(c);
        assert_eq!(status_and_code(&answer), (408, "request_timeout".into()), "{name}: {answer}");
    }

    // Dripping: a byte of the head every 100 ms, which alone would never time out a read; the whole head
    // is what has to arrive in time. The answer comes while the client is still sending.
    let mut drip = TcpStream::connect(&addr).unwrap();
    drip.set_timeout(Duration::from_millis(100));
    let head = get("/v1/sandboxes", &auth, "");
    let mut answer = Vec::new();
    let started = Instant::now();
    for b in head.as_bytes().iter().take(head.len() - 4) {
        if drip.write_all(&[*b]).is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match drip.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(30), "a dripping client was never cut off");
    }
    answer.extend(read_to_close(&mut drip).into_bytes());
    assert_eq!(status_and_code(&text(&answer)), (408, "request_timeout".into()), "{}", text(&answer));

    // Idle: a kept-alive connection is served, then cut off once it has sat idle as long.
    let mut idle = UnixStream::connect(d.socket()).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n").unwrap();
    let answer = read_to_close(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("HTTP/1.1 408"), "an idle kept-alive connection is closed with a 408: {answer}");
}

#[test]
fn past_the_connection_cap_a_new_connection_gets_503_until_one_closes() {
    let (d, addr, auth) = with_tcp(&["--max-connections", "2"]);
    // Two open connections (each holding a whole request in flight would do the same) fill each listener.
    let held_unix = [UnixStream::connect(d.socket()).unwrap(), UnixStream::connect(d.socket()).unwrap()];
    let held_tcp = [TcpStream::connect(&addr).unwrap(), TcpStream::connect(&addr).unwrap()];
    // A listener accepts connections in the order they arrived, and takes each one's place as it accepts it:
    // the third is accepted after the two have theirs.
    let mut third_unix = UnixStream::connect(d.socket()).unwrap();
    third_unix.write_all(get("/healthz", "", "").as_bytes()).unwrap();
    let mut third_tcp = TcpStream::connect(&addr).unwrap();
    third_tcp.write_all(get("/healthz", &auth, "").as_bytes()).unwrap();
    for (name, c) in [("unix", &mut third_unix as &mut dyn Conn), ("tcp", &mut third_tcp)] {
        let answer = read_to_close(c);
        assert_eq!(status_and_code(&answer), (503, "unavailable".into()), "{name}: {answer}");
        assert!(answer.contains("as many connections as it may (2)"), "{name}: {answer}");
    }
    // One closes: a new connection is served again (once the daemon has seen the close).
    drop(held_unix);
    drop(held_tcp);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(get("/healthz", &auth, "").as_bytes()).unwrap();
        if status_and_code(&read_to_close(&mut c)).0 == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "connections stayed refused after the held ones closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(d.http("GET", "/healthz", "").0, 200);
}

/// A sandbox's API port (`BERTH_API`, 127.0.0.1:3129 inside) keeps the same bounds.
#[test]
fn a_sandboxs_api_port_keeps_the_same_bounds() {
    let d = Daemon::start_with(&["--max-header-size", "2k", "--header-timeout", "1s"]);
    let id = d.create(&[]);
    let script = r#"
import socket
def answer(data):
    s = socket.create_connection(("127.0.0.1", 3129))
    s.settimeout(30)
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return out.split(b" ")[1].decode() if out else "closed"
        out += chunk
print(answer(b"GET /healthz HTTP/1.1\r\nHost: b\r\nX-Pad: " + b"a" * 3000 + b"\r\nConnection: close\r\n\r\n"))
print(answer(b""))
"#;
    let out = d.berth(&["exec", &id, "--", "python3", "-c", script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).split_whitespace().collect::<Vec<_>>(), ["431", "408"], "{}", text(&out.stderr));
}

/// Uploads are read whole before they are written, so the daemon holds at most 256 MiB of them at once:
/// four clients that declare 64 MiB bodies and send them slowly take the whole budget, a fifth upload gets
/// a 503 that says why (after waiting its 10 s), and once one of the four goes, uploads are taken again.
#[test]
fn uploads_in_flight_are_bounded_and_past_the_bound_an_upload_gets_503() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let put = |len: u64| {
        format!(
            "PUT /v1/sandboxes/{id}/files?path=/workspace/f HTTP/1.1\r\nHost: berth\r\nContent-Type: \
             application/octet-stream\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )
    };
    let mut slow: Vec<UnixStream> = (0..4)
        .map(|_| {
            let mut c = UnixStream::connect(d.socket()).unwrap();
            c.write_all(put(64 << 20).as_bytes()).unwrap();
            c.write_all(b"a first few bytes").unwrap();
            c
        })
        .collect();
    // A fifth upload is refused once the daemon holds all four (until then it may still be written).
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let mut fifth = UnixStream::connect(d.socket()).unwrap();
        fifth.write_all(format!("{}hello", put(5)).as_bytes()).unwrap();
        let answer = read_to_close(&mut fifth);
        // Written: 201 (made), or 200 (an earlier try made it already).
        if !matches!(status_and_code(&answer).0, 200 | 201) {
            break answer;
        }
        assert!(Instant::now() < deadline, "a fifth upload was still written with four of 64 MiB in flight");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status_and_code(&answer), (503, "unavailable".into()), "{answer}");
    assert!(answer.contains("256 MiB of uploads"), "{answer}");
    // One slow upload gives up: its place is free again, and a small upload is written.
    drop(slow.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = UnixStream::connect(d.socket()).unwrap();
        c.write_all(format!("{}hello", put(5)).as_bytes()).unwrap();
        let answer = read_to_close(&mut c);
        if matches!(status_and_code(&answer).0, 200 | 201) {
            break;
        }
        assert!(Instant::now() < deadline, "uploads stayed refused after one slow upload went: {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = d.berth(&["exec", &id, "--", "cat", "/workspace/f"]);
    assert_eq!(text(&out.stdout), "hello");
}
