//! The daemon's side of one sandbox's init control socket: requests go out, events are routed to whoever
//! waits for them (one receiver per exec).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use berth_init::protocol::{self, Event, Request};
use tokio::io::Interest;
use tokio::net::UnixDatagram;
use tokio::sync::mpsc;

use crate::EngineError;

/// Takes a connection init accepted: the port it came to, and the socket.
pub type ConnectionHandler = Box<dyn Fn(u16, OwnedFd) + Send + Sync>;

pub struct Session {
    /// The control socket (`SOCK_SEQPACKET`), registered with tokio through a datagram socket wrapper: only
    /// its readiness is used; messages and descriptors go through berth's own send/recv.
    control: UnixDatagram,
    waiters: Mutex<HashMap<u64, mpsc::UnboundedSender<Event>>>,
    /// The last events for request ids nobody waits for yet: a command woken from hibernation may end
    /// before its exec is registered again (see [`Session::register_as`]).
    unclaimed: Mutex<std::collections::VecDeque<Event>>,
    next: AtomicU64,
    /// Set when init hung up: the sandbox has ended (its shim tears it down).
    closed: tokio::sync::watch::Sender<bool>,
    /// What takes the connections init accepted (they are dropped, and so closed, when nothing does). Called
    /// on the task that reads the control socket: it must only hand the connection on.
    connections: Mutex<Option<ConnectionHandler>>,
}

impl Session {
    /// Take over an init control socket and start routing its events.
    pub fn start(control: OwnedFd) -> Result<Arc<Session>, EngineError> {
        berth_sys::fd::set_nonblocking(&control, true)?;
        let control = UnixDatagram::from_std(std::os::unix::net::UnixDatagram::from(control))
            .map_err(|e| berth_sys::SysError::new("watch the control socket", e))?;
        let session = Arc::new(Session {
            control,
            waiters: Mutex::new(HashMap::new()),
            unclaimed: Mutex::new(std::collections::VecDeque::new()),
            next: AtomicU64::new(first_request_id()),
            closed: tokio::sync::watch::Sender::new(false),
            connections: Mutex::new(None),
        });
        tokio::spawn(Arc::clone(&session).route());
        Ok(session)
    }

    /// A new request id (unique across daemon restarts) and the channel its events arrive on.
    pub fn register(&self) -> (u64, mpsc::UnboundedReceiver<Event>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut w) = self.waiters.lock() {
            w.insert(id, tx);
        }
        (id, rx)
    }

    /// The channel of request `id`, made by an earlier session with the same init (an exec that outlived a
    /// hibernation): its events, those that came before this call included, arrive on it.
    pub fn register_as(&self, id: u64) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let (Ok(mut w), Ok(mut kept)) = (self.waiters.lock(), self.unclaimed.lock()) {
            kept.retain(|ev| match ev {
                Event::Started { id: i, .. }
                | Event::Failed { id: i, .. }
                | Event::OverMemory { id: i, .. }
                | Event::Exited { id: i, .. }
                    if *i == id =>
                {
                    let _ = tx.send(ev.clone());
                    false
                }
                _ => true,
            });
            w.insert(id, tx);
        }
        rx
    }

    pub fn unregister(&self, id: u64) {
        if let Ok(mut w) = self.waiters.lock() {
            w.remove(&id);
        }
    }

    pub fn send(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(), EngineError> {
        protocol::send(self.control.as_fd(), req, fds).map_err(|_| EngineError::InitGone)
    }

    /// Read events until init hangs up; then every waiter's channel closes.
    async fn route(self: Arc<Self>) {
        let mut buf = vec![0u8; protocol::MAX_MESSAGE];
        loop {
            if self.control.readable().await.is_err() {
                break;
            }
            let got = self.control.try_io(Interest::READABLE, || {
                berth_sys::fd::recv(self.control.as_fd(), &mut buf).map_err(|e| {
                    if e.errno() == Some(rustix::io::Errno::AGAIN.raw_os_error()) {
                        std::io::ErrorKind::WouldBlock.into()
                    } else {
                        std::io::Error::other(e)
                    }
                })
            });
            let (n, mut fds) = match got {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) | Ok((0, _)) => break,
                Ok(r) => r,
            };
            let Ok(event) = serde_json::from_slice::<Event>(&buf[..n]) else { continue };
            if let Event::Connection { port, relay } = event {
                let fd = match relay {
                    None => fds.pop(),
                    Some(relay) => self.relay(relay),
                };
                if let (Some(fd), Ok(c)) = (fd, self.connections.lock())
                    && let Some(handle) = c.as_ref()
                {
                    handle(port, fd);
                }
                continue;
            }
            let target = match &event {
                Event::Started { id, .. }
                | Event::Failed { id, .. }
                | Event::OverMemory { id, .. }
                | Event::Exited { id, .. }
                | Event::Watching { id }
                | Event::Unwatched { id, .. } => Some(*id),
                _ => None,
            };
            if let (Some(id), Ok(w)) = (target, self.waiters.lock()) {
                match w.get(&id) {
                    Some(tx) => {
                        let _ = tx.send(event);
                    }
                    None => {
                        if let Ok(mut kept) = self.unclaimed.lock() {
                            if kept.len() >= UNCLAIMED {
                                kept.pop_front();
                            }
                            kept.push_back(event);
                        }
                    }
                }
            }
        }
        if let Ok(mut w) = self.waiters.lock() {
            w.clear();
        }
        self.closed.send_replace(true);
    }

    /// The daemon's end of a connection init relays: a stream socket whose other end goes to init with a
    /// `relay` request. (Its address is no TCP address: what asks a connection for its peer gets an error.)
    /// With nobody to take the connection, init still gets its socket, whose end it reads at once.
    fn relay(&self, relay: u64) -> Option<OwnedFd> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().ok()?;
        self.send(&Request::Relay { relay }, &[theirs.as_fd()]).ok()?;
        Some(OwnedFd::from(ours))
    }

    /// Hand the connections init accepts from now on to `handler`.
    pub fn on_connection(&self, handler: ConnectionHandler) {
        if let Ok(mut c) = self.connections.lock() {
            *c = Some(handler);
        }
    }

    /// Whether init has hung up (the sandbox ended on its own).
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Returns once init has hung up.
    pub async fn closed(&self) {
        let _ = self.closed.subscribe().wait_for(|closed| *closed).await;
    }
}

/// Most events kept for request ids nobody waits for.
const UNCLAIMED: usize = 64;

/// Request ids start from the clock (in microseconds), so a restarted daemon never reuses the id of a
/// request a previous daemon made to the same init, whose events could otherwise be taken for its own.
fn first_request_id() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_of_a_request_nobody_waits_for_yet_are_kept_for_it() {
        let (ours, init) = berth_sys::fd::seqpacket_pair().unwrap();
        let session = Session::start(ours).unwrap();
        let exited = Event::Exited { id: 7, code: Some(3), signal: None };
        protocol::send(init.as_fd(), &exited, &[]).unwrap();
        protocol::send(init.as_fd(), &Event::Exited { id: 8, code: Some(0), signal: None }, &[]).unwrap();
        // The router has read them (it reads in order) once a request's event after them reached its waiter.
        let (num, mut later) = session.register();
        protocol::send(init.as_fd(), &Event::Started { id: num, pid: 2 }, &[]).unwrap();
        assert!(matches!(later.recv().await, Some(Event::Started { pid: 2, .. })));
        let mut rx = session.register_as(7);
        assert_eq!(rx.recv().await, Some(exited));
        protocol::send(init.as_fd(), &Event::Exited { id: 7, code: None, signal: Some(9) }, &[]).unwrap();
        assert_eq!(rx.recv().await, Some(Event::Exited { id: 7, code: None, signal: Some(9) }));
        assert_eq!(session.unclaimed.lock().unwrap().len(), 1, "another request's event is still kept");
    }
}
