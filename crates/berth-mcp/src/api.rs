//! What the tools stand on: berth's HTTP API, reached through `Api`. The `berth mcp` command implements it
//! over the daemon's unix socket; the daemon's `/mcp` route implements it by calling its own router
//! in-process. Either way a tool's call is an ordinary API request, scoped, journaled and refused as such.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

/// A request body.
#[derive(Debug, Clone)]
pub enum Body {
    None,
    /// Sent as `application/json`.
    Json(Value),
    /// Sent as it is (a file's bytes).
    Bytes(Vec<u8>),
}

/// One API request: `path` includes its query string, already encoded.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: &'static str,
    pub path: String,
    pub body: Body,
    /// The `Authorization` header of the MCP request this call serves, when it came over HTTP: the call
    /// carries the caller's own credentials.
    pub authorization: Option<String>,
}

/// A 2xx answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (null when empty).
    pub fn json(&self) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::transport(format!("the daemon's answer is not the JSON expected: {e}")))
    }
}

/// A call that did not succeed: the API's answer (`status`, and `code` and `message` from its error body), or
/// no answer at all (`status` 0: the daemon could not be reached).
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub code: Option<String>,
    pub message: String,
}

impl ApiError {
    pub fn transport(message: impl Into<String>) -> ApiError {
        ApiError { status: 0, code: None, message: message.into() }
    }

    /// The error a non-2xx answer stands for: its `{"error": {"code", "message"}}` body, or what there is.
    pub fn from_answer(status: u16, body: &[u8]) -> ApiError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let field = |name: &str| {
            parsed.as_ref().and_then(|v| v.pointer(&format!("/error/{name}"))).and_then(Value::as_str).map(String::from)
        };
        let message = field("message").unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text: String = text.trim().chars().take(200).collect();
            if text.is_empty() {
                format!("the berth daemon answered HTTP {status}")
            } else {
                format!("the berth daemon answered HTTP {status}: {text}")
            }
        });
        ApiError { status, code: field("code"), message }
    }
}

pub type ApiFuture = Pin<Box<dyn Future<Output = Result<Reply, ApiError>> + Send + 'static>>;

/// berth's HTTP API, however it is reached.
pub trait Api: Send + Sync + 'static {
    /// Make one request. A non-2xx answer is an `ApiError`.
    fn call(&self, call: Call) -> ApiFuture;
}

/// Percent-encode one path segment (an id or a name), so that it cannot change the path's shape.
pub fn segment(s: &str) -> String {
    encode(s, b"-_~")
}

/// Percent-encode a query value; slashes are kept, for readable paths.
pub fn query_value(s: &str) -> String {
    encode(s, b"-_~./")
}

fn encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cannot_change_the_path() {
        assert_eq!(segment("../x"), "%2E%2E%2Fx");
        assert_eq!(segment("demo-1"), "demo-1");
        assert_eq!(query_value("/workspace/a b&c=d"), "/workspace/a%20b%26c%3Dd");
    }

    #[test]
    fn an_error_body_gives_its_sentence() {
        let e = ApiError::from_answer(404, br#"{"error":{"code":"not_found","message":"there is no sandbox \"x\""}}"#);
        assert_eq!(
            (e.status, e.code.as_deref(), e.message.as_str()),
            (404, Some("not_found"), "there is no sandbox \"x\"")
        );
        let e = ApiError::from_answer(405, b"");
        assert_eq!(e.message, "the berth daemon answered HTTP 405");
    }
}
