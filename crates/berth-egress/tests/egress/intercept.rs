use std::sync::Arc;
use std::time::Duration;

use berth_egress::{CertificateAuthority, Injection, Mode, Proxy, Verdict};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::common::*;

/// An HTTPS server for `name` with a self-signed certificate: records each request head, answers `hello`.
async fn https_server(name: &str) -> (u16, Vec<u8>, mpsc::UnboundedReceiver<String>) {
    let certified = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let der = certified.cert.der().to_vec();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(der.clone())], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else { return };
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.ends_with(b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(n @ 1..) => seen.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
                let _ = s.shutdown().await;
                let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
            });
        }
    });
    (port, der, rx)
}

fn injection(port: u16, intercept_tls: bool) -> Injection {
    Injection {
        host_rule: format!("api.test:{port}").parse().unwrap(),
        placeholder: "BERTH_PLACEHOLDER_TLS".into(),
        value: "tls-s3cr3t".into(),
        header: Some("X-Api-Key".into()),
        intercept_tls,
    }
}

/// Sends `request` over TLS through a tunnel, trusting only `ca`; returns the response.
async fn https_request(h: &Harness, port: u16, ca: &[u8], request: &str) -> Result<String, String> {
    let (tunnel, head) = h.connect(&format!("api.test:{port}")).await;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(head);
    }
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(ca.to_vec())).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("api.test").unwrap();
    let mut tls = TlsConnector::from(Arc::new(config)).connect(name, tunnel).await.map_err(|e| e.to_string())?;
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut out)).await.unwrap();
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_https_requests_through_an_intercepted_tunnel() {
    let (port, server_cert, mut requests) = https_server("api.test").await;
    let ca = CertificateAuthority::generate().unwrap();
    let ca_der = ca.certificate_der().to_vec();
    let policy = policy(Mode::Enforce, &[&format!("api.test:{port}")], &[], &["api.test"]);
    let proxy = Proxy::new(policy)
        .with_injections(vec![injection(port, true)])
        .unwrap()
        .with_tls_interception(ca, &[server_cert])
        .unwrap();
    let mut h = start_proxy(proxy).await;

    let request = format!(
        "GET /v1?k=BERTH_PLACEHOLDER_TLS HTTP/1.1\r\nHost: api.test:{port}\r\n\
         Authorization: Bearer BERTH_PLACEHOLDER_TLS\r\n\r\n"
    );
    let response = https_request(&h, port, &ca_der, &request).await.unwrap();
    // The response is searched for the secret, so its body comes chunked (a replacement changes its length).
    assert!(response.starts_with("HTTP/1.1 200 OK") && response.ends_with("\r\n5\r\nhello\r\n0\r\n\r\n"), "{response}");
    let got = requests.recv().await.unwrap();
    assert!(got.starts_with("GET /v1?k=tls-s3cr3t HTTP/1.1\r\n"), "{got}");
    assert!(got.contains("Authorization: Bearer tls-s3cr3t\r\n") && got.contains("X-Api-Key: tls-s3cr3t\r\n"), "{got}");
    assert!(got.ends_with("Accept-Encoding: identity\r\nConnection: close\r\n\r\n"), "{got}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Allowed, "{a:?}");
    assert_eq!((a.bytes_up, a.bytes_down), (got.len() as u64, response.len() as u64));

    // Inside the tunnel, the request must still be for the tunnel's host.
    let request = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    let response = https_request(&h, port, &ca_der, request).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Denied);
    assert!(a.reason.contains("Host header"), "{}", a.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interception_verifies_the_real_host_and_must_be_configured() {
    let (port, _server_cert, _requests) = https_server("api.test").await;
    let ca = CertificateAuthority::generate().unwrap();
    let ca_der = ca.certificate_der().to_vec();
    let rule = format!("api.test:{port}");
    // The real host's certificate is not trusted: the client gets a 502 inside its TLS session.
    let proxy = Proxy::new(policy(Mode::Enforce, &[&rule], &[], &["api.test"]))
        .with_injections(vec![injection(port, true)])
        .unwrap()
        .with_tls_interception(ca, &[])
        .unwrap();
    let mut h = start_proxy(proxy).await;
    let request = format!("GET / HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n");
    let response = https_request(&h, port, &ca_der, &request).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 502 "), "{response}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Error);
    // Said in the proxy's own words: rustls's text could quote the names in the server's certificate.
    assert!(a.reason.contains("TLS handshake with api.test"), "{}", a.reason);
    assert!(a.reason.ends_with("the server's certificate is not signed by a trusted authority"), "{}", a.reason);

    // An injection that asks for interception, on a proxy without an authority, refuses the tunnel.
    let proxy = Proxy::new(policy(Mode::Enforce, &[&rule], &[], &["api.test"]))
        .with_injections(vec![injection(port, true)])
        .unwrap();
    let mut h = start_proxy(proxy).await;
    let head = https_request(&h, port, &ca_der, &request).await.unwrap_err();
    assert!(head.starts_with("HTTP/1.1 403 ") && head.contains("needs TLS interception"), "{head}");
    h.event().await;

    // Without the flag the tunnel would not be intercepted, so nothing could search what the host sends
    // back: the tunnel is refused before it reaches the host.
    let proxy = Proxy::new(policy(Mode::Enforce, &[&rule], &[], &["api.test"]))
        .with_injections(vec![injection(port, false)])
        .unwrap();
    let mut h = start_proxy(proxy).await;
    let refused = https_request(&h, port, &ca_der, &request).await.unwrap_err();
    assert!(refused.starts_with("HTTP/1.1 403 ") && refused.contains("not intercept"), "{refused}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Denied, "{a:?}");
    assert!(a.reason.contains("searched for the value"), "{}", a.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_to_a_secrets_host_that_is_not_tls_is_closed_unread() {
    // The host echoes what it gets, as one that hands back what it was sent would.
    let port = echo_server().await;
    let rule = format!("api.test:{port}");
    let proxy = Proxy::new(policy(Mode::Enforce, &[&rule], &[], &["api.test"]))
        .with_injections(vec![injection(port, true)])
        .unwrap()
        .with_tls_interception(CertificateAuthority::generate().unwrap(), &[])
        .unwrap();
    let mut h = start_proxy(proxy).await;
    let (mut tunnel, head) = h.connect(&rule).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel.write_all(format!("GET / HTTP/1.1\r\nHost: {rule}\r\n\r\n").as_bytes()).await.unwrap();
    let back = read_all(&mut tunnel).await;
    assert!(back.is_empty(), "the host's answer came back unsearched: {back}");
    let a = h.event().await;
    assert_eq!(a.verdict, Verdict::Denied, "{a:?}");
    assert!(a.reason.contains("not a TLS ClientHello"), "{}", a.reason);
}
