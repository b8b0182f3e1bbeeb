//! The proxy's bounds on one sandbox's clients: connections served at once, and connections still sending
//! their request head. Past either, a client is answered 503 with the reason, and the attempt is recorded.

use std::time::Duration;

use berth_egress::{Limits, Mode, Verdict};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::*;

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_connection_bound_a_client_gets_a_503_that_says_why() {
    let port = echo_server().await;
    let rule = format!("echo.test:{port}");
    let limits = Limits { max_connections: 2, ..Limits::default() };
    let mut h = start_with_limits(policy(Mode::Enforce, &[&rule], &[], &["echo.test"]), limits).await;
    let target = format!("echo.test:{port}");
    let (first, head) = h.connect(&target).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let (_second, head) = h.connect(&target).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(h.proxy.clients().0, 2);

    let (_, head) = h.connect(&target).await;
    assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{head}");
    assert!(head.contains("X-Berth-Egress: error; reason=\"the sandbox has 2 connections open"), "{head}");
    assert!(head.contains("Proxy-Status: berth; error=connection_limit_reached"), "{head}");
    let refused = h.event().await;
    assert_eq!(refused.verdict, Verdict::Error);
    assert!(refused.reason.contains("the most it may have"), "{}", refused.reason);

    // A connection that ends gives its place back.
    drop(first);
    assert_eq!(h.event().await.verdict, Verdict::Allowed);
    let (_third, head) = h.connect(&target).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_hold_back_their_request_head_cannot_take_every_place() {
    let port = echo_server().await;
    let rule = format!("echo.test:{port}");
    let limits = Limits { max_pending: 2, head_timeout: Duration::from_secs(30), ..Limits::default() };
    let mut h = start_with_limits(policy(Mode::Enforce, &[&rule], &[], &["echo.test"]), limits).await;
    // Two clients start a head and stop (a slowloris).
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(h.addr).await.unwrap();
        s.write_all(b"CONNECT echo.test").await.unwrap();
        slow.push(s);
    }
    until("two heads pending", || h.proxy.clients().1 == 2).await;
    let answer = h.exchange(format!("CONNECT echo.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("still sending their request head"), "{answer}");
    assert!(h.event().await.reason.contains("request head"));

    // Once a slow client finishes its head, its place is free for the next.
    slow[0].write_all(format!(":{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    until("one head pending", || h.proxy.clients().1 == 1).await;
    let (_s, head) = h.connect(&format!("echo.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
}
