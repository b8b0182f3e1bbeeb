//! Reading the daemon's answer: the status line and headers (interim responses skipped), then the body as
//! `Content-Length`, `Transfer-Encoding: chunked` or the end of the connection frames it, as a `Streaming`
//! that reads it whole, as bytes, or a line at a time. A non-2xx answer becomes its `ClientError`.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;

use berth_api::ErrorBody;

use crate::ClientError;

/// The longest status line, header line or chunk-size line accepted.
const MAX_LINE: u64 = 16 * 1024;
/// The most header lines accepted in one response.
const MAX_HEADERS: usize = 128;
/// The largest body read into memory (streams are not limited).
const MAX_BODY: u64 = 64 << 20;

/// A response whose head has been read; its body is read through `Read` or, a line at a time, as an iterator.
pub struct Streaming {
    status: u16,
    body: BufReader<Body<BufReader<UnixStream>>>,
}

impl fmt::Debug for Streaming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streaming").field("status", &self.status).finish_non_exhaustive()
    }
}

impl Streaming {
    /// The next line of the body without its line ending, or `None` at the end of the body. Blocks only until
    /// one whole line (or the end) has arrived.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        let mut line = Vec::new();
        if self.body.read_until(b'\n', &mut line)? == 0 {
            return Ok(None);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        Ok(Some(line))
    }

    /// Read the rest of the body into memory.
    pub(crate) fn into_bytes(self) -> Result<(u16, Vec<u8>), ClientError> {
        let status = self.status;
        let body = read_all(self.body, MAX_BODY)?;
        if !(200..300).contains(&status) {
            return Err(api_error(status, &body));
        }
        Ok((status, body))
    }

    /// Pass a 2xx response on; turn any other into its error.
    pub(crate) fn ok(self) -> Result<Streaming, ClientError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let status = self.status;
        let body = read_all(self.body, MAX_BODY)?;
        Err(api_error(status, &body))
    }
}

impl Read for Streaming {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.body.read(buf)
    }
}

impl Iterator for Streaming {
    type Item = Result<Vec<u8>, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_line().transpose()
    }
}

fn read_all(body: impl Read, limit: u64) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    body.take(limit + 1).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(ClientError::Protocol(format!("the body is larger than {limit} bytes")));
    }
    Ok(out)
}

/// The error a non-2xx response stands for: the API's own message when the body is an `ErrorBody`.
fn api_error(status: u16, body: &[u8]) -> ClientError {
    if let Ok(ErrorBody { error }) = serde_json::from_slice::<ErrorBody>(body) {
        return ClientError::Api { status, code: Some(error.code), message: error.message };
    }
    // A body with a code this client does not know yet still carries a message worth showing.
    if let Some(message) = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").and_then(|m| m.as_str()).map(str::to_string))
    {
        return ClientError::Api { status, code: None, message };
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!("the berth daemon answered HTTP {status}")
    } else {
        let short: String = text.chars().take(200).collect();
        format!("the berth daemon answered HTTP {status}: {short}")
    };
    ClientError::Api { status, code: None, message }
}

pub(crate) fn read_response(mut conn: BufReader<UnixStream>) -> Result<Streaming, ClientError> {
    let (status, framing) = read_head(&mut conn)?;
    Ok(Streaming { status, body: BufReader::new(Body::new(conn, framing)) })
}

/// How the end of a body is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// This many bytes remain.
    Length(u64),
    /// Chunks: `left` bytes remain of the current one; `crlf` when the line ending after a chunk's data is
    /// still to be read.
    Chunked { left: u64, crlf: bool },
    /// Until the server closes the connection.
    Close,
}

/// Read the status line and headers, skipping interim (1xx) responses.
fn read_head<R: BufRead>(conn: &mut R) -> Result<(u16, Framing), ClientError> {
    loop {
        let line = read_line(conn)?;
        let status = parse_status_line(&line)?;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut headers = 0;
        loop {
            let line = read_line(conn)?;
            if line.is_empty() {
                break;
            }
            headers += 1;
            if headers > MAX_HEADERS {
                return Err(ClientError::Protocol("too many headers".into()));
            }
            let (name, value) =
                line.split_once(':').ok_or_else(|| ClientError::Protocol(format!("bad header line {line:?}")))?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let n: u64 =
                    value.parse().map_err(|_| ClientError::Protocol(format!("bad Content-Length {value:?}")))?;
                if length.is_some_and(|l| l != n) {
                    return Err(ClientError::Protocol("conflicting Content-Length headers".into()));
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                let last = value.rsplit(',').next().unwrap_or_default().trim();
                if last.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                } else if !last.eq_ignore_ascii_case("identity") {
                    return Err(ClientError::Protocol(format!("unsupported Transfer-Encoding {value:?}")));
                }
            }
        }
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let framing = if status == 204 || status == 304 || (100..200).contains(&status) {
            Framing::Length(0)
        } else if chunked {
            Framing::Chunked { left: 0, crlf: false }
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::Close
        };
        return Ok((status, framing));
    }
}

fn parse_status_line(line: &str) -> Result<u16, ClientError> {
    let bad = || ClientError::Protocol(format!("bad status line {line:?}"));
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().ok_or_else(bad)?;
    if !version.starts_with("HTTP/1.") {
        return Err(bad());
    }
    let code = parts.next().ok_or_else(bad)?;
    if code.len() != 3 {
        return Err(bad());
    }
    code.parse().map_err(|_| bad())
}

/// One line of the head (without its line ending), as text.
fn read_line<R: BufRead>(conn: &mut R) -> Result<String, ClientError> {
    let line = read_raw_line(conn)?;
    String::from_utf8(line).map_err(|_| ClientError::Protocol("a header is not UTF-8".into()))
}

/// One CRLF- (or LF-) terminated line, without its ending; the end of the connection before one is an error.
fn read_raw_line<R: BufRead>(conn: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    conn.by_ref().take(MAX_LINE).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() as u64 >= MAX_LINE {
            io::Error::new(io::ErrorKind::InvalidData, "a line of the response is too long")
        } else {
            truncated()
        });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection in the middle of a response")
}

/// A response body, unframed.
struct Body<R> {
    conn: R,
    framing: Framing,
    done: bool,
}

impl<R: BufRead> Body<R> {
    fn new(conn: R, framing: Framing) -> Self {
        Body { conn, framing, done: framing == Framing::Length(0) }
    }
}

impl<R: BufRead> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        match &mut self.framing {
            Framing::Close => {
                let n = self.conn.read(buf)?;
                self.done = n == 0;
                Ok(n)
            }
            Framing::Length(left) => {
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = self.conn.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(truncated());
                }
                *left -= n as u64;
                self.done = *left == 0;
                Ok(n)
            }
            Framing::Chunked { left, crlf } => {
                if *left == 0 {
                    if *crlf {
                        if !read_raw_line(&mut self.conn)?.is_empty() {
                            return Err(bad_chunk("no line ending after a chunk"));
                        }
                        *crlf = false;
                    }
                    let line = read_raw_line(&mut self.conn)?;
                    let size = std::str::from_utf8(&line).ok().and_then(|l| {
                        let hex = l.split(';').next().unwrap_or_default().trim();
                        if hex.is_empty() { None } else { u64::from_str_radix(hex, 16).ok() }
                    });
                    let size = size.ok_or_else(|| bad_chunk("bad chunk size line"))?;
                    if size == 0 {
                        // Trailers, up to the empty line that ends the body.
                        while !read_raw_line(&mut self.conn)?.is_empty() {}
                        self.done = true;
                        return Ok(0);
                    }
                    *left = size;
                }
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = self.conn.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(truncated());
                }
                *left -= n as u64;
                *crlf = *left == 0;
                Ok(n)
            }
        }
    }
}

fn bad_chunk(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{what} in a chunked response"))
}
