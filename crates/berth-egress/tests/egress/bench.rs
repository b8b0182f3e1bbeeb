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

/// A plain-HTTP server: `GET /N` is answered with N bytes of text (Content-Length framing), then closed.
async fn body_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Text like an API's answers: no secret in it, so the scan finds nothing, which is the usual case.
    let text: Vec<u8> = b"{\"id\": 12345, \"name\": \"example-item\", \"tags\": [\"a\", \"b\"], \"ok\": true}\n"
        .iter()
        .copied()
        .cycle()
        .take(256 * 1024)
        .collect();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let text = text.clone();
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let n: usize = head.split(' ').nth(1).and_then(|p| p.rsplit('/').next()?.parse().ok()).unwrap_or(0);
                let _ = s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes()).await;
                let mut left = n;
                while left > 0 {
                    let take = left.min(text.len());
                    if s.write_all(&text[..take]).await.is_err() {
                        return;
                    }
                    left -= take;
                }
            });
        }
    });
    port
}

/// One plain-HTTP request through the proxy; returns how many bytes came back.
async fn get(proxy: std::net::SocketAddr, authority: &str, n: usize) -> usize {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.set_nodelay(true).unwrap();
    let request = format!("GET http://{authority}/{n} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    while let Ok(k @ 1..) = s.read(&mut buf).await {
        total += k;
    }
    total
}

/// The cost of searching responses for an injected secret: the same server under two names, one that a
/// secret goes to (its responses are searched) and one that none does (its responses are copied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --release --ignored --nocapture"]
async fn measure_response_search() {
    let port = body_server().await;
    let (searched, copied) = (format!("secret.test:{port}"), format!("plain.test:{port}"));
    let injection = berth_egress::Injection {
        host_rule: searched.parse().unwrap(),
        placeholder: "berth-secret-TOKEN-0123456789".into(),
        value: "s3cr3t-value-9f8e7d6c-0123456789abcdef".into(),
        header: Some("Authorization".into()),
        intercept_tls: false,
    };
    let policy = policy(Mode::Enforce, &[&searched, &copied], &[], &["secret.test", "plain.test"]);
    let h = start_proxy(berth_egress::Proxy::new(policy).with_injections(vec![injection]).unwrap()).await;

    // Throughput: a 256 MiB body, best of five each, alternating.
    const TOTAL: usize = 256 << 20;
    let (mut plain, mut search) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let started = Instant::now();
        assert!(get(h.addr, &copied, TOTAL).await > TOTAL);
        plain = plain.min(started.elapsed());
        let started = Instant::now();
        assert!(get(h.addr, &searched, TOTAL).await > TOTAL);
        search = search.min(started.elapsed());
    }
    let gbps = |d: Duration| TOTAL as f64 / d.as_secs_f64() / 1e9;
    println!("response throughput: copied {:.2} GB/s, searched {:.2} GB/s", gbps(plain), gbps(search));

    // Per request: a 100-byte answer, 2000 requests each, alternating; medians.
    let (mut plain, mut search) = (Vec::new(), Vec::new());
    for _ in 0..2000 {
        let started = Instant::now();
        get(h.addr, &copied, 100).await;
        plain.push(started.elapsed());
        let started = Instant::now();
        get(h.addr, &searched, 100).await;
        search.push(started.elapsed());
    }
    let at = |v: &mut Vec<Duration>, q: usize| {
        v.sort();
        v[v.len() * q / 100].as_secs_f64() * 1e6
    };
    let (p50, s50) = (at(&mut plain, 50), at(&mut search, 50));
    let (p90, s90) = (at(&mut plain, 90), at(&mut search, 90));
    println!("small request, median: copied {p50:.1} us, searched {s50:.1} us, added {:.1} us", s50 - p50);
    println!("small request, p90: copied {p90:.1} us, searched {s90:.1} us, added {:.1} us", s90 - p90);
}
