//! Reading and understanding a proxy request's head.
//!
//! The head is read under a size cap and one overall deadline (not a per-read timeout), so a client that
//! trickles bytes cannot hold a connection open forever. Parsing is left to `httparse`; this module only
//! decides what kind of request it is and where it wants to go.

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use crate::rule::Host;

/// Why no request head could be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    TooLarge(usize),
    TimedOut(Duration),
    /// The client closed the connection before a complete head arrived (`true` if it sent anything).
    Closed(bool),
    Io(io::Error),
}

impl HeadError {
    pub(crate) fn reason(&self) -> String {
        match self {
            HeadError::TooLarge(max) => format!("the request head is larger than {} KiB", max / 1024),
            HeadError::TimedOut(t) => format!("the request head did not arrive within {} ms", t.as_millis()),
            HeadError::Closed(false) => "the client closed the connection without sending a request".to_string(),
            HeadError::Closed(true) => "the client closed the connection in the middle of its request".to_string(),
            HeadError::Io(e) => format!("reading the request failed: {e}"),
        }
    }
}

/// Reads up to the blank line that ends a request head. Returns the head and whatever the client sent
/// after it (a body, or the first bytes of a tunnelled protocol).
pub(crate) async fn read_head<C: AsyncRead + Unpin>(
    client: &mut C,
    max: usize,
    timeout: Duration,
) -> Result<(Vec<u8>, Vec<u8>), HeadError> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 8192];
    loop {
        let room = (max + 1).saturating_sub(buf.len()).min(chunk.len());
        if room == 0 {
            return Err(HeadError::TooLarge(max));
        }
        let n = match tokio::time::timeout_at(deadline, client.read(&mut chunk[..room])).await {
            Err(_) => return Err(HeadError::TimedOut(timeout)),
            Ok(Err(e)) => return Err(HeadError::Io(e)),
            Ok(Ok(0)) => return Err(HeadError::Closed(!buf.is_empty())),
            Ok(Ok(n)) => n,
        };
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf, from) {
            if end > max {
                return Err(HeadError::TooLarge(max));
            }
            let rest = buf.split_off(end);
            return Ok((buf, rest));
        }
    }
}

/// Index just past the first empty line at or after `from` (lines may end in CRLF or a bare LF).
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(off) = buf.get(i..)?.iter().position(|&b| b == b'\n') {
        let nl = i + off;
        match buf.get(nl + 1..) {
            Some([b'\n', ..]) => return Some(nl + 2),
            Some([b'\r', b'\n', ..]) => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    pub target: String,
    pub minor_version: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Request {
    /// Every value of header `name`, compared case-insensitively.
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }
}

pub(crate) fn parse(head: &[u8]) -> Result<Request, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("the request head is incomplete".to_string()),
        Err(httparse::Error::TooManyHeaders) => return Err("the request has more than 128 headers".to_string()),
        Err(e) => return Err(format!("the request head is not valid HTTP/1.x: {e}")),
    }
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version) else {
        return Err("the request line is incomplete".to_string());
    };
    Ok(Request {
        method: method.to_string(),
        target: target.to_string(),
        minor_version,
        headers: req.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect(),
    })
}

/// Where a request wants to go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `CONNECT host:port`.
    Tunnel { host: Host, port: u16 },
    /// `GET http://host[:port]/path`, with the path in origin form.
    Absolute { host: Host, port: u16, authority: String, path: String },
}

/// Classifies a request's target. Anything but CONNECT with an authority or a method with an `http://`
/// URL is refused: a client that sends `GET /path` is treating the proxy as the server.
pub(crate) fn target(req: &Request) -> Result<Target, String> {
    if req.method == "CONNECT" {
        let (host, port) = authority(&req.target, None)?;
        return Ok(Target::Tunnel { host, port });
    }
    let t = &req.target;
    if t.starts_with('/') || t == "*" {
        return Err(format!(
            "{} {t} is an origin-form request: this is a proxy, send CONNECT host:port or a full http:// URL",
            req.method
        ));
    }
    let scheme_end = t.find("://").ok_or_else(|| format!("request target {t:?} is not a URL"))?;
    if !t[..scheme_end].eq_ignore_ascii_case("http") {
        return Err(format!("the {} scheme cannot be proxied as plain HTTP: use CONNECT for TLS", &t[..scheme_end]));
    }
    let rest = &t[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let path = match &rest[end..] {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p if p.starts_with('#') => "/".to_string(),
        p => p.split('#').next().unwrap_or("/").to_string(),
    };
    let (host, port) = authority(auth, Some(80))?;
    Ok(Target::Absolute { host, port, authority: auth.to_string(), path })
}

/// Parses `host:port`, `[v6]:port` or, with a default port, a bare host.
pub(crate) fn authority(s: &str, default_port: Option<u16>) -> Result<(Host, u16), String> {
    if s.contains('@') {
        return Err(format!("{s:?}: user names and passwords in the URL are not supported"));
    }
    let missing = || format!("{s:?} has no port");
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let (addr, rest) = inner.split_once(']').ok_or_else(|| format!("{s:?} has an unclosed '['"))?;
        let ip: Ipv6Addr = addr.parse().map_err(|_| format!("{s:?} has no IPv6 address inside brackets"))?;
        let port = match rest {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| format!("{s:?} is not host:port"))?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match s.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => return Err(format!("{s:?}: write IPv6 addresses in brackets")),
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        (Host::parse(host).map_err(|e| e.to_string())?, port)
    };
    let port = match port {
        None => default_port.ok_or_else(missing)?,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("{s:?} has an invalid port"))?
        }
        Some(_) => return Err(format!("{s:?} has an invalid port")),
    };
    Ok((host, port))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(head: &str) -> Request {
        parse(head.as_bytes()).unwrap()
    }

    #[test]
    fn head_end_finds_blank_lines() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r", 0), None);
    }

    #[test]
    fn targets() {
        let t = target(&req("CONNECT Example.COM:443 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(t, Target::Tunnel { host: Host::parse("example.com").unwrap(), port: 443 });
        let t = target(&req("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n")).unwrap();
        assert_eq!(t, Target::Tunnel { host: Host::parse("::1").unwrap(), port: 8443 });
        assert!(target(&req("CONNECT example.com HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&req("CONNECT example.com:0 HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&req("CONNECT ::1:443 HTTP/1.1\r\n\r\n")).is_err());

        let t = target(&req("GET http://a.example.com/x?y=1 HTTP/1.1\r\n\r\n")).unwrap();
        let Target::Absolute { host, port, path, .. } = t else { panic!() };
        assert_eq!((host.to_string().as_str(), port, path.as_str()), ("a.example.com", 80, "/x?y=1"));
        let Target::Absolute { port, path, .. } = target(&req("GET HTTP://h.test:8080 HTTP/1.1\r\n\r\n")).unwrap()
        else {
            panic!()
        };
        assert_eq!((port, path.as_str()), (8080, "/"));
        let Target::Absolute { path, .. } = target(&req("GET http://h.test?q HTTP/1.1\r\n\r\n")).unwrap() else {
            panic!()
        };
        assert_eq!(path, "/?q");

        let e = target(&req("GET /index.html HTTP/1.1\r\n\r\n")).unwrap_err();
        assert!(e.contains("origin-form"), "{e}");
        assert!(target(&req("GET https://h.test/ HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&req("GET http://user:pw@h.test/ HTTP/1.1\r\n\r\n")).is_err());
        assert!(target(&req("GET http://bad_host!/ HTTP/1.1\r\n\r\n")).is_err());
    }

    #[test]
    fn bad_heads() {
        assert!(parse(b"GARBAGE\r\n\r\n").is_err());
        assert!(parse(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n").is_err());
        let many: String = (0..200).map(|i| format!("H{i}: v\r\n")).collect();
        assert!(parse(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()).unwrap_err().contains("128"));
    }
}
