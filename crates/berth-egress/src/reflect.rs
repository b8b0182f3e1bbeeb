//! Responses on connections that carry an injected secret: the value never goes back to the sandbox.
//!
//! A server that echoes its request (a debugging endpoint, an error page quoting a header, a redirect that
//! copies the query) would hand the injected value to the sandbox. So on every connection the proxy sends a
//! secret's value on, the response is read as HTTP and every occurrence of the value, raw or in the forms
//! [`berth_secrets::Redactor`] knows (base64 at any alignment, percent-encoding, JSON escaping), is
//! replaced with the secret's placeholder: in the status line, in every header of the final and of interim
//! (1xx) responses, in the body and in chunked trailers.
//!
//! The body is decoded from its framing before it is searched, so a value cut across chunks or across
//! reads is still found, and is sent on with framing of the proxy's own: chunked to an HTTP/1.1 client,
//! delimited by closing the connection otherwise (a replacement changes the length, and rewriting
//! `Content-Length` would need the whole body first). What cannot be searched is refused with a 502 rather
//! than passed on: a body with a content coding (the request asks for `identity`, so only a server that
//! ignores that sends one), a transfer coding other than `chunked`, a switch of protocols (101), or a head
//! that is not HTTP/1.x. After the one response the connection carries, nothing more is read from the server.

use std::io;
use std::sync::atomic::Ordering;

use berth_secrets::Redactor;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

use crate::answer;
use crate::inject::Injection;
use crate::relay::Counters;

/// Largest response head (status line and headers, or a trailer section) read from a server.
pub(crate) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// How much is read from the server at once.
const READ_BUF: usize = 64 * 1024;

/// What the response relay needs to know about the connection.
pub(crate) struct Reflect {
    redactor: Redactor,
    /// The request was `HEAD`: the response has no body whatever its headers say.
    head_request: bool,
    /// The client's request was HTTP/1.1, so it understands a chunked body.
    client_chunked: bool,
    /// The destination as shown in the proxy's own answers.
    dest: String,
    /// The final response's head has been sent: the proxy can no longer answer in its place.
    committed: bool,
}

impl Reflect {
    /// A relay that replaces what `redactor` finds (see [`redactor`]).
    pub(crate) fn new(redactor: Redactor, method: &str, client_minor: u8, dest: &str) -> Reflect {
        Reflect {
            redactor,
            head_request: method.eq_ignore_ascii_case("HEAD"),
            client_chunked: client_minor >= 1,
            dest: dest.to_string(),
            committed: false,
        }
    }

    /// Every form of the values in `bytes` replaced at once (a head, a trailer section).
    fn scrub(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = self.redactor.push(bytes);
        out.extend_from_slice(&self.redactor.finish());
        out
    }
}

/// A redactor that replaces the values of `injections`, in every form it knows, with their placeholders.
pub(crate) fn redactor(injections: &[&Injection]) -> Redactor {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
        injections.iter().map(|i| (i.placeholder.clone().into_bytes(), i.value.clone().into_bytes())).collect();
    Redactor::with_replacements(&pairs)
}

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// A response the proxy will not pass on: why, and the RFC 9209 error type.
struct Refusal(&'static str, String);

struct Head {
    minor: u8,
    status: u16,
    reason: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }

    /// The comma-separated items of every value of `name`, trimmed and lower-cased.
    fn items(&self, name: &str) -> Vec<String> {
        self.values(name)
            .flat_map(|v| {
                String::from_utf8_lossy(v).split(',').map(|s| s.trim().to_ascii_lowercase()).collect::<Vec<_>>()
            })
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// Relays the one response of an exchange from `up` to `client`, with every form of the secrets replaced.
/// The number of replacements is added to `counters.reflected`.
pub(crate) async fn relay<U, C>(up: U, client: &mut C, r: &mut Reflect, counters: &Counters) -> io::Result<()>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    let mut up = BufReader::with_capacity(READ_BUF, up);
    // Writes are gathered, and sent whenever the proxy is about to wait for the server.
    let client = &mut BufWriter::with_capacity(16 * 1024, client);
    let ended = relay_inner(&mut up, client, r, counters).await;
    counters.reflected.fetch_add(r.redactor.found(), Ordering::Relaxed);
    match ended {
        Ok(()) => {
            client.flush().await?;
            client.shutdown().await
        }
        Err(Failure::Io(e)) => Err(e),
        Err(Failure::Refused(Refusal(kind, why))) => {
            // No reason quotes what the server sent; searched all the same, as a second line of defence.
            let why = r.redactor.redact_str(&why);
            if r.committed {
                return Err(io::Error::other(why));
            }
            let answer = answer::failed(502, Some(&r.dest), kind, &why);
            client.write_all(&answer).await?;
            counters.down.fetch_add(answer.len() as u64, Ordering::Relaxed);
            client.flush().await?;
            client.shutdown().await?;
            Err(io::Error::other(why))
        }
    }
}

enum Failure {
    Io(io::Error),
    Refused(Refusal),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Io(e)
    }
}

fn refused(kind: &'static str, why: impl Into<String>) -> Failure {
    Failure::Refused(Refusal(kind, why.into()))
}

async fn relay_inner<U, C>(
    up: &mut BufReader<U>,
    client: &mut C,
    r: &mut Reflect,
    counters: &Counters,
) -> Result<(), Failure>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    let head = loop {
        before_waiting(up, client, r, false, true, counters).await?;
        let Some(raw) = read_block(up, false).await? else {
            // The server closed without answering: so does the proxy, as it would without a secret.
            return Ok(());
        };
        let head = parse(&raw)?;
        match head.status {
            101 => {
                return Err(refused(
                    "http_upgrade_failed",
                    "the server switched protocols (101) on a connection that carries a secret; the proxy does not \
                     pass on a protocol it cannot check for the secret's value",
                ));
            }
            100..=199 => {
                let out = r.scrub(&write_head(&head, &[], None));
                send(client, &out, counters).await?;
            }
            _ => break head,
        }
    };
    let body = framing(&head, r.head_request)?;
    r.committed = true;
    if body == Body::None {
        let out = r.scrub(&write_head(&head, &["connection", "keep-alive", "proxy-connection"], Some(false)));
        send(client, &out, counters).await?;
        return Ok(());
    }
    let chunked = r.client_chunked && head.minor >= 1;
    let dropped = ["connection", "keep-alive", "proxy-connection", "content-length", "transfer-encoding"];
    let out = r.scrub(&write_head(&head, &dropped, Some(chunked)));
    send(client, &out, counters).await?;
    let mut trailers = Vec::new();
    match body {
        Body::None => {}
        Body::Length(n) => copy(up, client, r, n, chunked, counters).await?,
        Body::UntilClose => copy(up, client, r, u64::MAX, chunked, counters).await?,
        Body::Chunked => loop {
            before_waiting(up, client, r, chunked, true, counters).await?;
            let line = read_line(up).await?;
            let size = chunk_size(&line)?;
            if size == 0 {
                before_waiting(up, client, r, chunked, true, counters).await?;
                trailers = read_block(up, true).await?.unwrap_or_default();
                break;
            }
            copy(up, client, r, size, chunked, counters).await?;
            before_waiting(up, client, r, chunked, true, counters).await?;
            let end = read_line(up).await?;
            if end != b"\r\n" && end != b"\n" {
                return Err(refused("http_protocol_error", "a chunk of the server's response is longer than its size"));
            }
        },
    }
    let rest = r.redactor.finish();
    emit(client, &rest, chunked, counters).await?;
    if chunked {
        let mut end = b"0\r\n".to_vec();
        if trailers.is_empty() {
            trailers = b"\r\n".to_vec();
        }
        // The trailer section ends with its blank line.
        end.extend_from_slice(&r.scrub(&trailers));
        send(client, &end, counters).await?;
    }
    Ok(())
}

/// How the body is delimited (RFC 9112, section 6.3), or why it cannot be searched.
fn framing(head: &Head, head_request: bool) -> Result<Body, Failure> {
    if head_request || head.status == 204 || head.status == 304 {
        return Ok(Body::None);
    }
    let codings = head.items("content-encoding");
    if let Some(c) = codings.iter().find(|c| c.as_str() != "identity") {
        // The server's own words are quoted only when they are a coding's name.
        let known = ["gzip", "x-gzip", "deflate", "br", "zstd", "compress", "x-compress", "dcb", "dcz"];
        let c = if known.contains(&c.as_str()) { c.as_str() } else { "unknown-coding" };
        return Err(refused(
            "http_response_content_coding",
            format!(
                "the server sent a {c}-encoded body although the proxy asked for identity; on a connection that \
                 carries a secret a compressed body cannot be checked for the secret's value"
            ),
        ));
    }
    let transfer = head.items("transfer-encoding");
    if !transfer.is_empty() {
        if transfer.iter().any(|t| t != "chunked") || transfer.len() > 1 {
            return Err(refused(
                "http_response_transfer_coding",
                "the server's response uses a transfer coding other than chunked, which the proxy cannot check for \
                 the secret's value",
            ));
        }
        return Ok(Body::Chunked);
    }
    let mut length = None;
    for item in head.items("content-length") {
        let n = match item.parse::<u64>() {
            Ok(n) if item.bytes().all(|b| b.is_ascii_digit()) => n,
            // The value is never quoted: the server chose it, and a search over it (lower-cased and cut at
            // commas by then) could miss a secret's value that it carries.
            _ => return Err(refused("http_protocol_error", "the server's Content-Length is not a number")),
        };
        if length.is_some_and(|l| l != n) {
            return Err(refused("http_protocol_error", "the server's response has conflicting Content-Length values"));
        }
        length = Some(n);
    }
    Ok(match length {
        Some(0) => Body::Length(0),
        Some(n) => Body::Length(n),
        None => Body::UntilClose,
    })
}

/// The head as sent on: the status line, the headers but `dropped`, and for a final response
/// `Connection: close` (and `Transfer-Encoding: chunked` when `chunked` is `Some(true)`).
fn write_head(head: &Head, dropped: &[&str], chunked: Option<bool>) -> Vec<u8> {
    let mut out = format!("HTTP/1.{} {} ", head.minor, head.status).into_bytes();
    out.extend_from_slice(&head.reason);
    out.extend_from_slice(b"\r\n");
    for (name, value) in &head.headers {
        if dropped.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(chunked) = chunked {
        if chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn parse(raw: &[u8]) -> Result<Head, Failure> {
    let mut headers = vec![httparse::EMPTY_HEADER; 256];
    let mut resp = httparse::Response::new(&mut headers);
    let bad = |e: String| refused("http_protocol_error", format!("the server's response is not valid HTTP/1.x: {e}"));
    match resp.parse(raw) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("the head is incomplete".into())),
        Err(e) => return Err(bad(e.to_string())),
    }
    let (Some(minor), Some(status)) = (resp.version, resp.code) else {
        return Err(bad("the status line is incomplete".into()));
    };
    let reason = resp.reason.unwrap_or("").as_bytes().to_vec();
    let headers = resp.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect();
    Ok(Head { minor, status, reason, headers })
}

/// Reads lines up to and including an empty one. `None` if the stream ended before the first byte (and
/// `trailers` is false); for trailers, a stream that ends at once counts as an empty section.
async fn read_block<U: AsyncRead + Unpin>(up: &mut BufReader<U>, trailers: bool) -> Result<Option<Vec<u8>>, Failure> {
    let mut block = Vec::new();
    loop {
        let room = (MAX_RESPONSE_HEAD + 1).saturating_sub(block.len()) as u64;
        let before = block.len();
        let n = (&mut *up).take(room).read_until(b'\n', &mut block).await?;
        if n == 0 {
            match (block.is_empty(), trailers) {
                (true, false) => return Ok(None),
                (true, true) => return Ok(Some(b"\r\n".to_vec())),
                _ => {}
            }
            return Err(refused(
                "http_response_incomplete",
                "the server closed the connection in the middle of its response",
            ));
        }
        if block.len() > MAX_RESPONSE_HEAD {
            return Err(refused(
                "http_response_header_section_size",
                format!("the server's response head is larger than {} KiB", MAX_RESPONSE_HEAD / 1024),
            ));
        }
        let line = &block[before..];
        if line == b"\r\n" || line == b"\n" {
            return Ok(Some(block));
        }
    }
}

/// Passes `n` body bytes (or everything until the server closes, for `u64::MAX`) through the redactor.
async fn copy<U, C>(
    up: &mut BufReader<U>,
    client: &mut C,
    r: &mut Reflect,
    mut n: u64,
    chunked: bool,
    c: &Counters,
) -> Result<(), Failure>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    while n > 0 {
        before_waiting(up, client, r, chunked, false, c).await?;
        let data = up.fill_buf().await?;
        if data.is_empty() {
            if n == u64::MAX {
                return Ok(());
            }
            return Err(refused(
                "http_response_incomplete",
                "the server closed the connection in the middle of its response",
            ));
        }
        let take = data.len().min(usize::try_from(n).unwrap_or(usize::MAX));
        let out = r.redactor.push(&data[..take]);
        up.consume(take);
        if n != u64::MAX {
            n -= take as u64;
        }
        emit(client, &out, chunked, c).await?;
    }
    Ok(())
}

/// When the next read would wait for the server (nothing, or no whole `line`, is buffered), sends what the
/// client can have now: the body the redactor can let go of (what it holds up to its last line break, a cut
/// that does not depend on the secret, see [`Redactor::release`]) and everything written so far. A response that arrives in pieces (events sent as they happen)
/// reaches the client piece by piece.
async fn before_waiting<U, C>(
    up: &BufReader<U>,
    client: &mut C,
    r: &mut Reflect,
    chunked: bool,
    line: bool,
    c: &Counters,
) -> io::Result<()>
where
    U: AsyncRead + Unpin,
    C: AsyncWrite + Unpin,
{
    let buffered = up.buffer();
    if if line { buffered.contains(&b'\n') } else { !buffered.is_empty() } {
        return Ok(());
    }
    let released = r.redactor.release();
    emit(client, &released, chunked, c).await?;
    client.flush().await
}

/// Sends body bytes, as one chunk when the body is chunked.
async fn emit<C: AsyncWrite + Unpin>(client: &mut C, bytes: &[u8], chunked: bool, c: &Counters) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    if chunked {
        let mut frame = Vec::with_capacity(bytes.len() + 20);
        frame.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
        frame.extend_from_slice(bytes);
        frame.extend_from_slice(b"\r\n");
        send(client, &frame, c).await
    } else {
        send(client, bytes, c).await
    }
}

async fn send<C: AsyncWrite + Unpin>(client: &mut C, bytes: &[u8], c: &Counters) -> io::Result<()> {
    client.write_all(bytes).await?;
    c.down.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

async fn read_line<U: AsyncRead + Unpin>(up: &mut BufReader<U>) -> Result<Vec<u8>, Failure> {
    let mut line = Vec::new();
    let n = (&mut *up).take(4096).read_until(b'\n', &mut line).await?;
    if n == 0 || line.last() != Some(&b'\n') {
        return Err(refused("http_protocol_error", "the server's chunked body has a truncated or overlong line"));
    }
    Ok(line)
}

fn chunk_size(line: &[u8]) -> Result<u64, Failure> {
    let bad = || refused("http_protocol_error", "a chunk size in the server's response is not a hexadecimal number");
    let text = std::str::from_utf8(line).map_err(|_| bad())?;
    let digits = text.split(';').next().unwrap_or("").trim_end_matches(['\r', '\n']).trim_matches([' ', '\t']);
    if digits.is_empty() || digits.len() > 15 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(digits, 16).map_err(|_| bad())
}

#[cfg(test)]
mod tests;
