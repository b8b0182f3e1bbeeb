//! The per-sandbox proxy: one request per client connection, judged, connected, relayed and recorded.
//!
//! The policy and the table of open connections sit behind one lock. A connection registers itself and
//! re-checks the current policy under that lock, and a policy change swaps the policy and sweeps the table
//! under it too, so no connection can slip between an old policy and a new one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::addr::special_kind;
use crate::answer;
use crate::attempt::{Attempt, Method, Verdict};
use crate::head::{self, HeadError, Target};
use berth_secrets::Redactor;

use crate::inject::{Injection, InjectionError};
use crate::policy::{Decision, Policy};
use crate::relay::Counters;
use crate::rule::{Host, Rule};
use crate::tls::{CertificateAuthority, Interceptor, TlsError};
use crate::upstream::{self, Failure};

/// Caps and deadlines that keep a hostile client from holding the proxy's memory or tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head accepted (answered with 431 beyond it).
    pub max_head: usize,
    /// Time for the whole request head to arrive (answered with 408 after it).
    pub head_timeout: Duration,
    /// Time to resolve and connect to the destination (answered with 504 after it).
    pub connect_timeout: Duration,
    /// Largest TLS ClientHello read before a tunnel is judged (refused beyond it).
    pub max_client_hello: usize,
    /// Time for a ClientHello to arrive in full once it has started (refused after it).
    pub hello_timeout: Duration,
    /// Most client connections served at once (answered with 503 beyond it).
    pub max_connections: usize,
    /// Most client connections still sending their request head (answered with 503 beyond it).
    pub max_pending: usize,
    /// Most host-name lookups in progress at once for this proxy, or for every proxy given its share with
    /// [`Proxy::with_lookup_share`] (further ones wait their turn).
    pub max_lookups: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head: 64 * 1024,
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            max_client_hello: 16 * 1024,
            hello_timeout: Duration::from_secs(10),
            max_connections: 128,
            max_pending: 32,
            max_lookups: 8,
        }
    }
}

/// An open, allowed connection, as [`Proxy::open_connections`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpenConnection {
    pub id: u64,
    pub host: String,
    pub port: u16,
    /// The address the proxy connected to.
    pub address: IpAddr,
    pub method: Method,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

type Sink = Box<dyn Fn(Attempt) + Send + Sync>;

/// The egress proxy of one sandbox. Share it in an `Arc`; call [`Proxy::serve`] for each accepted client.
pub struct Proxy {
    state: Mutex<State>,
    pub(crate) limits: Limits,
    sink: Option<Sink>,
    pub(crate) injections: Vec<Injection>,
    /// Redactors for the sets of injections that apply to a destination, by their indices: building one
    /// costs more than a small request, so each set is built once.
    searchers: Mutex<HashMap<Vec<usize>, Redactor>>,
    pub(crate) tls: Option<Interceptor>,
    next_id: AtomicU64,
    /// Client connections being served, and those of them still sending their request head.
    serving: Arc<AtomicUsize>,
    pending: Arc<AtomicUsize>,
    /// This proxy's share of the process's host-name lookups.
    lookups: Arc<tokio::sync::Semaphore>,
}

/// One place of a counted, bounded number (a connection served, a head awaited), given back when dropped.
struct Place(Arc<AtomicUsize>);

impl Place {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Place> {
        let taken = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        taken.ok().map(|_| Place(Arc::clone(count)))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

struct State {
    policy: Arc<Policy>,
    open: HashMap<u64, Open>,
}

struct Open {
    host: Host,
    port: u16,
    address: IpAddr,
    method: Method,
    started: Instant,
    counters: Arc<Counters>,
    /// Taken when a policy change closes the connection: the decision that closed it.
    close: Option<oneshot::Sender<Decision>>,
}

/// An upstream connection that passed every check and is in the table until this is dropped.
pub(crate) struct Upstream<'a> {
    pub stream: TcpStream,
    pub registration: Registration<'a>,
    pub closed: oneshot::Receiver<Decision>,
}

pub(crate) struct Registration<'a> {
    proxy: &'a Proxy,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.proxy.lock().open.remove(&self.id);
    }
}

const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many sets of injections keep a prepared redactor.
const MAX_SEARCHERS: usize = 64;
const LINGER: Duration = Duration::from_millis(500);

/// A share of the process's host-name lookups, which several proxies may take theirs from.
pub type LookupShare = Arc<tokio::sync::Semaphore>;

/// A share of `max` of the process's host-name lookups.
pub fn lookup_share(max: usize) -> LookupShare {
    Arc::new(tokio::sync::Semaphore::new(max))
}

impl Proxy {
    /// A proxy enforcing `policy`, with default limits, no event sink and no injections.
    pub fn new(policy: Policy) -> Proxy {
        Proxy {
            state: Mutex::new(State { policy: Arc::new(policy), open: HashMap::new() }),
            limits: Limits::default(),
            sink: None,
            injections: Vec::new(),
            searchers: Mutex::new(HashMap::new()),
            tls: None,
            next_id: AtomicU64::new(1),
            serving: Arc::new(AtomicUsize::new(0)),
            pending: Arc::new(AtomicUsize::new(0)),
            lookups: Arc::new(tokio::sync::Semaphore::new(Limits::default().max_lookups)),
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> Proxy {
        self.lookups = Arc::new(tokio::sync::Semaphore::new(limits.max_lookups));
        self.limits = limits;
        self
    }

    /// Take host-name lookups from `share` (made by [`lookup_share`]) instead of a share of its own, so
    /// that several proxies (a sandbox's and its children's) have `max_lookups` between them.
    pub fn with_lookup_share(mut self, share: LookupShare) -> Proxy {
        self.lookups = share;
        self
    }

    /// Calls `sink` with every [`Attempt`]. It runs on the connection's task: it should not block.
    pub fn with_sink(mut self, sink: impl Fn(Attempt) + Send + Sync + 'static) -> Proxy {
        self.sink = Some(Box::new(sink));
        self
    }

    /// Sends every [`Attempt`] on `events` (dropped silently once the receiver is gone).
    pub fn with_events(self, events: mpsc::UnboundedSender<Attempt>) -> Proxy {
        self.with_sink(move |attempt| {
            let _ = events.send(attempt);
        })
    }

    /// Secrets to write into plain-HTTP requests to matching hosts (see [`Injection`]).
    pub fn with_injections(mut self, injections: Vec<Injection>) -> Result<Proxy, InjectionError> {
        for injection in &injections {
            injection.validate()?;
        }
        self.injections = injections;
        Ok(self)
    }

    /// Lets injections with `intercept_tls` reach HTTPS requests: tunnels to their hosts are terminated
    /// with certificates from `ca` (which the sandbox must trust), and the real hosts are verified against
    /// the Mozilla roots plus `extra_roots` (DER certificates, for private services).
    pub fn with_tls_interception(
        mut self,
        ca: CertificateAuthority,
        extra_roots: &[Vec<u8>],
    ) -> Result<Proxy, TlsError> {
        self.tls = Some(Interceptor::new(ca, extra_roots)?);
        Ok(self)
    }

    /// A redactor for the values of every injection whose rule matches `host:port` (whether it goes over
    /// HTTPS or plain HTTP): what responses from there are searched for. `None` when no secret goes there.
    pub(crate) fn searcher(&self, host: &Host, port: u16) -> Option<Redactor> {
        let held: Vec<usize> =
            self.injections.iter().enumerate().filter(|(_, i)| i.applies_to(host, port)).map(|(n, _)| n).collect();
        if held.is_empty() {
            return None;
        }
        let mut cache = self.searchers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(r) = cache.get(&held) {
            return Some(r.clone());
        }
        let injections: Vec<&Injection> = held.iter().map(|&n| &self.injections[n]).collect();
        let built = crate::reflect::redactor(&injections);
        // Glob rules could make many sets in principle; past a few, they are built each time.
        if cache.len() < MAX_SEARCHERS {
            cache.insert(held, built.clone());
        }
        Some(built)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing holding this lock can leave the state half-changed, so a poisoned lock is still sound.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.lock().policy.clone()
    }

    /// Replaces the policy's rules and closes every open connection it no longer allows (judged on the host
    /// asked for and the address connected to). Egress closed by [`Proxy::close`] stays closed. Returns how
    /// many were closed.
    pub fn set_policy(&self, policy: Policy) -> usize {
        self.update(|p| {
            let closed = p.closed.take();
            *p = Policy { closed, ..policy };
        })
    }

    /// Refuses every destination for `why` (closing every open connection), or with None opens egress to
    /// what the rules allow again. Returns how many connections were closed.
    pub fn close(&self, why: Option<String>) -> usize {
        self.update(|p| p.closed = why)
    }

    /// Adds an allow rule (if absent). Allowing more closes nothing; the next connection sees the rule.
    /// Returns how many connections were closed (0).
    pub fn allow(&self, rule: Rule) -> usize {
        self.update(|p| {
            if !p.allow.contains(&rule) {
                p.allow.push(rule);
            }
        })
    }

    /// Adds a deny rule (if absent) and closes the open connections it matches. Returns how many.
    pub fn deny(&self, rule: Rule) -> usize {
        self.update(|p| {
            if !p.deny.contains(&rule) {
                p.deny.push(rule);
            }
        })
    }

    fn update(&self, change: impl FnOnce(&mut Policy)) -> usize {
        let mut state = self.lock();
        let mut policy = Policy::clone(&state.policy);
        change(&mut policy);
        state.policy = Arc::new(policy);
        let State { policy, open } = &mut *state;
        let mut closed = 0;
        for conn in open.values_mut() {
            if conn.close.is_none() {
                continue;
            }
            let decision = policy.judge_open(&conn.host, conn.port, conn.address);
            if !decision.allowed
                && let Some(close) = conn.close.take()
            {
                let _ = close.send(decision);
                closed += 1;
            }
        }
        closed
    }

    /// Client connections being served now, and how many of them are still sending their request head.
    pub fn clients(&self) -> (usize, usize) {
        (self.serving.load(Ordering::Acquire), self.pending.load(Ordering::Acquire))
    }

    /// The connections open now.
    pub fn open_connections(&self) -> Vec<OpenConnection> {
        let state = self.lock();
        let mut list: Vec<OpenConnection> = state
            .open
            .iter()
            .map(|(&id, c)| OpenConnection {
                id,
                host: c.host.to_string(),
                port: c.port,
                address: c.address,
                method: c.method,
                bytes_up: c.counters.up.load(Ordering::Relaxed),
                bytes_down: c.counters.down.load(Ordering::Relaxed),
                duration_ms: millis(c.started.elapsed()),
            })
            .collect();
        list.sort_by_key(|c| c.id);
        list
    }

    /// Serves one client connection: reads its request, judges it, and relays it if allowed. Returns when
    /// the connection is over, after emitting its [`Attempt`].
    pub async fn serve(self: &Arc<Self>, mut client: TcpStream) {
        let started = Instant::now();
        let _ = client.set_nodelay(true);
        let counters = Arc::new(Counters::default());
        let mut attempt = Attempt {
            time_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(millis).unwrap_or(0),
            host: String::new(),
            port: 0,
            method: Method::Http,
            verdict: Verdict::Error,
            rule: None,
            reason: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            client_port: client.peer_addr().map(|a| a.port()).unwrap_or(0),
        };
        let linger = match Place::take(&self.serving, self.limits.max_connections) {
            Some(_serving) => self.handle(&mut client, &mut attempt, &counters).await,
            None => {
                let why = format!(
                    "the sandbox has {} connections open through its proxy, the most it may have",
                    self.limits.max_connections
                );
                self.over(&mut client, &mut attempt, why).await
            }
        };
        attempt.bytes_up = counters.up.load(Ordering::Relaxed);
        attempt.bytes_down = counters.down.load(Ordering::Relaxed);
        attempt.duration_ms = millis(started.elapsed());
        if let Some(sink) = &self.sink {
            sink(attempt);
        }
        if linger {
            drain(client).await;
        }
    }

    /// Answer a connection past one of the proxy's bounds with a 503 (and record why).
    async fn over(&self, client: &mut TcpStream, a: &mut Attempt, why: String) -> bool {
        a.reason = why;
        answer(client, &answer::failed(503, None, "connection_limit_reached", &a.reason)).await;
        true
    }

    /// Returns true when the proxy answered the client itself and should read out what it still sends.
    async fn handle(&self, client: &mut TcpStream, a: &mut Attempt, counters: &Arc<Counters>) -> bool {
        let Some(waiting) = Place::take(&self.pending, self.limits.max_pending) else {
            let why = format!(
                "the sandbox has {} connections still sending their request head to its proxy, the most it may have",
                self.limits.max_pending
            );
            return self.over(client, a, why).await;
        };
        let read = head::read_head(client, self.limits.max_head, self.limits.head_timeout).await;
        drop(waiting);
        let (head, early) = match read {
            Ok(read) => read,
            Err(e) => {
                a.reason = e.reason();
                let (status, kind) = match e {
                    HeadError::TooLarge(_) => (431, "http_request_error"),
                    HeadError::TimedOut(_) => (408, "http_request_error"),
                    HeadError::Closed(_) | HeadError::Io(_) => return false,
                };
                answer(client, &answer::failed(status, None, kind, &a.reason)).await;
                return true;
            }
        };
        let request = head::parse(&head).and_then(|req| head::target(&req).map(|t| (req, t)));
        let (req, target) = match request {
            Ok(parsed) => parsed,
            Err(why) => {
                a.method = if head.starts_with(b"CONNECT ") { Method::Connect } else { Method::Http };
                a.reason = why;
                answer(client, &answer::failed(400, None, "http_request_error", &a.reason)).await;
                return true;
            }
        };
        match target {
            Target::Tunnel { host, port } => {
                (a.method, a.host, a.port) = (Method::Connect, host.to_string(), port);
                crate::connect::handle(self, client, early, &host, port, a, counters).await
            }
            Target::Absolute { host, port, authority, path } => {
                (a.method, a.host, a.port) = (Method::Http, host.to_string(), port);
                let target = crate::http::Dest { host: &host, port, authority: &authority, path: &path };
                crate::http::handle(self, client, &req, early, target, a, counters).await
            }
        }
    }

    /// Judges `host:port` by name, resolves, checks the addresses, connects and registers the connection.
    /// On `None` the client has been answered and `a` says why.
    pub(crate) async fn connect_upstream(
        &self,
        client: &mut TcpStream,
        a: &mut Attempt,
        host: &Host,
        port: u16,
        method: Method,
        counters: &Arc<Counters>,
    ) -> Option<Upstream<'_>> {
        let dest = host.with_port(port);
        let policy = self.policy();
        let decision = policy.decide_host(host, port);
        if !decision.allowed {
            refuse(client, a, &dest, decision).await;
            return None;
        }
        let opened = upstream::open(&policy, host, port, self.limits.connect_timeout, &self.lookups).await;
        let (stream, address, check) = match opened {
            Ok(opened) => opened,
            Err(Failure::Denied(d)) => {
                refuse(client, a, &dest, d).await;
                return None;
            }
            Err(Failure::Error(status, kind, why)) => {
                (a.verdict, a.rule, a.reason) = (Verdict::Error, decision.rule, why);
                answer(client, &answer::failed(status, Some(&dest), kind, &a.reason)).await;
                return None;
            }
        };
        let registered = {
            let mut state = self.lock();
            let now = state.policy.judge_open(host, port, address);
            if now.allowed {
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let (close, closed) = oneshot::channel();
                let started = Instant::now();
                let counters = counters.clone();
                let open = Open { host: host.clone(), port, address, method, started, counters, close: Some(close) };
                state.open.insert(id, open);
                Ok((Registration { proxy: self, id }, closed))
            } else {
                Err(now)
            }
        };
        let (registration, closed) = match registered {
            Ok(registered) => registered,
            Err(now) => {
                refuse(client, a, &dest, now).await;
                return None;
            }
        };
        a.verdict = Verdict::Allowed;
        a.rule = decision.rule.or(check.rule.clone());
        a.reason = match special_kind(address) {
            Some(_) => format!("{}; {}", decision.reason, check.reason),
            None => decision.reason,
        };
        Some(Upstream { stream, registration, closed })
    }
}

/// Records a policy change that closed a connection.
pub(crate) fn closed_by_change(a: &mut Attempt, d: Decision) {
    a.verdict = Verdict::Denied;
    a.rule = d.rule;
    a.reason = format!("closed by a policy change: {}", d.reason);
}

/// Answers a refusal with a 403 and records it.
pub(crate) async fn refuse(client: &mut TcpStream, a: &mut Attempt, dest: &str, d: Decision) {
    (a.verdict, a.rule, a.reason) = (Verdict::Denied, d.rule, d.reason);
    answer(client, &answer::denied(dest, a.rule.as_deref(), &a.reason)).await;
}

/// Writes the proxy's own answer; a client that does not read it is not waited for long.
pub(crate) async fn answer(client: &mut TcpStream, bytes: &[u8]) {
    let _ = tokio::time::timeout(WRITE_TIMEOUT, client.write_all(bytes)).await;
}

/// Closes our side and reads out what the client still sends for a moment, so that closing with unread
/// data does not reset the connection before the client has read the answer.
async fn drain(mut client: TcpStream) {
    let _ = client.shutdown().await;
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0usize;
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n @ 1..) = client.read(&mut buf).await {
            total += n;
            if total > 1 << 20 {
                break;
            }
        }
    })
    .await;
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn proxies_given_one_lookup_share_have_its_places_between_them() {
        let share = lookup_share(2);
        let limits = Limits { max_lookups: 2, ..Limits::default() };
        let parent = Proxy::new(Policy::default()).with_limits(limits.clone()).with_lookup_share(Arc::clone(&share));
        let child = Proxy::new(Policy::default()).with_limits(limits.clone()).with_lookup_share(Arc::clone(&share));
        let other = Proxy::new(Policy::default()).with_limits(limits);
        // The parent's lookups take every place; its child has none left, another proxy all of its own.
        let held = Arc::clone(&parent.lookups).try_acquire_many_owned(2).unwrap();
        assert_eq!(child.lookups.available_permits(), 0);
        assert!(Arc::clone(&child.lookups).try_acquire_owned().is_err());
        assert_eq!(other.lookups.available_permits(), 2);
        drop(held);
        assert_eq!(child.lookups.available_permits(), 2);
    }
}
