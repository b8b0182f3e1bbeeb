use std::time::Duration;

use berth_egress::{Mode, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_deny_closes_open_tunnels_and_a_live_allow_opens_the_next() {
    let port = echo_server().await;
    let a_rule = format!("a.test:{port}");
    let b_rule = format!("b.test:{port}");
    let mut h = start(policy(Mode::Enforce, &[&a_rule, &b_rule], &[], &["a.test", "b.test"])).await;
    let (mut a, head) = h.connect(&a_rule).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (mut b, _) = h.connect(&b_rule).await;
    for s in [&mut a, &mut b] {
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
    }
    assert_eq!(h.proxy.open_connections().len(), 2);

    assert_eq!(h.proxy.deny("a.test".parse().unwrap()), 1);
    let mut buf = [0u8; 16];
    // The proxy ends the tunnel itself (the echo server never would); the deadline only keeps a tunnel left
    // open from hanging the test.
    let n = tokio::time::timeout(Duration::from_secs(30), a.read(&mut buf))
        .await
        .expect("the denied tunnel was left open")
        .unwrap_or(0);
    assert_eq!(n, 0, "the tunnel is closed");
    let event = h.event().await;
    assert_eq!((event.host.as_str(), event.verdict), ("a.test", Verdict::Denied));
    assert_eq!(event.reason, format!("closed by a policy change: a.test:{port} is denied by rule a.test"));
    assert_eq!(event.rule.as_deref(), Some("a.test"));
    assert_eq!((event.bytes_up, event.bytes_down), (4, 4));

    // The other tunnel is untouched.
    b.write_all(b"pong").await.unwrap();
    let mut back = [0u8; 4];
    b.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"pong");

    // Replacing the whole policy closes what it no longer allows, and a live allow opens the next tunnel.
    let (_, head) = h.connect(&format!("c.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 403"));
    h.event().await;
    let mut next = policy(Mode::Enforce, &[], &[], &["c.test"]);
    next.add_hosts.insert("b.test".into(), "127.0.0.1".parse().unwrap());
    assert_eq!(h.proxy.set_policy(next), 1);
    assert_eq!(h.event().await.host, "b.test");
    assert_eq!(h.proxy.allow(format!("c.test:{port}").parse().unwrap()), 0);
    let (mut c, head) = h.connect(&format!("c.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    c.write_all(b"c").await.unwrap();
    c.read_exact(&mut back[..1]).await.unwrap();
    assert_eq!(h.proxy.open_connections().len(), 1);
    assert_eq!(h.proxy.policy().allow.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_exact_ip_rule_closes_tunnels_to_that_address() {
    let port = echo_server().await;
    let rule = format!("127.0.0.1:{port}");
    let mut h = start(policy(Mode::Learn, &[&rule], &[], &[])).await;
    let (mut s, head) = h.connect(&format!("127.0.0.1:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(h.proxy.set_policy(policy(Mode::AllowAll, &[&rule], &[], &[])), 0);
    // Dropping the exact-IP rule removes the exemption for the loopback address the tunnel reaches.
    assert_eq!(h.proxy.set_policy(policy(Mode::AllowAll, &[], &[], &[])), 1);
    let mut buf = [0u8; 1];
    assert_eq!(s.read(&mut buf).await.unwrap_or(0), 0);
    let event = h.event().await;
    assert!(event.reason.contains("loopback"), "{}", event.reason);
}
