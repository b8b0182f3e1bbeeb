//! Resolving a destination, checking every address it resolves to, and connecting to a checked address.
//!
//! The proxy connects to the very address it checked, never handing the name to a second resolution, so a
//! DNS answer that changes between the check and the connection (rebinding) cannot reach a refused address.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::policy::{Decision, Policy};
use crate::rule::Host;

/// Why no upstream connection was made.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An address check refused it.
    Denied(Decision),
    /// Resolution or connection failed: an HTTP status, an RFC 9209 error type and a sentence.
    Error(u16, &'static str, String),
}

/// Resolves `host` (literal, `add_hosts`, or DNS), checks every address, then connects to the first
/// address that accepts, all within `timeout`.
pub(crate) async fn open(
    policy: &Policy,
    host: &Host,
    port: u16,
    timeout: Duration,
) -> Result<(TcpStream, IpAddr, Decision), Failure> {
    let deadline = Instant::now() + timeout;
    let dest = host.with_port(port);
    let addrs = match (host, policy.mapped(host)) {
        (Host::Ip(ip), _) => vec![*ip],
        (_, Some(ip)) => vec![ip],
        (Host::Name(name), None) => resolve(name, port, deadline, timeout).await?,
    };
    let mut passed = None;
    for &ip in &addrs {
        let decision = policy.check_host_address(host, ip, port);
        if !decision.allowed {
            return Err(Failure::Denied(decision));
        }
        passed.get_or_insert(decision);
    }
    let Some(check) = passed else {
        return Err(Failure::Error(502, "dns_error", format!("{host} did not resolve to any address")));
    };
    let mut last = None;
    for &ip in &addrs {
        match tokio::time::timeout_at(deadline, TcpStream::connect(SocketAddr::new(ip, port))).await {
            Err(_) => {
                let why = format!("{dest} ({ip}) did not accept a connection within {} ms", timeout.as_millis());
                return Err(Failure::Error(504, "connection_timeout", why));
            }
            Ok(Ok(stream)) => {
                // Small writes (TLS handshakes, requests) should leave at once; the proxy adds no batching.
                let _ = stream.set_nodelay(true);
                return Ok((stream, ip, check));
            }
            Ok(Err(e)) => last = Some((ip, e)),
        }
    }
    let (ip, e) = last.ok_or_else(|| Failure::Error(502, "dns_error", format!("{host} has no address")))?;
    let kind =
        if e.kind() == io::ErrorKind::ConnectionRefused { "connection_refused" } else { "destination_unavailable" };
    Err(Failure::Error(502, kind, format!("could not connect to {dest} ({ip}): {e}")))
}

/// Most host-name lookups in progress at once, across every proxy of the process. A lookup blocks a thread of
/// the blocking pool the daemon also does its file work on, and goes on after its caller gives up: each holds
/// a permit until the resolver answers, so a sandbox asking for names whose servers never answer cannot take
/// that pool over.
pub const MAX_LOOKUPS: usize = 64;

fn lookups() -> Arc<tokio::sync::Semaphore> {
    static LOOKUPS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    Arc::clone(LOOKUPS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(MAX_LOOKUPS))))
}

async fn lookup(name: &str, port: u16) -> io::Result<Vec<std::net::SocketAddr>> {
    let permit = lookups().acquire_owned().await.map_err(io::Error::other)?;
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let _held = permit;
        std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Iterator::collect)
    })
    .await
    .map_err(io::Error::other)?
}

async fn resolve(name: &str, port: u16, deadline: Instant, timeout: Duration) -> Result<Vec<IpAddr>, Failure> {
    match tokio::time::timeout_at(deadline, lookup(name, port)).await {
        Err(_) => {
            let why = format!("resolving {name} took longer than {} ms", timeout.as_millis());
            Err(Failure::Error(504, "dns_timeout", why))
        }
        Ok(Err(e)) => Err(Failure::Error(502, "dns_error", format!("could not resolve {name}: {e}"))),
        Ok(Ok(found)) => {
            let mut addrs: Vec<IpAddr> = Vec::new();
            for a in found {
                if !addrs.contains(&a.ip()) {
                    addrs.push(a.ip());
                }
            }
            Ok(addrs)
        }
    }
}
