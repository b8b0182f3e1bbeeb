//! CONNECT tunnels.
//!
//! Before a tunnel carries anything, the client's first bytes are read: if they are a TLS ClientHello
//! whose server name differs from the host the tunnel was allowed for, the tunnel is closed. Otherwise
//! the bytes are passed on and the tunnel relays both ways until either side ends or a policy change
//! closes it. A tunnel to a secret's destination is either intercepted (and its one exchange searched) or
//! refused: it is never copied as it is, since the host may hand back the value it was sent.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::attempt::{Attempt, Method, Verdict};
use crate::inject::Injection;
use crate::intercept;
use crate::policy::Decision;
use crate::proxy::{Limits, Proxy, closed_by_change, refuse};
use crate::relay::{Counters, tunnel};
use crate::rule::{Host, normalise_name};
use crate::sni::{self, Hello};

/// What to do with the client's first bytes.
enum First {
    /// Pass these bytes on; `tls` if they are a ClientHello.
    Forward {
        bytes: Vec<u8>,
        tls: bool,
    },
    Refuse(String),
}

/// Serves a CONNECT request. Returns true if the proxy answered the client itself.
pub(crate) async fn handle(
    proxy: &Proxy,
    client: &mut TcpStream,
    early: Vec<u8>,
    host: &Host,
    port: u16,
    a: &mut Attempt,
    counters: &Arc<Counters>,
) -> bool {
    let intercepting: Vec<&Injection> =
        proxy.injections.iter().filter(|i| i.intercept_tls && i.applies_to(host, port)).collect();
    if !intercepting.is_empty() && proxy.tls.is_none() {
        let why = "a secret for this host needs TLS interception, which this proxy was not given".to_string();
        refuse(client, a, &host.with_port(port), Decision::deny(None, why)).await;
        return true;
    }
    // What comes back from a secret's destination is searched for its value, which only an intercepted
    // exchange allows: a tunnel there that would be copied as it is (plain HTTP inside CONNECT, or TLS to the
    // host of a `NAME@http://HOST` secret) is refused.
    let searched = proxy.searcher(host, port).is_some();
    if searched && intercepting.is_empty() {
        let why = format!(
            "{} receives a secret, so its responses are searched for the value, which a tunnel the proxy does \
             not intercept would carry back unsearched; send plain HTTP to it as a proxy request (http://{}/...)",
            host.with_port(port),
            host.with_port(port)
        );
        refuse(client, a, &host.with_port(port), Decision::deny(None, why)).await;
        return true;
    }
    let Some(upstream) = proxy.connect_upstream(client, a, host, port, Method::Connect, counters).await else {
        return true;
    };
    let (mut stream, mut closed) = (upstream.stream, upstream.closed);
    let work = async {
        let established = client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await;
        established.map_err(|e| (Verdict::Allowed, format!("the client went away: {e}")))?;
        match first_bytes(client, &stream, early, host, &proxy.limits).await {
            First::Refuse(reason) => Err((Verdict::Denied, reason)),
            First::Forward { bytes, tls: true } if !intercepting.is_empty() => {
                let Some(tls) = &proxy.tls else {
                    return Err((Verdict::Error, "TLS interception is not configured".to_string()));
                };
                let limits = &proxy.limits;
                let searcher = proxy.searcher(host, port);
                intercept::serve(tls, limits, client, bytes, &mut stream, host, port, &intercepting, searcher, counters)
                    .await
            }
            First::Forward { .. } if searched => Err((
                Verdict::Denied,
                "the tunnel's first bytes are not a TLS ClientHello, but its host receives a secret and only an \
                 intercepted TLS exchange with it can be searched for the value; the tunnel was closed"
                    .to_string(),
            )),
            First::Forward { bytes, .. } => {
                let forwarded = async {
                    stream.write_all(&bytes).await?;
                    counters.up.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    tunnel(client, &mut stream, counters).await
                };
                forwarded.await.map_err(|e| (Verdict::Allowed, format!("the tunnel ended with an error: {e}")))
            }
        }
    };
    tokio::select! {
        ended = work => match ended {
            Ok(()) => {}
            Err((Verdict::Allowed, why)) => a.reason = format!("{}; {why}", a.reason),
            Err((Verdict::Denied, why)) => (a.verdict, a.rule, a.reason) = (Verdict::Denied, None, why),
            Err((verdict, why)) => (a.verdict, a.reason) = (verdict, why),
        },
        Ok(decision) = &mut closed => closed_by_change(a, decision),
    }
    crate::http::note_reflected(a, counters);
    drop(upstream.registration);
    false
}

/// Reads the client's first bytes and judges them. A tunnel whose server speaks first is not TLS (a TLS
/// client always speaks first), so it is relayed without waiting for the client.
async fn first_bytes(
    client: &mut TcpStream,
    upstream: &TcpStream,
    mut buf: Vec<u8>,
    host: &Host,
    limits: &Limits,
) -> First {
    let mut chunk = vec![0u8; 4096];
    if buf.is_empty() {
        tokio::select! {
            read = client.read(&mut chunk) => match read {
                Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
                _ => return First::Forward { bytes: buf, tls: false },
            },
            _ = upstream.readable() => return First::Forward { bytes: buf, tls: false },
        }
    }
    let deadline = Instant::now() + limits.hello_timeout;
    loop {
        match sni::parse(&buf) {
            Hello::NotTls => return First::Forward { bytes: buf, tls: false },
            Hello::Malformed(why) => return First::Refuse(format!("the TLS ClientHello is malformed: {why}")),
            Hello::ClientHello { server_names } => {
                for name in server_names {
                    let text = String::from_utf8_lossy(&name);
                    let same = match (normalise_name(&text), host) {
                        (Ok(sni), Host::Name(connect)) => &sni == connect,
                        _ => false,
                    };
                    if !same {
                        return First::Refuse(format!("TLS SNI {text} does not match CONNECT host {host}"));
                    }
                }
                return First::Forward { bytes: buf, tls: true };
            }
            Hello::Incomplete => {}
        }
        let room = limits.max_client_hello.saturating_sub(buf.len()).min(chunk.len());
        if room == 0 {
            return First::Refuse(format!("the TLS ClientHello is larger than {} KiB", limits.max_client_hello / 1024));
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk[..room])).await {
            Err(_) => {
                let ms = limits.hello_timeout.as_millis();
                return First::Refuse(format!("the TLS ClientHello did not arrive in full within {ms} ms"));
            }
            Ok(Ok(n @ 1..)) => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return First::Refuse("the client closed the tunnel in the middle of its ClientHello".into()),
        }
    }
}
