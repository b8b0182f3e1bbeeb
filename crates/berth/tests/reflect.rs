//! A secret given as `NAME@HOST` never comes back into the sandbox: a server that reflects its whole request
//! (request line, headers, body; in response headers, status line, body and trailers; raw, base64,
//! percent-encoded, JSON-escaped) hands the sandbox the placeholder, over plain HTTP and inside intercepted
//! HTTPS, whatever the response's framing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use common::daemon::Daemon;
use common::secrets::{files_containing, set, tls_files};
use common::text;

/// A value with characters that base64, percent-encoding and JSON each write differently.
const VALUE: &str = "s3cr3t/v+lue\"9f8e\"7d6c";

const ECHO: &str = include_str!("reflect/echo.py");
const FETCH: &str = include_str!("reflect/fetch.py");

/// The reflecting server, on the host's loopback; killed when dropped.
struct Echo {
    child: Child,
    port: String,
}

impl Echo {
    /// Plain HTTP, or HTTPS with the certificate in `tls`.
    fn start(tls: Option<&std::path::Path>) -> Echo {
        let dir = tls.map_or("-".to_string(), |p| p.display().to_string());
        let mut child =
            Command::new("python3").args(["-c", ECHO, &dir]).stdout(Stdio::piped()).spawn().expect("python3");
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut port).unwrap();
        Echo { child, port: port.trim().to_string() }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn b64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=c.len() {
            out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// What of the value must never reach the sandbox: the value itself, the forms the server writes, and, of
/// a base64 text holding the value after a prefix, every character made only of the value's bits.
fn forbidden() -> Vec<String> {
    let mut out = vec![
        VALUE.to_string(),
        "s3cr3t%2Fv%2Blue%229f8e%227d6c".into(),
        "s3cr3t/v%2Blue%229f8e%227d6c".into(),
        "s3cr3t/v+lue\\\"9f8e\\\"7d6c".into(),
    ];
    for prefix in ["", "user:", "me:", "x:"] {
        for alphabet in [STANDARD, URL_SAFE] {
            let encoded = b64(format!("{prefix}{VALUE}").as_bytes(), alphabet);
            let (from, to) = ((8 * prefix.len()).div_ceil(6), (8 * (prefix.len() + VALUE.len())) / 6);
            out.push(encoded[from..to].to_string());
        }
    }
    out
}

/// Runs the fetch script in the sandbox and returns every byte it received.
fn fetch(d: &Daemon, id: &str, scheme: &str, authority: &str, paths: &[&str]) -> Vec<u8> {
    let mut args = vec!["exec", id, "--", "python3", "-c", FETCH, scheme, authority];
    args.extend_from_slice(paths);
    let out = d.berth(&args);
    let shown = text(&out.stdout);
    // What berth shows of exec output is redacted: the hex dump must not have needed it.
    assert!(out.status.success() && !shown.contains("[redacted"), "{shown}{}", text(&out.stderr));
    let hex = shown.trim();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

/// Every variant of reflection through one sandbox whose secret goes to `authority`.
fn reflections_come_back_as_the_placeholder(d: &Daemon, id: &str, scheme: &str, authority: &str) {
    let placeholder = text(&d.berth(&["exec", id, "--", "printenv", "TOKEN"]).stdout).trim().to_string();
    assert!(placeholder.starts_with("berth-secret-TOKEN-"), "{placeholder}");
    let clean = |what: &str, got: &[u8]| -> String {
        let shown = text(got);
        for form in forbidden() {
            assert!(!shown.contains(&form), "{what}: {form:?} reached the sandbox in {shown}");
        }
        shown
    };
    let q = format!("?t={placeholder}");

    // Content-Length: everything the server reflected is there, with the placeholder in the value's place.
    let got = clean("content-length", &fetch(d, id, scheme, authority, &[&format!("/cl{q}")]));
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with(&format!("HTTP/1.1 200 OK {placeholder}\r\n")), "{head}");
    for line in [
        format!("X-Echo-Authorization: Bearer {placeholder}"),
        format!("Set-Cookie: t={placeholder}; Path=/"),
        format!("Location: /back?t={placeholder}"),
        format!("WWW-Authenticate: Bearer realm=\"{placeholder}\""),
        "Transfer-Encoding: chunked".into(),
    ] {
        assert!(head.contains(&format!("\r\n{line}\r\n")), "{line} in {head}");
    }
    let body = text(&common::daemon::dechunk(body.as_bytes()));
    for line in [
        format!("GET /cl?t={placeholder} HTTP/1.1\r\n"),
        format!("Authorization: Bearer {placeholder}\r\n"),
        "Accept-Encoding: identity\r\n".into(),
        format!("\"Authorization\": \"Bearer {placeholder}\""),
        format!("\"url\": \"/anything?t={placeholder}\""),
        format!("percent: {placeholder}\n"),
        format!("form: t={placeholder}\n"),
    ] {
        assert!(body.contains(&line), "{line:?} in {body}");
    }
    // Base64: the encoded value, whole or inside `user:value` at each alignment, is replaced.
    for label in ["b64", "basic", "basic2", "basic3", "urlsafe"] {
        let line = body.lines().find(|l| l.starts_with(&format!("{label}: "))).unwrap();
        assert!(line.contains(&placeholder), "{line}");
    }
    assert!(count(&got, &placeholder) >= 14, "{got}");

    // Chunked, five bytes a chunk (the value is cut across chunks and reads), with a trailer.
    let got = clean("chunked", &fetch(d, id, scheme, authority, &[&format!("/chunked{q}")]));
    assert!(got.ends_with(&format!("0\r\nX-Echo: {placeholder}\r\n\r\n")), "{got}");
    let body = text(&common::daemon::dechunk(got.split_once("\r\n\r\n").unwrap().1.as_bytes()));
    assert!(body.contains(&format!("Authorization: Bearer {placeholder}\r\n")), "{body}");

    // The client asks for gzip; the request that goes out asks for identity, which the server honours.
    let got = clean("gzip", &fetch(d, id, scheme, authority, &[&format!("/gzip{q}")]));
    assert!(!got.contains("Content-Encoding") && got.contains("Accept-Encoding: identity\r\n"), "{got}");
    // A server that compresses anyway is refused: a compressed body cannot be searched.
    let got = clean("gzip-always", &fetch(d, id, scheme, authority, &[&format!("/gzip-always{q}")]));
    assert!(got.starts_with("HTTP/1.1 502 Bad Gateway\r\n") && got.contains("gzip-encoded"), "{got}");
    // A switch of protocols would be a tunnel nothing searches: refused.
    let got = clean("upgrade", &fetch(d, id, scheme, authority, &[&format!("/upgrade{q}")]));
    assert!(got.starts_with("HTTP/1.1 502 Bad Gateway\r\n") && got.contains("switched protocols"), "{got}");
    // Two requests on one connection: one goes out, and one response comes back, though the server sends
    // a second one that reflects the value.
    let got = clean("keep-alive", &fetch(d, id, scheme, authority, &[&format!("/twice{q}"), &format!("/cl{q}")]));
    assert_eq!(count(&got, "HTTP/1.1 200"), 1, "{got}");
    assert!(got.ends_with("\r\n5\r\nfirst\r\n0\r\n\r\n"), "{got}");
    // HEAD: the headers are searched, and no body follows.
    let got = clean("head", &fetch(d, id, scheme, authority, &[&format!("HEAD /cl{q}")]));
    assert!(got.contains(&format!("\r\nX-Echo-Authorization: Bearer {placeholder}\r\n")), "{got}");
    assert!(got.ends_with("\r\n\r\n") && got.contains("Content-Length: "), "{got}");

    // The egress log says values were taken out, without the value; so does the journal, and nothing the
    // daemon keeps holds the value.
    let log = text(&d.berth(&["net", "log", id, "--json"]).stdout);
    assert!(log.contains("replaced with its placeholder") && !log.contains("s3cr3t"), "{log}");
    assert!(log.contains("gzip-encoded") && log.contains("switched protocols"), "{log}");
    let journal = text(&d.berth(&["journal", id, "--json"]).stdout);
    assert!(journal.contains("replaced with its placeholder") && !journal.contains("s3cr3t"), "{journal}");
    let hits = files_containing(&d.root(), VALUE.as_bytes());
    assert!(hits.is_empty(), "the value is on disk in the clear: {hits:?}");
}

#[test]
fn a_reflecting_server_hands_back_the_placeholder_over_plain_http() {
    let echo = Echo::start(None);
    let d = Daemon::start();
    set(&d, "TOKEN", VALUE);
    let authority = format!("echo.test:{}", echo.port);
    let id = d.create(&[
        "--secret",
        &format!("TOKEN@http://{authority}"),
        "--allow-net",
        &authority,
        "--add-host",
        "echo.test:127.0.0.1",
    ]);
    reflections_come_back_as_the_placeholder(&d, &id, "http", &authority);
    // Plain HTTP inside a CONNECT tunnel would come back unsearched: the tunnel is refused.
    let got = text(&fetch(&d, &id, "tunnel", &authority, &["/cl"]));
    assert!(got.starts_with("HTTP/1.1 403 Forbidden\r\n") && got.contains("not intercept"), "{got}");
    assert!(!got.contains("s3cr3t") && !got.contains("HTTP/1.1 200"), "{got}");
}

#[test]
fn a_reflecting_server_hands_back_the_placeholder_inside_intercepted_https() {
    let tls = tempfile::tempdir().unwrap();
    tls_files(tls.path(), "echo.test");
    let echo = Echo::start(Some(tls.path()));
    let roots = tls.path().join("ca.pem");
    let d = Daemon::start_with_env(&[("BERTH_EGRESS_ROOTS", roots.to_str().unwrap())]);
    set(&d, "TOKEN", VALUE);
    let authority = format!("echo.test:{}", echo.port);
    let id = d.create(&[
        "--secret",
        &format!("TOKEN@{authority}"),
        "--allow-net",
        &authority,
        "--add-host",
        "echo.test:127.0.0.1",
    ]);
    reflections_come_back_as_the_placeholder(&d, &id, "https", &authority);
}

#[test]
fn a_value_the_server_sends_as_its_content_length_is_not_quoted_in_the_refusal() {
    // Capitals and a comma: the proxy reads a Content-Length lower-cased and cut at commas, where no search
    // for the value would find it.
    const ODD: &str = "Zk8Q-S3CRET,Mixed-Case-77";
    let echo = Echo::start(None);
    let d = Daemon::start();
    set(&d, "TOKEN", ODD);
    let authority = format!("echo.test:{}", echo.port);
    let id = d.create(&[
        "--secret",
        &format!("TOKEN@http://{authority}"),
        "--allow-net",
        &authority,
        "--add-host",
        "echo.test:127.0.0.1",
    ]);
    let got = text(&fetch(&d, &id, "http", &authority, &["/length-echo"])).to_lowercase();
    let log = text(&d.berth(&["net", "log", &id, "--json"]).stdout).to_lowercase();
    let journal = text(&d.berth(&["journal", &id, "--json"]).stdout).to_lowercase();
    for (what, shown) in [("response", &got), ("egress log", &log), ("journal", &journal)] {
        for piece in ["zk8q-s3cret", "mixed-case-77"] {
            assert!(!shown.contains(piece), "{what}: {piece} in {shown}");
        }
    }
    assert!(got.starts_with("http/1.1 502 bad gateway\r\n") && got.contains("content-length is not a number"), "{got}");
    assert!(log.contains("content-length is not a number"), "{log}");
}
