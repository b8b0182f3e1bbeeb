//! The berth CLI's HTTP client: a small blocking HTTP/1.1 client for the daemon's API, over its unix socket.
//!
//! It owns talking to the daemon from a command line: connecting to the socket (and telling a missing daemon
//! from one that refuses), the bearer token from `BERTH_TOKEN`, request heads, reading answers however they
//! are framed, and turning the API's error bodies into `ClientError`s. What the requests mean is the API's
//! (`berth-api`'s types), and what is done with the answers is its callers': the `berth` command line and
//! `berth-bench`.
//!
//! One connection per request (`Connection: close`): the CLI makes a handful of requests per run, so keeping
//! connections alive would buy nothing. Responses may be framed by `Content-Length`, by
//! `Transfer-Encoding: chunked`, or by the server closing the connection; streamed responses (NDJSON) are
//! read a line at a time, as the daemon writes them.
//!
//! The crate's root holds the client and its errors; `response` reads an answer (its head, and its body
//! however it is framed) into a `Streaming`.
#![forbid(unsafe_code)]

mod response;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::fmt;
use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use berth_api::ErrorCode;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use response::Streaming;
use response::read_response;

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/berth/berth.sock";

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
