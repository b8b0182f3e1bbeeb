//! A sandbox's way out: the connections its init accepts on the proxy port (egress, decided by the sandbox's
//! policy) and on the API port (berth's own API, for the sandbox's session token). Neither needs a network
//! interface in the sandbox: init hands each accepted socket to the daemon over its control socket.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use berth_init::protocol::{API_PORT, PROXY_PORT};
use tokio::sync::mpsc;

use super::{Engine, Live};
use crate::EngineError;

/// Most connections (proxy and API together) one sandbox may hold open at once: past it, new ones are closed
/// at once, so a sandbox cannot spend the daemon's descriptors or memory.
pub const MAX_CONNECTIONS: usize = 256;

/// One of a sandbox's open connections, counted until dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>) -> Option<Slot> {
        let taken = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_CONNECTIONS).then_some(n + 1));
        taken.ok().map(|_| Slot(Arc::clone(count)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An API connection and its slot (held, not read: dropping the connection gives the slot back).
pub struct Counted(tokio::net::TcpStream, #[allow(dead_code)] Slot);

impl Counted {
    /// The address the connection came from inside the sandbox.
    pub fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.0.peer_addr()
    }
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl std::os::fd::AsFd for Counted {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// The connections one sandbox makes to its API port, in the order they came.
pub struct ApiConnections(mpsc::UnboundedReceiver<Counted>);

impl ApiConnections {
    /// The next connection; none once the sandbox is gone.
    pub async fn accept(&mut self) -> Option<Counted> {
        self.0.recv().await
    }
}

/// What serves berth's API to a sandbox's own API port (its session token's calls): the daemon's HTTP
/// transport, given to the engine once at start (`Engine::serve_sandbox_apis_with`). The engine hands it
/// each sandbox's connections, counted against the sandbox's cap, and aborts the task with the sandbox.
pub trait SandboxApi: Send + Sync {
    fn serve(&self, engine: Arc<Engine>, connections: ApiConnections) -> tokio::task::JoinHandle<()>;
}

fn tcp_stream(fd: OwnedFd) -> Option<tokio::net::TcpStream> {
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true).ok()?;
    tokio::net::TcpStream::from_std(std).ok()
}

impl Engine {
    /// Route the connections `live`'s init accepts: the API port to the API (token required, as on the TCP
    /// listener), the proxy port to the sandbox's egress proxy.
    pub(super) fn route_connections(&self, live: &Arc<Live>) {
        let Some(engine) = self.this.get().and_then(std::sync::Weak::upgrade) else { return };
        let (api_tx, api_rx) = mpsc::unbounded_channel();
        // Held to the sandbox's cap on connections (Slot) before they get here. Without a transport for
        // them (an engine that serves nothing), the sender's connections are closed as they come.
        if let Some(api) = self.sandbox_api.get() {
            live.keep_task(api.serve(engine, ApiConnections(api_rx)));
        }
        let weak = Arc::downgrade(live);
        let open = Arc::new(AtomicUsize::new(0));
        // Straight from the task that reads init's control socket to a task of the connection's own: no hop
        // in between on a connection's way out.
        live.session.on_connection(Box::new(move |port, fd| {
            // Past the cap the descriptor is dropped here, which closes the connection.
            let Some(slot) = Slot::take(&open) else { return };
            let Some(stream) = tcp_stream(fd) else { return };
            match port {
                API_PORT => {
                    let _ = api_tx.send(Counted(stream, slot));
                }
                PROXY_PORT => {
                    let Some(live) = weak.upgrade() else { return };
                    let egress = Arc::clone(&live.egress);
                    tokio::spawn(async move {
                        egress.serve(stream).await;
                        drop(slot);
                    });
                }
                _ => {}
            }
        }));
    }
}

/// How much later than its start and duration say an exec may still have made a connection.
const END_SLACK_MS: u64 = 100;

/// The only exec of `live` that was running at `time_ms` (none when several were, or none).
async fn running_at(live: &Live, time_ms: u64) -> Option<String> {
    let execs = live.execs.lock().await;
    let mut running = execs
        .iter()
        .filter(|(_, e)| {
            e.started_at_ms <= time_ms
                && e.done.borrow().as_ref().is_none_or(|r| {
                    // Its end as its duration puts it, a little late rather than early (milliseconds rounded).
                    e.started_at_ms.saturating_add(r.duration_ms).saturating_add(END_SLACK_MS) >= time_ms
                })
        })
        .map(|(id, _)| id.clone());
    match (running.next(), running.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The journal's record of one egress attempt of `sandbox` (or pod).
pub(super) fn egress_record(
    a: &berth_egress::Attempt,
    sandbox: String,
    exec: Option<String>,
) -> berth_api::EgressRecord {
    // What the sandbox wrote (a host name, a header quoted in a reason) is kept short in the journal.
    let short = |s: &str| -> String {
        if s.len() <= 256 {
            return s.to_string();
        }
        let mut end = 256;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    };
    let word = |v: serde_json::Result<serde_json::Value>| {
        v.ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
    };
    berth_api::EgressRecord {
        time_ms: a.time_ms,
        sandbox,
        exec,
        host: short(&a.host),
        port: a.port,
        method: word(serde_json::to_value(a.method)),
        verdict: word(serde_json::to_value(a.verdict)),
        rule: a.rule.clone(),
        reason: short(&a.reason),
        bytes_up: a.bytes_up,
        bytes_down: a.bytes_down,
        duration_ms: a.duration_ms,
    }
}

/// The variables naming the proxy on `port`, as every exec of a daemon sandbox (and every process of a pod
/// with an egress policy) gets them.
pub(crate) fn proxy_env(port: u16) -> Vec<(String, String)> {
    let proxy = format!("http://127.0.0.1:{port}");
    let mut env = Vec::new();
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        env.push((k.to_string(), proxy.clone()));
    }
    for k in ["NO_PROXY", "no_proxy"] {
        env.push((k.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    env
}

/// The environment every exec of a daemon sandbox gets: the proxy, and berth's API with the session token.
pub(super) fn session_env(id: &str, token: &str) -> Vec<(String, String)> {
    let mut env = proxy_env(PROXY_PORT);
    env.push(("BERTH_API".into(), format!("http://127.0.0.1:{API_PORT}")));
    env.push(("BERTH_TOKEN".into(), token.to_string()));
    env.push(("BERTH_SANDBOX_ID".into(), id.to_string()));
    env
}

/// The proxy's policy for a wire policy; a rule berth cannot use is a 400.
pub(super) fn policy_of(net: &berth_api::Network) -> Result<berth_egress::Policy, EngineError> {
    let rules = |list: &[String]| -> Result<Vec<berth_egress::Rule>, EngineError> {
        list.iter().map(|r| r.parse::<berth_egress::Rule>().map_err(|e| EngineError::invalid(e.to_string()))).collect()
    };
    let allow = rules(&net.allow)?;
    let deny = rules(&net.deny)?;
    let mode = match net.mode.as_deref() {
        None if allow.is_empty() => berth_egress::Mode::None,
        None => berth_egress::Mode::Enforce,
        Some(m) => m.parse().map_err(|e: berth_egress::ModeError| EngineError::invalid(e.to_string()))?,
    };
    let mut add_hosts = std::collections::BTreeMap::new();
    for (name, ip) in &net.add_hosts {
        let addr: std::net::IpAddr = ip
            .parse()
            .map_err(|_| EngineError::invalid(format!("add_hosts: {ip:?} (for {name}) is not an IP address")))?;
        berth_egress::Host::parse(name).map_err(|e| EngineError::invalid(format!("add_hosts: {e}")))?;
        add_hosts.insert(name.to_ascii_lowercase(), addr);
    }
    Ok(berth_egress::Policy { mode, allow, deny, add_hosts, closed: None })
}

/// The wire form of a policy, as the record shows it.
pub(super) fn network_of(p: &berth_egress::Policy) -> berth_api::Network {
    berth_api::Network {
        mode: Some(p.mode.to_string()),
        allow: p.allow.iter().map(ToString::to_string).collect(),
        deny: p.deny.iter().map(ToString::to_string).collect(),
        add_hosts: p.add_hosts.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
    }
}

impl Engine {
    /// Journal every egress attempt of `live` (as the sandbox's own action).
    pub(super) fn log_egress(live: &Arc<Live>, mut attempts: mpsc::UnboundedReceiver<berth_egress::Attempt>) {
        let weak = Arc::downgrade(live);
        let task = tokio::spawn(async move {
            while let Some(a) = attempts.recv().await {
                let Some(live) = weak.upgrade() else { return };
                let id = live.record.lock().await.id.clone();
                // Which exec made it: the one that was running when the attempt began, if only one was (told
                // from the exec table's times, so neither a table busy at connect time nor a relayed connection
                // without a TCP port leaves it unnamed).
                let exec = running_at(&live, a.time_ms).await;
                if let Ok(mut m) = live.meter.lock() {
                    m.add_egress(a.bytes_up, a.bytes_down);
                }
                let record = egress_record(&a, id, exec);
                let args = serde_json::json!({"host": record.host, "port": record.port, "method": record.method});
                live.note_egress(args, serde_json::to_value(&record).unwrap_or_default());
            }
        });
        live.keep_task(task);
    }

    /// Change a running sandbox's policy: allow and deny rules take effect at once, and open connections the
    /// new policy forbids are closed.
    pub async fn net_change(
        &self,
        id: &str,
        change: berth_api::NetChange,
    ) -> Result<berth_api::NetChanged, EngineError> {
        let parse = |list: &[String]| -> Result<Vec<berth_egress::Rule>, EngineError> {
            list.iter()
                .map(|r| r.parse::<berth_egress::Rule>().map_err(|e| EngineError::invalid(e.to_string())))
                .collect()
        };
        let (allow, deny) = (parse(&change.allow)?, parse(&change.deny)?);
        if allow.is_empty() && deny.is_empty() {
            return Err(EngineError::invalid("name at least one rule to allow or deny"));
        }
        let live = self.live(id).await?;
        self.admit_record(id, "the network policy is not changed").await?;
        let mut policy = (*live.egress.policy()).clone();
        for r in allow {
            if !policy.allow.contains(&r) {
                policy.allow.push(r);
            }
            policy.deny.retain(|d| !policy.allow.contains(d));
        }
        for r in deny {
            policy.allow.retain(|a| *a != r);
            if !policy.deny.contains(&r) {
                policy.deny.push(r);
            }
        }
        if policy.mode == berth_egress::Mode::None && !policy.allow.is_empty() {
            policy.mode = berth_egress::Mode::Enforce;
        }
        let closed = live.egress.set_policy(policy.clone()) as u64;
        let network = network_of(&policy);
        let record = {
            let mut r = live.record.lock().await;
            r.network = network.clone();
            r.clone()
        };
        let _ = self.store.sandbox_live(&record);
        if let Ok(Some(mut spec)) = self.store.spec(&record.id) {
            spec["network"] = serde_json::to_value(&network).unwrap_or_default();
            let _ = self.store.put_spec(&record.id, &spec);
        }
        live.note("net", serde_json::to_value(&change).unwrap_or_default(), serde_json::json!({"closed": closed}));
        Ok(berth_api::NetChanged { network, closed })
    }

    /// Every egress attempt of a sandbox, from its journal (which outlives it).
    pub async fn net_log(&self, id: &str) -> Result<Vec<berth_api::EgressRecord>, EngineError> {
        let sid = match self.get(id).await {
            Ok(r) => r.id,
            Err(_) if id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) => id.to_string(),
            Err(e) => return Err(e),
        };
        let path = super::journal_path(&self.root, &sid);
        if !path.exists() {
            return Err(EngineError::NoSandbox(id.to_string()));
        }
        // Only the egress records are held, one line read at a time (they keep to their share of the journal).
        let records = crate::journal::read_actions(&path, |a| a == "egress").map_err(EngineError::Log)?;
        Ok(records.into_iter().filter_map(|r| serde_json::from_value(r.result).ok()).collect())
    }

    /// The smallest allowlist that would have let through what the sandbox reached: record with
    /// `--net learn`, then enforce this.
    pub async fn net_suggest(&self, id: &str) -> Result<berth_api::NetSuggestion, EngineError> {
        let mut allow = std::collections::BTreeSet::new();
        for r in self.net_log(id).await?.into_iter().filter(|r| r.verdict == "allowed") {
            if let Ok(host) = berth_egress::Host::parse(&r.host) {
                allow.insert(host.with_port(r.port));
            }
        }
        Ok(berth_api::NetSuggestion { allow: allow.into_iter().collect() })
    }
}

/// A certificate and its key, PEM.
type Pems = (String, String);

/// For secrets injected into HTTPS: a fresh authority for the sandbox's proxy (certificate, key), and the
/// files that make the sandbox trust it (its certificate alone, and the host's bundle with it).
pub(super) fn authority_for(injections: &[berth_egress::Injection]) -> Result<(Option<Pems>, Vec<Pems>), EngineError> {
    if !injections.iter().any(|i| i.intercept_tls) {
        return Ok((None, vec![]));
    }
    let ca = berth_egress::CertificateAuthority::generate()
        .map_err(|e| EngineError::Storage(format!("cannot make the sandbox's proxy authority: {e}")))?;
    let cert = ca.certificate_pem().to_string();
    let host_bundle = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    let files =
        vec![("ca.pem".to_string(), cert.clone()), ("ca-bundle.pem".to_string(), format!("{host_bundle}\n{cert}"))];
    Ok((Some((cert, ca.key_pem())), files))
}

/// The variables common TLS clients read for their trust store, pointed at the bundle with the proxy's
/// authority in it.
pub(super) fn trust_env() -> Vec<(String, String)> {
    let bundle = format!("{}/ca-bundle.pem", berth_runtime::plan::BERTH_FILES);
    let mut env: Vec<(String, String)> = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"]
        .into_iter()
        .map(|k| (k.to_string(), bundle.clone()))
        .collect();
    env.push(("NODE_EXTRA_CA_CERTS".into(), format!("{}/ca.pem", berth_runtime::plan::BERTH_FILES)));
    env
}

/// Extra roots the proxy trusts for upstream servers (`BERTH_EGRESS_ROOTS`, a PEM bundle: a private CA in
/// front of a company's services), as DER.
fn extra_roots() -> Vec<Vec<u8>> {
    let Some(path) = std::env::var_os("BERTH_EGRESS_ROOTS") else { return vec![] };
    let Ok(text) = std::fs::read_to_string(path) else { return vec![] };
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match (line.trim(), cur.as_mut()) {
            ("-----BEGIN CERTIFICATE-----", _) => cur = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                if let Some(der) = base64_decode(b64) {
                    out.push(der);
                }
                cur = None;
            }
            (l, Some(b64)) => b64.push_str(l),
            _ => {}
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = s.bytes().filter(|b| *b != b'=' && !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(out)
}

/// The share of `top` in `shares`, made (of `max` places) if it has none that is still in use.
fn share_for(
    shares: &mut HashMap<String, std::sync::Weak<tokio::sync::Semaphore>>,
    top: &str,
    max: usize,
) -> berth_egress::LookupShare {
    shares.retain(|_, s| s.strong_count() > 0);
    if let Some(share) = shares.get(top).and_then(std::sync::Weak::upgrade) {
        return share;
    }
    let share = berth_egress::lookup_share(max);
    shares.insert(top.to_string(), Arc::downgrade(&share));
    share
}

impl Engine {
    /// The share of the daemon's host-name lookups that `record`'s proxy takes its own from: that of the
    /// sandbox at the top of its owners. A sandbox and the children it makes (which its session token drives)
    /// have one `--max-lookups` between them, so that they cannot hold every lookup of the daemon together.
    fn lookup_share_of(&self, record: &berth_api::Sandbox) -> berth_egress::LookupShare {
        let mut top = record.id.clone();
        let mut owner = record.owner.clone();
        // Owners are made before what they own, so the chain ends; the count only guards a damaged store.
        for _ in 0..64 {
            let Some(o) = owner else { break };
            owner = self.store.record(&o).ok().flatten().and_then(|r| r.owner);
            top = o;
        }
        let mut shares = self.lookup_shares.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        share_for(&mut shares, &top, self.bounds.max_lookups)
    }

    /// Hold a sandbox as live: its egress proxy (policy, injected secrets, authority), its redactor, the
    /// task that journals its egress, and the routing of its connections.
    pub(super) fn make_live(&self, a: super::Adopted, secrets: &[String]) -> Result<Arc<Live>, EngineError> {
        // A sandbox that runs is taken over even if its secrets cannot be read now (a missing key): it keeps
        // the environment it has; only the proxy's injections and the redaction are lost, and that is said.
        let resolved = self.resolve_secrets(secrets, Some(&a.env), a.record.tenant.as_deref()).unwrap_or_else(|e| {
            crate::log::warn(
                "cannot read a sandbox's secrets",
                serde_json::json!({"sandbox": a.record.id, "error": berth_runtime::error_chain(&e)}),
            );
            super::secrets::Resolved::default()
        });
        let (tx, attempts) = mpsc::unbounded_channel();
        let limits = berth_egress::Limits {
            max_connections: self.bounds.max_proxy_connections,
            max_pending: self.bounds.max_proxy_pending,
            max_lookups: self.bounds.max_lookups,
            ..berth_egress::Limits::default()
        };
        let mut policy = policy_of(&a.record.network)?;
        policy.closed = self.egress_closed_for(a.record.tenant.as_deref());
        let mut proxy = berth_egress::Proxy::new(policy)
            .with_limits(limits)
            .with_lookup_share(self.lookup_share_of(&a.record))
            .with_events(tx)
            .with_injections(resolved.injections)
            .map_err(|e| EngineError::invalid(e.to_string()))?;
        if let Some((cert, key)) = &a.authority {
            let ca = berth_egress::CertificateAuthority::from_pem(cert, key)
                .map_err(|e| EngineError::Storage(format!("the sandbox's proxy authority: {e}")))?;
            proxy = proxy
                .with_tls_interception(ca, &extra_roots())
                .map_err(|e| EngineError::Storage(format!("the sandbox's proxy authority: {e}")))?;
        }
        let live = Arc::new(
            Live::new(&self.root, &self.bounds, a.record, a.env, a.session, Arc::new(proxy), resolved.redactor)
                .map_err(EngineError::Log)?,
        );
        Self::log_egress(&live, attempts);
        self.route_connections(&live);
        self.watch_session(&live);
        Ok(live)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_and_its_children_take_their_lookups_from_one_share() {
        let mut shares = HashMap::new();
        let parent = share_for(&mut shares, "aaaaaaaaaaaa", 8);
        // Each of its children asks for the share of the same top.
        let children: Vec<_> = (0..8).map(|_| share_for(&mut shares, "aaaaaaaaaaaa", 8)).collect();
        assert!(children.iter().all(|c| Arc::ptr_eq(c, &parent)));
        let held = Arc::clone(&parent).try_acquire_many_owned(8).unwrap();
        assert_eq!(children[7].available_permits(), 0, "nine sandboxes, eight places between them");
        // Another top has its own.
        assert_eq!(share_for(&mut shares, "bbbbbbbbbbbb", 8).available_permits(), 8);
        drop(held);
        // Once no proxy holds a share it is forgotten, and a new one made.
        drop((parent, children));
        let fresh = share_for(&mut shares, "aaaaaaaaaaaa", 8);
        assert_eq!(fresh.available_permits(), 8);
        assert_eq!(shares.len(), 1);
    }
}
