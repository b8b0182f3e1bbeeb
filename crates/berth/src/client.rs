//! A small blocking HTTP/1.1 client for the daemon's API, over its unix socket.
//!
//! One connection per request (`Connection: close`): the CLI makes a handful of requests per run, so keeping
//! connections alive would buy nothing. Responses may be framed by `Content-Length`, by
//! `Transfer-Encoding: chunked`, or by the server closing the connection; streamed responses (NDJSON) are
//! read a line at a time, as the daemon writes them.

use std::cell::Cell;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use berth_api::{ErrorBody, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/berth/berth.sock";

/// The longest status line, header line or chunk-size line accepted.
const MAX_LINE: u64 = 16 * 1024;
/// The most header lines accepted in one response.
const MAX_HEADERS: usize = 128;
/// The largest body read into memory (streams are not limited).
const MAX_BODY: u64 = 64 << 20;

/// Why a request to the daemon failed.
#[derive(Debug)]
pub enum ClientError {
    /// Nothing listens on the socket.
    NoDaemon { socket: PathBuf },
    /// The socket exists but cannot be connected to (such as: permission denied).
    Connect { socket: PathBuf, source: io::Error },
    /// Reading or writing the connection failed, or it closed in the middle of a response.
    Io(io::Error),
    /// The daemon's answer is not HTTP as this client understands it, or not the JSON it expects.
    Protocol(String),
    /// A request this client refuses to send.
    Invalid(String),
    /// The daemon answered with a non-2xx status.
    Api { status: u16, code: Option<ErrorCode>, message: String },
}

impl ClientError {
    /// The API's error code, when the daemon sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { code, .. } => *code,
            _ => None,
        }
    }

    /// Whether the daemon said there is no such thing (by code, or by status when it sent no code).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::NotFound) || matches!(self, ClientError::Api { status: 404, .. })
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::NoDaemon { socket } => {
                write!(f, "no berth daemon at {}: start one with berth daemon", socket.display())
            }
            ClientError::Connect { socket, source } => {
                write!(f, "cannot connect to the berth daemon at {}: {source}", socket.display())
            }
            ClientError::Io(e) => write!(f, "lost the connection to the berth daemon: {e}"),
            ClientError::Protocol(m) => write!(f, "the berth daemon's answer makes no sense: {m}"),
            ClientError::Invalid(m) => f.write_str(m),
            ClientError::Api { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Connect { source, .. } | ClientError::Io(source) => Some(source),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// A connection to the daemon's socket, and the means to make more.
pub struct Client {
    socket: PathBuf,
    token: Option<String>,
    /// The connection `connect` opened, used by the first request.
    first: Cell<Option<UnixStream>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token stays out of debug output.
        f.debug_struct("Client").field("socket", &self.socket).field("token", &self.token.is_some()).finish()
    }
}

impl Client {
    /// Connect to the daemon at `socket`, sending `BERTH_TOKEN` (when set) as a bearer token.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        Client::connect_with_token(socket, std::env::var("BERTH_TOKEN").ok().filter(|t| !t.is_empty()))
    }

    /// Connect to the daemon at `socket`, sending `token` as a bearer token.
    pub fn connect_with_token(socket: &Path, token: Option<String>) -> Result<Client, ClientError> {
        if token.as_ref().is_some_and(|t| t.chars().any(|c| c.is_control())) {
            return Err(ClientError::Invalid("BERTH_TOKEN must not contain control characters".into()));
        }
        let stream = open(socket)?;
        Ok(Client { socket: socket.to_path_buf(), token, first: Cell::new(Some(stream)) })
    }

    /// `GET path`; a non-2xx answer is an error.
    pub fn get(&self, path: &str) -> Result<(u16, Vec<u8>), ClientError> {
        self.request("GET", path, None)?.into_bytes()
    }

    /// `POST path` with `body` as JSON; a non-2xx answer is an error.
    pub fn post_json<T: Serialize + ?Sized>(&self, path: &str, body: &T) -> Result<(u16, Vec<u8>), ClientError> {
        let body = encode(body)?;
        self.request("POST", path, Some(&body))?.into_bytes()
    }

    /// `DELETE path`; a non-2xx answer is an error.
    pub fn delete(&self, path: &str) -> Result<(u16, Vec<u8>), ClientError> {
        self.request("DELETE", path, None)?.into_bytes()
    }

    /// `PUT path` with `body` as it is (such as a file's bytes or a tar); a non-2xx answer is an error.
    pub fn put_bytes(&self, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), ClientError> {
        self.request("PUT", path, Some(body))?.into_bytes()
    }

    /// `GET path`, returning the body to be read as it arrives; a non-2xx answer is an error.
    pub fn get_stream(&self, path: &str) -> Result<Streaming, ClientError> {
        self.request("GET", path, None)?.ok()
    }

    /// `POST path` with `body` as JSON, returning the body to be read as it arrives (such as NDJSON, a line at
    /// a time); a non-2xx answer is an error.
    pub fn post_json_stream<T: Serialize + ?Sized>(&self, path: &str, body: &T) -> Result<Streaming, ClientError> {
        let body = encode(body)?;
        self.request("POST", path, Some(&body))?.ok()
    }

    /// Send one request and read the answer's head.
    fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Streaming, ClientError> {
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(ClientError::Invalid(format!("{path:?} is not a request path")));
        }
        let mut stream = match self.first.take() {
            Some(s) => s,
            None => open(&self.socket)?,
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: berth\r\nUser-Agent: berth/{}\r\nContent-Type: application/json\r\n\
             Connection: close\r\n",
            env!("CARGO_PKG_VERSION")
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body.unwrap_or_default());
        stream.write_all(&request)?;
        stream.flush()?;
        read_response(BufReader::new(stream))
    }
}

/// Percent-encode one path segment (such as an id a user typed), so that it cannot change the path's shape.
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    // `.` and `..` would be taken as path steps; dots elsewhere are left readable.
    let dot_segment = s == "." || s == "..";
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') || (b == b'.' && !dot_segment) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decode a JSON body into `T`.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|e| ClientError::Protocol(format!("unexpected JSON ({e})")))
}

fn encode<T: Serialize + ?Sized>(body: &T) -> Result<Vec<u8>, ClientError> {
    serde_json::to_vec(body).map_err(|e| ClientError::Invalid(format!("cannot encode the request: {e}")))
}

fn open(socket: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(socket).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ClientError::NoDaemon { socket: socket.to_path_buf() }
        }
        _ => ClientError::Connect { socket: socket.to_path_buf(), source: e },
    })
}

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
    fn into_bytes(self) -> Result<(u16, Vec<u8>), ClientError> {
        let status = self.status;
        let body = read_all(self.body, MAX_BODY)?;
        if !(200..300).contains(&status) {
            return Err(api_error(status, &body));
        }
        Ok((status, body))
    }

    /// Pass a 2xx response on; turn any other into its error.
    fn ok(self) -> Result<Streaming, ClientError> {
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

fn read_response(mut conn: BufReader<UnixStream>) -> Result<Streaming, ClientError> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::{Read, Write};
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
}
