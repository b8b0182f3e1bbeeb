//! Resolving a destination, checking every address it resolves to, and connecting to a checked address.
//!
//! The proxy connects to the very address it checked, never handing the name to a second resolution, so a
//! DNS answer that changes between the check and the connection (rebinding) cannot reach a refused address.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Semaphore;
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
    own_lookups: &Arc<Semaphore>,
) -> Result<(TcpStream, IpAddr, Decision), Failure> {
    let deadline = Instant::now() + timeout;
    let dest = host.with_port(port);
    let addrs = match (host, policy.mapped(host)) {
        (Host::Ip(ip), _) => vec![*ip],
        (_, Some(ip)) => vec![ip],
        (Host::Name(name), None) => resolve(name, port, deadline, timeout, own_lookups).await?,
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
/// that pool over. Each proxy (each sandbox, or a sandbox with its children) has a share of these too
/// (`Limits::max_lookups`, shared with `Proxy::with_lookup_share`), taken first,
/// so that one sandbox's lookups that never end cannot hold every place and delay the others'.
pub const MAX_LOOKUPS: usize = 64;

fn lookups() -> Arc<Semaphore> {
    static LOOKUPS: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    Arc::clone(LOOKUPS.get_or_init(|| Arc::new(Semaphore::new(MAX_LOOKUPS))))
}

async fn lookup(name: &str, port: u16, own: &Arc<Semaphore>) -> io::Result<Vec<std::net::SocketAddr>> {
    let name = name.to_string();
    run_lookup(own, move || std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Iterator::collect))
        .await?
}

/// Run `work` (a blocking lookup) holding a place of the proxy's own share and one of the whole; both are
/// held until it returns, even if its caller has stopped waiting.
async fn run_lookup<T: Send + 'static>(
    own: &Arc<Semaphore>,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    // Its own share first: a sandbox waiting on its share holds none of the whole meanwhile.
    let mine = Arc::clone(own).acquire_owned().await.map_err(io::Error::other)?;
    let all = lookups().acquire_owned().await.map_err(io::Error::other)?;
    tokio::task::spawn_blocking(move || {
        let _held = (mine, all);
        work()
    })
    .await
    .map_err(io::Error::other)
}

async fn resolve(
    name: &str,
    port: u16,
    deadline: Instant,
    timeout: Duration,
    own: &Arc<Semaphore>,
) -> Result<Vec<IpAddr>, Failure> {
    match tokio::time::timeout_at(deadline, lookup(name, port, own)).await {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_proxy_stuck_on_its_share_of_lookups_does_not_hold_up_another() {
        let (other, hostile) = (Arc::new(Semaphore::new(2)), Arc::new(Semaphore::new(2)));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        // Two lookups that do not end until released take all of the hostile proxy's share.
        let mut blocked = Vec::new();
        for _ in 0..2 {
            let (sem, held) = (Arc::clone(&hostile), Arc::clone(&held));
            blocked.push(tokio::spawn(async move {
                run_lookup(&sem, move || {
                    let _ = held.lock().unwrap().recv();
                })
                .await
            }));
        }
        while hostile.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        // Its third waits for its own share …
        let sem = Arc::clone(&hostile);
        let third = tokio::spawn(async move { run_lookup(&sem, || 3).await });
        // … while another proxy's lookup goes through.
        assert_eq!(run_lookup(&other, || 7).await.unwrap(), 7);
        assert!(!third.is_finished(), "the hostile proxy's third lookup waits for its own share");
        assert_eq!(hostile.available_permits(), 0);
        release.send(()).unwrap();
        release.send(()).unwrap();
        for b in blocked {
            b.await.unwrap().unwrap();
        }
        assert_eq!(third.await.unwrap().unwrap(), 3);
    }
}
