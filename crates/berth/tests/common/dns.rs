//! A DNS server of a test's own, for a daemon that resolves through it (`Daemon::start_with_resolver`): UDP on
//! port 53 of a loopback address no other test holds, answering A questions as the test says and noting
//! every question it is asked.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What the server answers a question for a name with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// These IPv4 addresses (and no IPv6 address).
    A(Vec<Ipv4Addr>),
    /// Nothing at all, as a server that never answers: held until the server is released, then SERVFAIL.
    Never,
}

/// Says what to answer for a name (lowercase), given how many A questions for it were answered before.
type Answers = Box<dyn Fn(&str, usize) -> Answer + Send>;

struct State {
    answers: Answers,
    /// Every question asked: the name and its type (1 A, 28 AAAA).
    asked: Vec<(String, u16)>,
    /// Questions not answered yet (`Answer::Never`), and who asked.
    held: Vec<(Vec<u8>, SocketAddr)>,
}

struct Shared {
    socket: UdpSocket,
    state: Mutex<State>,
    /// Set once the held questions are answered: from then on `Never` is SERVFAIL at once.
    released: AtomicBool,
    stop: AtomicBool,
}

/// Answers every question held so far (and every later `Never` one) with SERVFAIL, so that the resolver
/// calls waiting on them return.
#[derive(Clone)]
pub struct Release(Arc<Shared>);

impl Release {
    pub fn release(&self) {
        self.0.released.store(true, Ordering::Release);
        let held = std::mem::take(&mut self.0.state.lock().unwrap().held);
        for (query, from) in held {
            if let Some(q) = question(&query) {
                let _ = self.0.socket.send_to(&reply(&query, q.end, 2, &[]), from);
            }
        }
    }
}

/// The server; it stops (releasing what it holds) when dropped.
pub struct Dns {
    addr: Ipv4Addr,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Dns {
    /// A server answering with `answers`, on port 53 of the first free address of 127.0.53.0/24.
    pub fn start(answers: impl Fn(&str, usize) -> Answer + Send + 'static) -> Dns {
        let first = std::process::id() as usize;
        let (addr, socket) = (0..254)
            .map(|i| Ipv4Addr::new(127, 0, 53, 1 + ((first + i) % 254) as u8))
            .find_map(|ip| UdpSocket::bind((ip, 53)).ok().map(|s| (ip, s)))
            .expect("no address of 127.0.53.0/24 has port 53 free");
        let state = State { answers: Box::new(answers), asked: Vec::new(), held: Vec::new() };
        let shared = Arc::new(Shared {
            socket,
            state: Mutex::new(state),
            released: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let serving = Arc::clone(&shared);
        let thread = std::thread::spawn(move || serve(&serving));
        Dns { addr, shared, thread: Some(thread) }
    }

    /// The address to name as the nameserver.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// A handle that releases what the server holds (a daemon's harness calls it before stopping the daemon).
    pub fn releaser(&self) -> Release {
        Release(Arc::clone(&self.shared))
    }

    /// Every question asked so far: name and type.
    pub fn asked(&self) -> Vec<(String, u16)> {
        self.shared.state.lock().unwrap().asked.clone()
    }

    /// The distinct names asked so far for which `pick` holds.
    pub fn names_asked(&self, pick: impl Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
        self.asked().into_iter().map(|(n, _)| n).filter(|n| pick(n)).collect()
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.releaser().release();
        self.shared.stop.store(true, Ordering::Release);
        // Wake the server's thread with an empty datagram.
        if let Ok(s) = UdpSocket::bind((self.addr, 0)) {
            let _ = s.send_to(&[], (self.addr, 53));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(shared: &Shared) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = shared.socket.recv_from(&mut buf) else { return };
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let query = &buf[..n];
        let Some(q) = question(query) else { continue };
        let mut state = shared.state.lock().unwrap();
        let before = state.asked.iter().filter(|(name, t)| *name == q.name && *t == 1).count();
        state.asked.push((q.name.clone(), q.qtype));
        let answer = (state.answers)(&q.name, before);
        let out = match answer {
            Answer::A(addrs) if q.qtype == 1 => reply(query, q.end, 0, &addrs),
            Answer::A(_) => reply(query, q.end, 0, &[]),
            Answer::Never if shared.released.load(Ordering::Acquire) => reply(query, q.end, 2, &[]),
            Answer::Never => {
                state.held.push((query.to_vec(), from));
                continue;
            }
        };
        drop(state);
        let _ = shared.socket.send_to(&out, from);
    }
}

/// The one question of a query: its name (lowercase, no trailing dot), type, and where it ends.
struct Question {
    name: String,
    qtype: u16,
    end: usize,
}

fn question(p: &[u8]) -> Option<Question> {
    if p.len() < 12 || p[2] & 0x80 != 0 || u16::from_be_bytes([p[4], p[5]]) != 1 {
        return None;
    }
    let mut labels = Vec::new();
    let mut i = 12;
    loop {
        let len = usize::from(*p.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return None;
        }
        labels.push(String::from_utf8_lossy(p.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*p.get(i)?, *p.get(i + 1)?]);
    p.get(i + 3)?;
    Some(Question { name: labels.join("."), qtype, end: i + 4 })
}

/// An answer to `query` (whose question ends at `end`) with response code `rcode` and A records `addrs`.
fn reply(query: &[u8], end: usize, rcode: u8, addrs: &[Ipv4Addr]) -> Vec<u8> {
    let mut r = Vec::with_capacity(end + 16 * addrs.len());
    r.extend_from_slice(&query[..2]);
    // A response, authoritative, recursion desired as asked; recursion available; the code.
    r.push(0x84 | (query[2] & 0x01));
    r.push(0x80 | rcode);
    r.extend_from_slice(&1u16.to_be_bytes());
    r.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&query[12..end]);
    for a in addrs {
        // The question's name (a pointer to offset 12), type A, class IN, TTL 1 s, four bytes.
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        r.extend_from_slice(&1u32.to_be_bytes());
        r.extend_from_slice(&4u16.to_be_bytes());
        r.extend_from_slice(&a.octets());
    }
    r
}
