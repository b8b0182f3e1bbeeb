//! Secrets: sealed at rest, given to the sandboxes that declare them, redacted from output, logs and the
//! journal; and secrets that never enter the sandbox, put into requests to one host by the proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use common::daemon::Daemon;
use common::secrets::{files_containing, set, tls_files};
use common::text;

const VALUE: &str = "s3cr3t-value-9f8e7d6c";

#[test]
fn a_secret_reaches_its_sandbox_and_nothing_berth_shows_or_keeps() {
    let d = Daemon::start();
    set(&d, "API_TOKEN", VALUE);
    let ls = text(&d.berth(&["secret", "ls"]).stdout);
    assert!(ls.contains("API_TOKEN") && !ls.contains(VALUE), "{ls}");
    let id = d.create(&["--secret", "API_TOKEN"]);
    // The command gets the value...
    let check = d.berth(&["exec", &id, "--", "sh", "-c", &format!("test \"$API_TOKEN\" = '{VALUE}' && echo match")]);
    assert_eq!(text(&check.stdout), "match\n");
    // ...but what berth shows of its output has it redacted, split across writes or not.
    let out = d.berth(&["exec", &id, "--", "sh", "-c", "echo \"token=$API_TOKEN\"; printf %s \"$API_TOKEN\" | cut -c1-5; printf '%s' \"$API_TOKEN\" | dd bs=3 2>/dev/null; echo"]);
    let shown = text(&out.stdout);
    assert!(!shown.contains(VALUE), "{shown}");
    assert!(shown.starts_with("token=[redacted:API_TOKEN]\n"), "{shown}");
    // A terminal shows it redacted too.
    let shell = d.shell(&[&id, "--cmd", "sh"], "echo \"t=$API_TOKEN\"; exit\n");
    let screen = text(&shell.stdout);
    assert!(!screen.contains(VALUE) && screen.contains("t=[redacted:API_TOKEN]"), "{screen}");
    // An argv that spells the value out is redacted in the journal.
    let echoed = d.berth(&["exec", &id, "--", "echo", VALUE]);
    assert!(echoed.status.success(), "{}", text(&echoed.stderr));
    assert_eq!(text(&echoed.stdout), "[redacted:API_TOKEN]\n", "the exec's own output is redacted too");
    let journal = text(&d.berth(&["journal", &id, "--json"]).stdout);
    assert!(!journal.contains(VALUE), "{journal}");
    // Nowhere in the daemon's files: database, logs, journal, sealed secrets.
    let hits = files_containing(&d.root(), VALUE.as_bytes());
    assert!(hits.is_empty(), "the value is on disk in the clear: {hits:?}");
    let unknown = d.berth(&["create", "--secret", "NOPE"]);
    assert!(text(&unknown.stderr).contains("no secret \"NOPE\""), "{}", text(&unknown.stderr));
    let bad = d.berth(&["create", "--secret", "lower"]);
    assert_eq!(bad.status.code(), Some(125), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("\"lower\" is not a valid secret name"), "{}", text(&bad.stderr));
}

#[test]
fn an_injected_secret_reaches_its_host_only_and_never_enters_the_sandbox() {
    let d = Daemon::start();
    set(&d, "GH_TOKEN", VALUE);
    // An upstream that records the Authorization header it receives and answers with a fixed body.
    let seen: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let n = c.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let host = head.lines().find(|l| l.to_ascii_lowercase().starts_with("host:")).unwrap_or("").to_string();
            let auth =
                head.lines().find(|l| l.to_ascii_lowercase().starts_with("authorization:")).unwrap_or("").to_string();
            record.lock().unwrap().push(format!("{host} | {auth}"));
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let id = d.create(&[
        "--secret",
        &format!("GH_TOKEN@http://api.test:{port}"),
        "--allow-net",
        &format!("api.test:{port},other.test:{port}"),
        "--add-host",
        "api.test:127.0.0.1",
        "--add-host",
        "other.test:127.0.0.1",
    ]);
    let inside = text(&d.berth(&["exec", &id, "--", "printenv", "GH_TOKEN"]).stdout);
    assert!(inside.starts_with("berth-secret-GH_TOKEN-"), "the sandbox sees a placeholder: {inside}");
    let fetch = "import os,sys,urllib.request; r=urllib.request.Request(sys.argv[1], headers={'Authorization':'Bearer '+os.environ['GH_TOKEN']}); print(urllib.request.urlopen(r,timeout=10).read().decode())";
    for host in ["api.test", "other.test"] {
        let out = d.berth(&["exec", &id, "--", "python3", "-c", fetch, &format!("http://{host}:{port}/")]);
        assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    }
    let seen_by_upstream = Arc::clone(&seen);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let to_api = seen.iter().find(|s| s.contains("api.test")).unwrap();
    let to_other = seen.iter().find(|s| s.contains("other.test")).unwrap();
    assert!(to_api.ends_with(&format!("Bearer {VALUE}")), "the named host gets the value: {to_api}");
    assert!(!to_other.contains(VALUE) && to_other.contains("berth-secret-GH_TOKEN-"), "no other host does: {to_other}");
    // Declared for HTTPS (no `http://`), the value never goes out in plain HTTP, even to its host.
    let https_only = d.create(&[
        "--secret",
        &format!("GH_TOKEN@api.test:{port}"),
        "--allow-net",
        &format!("api.test:{port}"),
        "--add-host",
        "api.test:127.0.0.1",
    ]);
    let out = d.berth(&["exec", &https_only, "--", "python3", "-c", fetch, &format!("http://api.test:{port}/")]);
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let last = seen_by_upstream.lock().unwrap().last().cloned().unwrap();
    assert!(!last.contains(VALUE) && last.contains("berth-secret-GH_TOKEN-"), "{last}");
    // Not in the sandbox's files or environment anywhere.
    let grep = d.berth(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        &format!("grep -rs '{VALUE}' /proc/self/environ /etc /workspace /tmp; echo done"),
    ]);
    assert_eq!(text(&grep.stdout), "done\n");
}

/// An HTTPS server on the host's loopback: it records the Authorization header of each request.
const TLS_SERVER: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(sys.argv[2], "a").write(self.headers.get("Authorization", "") + "\n")
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1] + "/server.pem", sys.argv[1] + "/server.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[test]
fn an_injected_secret_reaches_its_host_over_https_through_the_sandboxs_own_authority() {
    let tls = tempfile::tempdir().unwrap();
    tls_files(tls.path(), "tls.test");
    let seen = tls.path().join("seen");
    let mut server = std::process::Command::new("python3")
        .args(["-c", TLS_SERVER, tls.path().to_str().unwrap(), seen.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.stdout.take().unwrap()), &mut port).unwrap();
    let port = port.trim().to_string();
    // The proxy must trust the test server's authority, as a company would add its own.
    let roots = tls.path().join("ca.pem");
    let d = Daemon::start_with_env(&[("BERTH_EGRESS_ROOTS", roots.to_str().unwrap())]);
    set(&d, "TLS_TOKEN", VALUE);
    let id = d.create(&[
        "--secret",
        &format!("TLS_TOKEN@tls.test:{port}"),
        "--allow-net",
        &format!("tls.test:{port}"),
        "--add-host",
        "tls.test:127.0.0.1",
    ]);
    let fetch = "import os,sys,urllib.request; r=urllib.request.Request(sys.argv[1], headers={'Authorization':'Bearer '+os.environ['TLS_TOKEN']}); print(urllib.request.urlopen(r,timeout=10).read().decode())";
    let out = d.berth(&["exec", &id, "--", "python3", "-c", fetch, &format!("https://tls.test:{port}/")]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let got = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(got, format!("Bearer {VALUE}\n"), "the server got the value, over TLS");
    // Inside, only the placeholder and the sandbox's authority are to be found.
    let inside = d.berth(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "printenv TLS_TOKEN; test -s /run/egress/ca.pem && echo ca; echo $SSL_CERT_FILE",
    ]);
    let inside = text(&inside.stdout);
    assert!(
        inside.starts_with("berth-secret-TLS_TOKEN-") && inside.contains("\nca\n/run/egress/ca-bundle.pem"),
        "{inside}"
    );
}
