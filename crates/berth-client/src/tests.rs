//! The client against a fake daemon on a unix socket: request heads, every body framing, streamed lines,
//! error bodies, and what a missing daemon or a garbled answer turns into.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
use std::thread;

use super::*;

/// A fake daemon: accepts one connection per entry of `parts`, reads the request head (and a body of
/// Content-Length bytes), then writes the parts in order, waiting for a message on the channel before
/// each part after the first so that tests control what the client has seen at each point. Returns the
/// requests it read.
fn serve(
    dir: &Path,
    responses: Vec<Vec<Vec<u8>>>,
    gate: Option<mpsc::Receiver<()>>,
) -> thread::JoinHandle<Vec<String>> {
    let listener = UnixListener::bind(dir.join("berth.sock")).unwrap();
    thread::spawn(move || {
        let mut requests = Vec::new();
        for parts in responses {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                head.push_str(&line);
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            head.push_str(&String::from_utf8(body).unwrap());
            requests.push(head);
            let mut stream = stream;
            for (i, part) in parts.iter().enumerate() {
                if i > 0
                    && let Some(gate) = &gate
                {
                    gate.recv().unwrap();
                }
                stream.write_all(part).unwrap();
                stream.flush().unwrap();
            }
        }
        requests
    })
}

fn one(response: &str) -> Vec<Vec<Vec<u8>>> {
    vec![vec![response.as_bytes().to_vec()]]
}

#[test]
fn a_missing_socket_says_how_to_start_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.sock");
    let err = Client::connect(&path).unwrap_err();
    assert_eq!(err.to_string(), format!("no berth daemon at {}: start one with berth daemon", path.display()));
}

#[test]
fn a_socket_nobody_listens_on_says_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    drop(UnixListener::bind(&path).unwrap());
    let err = Client::connect(&path).unwrap_err();
    assert_eq!(err.to_string(), format!("no berth daemon at {}: start one with berth daemon", path.display()));
}

#[test]
fn content_length_bodies_and_request_headers() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        one("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"id\":\"abc\"}"),
        None,
    );
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), Some("s3cret".into())).unwrap();
    let (status, body) = client.post_json("/v1/sandboxes", &serde_json::json!({"name": "x"})).unwrap();
    assert_eq!(status, 201);
    assert_eq!(body, br#"{"id":"abc"}"#);
    let requests = server.join().unwrap();
    let req = &requests[0];
    assert!(req.starts_with("POST /v1/sandboxes HTTP/1.1\r\n"), "{req}");
    assert!(req.contains("\r\nHost: berth\r\n"), "{req}");
    assert!(req.contains("\r\nContent-Type: application/json\r\n"), "{req}");
    assert!(req.contains("\r\nAuthorization: Bearer s3cret\r\n"), "{req}");
    assert!(req.contains("\r\nContent-Length: 12\r\n"), "{req}");
    assert!(req.ends_with("\r\n\r\n{\"name\":\"x\"}"), "{req}");
}

#[test]
fn no_token_no_authorization_header_and_each_request_gets_a_connection() {
    let dir = tempfile::tempdir().unwrap();
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]".to_vec();
    let server = serve(dir.path(), vec![vec![ok.clone()], vec![ok]], None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    assert_eq!(client.get("/v1/sandboxes").unwrap(), (200, b"[]".to_vec()));
    assert_eq!(client.delete("/v1/sandboxes/a%20b").unwrap(), (200, b"[]".to_vec()));
    let requests = server.join().unwrap();
    assert!(requests[0].starts_with("GET /v1/sandboxes HTTP/1.1\r\n"));
    assert!(requests[1].starts_with("DELETE /v1/sandboxes/a%20b HTTP/1.1\r\n"));
    assert!(!requests[0].contains("Authorization"));
}

#[test]
fn bodies_that_end_with_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nall of it\nuntil eof"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let (_, body) = client.get("/x").unwrap();
    assert_eq!(body, b"all of it\nuntil eof");
}

#[test]
fn interim_responses_are_skipped_and_204_has_no_body() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    assert_eq!(client.delete("/x").unwrap(), (204, Vec::new()));
}

#[test]
fn chunked_lines_split_across_chunks_arrive_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::channel();
    let parts: Vec<Vec<u8>> = vec![
        // Head, a chunk holding a whole line and the start of the next, then nothing until told.
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n\
          f\r\n{\"a\":1}\n{\"b\":22\r\n"
            .to_vec(),
        // The rest of the second line, split over two chunks (one with an extension), a line in one chunk
        // of its own, and a trailer.
        b"2\r\n2}\r\n3;ext=1\r\n\n{\"\r\n6\r\nc\":3}\n\r\n0\r\nX-Trailer: yes\r\n\r\n".to_vec(),
    ];
    let _server = serve(dir.path(), vec![parts], Some(rx));
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let mut stream = client.post_json_stream("/v1/sandboxes/x/execs", &serde_json::json!({})).unwrap();
    // The first line is readable while the server still holds the rest back.
    assert_eq!(stream.next_line().unwrap().unwrap(), br#"{"a":1}"#);
    tx.send(()).unwrap();
    let rest: Vec<Vec<u8>> = Iterator::by_ref(&mut stream).map(|l| l.unwrap()).collect();
    assert_eq!(rest, vec![br#"{"b":222}"#.to_vec(), br#"{"c":3}"#.to_vec()]);
    assert!(stream.next_line().unwrap().is_none());
}

#[test]
fn chunked_bodies_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(
        dir.path(),
        one("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n9\r\n, world!\n\r\n0\r\n\r\n"),
        None,
    );
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let mut body = String::new();
    client.get_stream("/log").unwrap().read_to_string(&mut body).unwrap();
    assert_eq!(body, "hello, world!\n");
}

#[test]
fn a_last_line_without_a_newline_is_still_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\none\r\ntwo"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let lines: Vec<Vec<u8>> = client.get_stream("/x").unwrap().map(|l| l.unwrap()).collect();
    assert_eq!(lines, vec![b"one".to_vec(), b"two".to_vec()]);
}

#[test]
fn a_body_cut_short_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let err = client.get("/x").unwrap_err();
    assert!(matches!(err, ClientError::Io(ref e) if e.kind() == io::ErrorKind::UnexpectedEof), "{err:?}");

    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    let mut stream = client.get_stream("/x").unwrap();
    assert!(stream.next_line().is_err());
}

#[test]
fn error_bodies_become_their_message_and_keep_their_code() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"{"error":{"code":"not_found","message":"no sandbox named foo"}}"#;
    let chunked = format!(
        "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        10,
        &body[..10],
        body.len() - 10,
        &body[10..]
    );
    let conflict = r#"{"error":{"code":"conflict","message":"the name foo is taken"}}"#;
    let teapot = "{\"error\":{\"code\":\"teapot\",\"message\":\"short\"}}\n";
    let responses = vec![
        vec![format!("HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()],
        vec![chunked.into_bytes()],
        vec![format!("HTTP/1.1 409 Conflict\r\nContent-Length: {}\r\n\r\n{conflict}", conflict.len()).into_bytes()],
        vec![b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 4\r\n\r\noops".to_vec()],
        // An unknown code, and bare line feeds in the head.
        vec![format!("HTTP/1.1 418 I'm a teapot\nContent-Length: {}\n\n{teapot}", teapot.len()).into_bytes()],
    ];
    let _server = serve(dir.path(), responses, None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();

    let err = client.get("/v1/sandboxes/foo").unwrap_err();
    assert_eq!(err.to_string(), "no sandbox named foo");
    assert_eq!(err.code(), Some(ErrorCode::NotFound));
    assert!(err.is_not_found());

    let err = client.delete("/v1/sandboxes/foo").unwrap_err();
    assert_eq!(err.to_string(), "no sandbox named foo");
    assert_eq!(err.code(), Some(ErrorCode::NotFound));

    // Streams turn errors into errors before any line is read.
    let err = client.post_json_stream("/v1/sandboxes", &serde_json::json!({})).unwrap_err();
    assert_eq!(err.to_string(), "the name foo is taken");
    assert_eq!(err.code(), Some(ErrorCode::Conflict));

    let err = client.get("/x").unwrap_err();
    assert_eq!(err.to_string(), "the berth daemon answered HTTP 502: oops");
    assert_eq!(err.code(), None);
    assert!(!err.is_not_found());

    let err = client.get("/x").unwrap_err();
    assert_eq!(err.to_string(), "short");
    assert!(matches!(err, ClientError::Api { status: 418, code: None, .. }));
}

#[test]
fn garbage_is_a_protocol_error() {
    let dir = tempfile::tempdir().unwrap();
    let _server = serve(dir.path(), one("SSH-2.0-OpenSSH\r\n\r\n"), None);
    let client = Client::connect_with_token(&dir.path().join("berth.sock"), None).unwrap();
    assert!(matches!(client.get("/x").unwrap_err(), ClientError::Protocol(_)));
}

#[test]
fn segments_are_escaped() {
    assert_eq!(segment("abc-1.2_~"), "abc-1.2_~");
    assert_eq!(segment("../x y/?"), "..%2Fx%20y%2F%3F");
    assert_eq!(segment(".."), "%2E%2E");
}
