use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use berth_egress::{Attempt, Limits, Mode, Policy, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub struct Harness {
    pub proxy: Arc<Proxy>,
    pub addr: SocketAddr,
    pub events: mpsc::UnboundedReceiver<Attempt>,
}

impl Harness {
    /// The next attempt the proxy recorded.
    pub async fn event(&mut self) -> Attempt {
        tokio::time::timeout(Duration::from_secs(5), self.events.recv()).await.expect("no attempt").expect("closed")
    }

    /// Opens a CONNECT tunnel; returns the stream and the proxy's response head.
    pub async fn connect(&self, target: &str) -> (TcpStream, String) {
        let mut s = TcpStream::connect(self.addr).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await.unwrap();
        let head = read_head(&mut s).await;
        (s, head)
    }

    /// Sends raw bytes as a request and returns everything the proxy sends back until it closes.
    pub async fn exchange(&self, request: &[u8]) -> String {
        let mut s = TcpStream::connect(self.addr).await.unwrap();
        s.write_all(request).await.unwrap();
        read_all(&mut s).await
    }
}

pub fn policy(mode: Mode, allow: &[&str], deny: &[&str], hosts: &[&str]) -> Policy {
    Policy {
        mode,
        allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
        deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
        add_hosts: hosts.iter().map(|h| (h.to_string(), "127.0.0.1".parse().unwrap())).collect::<BTreeMap<_, _>>(),
        closed: None,
    }
}

pub async fn start(policy: Policy) -> Harness {
    start_proxy(Proxy::new(policy)).await
}

pub async fn start_with_limits(policy: Policy, limits: Limits) -> Harness {
    start_proxy(Proxy::new(policy).with_limits(limits)).await
}

pub async fn start_proxy(proxy: Proxy) -> Harness {
    let (tx, events) = mpsc::unbounded_channel();
    let proxy = Arc::new(proxy.with_events(tx));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = proxy.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let proxy = serving.clone();
            tokio::spawn(async move { proxy.serve(client).await });
        }
    });
    Harness { proxy, addr, events }
}

/// A server that echoes every connection back; returns its port.
pub async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// An HTTP server that records everything each connection sent (until the client half-closes or a
/// short pause) and answers every connection with `200` and body `hello`.
pub async fn http_server() -> (u16, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(Ok(n @ 1..)) = tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await {
                    seen.extend_from_slice(&buf[..n]);
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
                let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
            });
        }
    });
    (port, rx)
}

pub async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte)).await.expect("head timed out") {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

pub async fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await.expect("no end of stream");
    String::from_utf8_lossy(&out).into_owned()
}

/// A port nothing listens on.
pub async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}
