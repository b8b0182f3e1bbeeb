#![allow(clippy::unwrap_used)]

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;

use super::*;

const VALUE: &str = "s3cr3t-value-9f8e7d6c";
const PLACEHOLDER: &str = "berth-secret-TOKEN-0123";

/// A server's bytes, handed over at most `step` bytes per read.
struct Trickle {
    data: Vec<u8>,
    pos: usize,
    step: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = self.step.min(buf.remaining()).min(self.data.len() - self.pos);
        let from = self.pos;
        buf.put_slice(&self.data[from..from + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

fn injection() -> Injection {
    Injection {
        host_rule: "api.test".parse().unwrap(),
        placeholder: PLACEHOLDER.into(),
        value: VALUE.into(),
        header: None,
        intercept_tls: false,
    }
}

/// What the client receives for `response`, read `step` bytes at a time, and how the relay ended.
async fn relay_with(response: &[u8], method: &str, minor: u8, step: usize) -> (Vec<u8>, io::Result<()>, u64) {
    let inj = injection();
    let mut r = Reflect::new(redactor(&[&inj]), method, minor, "api.test:80");
    let up = Trickle { data: response.to_vec(), pos: 0, step };
    let mut client = Vec::new();
    let counters = Counters::default();
    let ended = relay(up, &mut client, &mut r, &counters).await;
    assert_eq!(counters.down.load(Ordering::Relaxed), client.len() as u64);
    (client, ended, counters.reflected.load(Ordering::Relaxed))
}

async fn get(response: &[u8]) -> (Vec<u8>, io::Result<()>, u64) {
    relay_with(response, "GET", 1, usize::MAX).await
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The head and the de-chunked body of a chunked response (with the trailer section, if any).
fn dechunk(out: &[u8]) -> (String, Vec<u8>, String) {
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let mut rest = &out[end..];
    let mut body = Vec::new();
    loop {
        let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16).unwrap();
        rest = &rest[nl + 2..];
        if size == 0 {
            return (head, body, String::from_utf8_lossy(rest).to_string());
        }
        body.extend_from_slice(&rest[..size]);
        assert_eq!(&rest[size..size + 2], b"\r\n");
        rest = &rest[size + 2..];
    }
}

#[tokio::test]
async fn every_part_of_a_response_is_searched() {
    let body = format!("you sent: Authorization: Bearer {VALUE}\n");
    let response = format!(
        "HTTP/1.1 401 {VALUE}\r\nContent-Length: {}\r\nSet-Cookie: t={VALUE}; Path=/\r\nLocation: /x?k={VALUE}\r\n\
         WWW-Authenticate: Bearer realm=\"{VALUE}\"\r\nConnection: keep-alive\r\n\r\n{body}",
        body.len()
    );
    let (out, ended, found) = get(response.as_bytes()).await;
    ended.unwrap();
    assert!(!contains(&out, VALUE.as_bytes()), "{}", String::from_utf8_lossy(&out));
    let (head, body, trailers) = dechunk(&out);
    assert!(head.starts_with(&format!("HTTP/1.1 401 {PLACEHOLDER}\r\n")), "{head}");
    for line in [
        format!("Set-Cookie: t={PLACEHOLDER}; Path=/"),
        format!("Location: /x?k={PLACEHOLDER}"),
        format!("WWW-Authenticate: Bearer realm=\"{PLACEHOLDER}\""),
        "Transfer-Encoding: chunked".into(),
        "Connection: close".into(),
    ] {
        assert!(head.contains(&format!("{line}\r\n")), "{line} in {head}");
    }
    assert!(!head.contains("Content-Length") && !head.contains("keep-alive"), "{head}");
    assert_eq!(String::from_utf8(body).unwrap(), format!("you sent: Authorization: Bearer {PLACEHOLDER}\n"));
    assert_eq!(trailers, "\r\n");
    assert_eq!(found, 5);
}

#[tokio::test]
async fn a_value_cut_across_chunks_and_reads_is_found_at_every_offset() {
    let text = format!("prefix {VALUE} middle {VALUE}{VALUE} suffix");
    for cut in 1..text.len() {
        let (a, b) = text.split_at(cut);
        let response = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x};ext=1\r\n{b}\r\n0\r\n\
             X-Trailer: {VALUE}\r\n\r\n",
            a.len(),
            b.len()
        );
        for step in [1, 3, 7, 64, usize::MAX] {
            let (out, ended, found) = relay_with(response.as_bytes(), "GET", 1, step).await;
            ended.unwrap();
            assert!(!contains(&out, VALUE.as_bytes()), "cut {cut} step {step}");
            let (_, body, trailers) = dechunk(&out);
            let want = format!("prefix {PLACEHOLDER} middle {PLACEHOLDER}{PLACEHOLDER} suffix");
            // Adjacent occurrences become one replacement (each of their bytes is hidden).
            let body = String::from_utf8(body).unwrap();
            assert!(
                body == want || body == want.replace(&format!("{PLACEHOLDER}{PLACEHOLDER}"), PLACEHOLDER),
                "{body}"
            );
            assert_eq!(trailers, format!("X-Trailer: {PLACEHOLDER}\r\n\r\n"));
            assert!(found >= 3, "cut {cut} step {step}: {found}");
        }
    }
}

#[tokio::test]
async fn binary_and_close_delimited_bodies() {
    // Every byte value, with an insertion at two places of the same base.
    let with = |inserted: &str| {
        let mut b: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        b.splice(2500..2500, inserted.bytes());
        b.splice(1000..1000, inserted.bytes());
        b
    };
    let body = with(VALUE);
    let mut response = b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    response.extend_from_slice(&body);
    // An HTTP/1.0 response cannot be chunked: the body ends where the connection does.
    let (out, ended, found) = relay_with(&response, "GET", 1, 100).await;
    ended.unwrap();
    assert!(!contains(&out, VALUE.as_bytes()));
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(!String::from_utf8_lossy(&out[..end]).contains("chunked"));
    assert!(out[end..] == with(PLACEHOLDER), "the body is passed on byte for byte, but for the values");
    assert_eq!(found, 2);
    // Neither can a body to an HTTP/1.0 client.
    let (out, ended, _) =
        relay_with(format!("HTTP/1.1 200 OK\r\nContent-Length: 21\r\n\r\n{VALUE}").as_bytes(), "GET", 0, 5).await;
    ended.unwrap();
    assert!(
        out.ends_with(format!("Connection: close\r\n\r\n{PLACEHOLDER}").as_bytes()),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[tokio::test]
async fn encoded_forms_are_found() {
    let b64 = |s: &str| {
        let t = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes = s.as_bytes();
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = c.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
            for i in 0..=c.len() {
                out.push(char::from(t[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        while !out.len().is_multiple_of(4) {
            out.push('=');
        }
        out
    };
    let forms = [
        b64(VALUE),
        format!("Basic {}", b64(&format!("user:{VALUE}"))),
        format!("Basic {}", b64(&format!("me:{VALUE}"))),
        format!("Basic {}", b64(&format!("a:{VALUE}"))),
        b64(VALUE).replace('+', "-").replace('/', "_").trim_end_matches('=').to_string(),
        format!("{{\"headers\": {{\"Authorization\": \"Bearer {VALUE}\"}}}}"),
    ];
    for form in forms {
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{form}", form.len());
        let (out, ended, found) = get(response.as_bytes()).await;
        ended.unwrap();
        let (_, body, _) = dechunk(&out);
        let body = String::from_utf8(body).unwrap();
        assert!(found >= 1 && body.contains(PLACEHOLDER), "{form} became {body}");
    }
    // A value with characters that percent-encoding and JSON escape.
    let value = "p@ss w/rd\"x\\y";
    let inj = Injection { value: value.into(), ..injection() };
    for form in ["p%40ss%20w%2Frd%22x%5Cy", "p%40ss+w%2Frd%22x%5Cy", "p%40ss%20w/rd%22x%5Cy", "p@ss w\\/rd\\\"x\\\\y"] {
        let mut r = Reflect::new(redactor(&[&inj]), "GET", 1, "api.test:80");
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n[{form}]", form.len() + 2);
        let mut out = Vec::new();
        relay(response.as_bytes(), &mut out, &mut r, &Counters::default()).await.unwrap();
        let (_, body, _) = dechunk(&out);
        assert_eq!(String::from_utf8(body).unwrap(), format!("[{PLACEHOLDER}]"), "{form}");
    }
}

#[tokio::test]
async fn what_cannot_be_searched_is_refused() {
    let cases = [
        ("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 21\r\n\r\n", "gzip-encoded"),
        ("HTTP/1.1 200 OK\r\nContent-Encoding: identity, br\r\n\r\n", "br-encoded"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "transfer coding"),
        ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "switched protocols"),
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", "conflicting"),
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "not valid HTTP/1.x"),
    ];
    for (head, why) in cases {
        let mut response = head.as_bytes().to_vec();
        response.extend_from_slice(VALUE.as_bytes());
        let (out, ended, _) = get(&response).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\r\n") && text.contains(why), "{head}: {text}");
        assert!(!contains(&out, VALUE.as_bytes()));
        assert!(ended.unwrap_err().to_string().contains(why));
    }
    // Compression announced on a response without a body is harmless.
    let (out, ended, _) =
        relay_with(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 40\r\n\r\n", "HEAD", 1, 9).await;
    ended.unwrap();
    assert!(String::from_utf8_lossy(&out).contains("Content-Length: 40\r\n"));
}

#[tokio::test]
async fn interim_responses_head_requests_and_what_follows_the_response() {
    let response = format!(
        "HTTP/1.1 103 Early Hints\r\nLink: </x?k={VALUE}>\r\n\r\nHTTP/1.1 204 No Content\r\nX-Echo: {VALUE}\r\n\r\n\
         HTTP/1.1 200 OK\r\nContent-Length: 21\r\n\r\n{VALUE}"
    );
    let (out, ended, found) = get(response.as_bytes()).await;
    ended.unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text,
        format!(
            "HTTP/1.1 103 Early Hints\r\nLink: </x?k={PLACEHOLDER}>\r\n\r\nHTTP/1.1 204 No Content\r\n\
             X-Echo: {PLACEHOLDER}\r\nConnection: close\r\n\r\n"
        ),
        "the second response on the connection is not passed on"
    );
    assert_eq!(found, 2);
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: 21\r\nX-Echo: {VALUE}\r\n\r\n");
    let (out, ended, _) = relay_with(head.as_bytes(), "HEAD", 1, 4).await;
    ended.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("HTTP/1.1 200 OK\r\nContent-Length: 21\r\nX-Echo: {PLACEHOLDER}\r\nConnection: close\r\n\r\n")
    );
    // A body cut short by the server ends the relay with an error, and the chunked body without its end.
    let (out, ended, _) = get(format!("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{VALUE}").as_bytes()).await;
    assert!(ended.is_err() && !contains(&out, VALUE.as_bytes()) && !out.ends_with(b"0\r\n\r\n"));
}

#[tokio::test]
async fn a_refusal_does_not_quote_the_value() {
    for head in [
        format!("HTTP/1.1 200 OK\r\nContent-Length: {VALUE}\r\n\r\n"),
        format!("HTTP/1.1 200 OK\r\nContent-Encoding: {VALUE}\r\n\r\n"),
        format!("HTTP/1.1 200 OK\r\nContent-Encoding: {}\r\n\r\n", VALUE.to_uppercase()),
        format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {VALUE}, chunked\r\n\r\n"),
    ] {
        let (out, ended, _) = get(head.as_bytes()).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
        assert!(!contains(&out, VALUE.as_bytes()) && !contains(&out, VALUE.to_uppercase().as_bytes()), "{text}");
        let why = ended.unwrap_err().to_string();
        assert!(!why.contains(VALUE), "{why}");
    }
}

#[tokio::test]
async fn a_content_length_that_carries_a_value_with_capitals_and_commas_is_not_quoted() {
    // Header items are lower-cased and cut at commas before they are judged, so a search over a quoted item
    // would miss such a value: the refusal must not quote it at all.
    let value = "S3cr3T-VALUE-0042,Zq";
    let inj = Injection { value: value.into(), ..injection() };
    let mut r = Reflect::new(redactor(&[&inj]), "GET", 1, "api.test:80");
    let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {value}\r\n\r\n");
    let up = Trickle { data: response.into_bytes(), pos: 0, step: usize::MAX };
    let mut client = Vec::new();
    let ended = relay(up, &mut client, &mut r, &Counters::default()).await;
    let text = String::from_utf8_lossy(&client).to_lowercase();
    let why = ended.unwrap_err().to_string().to_lowercase();
    for piece in ["s3cr3t-value", "0042", "zq"] {
        assert!(!text.contains(piece) && !why.contains(piece), "{piece} in {text} / {why}");
    }
    assert!(text.starts_with("http/1.1 502 ") && text.contains("content-length is not a number"), "{text}");
}

/// Reads from `sandbox` into `seen` until `what` is there.
async fn until(sandbox: &mut tokio::io::DuplexStream, seen: &mut Vec<u8>, what: &[u8]) {
    let mut buf = [0u8; 4096];
    let wait = async {
        while !contains(seen, what) {
            let n = sandbox.read(&mut buf).await.unwrap();
            assert!(n > 0);
            seen.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait).await.unwrap();
}

/// What the client receives of a streamed response whose server pauses after `before` and then sends
/// `after`: the chunks as they were framed.
async fn paused(before: &str, after: &str) -> Vec<String> {
    let (mut server, up) = tokio::io::duplex(64 * 1024);
    let (client, mut sandbox) = tokio::io::duplex(64 * 1024);
    let relaying = tokio::spawn(async move {
        let inj = injection();
        let mut r = Reflect::new(redactor(&[&inj]), "GET", 1, "api.test:80");
        let mut client = client;
        relay(up, &mut client, &mut r, &Counters::default()).await
    });
    server.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: one\n\n").await.unwrap();
    let mut seen = Vec::new();
    // A whole event is passed on while the server waits.
    until(&mut sandbox, &mut seen, b"data: one\n\n\r\n").await;
    server.write_all(before.as_bytes()).await.unwrap();
    // Everything up to the pause's last line break is released while the server waits.
    let released = &before[..before.rfind('\n').map_or(0, |i| i + 1)];
    if !released.is_empty() {
        until(&mut sandbox, &mut seen, format!("{released}\r\n").as_bytes()).await;
    }
    server.write_all(after.as_bytes()).await.unwrap();
    drop(server);
    relaying.await.unwrap().unwrap();
    sandbox.read_to_end(&mut seen).await.unwrap();
    let (_, body, _) = dechunk(&seen);
    assert!(!contains(&body, &VALUE.as_bytes()[..4]), "{}", String::from_utf8_lossy(&body));
    let shown = if before.contains(&VALUE[..9]) { format!("data: {PLACEHOLDER}\n\n") } else { after.to_string() };
    assert!(String::from_utf8_lossy(&body).ends_with(&shown), "{}", String::from_utf8_lossy(&body));
    let text = String::from_utf8_lossy(&seen);
    let body_start = text.find("\r\n\r\n").unwrap() + 4;
    text[body_start..].split("\r\n").map(str::to_string).collect()
}

#[tokio::test]
async fn a_paused_stream_is_cut_where_its_lines_end_whatever_the_bytes_held_are() {
    // The server pauses after text that begins the value, and after text of the same length that does not:
    // the sandbox sees the same chunks at the same points, so it learns nothing of how much of a guess was
    // right. Only the content of the last chunk differs, once the value is whole and replaced.
    let guess = &VALUE[..9];
    let wrong = "x".repeat(guess.len());
    let right = paused(&format!("event: a\ndata: {guess}"), &format!("{}\n\n", &VALUE[9..])).await;
    let other = paused(&format!("event: a\ndata: {wrong}"), &format!("{}\n\n", &VALUE[9..])).await;
    // The pause releases the line that ended, not "data: " (all that could not begin the value) in one case
    // and everything in the other.
    for chunks in [&right, &other] {
        assert_eq!(chunks[..4], ["b", "data: one\n\n", "9", "event: a\n"], "{right:?} / {other:?}");
    }
}
