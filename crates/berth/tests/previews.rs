//! Preview URLs on a real daemon with a TCP listener, behind both isolations: a server the sandbox runs on
//! its own loopback reached through `/preview/<id>/<port>/` with the preview's token (then its cookie), a
//! WebSocket echoed through a public preview, a token for one port refused on another, an expired and a
//! removed preview refused, every request journaled, and nothing reachable once the sandbox is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;

/// A WebSocket echo server on 127.0.0.1:9000, with nothing but Python's standard library.
const ECHO: &str = r#"
import socket, hashlib, base64, struct
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 9000)); s.listen(8)
while True:
    c, _ = s.accept()
    head = b''
    while b'\r\n\r\n' not in head:
        more = c.recv(4096)
        if not more:
            break
        head += more
    if b'\r\n\r\n' not in head:
        c.close()
        continue
    key = [l.split(b':', 1)[1].strip() for l in head.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key')][0]
    accept = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n')
    def take(n):
        b = b''
        while len(b) < n:
            more = c.recv(n - len(b))
            if not more:
                raise EOFError
            b += more
        return b
    try:
        while True:
            h = take(2); op = h[0] & 15; n = h[1] & 127
            if n == 126: n = struct.unpack('>H', take(2))[0]
            mask = take(4); data = bytes(b ^ mask[i % 4] for i, b in enumerate(take(n)))
            if op == 8: break
            c.sendall(bytes([0x80 | op, len(data)]) + data)
    except EOFError:
        pass
    c.close()
"#;

/// One raw HTTP/1.1 GET to the listener at `addr` with extra header lines: (status, head, body).
fn get(addr: &str, path: &str, headers: &str) -> (u16, String, String) {
    get_as(addr, addr, path, headers)
}

/// The same, naming `host` as the host asked for.
fn get_as(addr: &str, host: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (status, head.to_string(), body.to_string())
}

/// The path and query of a preview URL the daemon printed (`http://ADDR/preview/…`).
fn path_of(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    rest[rest.find('/').unwrap()..].to_string()
}

fn expose(d: &Daemon, args: &[&str]) -> String {
    let mut all = vec!["expose"];
    all.extend_from_slice(args);
    let out = d.berth(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

/// Start the file server (port 8000, serving /workspace) and the echo server (9000); wait until both answer.
fn serve(d: &Daemon, id: &str) {
    d.sh(id, "echo hello-preview > /workspace/index.html");
    let (status, body) = d.files("PUT", id, "files", "/workspace/echo.py", "", ECHO.as_bytes());
    assert!((200..300).contains(&status), "{}", String::from_utf8_lossy(&body));
    d.sh(
        id,
        "cd /workspace && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && \
         (python3 echo.py >/dev/null 2>&1 &)",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let up = "python3 -c \"import socket; [socket.create_connection(('127.0.0.1', p)).close() for p in (8000, 9000)]\"";
    while !d.berth(&["exec", id, "--", "sh", "-c", up]).status.success() {
        assert!(Instant::now() < deadline, "the servers in the sandbox did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn previews_behind(iso: &str) {
    let (d, addr) = Daemon::start_with_tcp(&["--isolation", iso, "--domain", "preview.test"]);
    let id = d.create(&[]);
    serve(&d, &id);

    // Through the preview with its token: the server's page, and a cookie for the preview's path.
    let url = expose(&d, &[&id, "8000"]);
    assert!(url.starts_with(&format!("http://{addr}/preview/{id}/8000/?berth_preview_token=bpv_")), "{url}");
    let (status, head, body) = get(&addr, &path_of(&url), "");
    assert_eq!((status, body.as_str()), (200, "hello-preview\n"), "{head}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no cookie: {head}"))
        .to_string();
    let (status, _, body) = get(&addr, &format!("/preview/{id}/8000/index.html"), &format!("Cookie: {cookie}\r\n"));
    assert_eq!((status, body.as_str()), (200, "hello-preview\n"), "the cookie opens it too");
    // Without a token it is refused, with a sentence; so is an API token's absence not what it asks for.
    let (status, _, body) = get(&addr, &format!("/preview/{id}/8000/"), "");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("a token of its own"), "{body}");
    // The bare path goes to the preview's root.
    let (status, head, _) = get(&addr, &format!("/preview/{id}/8000"), "");
    assert_eq!(status, 308, "{head}");

    // The same preview as a host of its own under the daemon's domain (what a wildcard DNS name points at).
    let made: serde_json::Value = serde_json::from_str(&expose(&d, &[&id, "8000", "--json"])).unwrap();
    let port = addr.rsplit(':').next().unwrap();
    let host = format!("8000-{id}.preview.test:{port}");
    let host_url = made["host_url"].as_str().unwrap();
    assert!(host_url.starts_with(&format!("http://{host}/?berth_preview_token=bpv_")), "{made}");
    let (status, _, body) = get_as(&addr, &host, &path_of(host_url), "");
    assert_eq!((status, body.as_str()), (200, "hello-preview\n"));
    let (status, _, _) = get_as(&addr, &host, "/index.html", "");
    assert_eq!(status, 401, "by host, as by path, a token is needed");
    let (status, _, body) = get_as(&addr, &format!("8001-{id}.preview.test"), "/", "");
    assert_eq!(status, 404, "a port with no preview: {body}");
    // A host outside the domain is the API's, which wants its own token.
    let (status, _, _) = get_as(&addr, &format!("8000-{id}.elsewhere.test"), "/v1/sandboxes", "");
    assert_eq!(status, 401);

    // A token opens its own port only.
    let echo_url = expose(&d, &[&id, "9000"]);
    let token_8000 = url.split("berth_preview_token=").nth(1).unwrap().to_string();
    let (status, _, body) = get(&addr, &format!("/preview/{id}/9000/?berth_preview_token={token_8000}"), "");
    assert_eq!(status, 401, "port 8000's token does not open port 9000: {body}");
    assert!(echo_url != url);

    // A public preview needs no token, and carries a WebSocket both ways.
    let public = expose(&d, &[&id, "9000", "--public"]);
    assert!(!public.contains("token"), "{public}");
    let stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut ws, answer) = tungstenite::client::client(format!("ws://{addr}{}", path_of(&public)), stream).unwrap();
    assert_eq!(answer.status(), 101);
    ws.send(tungstenite::Message::Text("over the preview".into())).unwrap();
    assert_eq!(ws.read().unwrap().into_text().unwrap().as_str(), "over the preview");
    // An open connection through a preview leads out of the sandbox: it cannot hibernate meanwhile, and says
    // why; closed, it can, and the next request through the preview wakes it.
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("1 connection(s) through its preview URLs are open"), "{body}");
    let _ = ws.close(None);
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
        if status == 200 {
            break;
        }
        assert!(body.contains("preview URLs are open"), "{body}");
        assert!(Instant::now() < deadline, "the closed connection still counted: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _, body) = get(&addr, &format!("/preview/{id}/8000/"), &format!("Cookie: {cookie}\r\n"));
    assert_eq!((status, body.as_str()), (200, "hello-preview\n"), "a preview request wakes it");

    // One that expires stops working; one removed stops at once.
    let short = expose(&d, &[&id, "8000", "--ttl", "1s"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&addr, &path_of(&short), "").0 == 200 {
        assert!(Instant::now() < deadline, "the preview did not expire");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&addr, &path_of(&short), "").0, 401, "an expired token is refused");
    let listed: serde_json::Value = serde_json::from_slice(&d.berth(&["expose", "ls", &id, "--json"]).stdout).unwrap();
    let first =
        listed.as_array().unwrap().iter().find(|p| p["port"] == 8000).unwrap()["id"].as_str().unwrap().to_string();
    assert!(listed.as_array().unwrap().iter().all(|p| p["token"].is_null()), "a listing shows no token: {listed}");
    let out = d.berth(&["expose", "rm", &id, &first]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (status, _, _) = get(&addr, &path_of(&url), "");
    assert_eq!(status, 401, "the removed preview's token opens nothing (port 8000 has another preview)");

    // Every request through a preview is in the sandbox's journal.
    let journal = text(&d.berth(&["journal", &id]).stdout);
    assert!(journal.contains("preview") && journal.contains("expose") && journal.contains("unexpose"), "{journal}");

    // Removing the sandbox closes its previews, and says so in its receipt.
    let out = d.berth(&["rm", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("closed 3 preview(s)"), "{}", text(&out.stdout));
    assert_eq!(get(&addr, &path_of(&public), "").0, 404);
}

#[test]
fn a_sandboxs_server_is_reached_through_its_preview_namespaces() {
    previews_behind("namespaces");
}

#[test]
fn a_sandboxs_server_is_reached_through_its_preview_gvisor() {
    previews_behind("gvisor");
}

#[test]
fn previews_need_a_listener_a_port_and_a_sandbox() {
    let d = Daemon::start();
    let id = d.create(&[]);
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/previews"), r#"{"port": 8000}"#);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("no TCP listener"), "{body}");
    let (d, _addr) = Daemon::start_with_tcp(&[]);
    let id = d.create(&[]);
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/previews"), r#"{"port": 0}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) =
        d.http("POST", &format!("/v1/sandboxes/{id}/previews"), r#"{"port": 8000, "ttl_seconds": -1}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) = d.http("POST", "/v1/sandboxes/000000000000/previews", r#"{"port": 8000}"#);
    assert_eq!(status, 404, "{body}");
    let (status, body) = d.http("DELETE", &format!("/v1/sandboxes/{id}/previews/nope"), "");
    assert_eq!(status, 404, "{body}");
    // Nothing listening on the port: a sentence, not a hang.
    let url = text(&d.berth(&["expose", &id, "8123"]).stdout).trim().to_string();
    let (status, _, body) = get(&_addr, &path_of(&url), "");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("nothing answered on 127.0.0.1:8123"), "{body}");
}

/// A server on 127.0.0.1:8100 that answers a POST with the SHA-256 of its body and `GET /big` with a
/// 64 MiB file of random bytes from `/tmp/big`.
const BODIES: &str = r#"
import hashlib, http.server, shutil
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n, h = int(self.headers['Content-Length']), hashlib.sha256()
        while n:
            chunk = self.rfile.read(min(n, 1 << 20)); h.update(chunk); n -= len(chunk)
        body = h.hexdigest().encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        with open('/tmp/big', 'rb') as f:
            self.send_response(200); self.send_header('Content-Length', str(64 << 20)); self.end_headers()
            shutil.copyfileobj(f, self.wfile, 1 << 20)
http.server.ThreadingHTTPServer(('127.0.0.1', 8100), H).serve_forever()
"#;

#[test]
fn large_bodies_pass_through_a_preview_both_ways() {
    use sha2::Digest;
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let id = d.create(&["--memory", "1G"]);
    d.sh(&id, &format!("head -c 67108864 /dev/urandom > /tmp/big && cat > /tmp/bodies.py <<'EOF'\n{BODIES}\nEOF"));
    assert!(d.berth(&["exec", "-d", &id, "--", "python3", "/tmp/bodies.py"]).status.success());
    let url = expose(&d, &[&id, "8100", "--public"]);
    let path = path_of(&url);
    let deadline = Instant::now() + Duration::from_secs(30);
    let up = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8100)).close()\"";
    while !d.berth(&["exec", &id, "--", "sh", "-c", up]).status.success() {
        assert!(Instant::now() < deadline, "the server in the sandbox did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }

    // 48 MiB up: the server inside sees every byte.
    let body: Vec<u8> = (0..48u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
        .unwrap();
    s.write_all(&body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let want: String = sha2::Sha256::digest(&body).iter().map(|b| format!("{b:02x}")).collect();
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with(&want), "{}", &resp[..resp.len().min(400)]);

    // 64 MiB down, streamed: the same bytes as the file inside.
    let inside = d.sh(&id, "sha256sum /tmp/big | cut -d' ' -f1").trim().to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path}big HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..at]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got: String = sha2::Sha256::digest(&all[at..]).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!((all.len() - at, got), (64 << 20, inside));
}
