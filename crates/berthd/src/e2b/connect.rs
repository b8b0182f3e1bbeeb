//! The Connect protocol as E2B's envd clients speak it: the JSON codec, no compression; unary calls are a bare
//! JSON body each way, server streams are enveloped messages (a flags byte, a 4-byte big-endian length, the
//! JSON) ending with an end-stream envelope (flags `0x02`) that carries an error or `{}`.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The end-stream envelope's flag.
const END_STREAM: u8 = 0x02;
/// The largest request message taken.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// One enveloped message.
pub(crate) fn envelope(flags: u8, message: &Value) -> Bytes {
    let json = serde_json::to_vec(message).unwrap_or_default();
    let mut out = Vec::with_capacity(json.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    Bytes::from(out)
}

/// A message frame of a stream.
pub(crate) fn message(m: Value) -> Bytes {
    envelope(0, &m)
}

/// The stream's end: `{}`, or the error it ended with.
pub(crate) fn end(error: Option<(&str, String)>) -> Bytes {
    match error {
        None => envelope(END_STREAM, &json!({})),
        Some((code, message)) => envelope(END_STREAM, &json!({"error": {"code": code, "message": message}})),
    }
}

/// The messages of an enveloped request body (a stream's request, or a client stream's several).
pub(crate) fn messages(mut body: &[u8]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err("a Connect envelope shorter than its 5-byte prefix".into());
        }
        let n = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let Some(m) = body.get(5..5 + n) else { return Err("a Connect envelope longer than the body".into()) };
        if body[0] & END_STREAM == 0 {
            out.push(serde_json::from_slice(m).map_err(|e| format!("a message that is not JSON: {e}"))?);
        }
        body = &body[5 + n..];
    }
    Ok(out)
}

/// The HTTP status a Connect error code is sent with.
fn status(code: &str) -> StatusCode {
    match code {
        "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "permission_denied" => StatusCode::FORBIDDEN,
        "not_found" => StatusCode::NOT_FOUND,
        "already_exists" | "aborted" => StatusCode::CONFLICT,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "unimplemented" => StatusCode::NOT_IMPLEMENTED,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The Connect code for an API answer's status.
pub(crate) fn code_of(status: u16) -> &'static str {
    match status {
        400 | 413 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        409 => "failed_precondition",
        429 => "resource_exhausted",
        503 => "unavailable",
        504 => "deadline_exceeded",
        _ => "internal",
    }
}

/// A unary call's answer.
pub(crate) fn ok(v: Value) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], serde_json::to_vec(&v).unwrap_or_default())
        .into_response()
}

/// A unary call's error (also what a stream that could not start answers).
pub(crate) fn err(code: &str, message: impl Into<String>) -> Response {
    let body = json!({"code": code, "message": message.into()});
    (status(code), [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string())
        .into_response()
}

/// A server stream's answer, its frames from `frames` (the last of which is `end`).
pub(crate) fn stream(frames: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let body =
        tokio_stream::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(frames), Ok::<_, std::io::Error>);
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/connect+json"))], Body::from_stream(body))
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_go_both_ways() {
        let mut body = envelope(0, &json!({"a": 1})).to_vec();
        body.extend_from_slice(&envelope(0, &json!({"b": 2})));
        body.extend_from_slice(&end(None));
        assert_eq!(messages(&body).unwrap(), vec![json!({"a": 1}), json!({"b": 2})]);
        assert_eq!(&envelope(0, &json!({}))[..], b"\0\0\0\0\x02{}");
        assert!(messages(b"\0\0\0\0\x09{}").is_err());
        assert!(messages(b"\0\0").is_err());
    }
}
