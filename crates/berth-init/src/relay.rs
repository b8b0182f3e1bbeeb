//! Connections init relays itself: where no descriptor can leave the sandbox (gVisor), a connection init
//! accepts on the proxy or API port waits here, numbered, until the supervisor sends the socket that stands
//! for it outside; then two small threads copy the bytes between them, one each way.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// Most connections waiting for the supervisor's socket at once (the supervisor serves at most as many per
/// sandbox): past it a new connection is closed at once.
pub const MAX_WAITING: usize = 256;

/// A copying thread needs little: one buffer, no recursion.
const STACK: usize = 128 * 1024;
const BUFFER: usize = 32 * 1024;

/// Accepted connections not yet joined to a socket of the supervisor's.
#[derive(Default)]
pub struct Waiting {
    next: u64,
    conns: HashMap<u64, TcpStream>,
}

impl Waiting {
    /// Keep `conn` until its other end comes; its number, or `None` (and it is closed) when too many wait.
    pub fn add(&mut self, conn: TcpStream) -> Option<u64> {
        if self.conns.len() >= MAX_WAITING {
            return None;
        }
        self.next += 1;
        self.conns.insert(self.next, conn);
        Some(self.next)
    }

    /// Join connection `id` to `outside` and start copying. An unknown number, or a descriptor that is not a
    /// stream socket, is refused (the descriptor is closed).
    pub fn join(&mut self, id: u64, outside: OwnedFd) -> Result<(), String> {
        let conn = self.conns.remove(&id).ok_or_else(|| format!("no connection {id} waits for its other end"))?;
        let kind = rustix::net::sockopt::socket_type(&outside).map_err(|e| format!("connection {id}: {e}"))?;
        if kind != rustix::net::SocketType::STREAM {
            return Err(format!("connection {id}: its other end is not a stream socket"));
        }
        join(conn, UnixStream::from(outside), TcpStream::try_clone, |c| c.shutdown(Shutdown::Write))
            .map_err(|e| format!("connection {id}: {e}"))
    }
}

/// Connect to the unix socket at `path` and copy between it and `outside` (see `Request::Connect`).
pub fn connect(path: &str, outside: OwnedFd) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    let inside = UnixStream::connect(path).map_err(|e| format!("connect to {path}: {e}"))?;
    join(inside, UnixStream::from(outside), UnixStream::try_clone, |i| i.shutdown(Shutdown::Write))
        .map_err(|e| format!("connect to {path}: {e}"))
}

/// Connect to `127.0.0.1:port` inside the sandbox and copy between it and `outside` (see
/// `Request::ConnectPort`).
pub fn connect_port(port: u16, outside: OwnedFd) -> Result<(), String> {
    if port == 0 {
        return Err("port 0 is not a port to connect to".into());
    }
    let inside = TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
        .map_err(|e| format!("connect to 127.0.0.1:{port} inside the sandbox: {e}"))?;
    join(inside, UnixStream::from(outside), TcpStream::try_clone, |i| i.shutdown(Shutdown::Write))
        .map_err(|e| format!("connect to port {port}: {e}"))
}

/// Copy both ways between `inside` (a connection in the sandbox, cloned with `dup` and half-closed with
/// `finish`) and `outside`, the supervisor's socket, a thread each way, until both sides have finished.
fn join<S>(
    inside: S,
    outside: UnixStream,
    dup: fn(&S) -> std::io::Result<S>,
    finish: fn(&S) -> std::io::Result<()>,
) -> Result<(), String>
where
    S: Read + Send + 'static,
    for<'a> &'a S: Write,
{
    let (inside_in, outside_in) = match (dup(&inside), outside.try_clone()) {
        (Ok(i), Ok(o)) => (i, o),
        _ => return Err("out of descriptors".into()),
    };
    spawn_copy(outside_in, inside_in, finish)?;
    // Without the second thread the connection still ends: its descriptors are dropped with the closure,
    // and the first thread's reads and writes fail.
    spawn_copy::<S, UnixStream, _>(inside, outside, |o: &UnixStream| o.shutdown(Shutdown::Write))
}

/// Copy from `from` to `to` on a thread of its own until the end of `from` or an error; then `finish(to)`.
pub fn spawn_copy<R, W, F>(from: R, to: W, finish: F) -> Result<(), String>
where
    R: Read + Send + 'static,
    W: Send + 'static,
    for<'a> &'a W: Write,
    F: FnOnce(&W) -> std::io::Result<()> + Send + 'static,
{
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || copy(from, &to, finish))
        .map(|_| ())
        .map_err(|_| "no thread to copy it".to_string())
}

/// Copy from `from` to `to` until the end of `from` or an error, then `finish(to)` (for a socket, finish its
/// writing side: the other direction may go on, and a request half-closed still gets its answer). Plain reads
/// and writes, never a splice: each write moves an offset `to` shares with others at once.
pub fn copy<R: Read, W>(mut from: R, mut to: &W, finish: impl FnOnce(&W) -> std::io::Result<()>)
where
    for<'a> &'a W: Write,
{
    let mut buf = vec![0u8; BUFFER];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = finish(to);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_port_connect_reaches_a_loopback_listener_and_a_closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        connect_port(port, OwnedFd::from(theirs)).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        ours.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        conn.write_all(b"pong").unwrap();
        ours.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
        drop(listener);
        let (_ours, theirs) = UnixStream::pair().unwrap();
        let refused = connect_port(port, OwnedFd::from(theirs)).unwrap_err();
        assert!(refused.contains(&format!("127.0.0.1:{port}")), "{refused}");
    }

    #[test]
    fn a_joined_connection_carries_bytes_both_ways_and_half_closes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (conn, _) = listener.accept().unwrap();
        let mut waiting = Waiting::default();
        let id = waiting.add(conn).unwrap();
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        waiting.join(id, OwnedFd::from(theirs)).unwrap();
        client.write_all(b"ping").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        ours.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"ping", "the client's bytes and its end reach the outside");
        ours.write_all(b"pong").unwrap();
        drop(ours);
        let mut back = Vec::new();
        client.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"pong", "the answer after the half-close comes back");
    }

    #[test]
    fn an_unknown_number_or_a_datagram_socket_is_refused() {
        let mut waiting = Waiting::default();
        let (_ours, theirs) = UnixStream::pair().unwrap();
        assert!(waiting.join(7, OwnedFd::from(theirs)).unwrap_err().contains("no connection 7"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let id = waiting.add(listener.accept().unwrap().0).unwrap();
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        assert!(waiting.join(id, OwnedFd::from(a)).unwrap_err().contains("not a stream socket"));
        assert!(waiting.conns.is_empty(), "a refused join leaves nothing waiting");
    }

    #[test]
    fn a_connect_reaches_a_unix_socket_inside() {
        let dir = std::env::temp_dir().join(format!("berth-init-connect-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        connect(dir.to_str().unwrap(), OwnedFd::from(theirs)).unwrap();
        let (mut served, _) = listener.accept().unwrap();
        ours.write_all(b"ask").unwrap();
        ours.shutdown(Shutdown::Write).unwrap();
        let mut asked = Vec::new();
        served.read_to_end(&mut asked).unwrap();
        assert_eq!(asked, b"ask");
        served.write_all(b"answer").unwrap();
        drop(served);
        let mut answer = Vec::new();
        ours.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"answer");
        let _ = std::fs::remove_file(&dir);
        let (_ours, theirs) = UnixStream::pair().unwrap();
        assert!(connect("relative", OwnedFd::from(theirs)).unwrap_err().contains("not an absolute path"));
    }

    #[test]
    fn past_the_cap_a_connection_is_closed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut waiting = Waiting::default();
        let mut clients = Vec::new();
        for _ in 0..MAX_WAITING {
            clients.push(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
            assert!(waiting.add(listener.accept().unwrap().0).is_some());
        }
        let mut last = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(waiting.add(listener.accept().unwrap().0).is_none());
        let mut buf = [0u8; 1];
        assert_eq!(last.read(&mut buf).unwrap(), 0, "the connection past the cap is closed");
    }
}
