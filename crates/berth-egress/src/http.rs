//! Plain-HTTP requests with an absolute URL (`GET http://host/path`).
//!
//! The request goes to the URL's host in origin form with `Connection: close`, and exactly one body is
//! forwarded, so a proxy connection carries one request to one host: a second request pipelined behind
//! the first is never sent anywhere.

use std::sync::Arc;

use tokio::net::TcpStream;

use crate::answer;
use crate::attempt::{Attempt, Method};
use crate::head::{Request, authority};
use crate::inject::{Injection, replace};
use crate::policy::Decision;
use crate::proxy::{Proxy, answer, closed_by_change, refuse};
use crate::reflect::Reflect;
use crate::relay::{Counters, Framing, exchange};
use crate::rule::Host;

/// Where a plain-HTTP request goes.
pub(crate) struct Dest<'a> {
    pub host: &'a Host,
    pub port: u16,
    /// The URL's authority as the client wrote it, for a request that has no `Host` header.
    pub authority: &'a str,
    /// The request target in origin form.
    pub path: &'a str,
}

/// Headers dropped from a request whose response is searched for secrets: a compressed body could not be
/// searched (the request asks for `identity` instead), and a range of the body could cut a value in pieces
/// that no search recognises.
const UNSEARCHABLE: [&str; 3] = ["accept-encoding", "range", "if-range"];

/// Headers that describe the client's connection to the proxy, not the request: never forwarded.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te", "upgrade"];

/// Serves a plain-HTTP request. Returns true if the proxy answered the client itself.
pub(crate) async fn handle(
    proxy: &Proxy,
    client: &mut TcpStream,
    req: &Request,
    early: Vec<u8>,
    dest: Dest<'_>,
    a: &mut Attempt,
    counters: &Arc<Counters>,
) -> bool {
    let shown = dest.host.with_port(dest.port);
    let hosts: Vec<&[u8]> = req.values("host").collect();
    if hosts.len() > 1 {
        refuse(client, a, &shown, Decision::deny(None, "the request has more than one Host header".into())).await;
        return true;
    }
    if let Some(value) = hosts.first() {
        let text = String::from_utf8_lossy(value);
        if authority(&text, Some(80)).ok() != Some((dest.host.clone(), dest.port)) {
            let why = format!("the Host header {text} does not match the request's URL host {shown}");
            refuse(client, a, &shown, Decision::deny(None, why)).await;
            return true;
        }
    }
    let framing = match framing(req) {
        Ok(framing) => framing,
        Err(why) => {
            a.reason = why;
            answer(client, &answer::failed(400, Some(&shown), "http_request_error", &a.reason)).await;
            return true;
        }
    };
    let upstream = proxy.connect_upstream(client, a, dest.host, dest.port, Method::Http, counters).await;
    let Some(upstream) = upstream else { return true };
    let (mut stream, mut closed) = (upstream.stream, upstream.closed);
    // A secret meant for HTTPS (injected inside intercepted TLS) never goes out in the clear; but the
    // response of every host a secret goes to is searched for its value, which the host may have kept.
    let injections: Vec<&Injection> =
        proxy.injections.iter().filter(|i| !i.intercept_tls && i.applies_to(dest.host, dest.port)).collect();
    let searcher = proxy.searcher(dest.host, dest.port);
    let reflect = searcher.map(|r| Reflect::new(r, &req.method, req.minor_version, &shown));
    let head = origin_head(req, &dest, &injections, reflect.is_some());
    let work = exchange(&mut *client, early, &mut stream, &head, framing, reflect, counters);
    tokio::select! {
        ended = work => {
            if let Err(e) = ended {
                a.reason = format!("{}; the exchange ended with an error: {e}", a.reason);
            }
        }
        Ok(decision) = &mut closed => closed_by_change(a, decision),
    }
    note_reflected(a, counters);
    drop(upstream.registration);
    false
}

/// Says in the attempt's reason how often a secret's value came back in the response and was replaced.
pub(crate) fn note_reflected(a: &mut Attempt, counters: &Counters) {
    let n = counters.reflected.load(std::sync::atomic::Ordering::Relaxed);
    if n > 0 {
        let times = if n == 1 { "once".to_string() } else { format!("{n} times") };
        a.reason = format!(
            "{}; the response carried a secret's value back ({times}): replaced with its placeholder",
            a.reason
        );
    }
}

/// How the request's body is delimited. Ambiguous framing (both headers, conflicting lengths), which two
/// parsers could read differently, is refused.
pub(crate) fn framing(req: &Request) -> Result<Framing, String> {
    let te: Vec<&[u8]> = req.values("transfer-encoding").collect();
    let cl: Vec<&[u8]> = req.values("content-length").collect();
    if !te.is_empty() {
        if !cl.is_empty() {
            return Err("the request has both Transfer-Encoding and Content-Length".into());
        }
        if req.minor_version == 0 {
            return Err("an HTTP/1.0 request cannot use Transfer-Encoding".into());
        }
        let all = te.iter().map(|v| String::from_utf8_lossy(v)).collect::<Vec<_>>().join(",");
        let last = all.rsplit(',').next().unwrap_or("").trim();
        if !last.eq_ignore_ascii_case("chunked") {
            return Err("the request's Transfer-Encoding does not end in chunked".into());
        }
        return Ok(Framing::Chunked);
    }
    let mut length = None;
    for value in cl {
        for item in String::from_utf8_lossy(value).split(',') {
            let item = item.trim();
            let n = match item.parse::<u64>() {
                Ok(n) if !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(format!("the request's Content-Length {item:?} is not a number")),
            };
            if length.is_some_and(|l| l != n) {
                return Err("the request has conflicting Content-Length values".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        None | Some(0) => Framing::None,
        Some(n) => Framing::Length(n),
    })
}

/// The head sent upstream: origin form, hop-by-hop headers dropped, `Connection: close`, and any
/// injections applied (never to the `Host` header, which chose the destination). When the response will be
/// `searched`, it asks for an uncompressed, whole body.
pub(crate) fn origin_head(req: &Request, dest: &Dest<'_>, injections: &[&Injection], searched: bool) -> Vec<u8> {
    let inject = |bytes: &[u8]| {
        let mut out = bytes.to_vec();
        for i in injections {
            if let Some(replaced) = replace(&out, i.placeholder.as_bytes(), i.value.as_bytes()) {
                out = replaced;
            }
        }
        out
    };
    let mut head = Vec::with_capacity(1024);
    head.extend_from_slice(req.method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(&inject(dest.path.as_bytes()));
    head.extend_from_slice(format!(" HTTP/1.{}\r\n", req.minor_version).as_bytes());
    let has = |name: &str| req.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("host") {
        head.extend_from_slice(format!("Host: {}\r\n", dest.authority).as_bytes());
    }
    for (name, value) in &req.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || (searched && UNSEARCHABLE.contains(&lower.as_str())) {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(&if lower == "host" { value.clone() } else { inject(value) });
        head.extend_from_slice(b"\r\n");
    }
    let mut added: Vec<String> = Vec::new();
    for i in injections {
        if let Some(name) = &i.header
            && !has(name)
            && !added.iter().any(|a| a.eq_ignore_ascii_case(name))
        {
            head.extend_from_slice(format!("{name}: {}\r\n", i.value).as_bytes());
            added.push(name.clone());
        }
    }
    if searched {
        head.extend_from_slice(b"Accept-Encoding: identity\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::head::parse;

    fn req(s: &str) -> Request {
        parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn framing_rules() {
        assert_eq!(framing(&req("POST http://h.test/ HTTP/1.1\r\n\r\n")), Ok(Framing::None));
        assert_eq!(framing(&req("POST http://h.test/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n")), Ok(Framing::Length(5)));
        assert_eq!(
            framing(&req("POST http://h.test/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n")),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            framing(&req("POST http://h.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")),
            Ok(Framing::Chunked)
        );
        for bad in [
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: +5\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Transfer-Encoding: chunked, gzip\r\n",
        ] {
            assert!(framing(&req(&format!("POST http://h.test/ HTTP/1.1\r\n{bad}\r\n"))).is_err(), "{bad}");
        }
    }

    #[test]
    fn rewritten_head() {
        let r =
            req("GET http://api.test/v1?k=SECRET_KEY HTTP/1.1\r\nHost: api.test\r\nProxy-Connection: keep-alive\r\n\
             Connection: keep-alive\r\nProxy-Authorization: Basic x\r\nX-Key: SECRET_KEY\r\n\r\n");
        let host = Host::parse("api.test").unwrap();
        let dest = Dest { host: &host, port: 80, authority: "api.test", path: "/v1?k=SECRET_KEY" };
        let injection = Injection {
            host_rule: "api.test".parse().unwrap(),
            placeholder: "SECRET_KEY".into(),
            value: "v4lue".into(),
            header: Some("Authorization".into()),
            intercept_tls: false,
        };
        let head = String::from_utf8(origin_head(&r, &dest, &[&injection], false)).unwrap();
        assert_eq!(
            head,
            "GET /v1?k=v4lue HTTP/1.1\r\nHost: api.test\r\nX-Key: v4lue\r\nAuthorization: v4lue\r\n\
             Connection: close\r\n\r\n"
        );
        let plain =
            String::from_utf8(origin_head(&req("GET http://api.test/ HTTP/1.0\r\n\r\n"), &dest, &[], false)).unwrap();
        assert_eq!(plain, "GET /v1?k=SECRET_KEY HTTP/1.0\r\nHost: api.test\r\nConnection: close\r\n\r\n");
        // A response to be searched is asked for whole and uncompressed.
        let r = req(
            "GET http://api.test/ HTTP/1.1\r\nAccept-Encoding: gzip, br\r\nRange: bytes=5-9\r\nIf-Range: x\r\n\r\n",
        );
        let searched = String::from_utf8(origin_head(&r, &dest, &[&injection], true)).unwrap();
        assert_eq!(
            searched,
            "GET /v1?k=v4lue HTTP/1.1\r\nHost: api.test\r\nAuthorization: v4lue\r\nAccept-Encoding: identity\r\n\
             Connection: close\r\n\r\n"
        );
    }
}
