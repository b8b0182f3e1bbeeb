use std::time::Duration;

use berth_egress::sni::client_hello_for_tests;
use berth_egress::{Limits, Method, Mode, Verdict, suggest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

async fn echo_round_trip(s: &mut TcpStream, data: &[u8]) {
    s.write_all(data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(back, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_tunnel_relays_and_counts_bytes() {
    let port = echo_server().await;
    let rule = format!("echo.test:{port}");
    let mut h = start(policy(Mode::Enforce, &[&rule], &[], &["echo.test"])).await;
    let (mut s, head) = h.connect(&format!("ECHO.test.:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200 Connection Established\r\n"), "{head}");
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    echo_round_trip(&mut s, b"ping").await;
    echo_round_trip(&mut s, &big).await;
    assert_eq!(h.proxy.open_connections().len(), 1);
    drop(s);
    let a = h.event().await;
    assert_eq!((a.method, a.verdict, a.host.as_str(), a.port), (Method::Connect, Verdict::Allowed, "echo.test", port));
    assert_eq!(a.rule.as_deref(), Some(rule.as_str()));
    assert_eq!((a.bytes_up, a.bytes_down), (1_000_004, 1_000_004));
    assert!(a.reason.contains("add_hosts"), "{}", a.reason);
    assert!(h.proxy.open_connections().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_tunnel_gets_a_clear_answer() {
    let mut h = start(policy(Mode::Enforce, &["allowed.test:443"], &[], &[])).await;
    let (mut s, head) = h.connect("other.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{head}");
    assert!(head.contains("X-Berth-Egress: denied; reason=\"no allow rule matches other.test:443\""), "{head}");
    assert!(head.contains("Proxy-Status: berth; error=http_request_denied"), "{head}");
    let body = read_all(&mut s).await;
    assert_eq!(body, "berth: egress to other.test:443 denied: no allow rule matches other.test:443\n");
    let a = h.event().await;
    assert_eq!((a.verdict, a.rule, a.bytes_up), (Verdict::Denied, None, 0));

    // The default policy denies everything, even with a listener started by mistake.
    let mut h = start(Default::default()).await;
    let (_, head) = h.connect("example.com:443").await;
    assert!(head.contains("network access is off"), "{head}");
    assert_eq!(h.event().await.verdict, Verdict::Denied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_port_and_deny_rules() {
    let port = echo_server().await;
    let glob = format!("*.svc.test:{port}");
    let hosts = ["a.svc.test", "b.c.svc.test", "svc.test", "bad.svc.test"];
    let mut h = start(policy(Mode::Enforce, &[&glob], &["bad.svc.test"], &hosts)).await;
    for (target, allowed) in [
        (format!("a.svc.test:{port}"), true),
        (format!("b.c.svc.test:{port}"), true),
        (format!("svc.test:{port}"), false),
        (format!("a.svc.test:{}", port ^ 1), false),
        (format!("bad.svc.test:{port}"), false),
    ] {
        let (mut s, head) = h.connect(&target).await;
        assert_eq!(head.starts_with("HTTP/1.1 200"), allowed, "{target}: {head}");
        if allowed {
            echo_round_trip(&mut s, b"x").await;
        }
        drop(s);
        let a = h.event().await;
        assert_eq!(a.verdict == Verdict::Allowed, allowed, "{target}: {a:?}");
        if target.starts_with("bad.") {
            assert_eq!(a.rule.as_deref(), Some("bad.svc.test"));
            assert!(head.contains("rule=\"bad.svc.test\""), "{head}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_must_match_the_tunnel() {
    let port = echo_server().await;
    let mut h = start(policy(Mode::Enforce, &[&format!("echo.test:{port}")], &[], &["echo.test"])).await;

    // A ClientHello for the tunnel's own host, in tiny records and tiny writes, goes through.
    let (mut s, head) = h.connect(&format!("echo.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let hello = client_hello_for_tests(Some("Echo.Test"), 7);
    for piece in hello.chunks(5) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut back = vec![0u8; hello.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, hello);
    drop(s);
    assert_eq!(h.event().await.verdict, Verdict::Allowed);

    // Another name on the same tunnel is refused before a byte reaches the server.
    let (mut s, _) = h.connect(&format!("echo.test:{port}")).await;
    let hello = client_hello_for_tests(Some("evil.test"), 16384);
    let (first, second) = hello.split_at(20);
    s.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(second).await.unwrap();
    assert_eq!(read_all(&mut s).await, "", "the server must not have seen the hello");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Denied);
    assert_eq!(a.reason, "TLS SNI evil.test does not match CONNECT host echo.test");
    assert_eq!(a.bytes_up, 0);

    // A hello sent in the same write as the CONNECT request is judged all the same.
    let mut s = TcpStream::connect(h.addr).await.unwrap();
    let mut request = format!("CONNECT echo.test:{port} HTTP/1.1\r\n\r\n").into_bytes();
    request.extend_from_slice(&client_hello_for_tests(Some("evil.test"), 100));
    s.write_all(&request).await.unwrap();
    assert!(read_all(&mut s).await.starts_with("HTTP/1.1 200"));
    assert!(h.event().await.reason.starts_with("TLS SNI evil.test does not match"));

    // A hello that never completes is refused once it is too large.
    let limits = Limits { max_client_hello: 1024, ..Limits::default() };
    let mut h =
        start_with_limits(policy(Mode::Enforce, &[&format!("echo.test:{port}")], &[], &["echo.test"]), limits).await;
    let (mut s, _) = h.connect(&format!("echo.test:{port}")).await;
    let mut huge = vec![22, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc];
    huge.resize(2000, 0);
    let _ = s.write_all(&huge).await;
    let _ = read_all(&mut s).await;
    assert!(h.event().await.reason.contains("larger than 1 KiB"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_addresses_are_refused_without_an_exact_ip_rule() {
    let port = echo_server().await;
    for mode in [Mode::AllowAll, Mode::Learn] {
        let mut h = start(policy(mode, &[], &[], &[])).await;
        for (target, kind) in [
            (format!("127.0.0.1:{port}"), "loopback"),
            (format!("localhost:{port}"), "loopback"),
            (format!("[::1]:{port}"), "loopback"),
            (format!("[::ffff:127.0.0.1]:{port}"), "loopback"),
            ("169.254.169.254:80".to_string(), "cloud metadata"),
            ("10.0.0.5:80".to_string(), "private"),
            ("192.168.1.1:443".to_string(), "private"),
            ("100.64.0.1:443".to_string(), "carrier-grade NAT"),
            ("0.0.0.0:80".to_string(), "unspecified"),
            ("[fe80::1]:80".to_string(), "link-local"),
        ] {
            let (_, head) = h.connect(&target).await;
            assert!(head.starts_with("HTTP/1.1 403"), "{mode}: {target}: {head}");
            assert!(head.contains("destination_ip_prohibited"), "{head}");
            let a = h.event().await;
            assert_eq!(a.verdict, Verdict::Denied, "{target}");
            assert!(a.reason.contains(kind), "{target}: {}", a.reason);
        }
    }
    // localhost is a name that resolves to loopback: refused by the address check, not by name.
    let mut h = start(policy(Mode::Enforce, &[&format!("localhost:{port}")], &[], &[])).await;
    let (_, head) = h.connect(&format!("localhost:{port}")).await;
    assert!(head.contains("localhost resolves to"), "{head}");
    h.event().await;

    // An exact IP rule opens that address, in any mode, on its port only.
    let rule = format!("127.0.0.1:{port}");
    for mode in [Mode::Enforce, Mode::Learn] {
        let mut h = start(policy(mode, &[&rule], &[], &[])).await;
        let (mut s, head) = h.connect(&rule).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        echo_round_trip(&mut s, b"ip").await;
        drop(s);
        assert_eq!(h.event().await.verdict, Verdict::Allowed);
        let (_, head) = h.connect(&format!("127.0.0.1:{}", port ^ 1)).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        h.event().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learn_mode_records_and_suggests() {
    let port = echo_server().await;
    let mut h = start(policy(Mode::Learn, &[], &[], &["a.test", "b.test"])).await;
    let mut attempts = Vec::new();
    for target in [format!("a.test:{port}"), format!("b.test:{port}"), format!("A.test:{port}"), "localhost:1".into()] {
        let (mut s, head) = h.connect(&target).await;
        if head.starts_with("HTTP/1.1 200") {
            echo_round_trip(&mut s, b"hi").await;
        }
        drop(s);
        attempts.push(h.event().await);
    }
    assert_eq!(attempts.iter().filter(|a| a.verdict == Verdict::Allowed).count(), 3);
    assert_eq!(suggest(&attempts), [format!("a.test:{port}"), format!("b.test:{port}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_slow_and_oversized_requests() {
    let limits = Limits { head_timeout: Duration::from_millis(300), ..Limits::default() };
    let mut h = start_with_limits(policy(Mode::AllowAll, &[], &[], &[]), limits).await;

    let mut big = b"CONNECT a.test:443 HTTP/1.1\r\n".to_vec();
    while big.len() < 70 * 1024 {
        big.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let answer = h.exchange(&big).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert!(h.event().await.reason.contains("larger than 64 KiB"));

    // A client that trickles its head is cut off at the deadline, however often it sends a byte: a head that
    // takes it 10 s to send is answered and closed before it is all sent.
    let (mut rd, mut wr) = TcpStream::connect(h.addr).await.unwrap().into_split();
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    let mut head = b"CONNECT a.test:443 HTTP/1.1\r\nX: ".to_vec();
    head.resize(400, b'y');
    let mut sent = 0;
    for b in &head {
        if reader.is_finished() || wr.write_all(&[*b]).await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let answer = reader.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(sent < head.len(), "the whole trickled head was read without being cut off");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Error);
    assert_eq!(a.reason, "the request head did not arrive within 300 ms");

    let answer = h.exchange(b"GET /index.html HTTP/1.1\r\nHost: x.test\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("origin-form"), "{answer}");
    h.event().await;

    let answer = h.exchange(b"CONNECT a.test HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 ") && answer.contains("has no port"), "{answer}");
    assert_eq!(h.event().await.method, Method::Connect);

    let answer = h.exchange(b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    h.event().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_destination_is_a_502() {
    let port = closed_port().await;
    let mut h = start(policy(Mode::Enforce, &[&format!("gone.test:{port}")], &[], &["gone.test"])).await;
    let (_, head) = h.connect(&format!("gone.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
    assert!(head.contains("connection_refused"), "{head}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Error);
    assert!(a.reason.contains("could not connect to gone.test"), "{}", a.reason);
}
