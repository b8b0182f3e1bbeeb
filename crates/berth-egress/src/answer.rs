//! The answers the proxy itself gives a client: refusals and failures, in a form both a program (status,
//! `Proxy-Status` per RFC 9209, `X-Berth-Egress`) and a person reading a terminal (the body) understand.

/// A `403 Forbidden` for a destination the policy refuses.
pub(crate) fn denied(dest: &str, rule: Option<&str>, reason: &str) -> Vec<u8> {
    let egress = match rule {
        Some(rule) => format!("denied; rule=\"{}\"; reason=\"{}\"", quoted(rule), quoted(reason)),
        None => format!("denied; reason=\"{}\"", quoted(reason)),
    };
    let error = if reason.contains(" address") { "destination_ip_prohibited" } else { "http_request_denied" };
    response(
        403,
        "Forbidden",
        error,
        &egress,
        reason,
        &format!("berth: egress to {} denied: {}", line(dest), line(reason)),
    )
}

/// A `4xx`/`5xx` for a request that could not be served: `error` is an RFC 9209 error type.
pub(crate) fn failed(status: u16, dest: Option<&str>, error: &str, reason: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let egress = format!("error; reason=\"{}\"", quoted(reason));
    let body = match dest {
        Some(dest) => format!("berth: egress to {} failed: {}", line(dest), line(reason)),
        None if status == 503 => format!("berth: the proxy refused the connection: {}", line(reason)),
        None => format!("berth: bad proxy request: {}", line(reason)),
    };
    response(status, phrase, error, &egress, reason, &body)
}

fn response(status: u16, phrase: &str, error: &str, egress: &str, reason: &str, body: &str) -> Vec<u8> {
    let body = format!("{body}\n");
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\nProxy-Status: berth; error={error}; details=\"{}\"\r\n\
         X-Berth-Egress: {egress}\r\n\r\n{body}",
        body.len(),
        quoted(reason),
    )
    .into_bytes()
}

/// The contents of a quoted header string: printable ASCII only, `"` and `\` escaped. Reasons can carry
/// text a client chose (a TLS server name), which must not be able to end the header or the head.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out
}

/// One line of body text: control characters replaced.
fn line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_stays_in_its_header() {
        let answer = denied("h.test:443", Some("*.test"), "name \"x\r\nSet-Cookie: a\" \\ é");
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(!head.contains("\r\nSet-Cookie"), "{head}");
        assert!(
            head.contains("X-Berth-Egress: denied; rule=\"*.test\"; reason=\"name \\\"x??Set-Cookie: a\\\" \\\\ ?\"")
        );
        assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert_eq!(body.lines().count(), 1, "{body}");
        assert!(body.starts_with("berth: egress to h.test:443 denied: name"));
    }
}
