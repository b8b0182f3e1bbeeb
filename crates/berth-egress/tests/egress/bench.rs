//! Measurements, run by hand (the figures only mean something in release mode):
//! `cargo test -p berth-egress --release --test egress -- --ignored --nocapture`

use std::time::{Duration, Instant};

use berth_egress::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// A server that reads each connection to its end, then answers one byte.
async fn sink_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(1..) = s.read(&mut buf).await {}
                let _ = s.write_all(b"!").await;
            });
        }
    });
    port
}

const ESTABLISHED: usize = b"HTTP/1.1 200 Connection Established\r\n\r\n".len();

async fn tunnel(proxy: std::net::SocketAddr, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = [0u8; ESTABLISHED];
    s.read_exact(&mut head).await.unwrap();
    assert!(head.starts_with(b"HTTP/1.1 200"));
    s
}

async fn push(mut s: TcpStream, total: usize) -> Duration {
    let chunk = vec![0u8; 256 * 1024];
    let started = Instant::now();
    let mut sent = 0;
    while sent < total {
        s.write_all(&chunk).await.unwrap();
        sent += chunk.len();
    }
    s.shutdown().await.unwrap();
    let mut done = [0u8; 1];
    s.read_exact(&mut done).await.unwrap();
    started.elapsed()
}

async fn round_trip(s: &mut TcpStream) {
    s.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --release --ignored --nocapture"]
async fn measure() {
    let sink = sink_server().await;
    let echo = echo_server().await;
    let (sink_rule, echo_rule) = (format!("127.0.0.1:{sink}"), format!("127.0.0.1:{echo}"));
    let h = start(policy(Mode::Enforce, &[&sink_rule, &echo_rule], &[], &["e.test"])).await;

    // Throughput: 1 GiB one way, best of three.
    const TOTAL: usize = 1 << 30;
    let (mut direct, mut proxied) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        let s = TcpStream::connect(("127.0.0.1", sink)).await.unwrap();
        direct = direct.min(push(s, TOTAL).await);
        let s = tunnel(h.addr, &sink_rule).await;
        proxied = proxied.min(push(s, TOTAL).await);
    }
    let gbps = |d: Duration| TOTAL as f64 / d.as_secs_f64() / 1e9;
    println!("throughput: direct {:.2} GB/s, through the proxy {:.2} GB/s", gbps(direct), gbps(proxied));

    // Added latency per connection: connect, (CONNECT and its answer,) one echoed byte. Direct and
    // proxied runs alternate so that load from elsewhere affects both alike; medians are reported.
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        let started = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", echo)).await.unwrap();
        s.set_nodelay(true).unwrap();
        round_trip(&mut s).await;
        direct.push(started.elapsed());
        let started = Instant::now();
        let mut s = tunnel(h.addr, &echo_rule).await;
        round_trip(&mut s).await;
        proxied.push(started.elapsed());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e6
    };
    let (direct, proxied) = (median(&mut direct), median(&mut proxied));
    println!(
        "connection + first byte (median): direct {direct:.1} us, through the proxy {proxied:.1} us, added {:.1} us",
        proxied - direct
    );

    // A live policy change: from the call to the client seeing its tunnel closed.
    let mut times = Vec::new();
    let allowing = policy(Mode::Enforce, &[&echo_rule], &[], &[]);
    for _ in 0..200 {
        h.proxy.set_policy(allowing.clone());
        let mut s = tunnel(h.addr, &echo_rule).await;
        round_trip(&mut s).await;
        let started = Instant::now();
        assert_eq!(h.proxy.set_policy(policy(Mode::Enforce, &[], &[], &[])), 1);
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap_or(0), 0);
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "policy change to closed tunnel: median {:.1} us, p99 {:.1} us, max {:.1} us",
        times[times.len() / 2].as_secs_f64() * 1e6,
        times[times.len() * 99 / 100].as_secs_f64() * 1e6,
        times[times.len() - 1].as_secs_f64() * 1e6
    );
}
