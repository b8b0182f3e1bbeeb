use std::time::Duration;

use berth_egress::{Injection, Method, Mode, Proxy, Verdict};
use tokio::sync::mpsc;

use crate::common::*;

async fn seen(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_goes_out_in_origin_form_with_connection_close() {
    let (port, mut requests) = http_server().await;
    let mut h = start(policy(Mode::Enforce, &[&format!("web.test:{port}")], &[], &["web.test"])).await;
    let request = format!(
        "GET http://web.test:{port}/path?q=1 HTTP/1.1\r\nHost: web.test:{port}\r\nProxy-Connection: keep-alive\r\n\
         Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    );
    let answer = h.exchange(request.as_bytes()).await;
    assert_eq!(answer, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    let got = seen(&mut requests).await;
    assert_eq!(
        got,
        format!("GET /path?q=1 HTTP/1.1\r\nHost: web.test:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    );
    let a = h.event().await;
    assert_eq!((a.method, a.verdict), (Method::Http, Verdict::Allowed));
    assert_eq!((a.bytes_up, a.bytes_down), (got.len() as u64, answer.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_per_connection() {
    let (port, mut requests) = http_server().await;
    let mut h = start(policy(Mode::Enforce, &[&format!("web.test:{port}")], &[], &["web.test"])).await;
    // A body with a second request behind it: only the first request and its body are forwarded.
    let request = format!(
        "POST http://web.test:{port}/up HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: 5\r\n\r\nhello\
         GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    );
    let answer = h.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let got = seen(&mut requests).await;
    assert!(got.ends_with("Connection: close\r\n\r\nhello"), "{got}");
    assert!(!got.contains("evil"), "{got}");
    h.event().await;

    // A chunked body is forwarded as sent, up to its last chunk.
    let request = format!(
        "POST http://web.test:{port}/c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGARBAGE"
    );
    let answer = h.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let got = seen(&mut requests).await;
    assert!(got.contains(&format!("Host: web.test:{port}\r\n")), "{got}");
    assert!(got.ends_with("\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), "{got}");
    h.event().await;

    // Ambiguous framing is refused.
    let request =
        format!("POST http://web.test:{port}/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc");
    assert!(h.exchange(request.as_bytes()).await.starts_with("HTTP/1.1 400 "));
    assert_eq!(h.event().await.verdict, Verdict::Error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_denials() {
    let (port, _requests) = http_server().await;
    let mut h = start(policy(Mode::Enforce, &[&format!("web.test:{port}")], &[], &["web.test", "evil.test"])).await;
    let answer = h.exchange(format!("GET http://evil.test:{port}/ HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer
            .ends_with(&format!("berth: egress to evil.test:{port} denied: no allow rule matches evil.test:{port}\n"))
    );
    assert_eq!(h.event().await.verdict, Verdict::Denied);

    // The Host header must name the URL's host: a server choosing by Host must not see another name.
    let request = format!("GET http://web.test:{port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n");
    let answer = h.exchange(request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(answer.contains("does not match"), "{answer}");
    h.event().await;
    let request = format!("GET http://web.test:{port}/ HTTP/1.1\r\nHost: web.test:{port}\r\nHost: evil.test\r\n\r\n");
    assert!(h.exchange(request.as_bytes()).await.starts_with("HTTP/1.1 403 "));
    h.event().await;

    let answer = h.exchange(b"GET https://web.test/ HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 ") && answer.contains("use CONNECT"), "{answer}");
    h.event().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_injected_only_for_their_host() {
    let (port, mut requests) = http_server().await;
    let injection = Injection {
        host_rule: format!("api.test:{port}").parse().unwrap(),
        placeholder: "BERTH_PLACEHOLDER_1".into(),
        value: "s3cr3t-value".into(),
        header: Some("X-Api-Key".into()),
        intercept_tls: false,
    };
    let allow = [format!("api.test:{port}"), format!("other.test:{port}")];
    let policy = policy(Mode::Enforce, &[&allow[0], &allow[1]], &[], &["api.test", "other.test"]);
    let mut h = start_proxy(Proxy::new(policy).with_injections(vec![injection]).unwrap()).await;

    let request = format!(
        "GET http://api.test:{port}/x?key=BERTH_PLACEHOLDER_1 HTTP/1.1\r\n\
         Authorization: Bearer BERTH_PLACEHOLDER_1\r\n\r\n"
    );
    h.exchange(request.as_bytes()).await;
    let got = seen(&mut requests).await;
    assert!(got.starts_with("GET /x?key=s3cr3t-value HTTP/1.1\r\n"), "{got}");
    assert!(got.contains("Authorization: Bearer s3cr3t-value\r\n"), "{got}");
    assert!(got.contains("X-Api-Key: s3cr3t-value\r\n"), "{got}");
    assert!(!got.contains("BERTH_PLACEHOLDER_1"), "{got}");
    h.event().await;

    let request =
        format!("GET http://other.test:{port}/?k=BERTH_PLACEHOLDER_1 HTTP/1.1\r\nA: BERTH_PLACEHOLDER_1\r\n\r\n");
    h.exchange(request.as_bytes()).await;
    let got = seen(&mut requests).await;
    assert!(!got.contains("s3cr3t"), "{got}");
    assert!(got.contains("A: BERTH_PLACEHOLDER_1\r\n"), "{got}");
    h.event().await;

    // A tunnel to the secret's host is refused before it reaches the host: the proxy could not search what
    // comes back through it for the value.
    let (_, head) = h.connect(&format!("api.test:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 403 ") && head.contains("not intercept"), "{head}");
    assert_eq!(h.event().await.verdict, Verdict::Denied);
    // Through a tunnel elsewhere the proxy cannot see the request: the placeholder goes through unchanged.
    let (mut s, _) = h.connect(&format!("other.test:{port}")).await;
    use tokio::io::AsyncWriteExt;
    s.write_all(b"GET / HTTP/1.1\r\nX: BERTH_PLACEHOLDER_1\r\n\r\n").await.unwrap();
    s.shutdown().await.unwrap();
    read_all(&mut s).await;
    assert!(!seen(&mut requests).await.contains("s3cr3t"));
}
