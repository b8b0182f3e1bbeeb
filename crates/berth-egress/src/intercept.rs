//! An intercepted tunnel: TLS from the client ends at the proxy, one HTTP request is read, secrets are
//! injected into its head, and it goes on over the proxy's own verified TLS connection to the host the
//! tunnel was allowed for (whatever the request says, it cannot reach another host).

use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::answer;
use crate::attempt::Verdict;
use crate::head::{self, authority};
use crate::http::{Dest, framing, origin_head};
use crate::inject::Injection;
use crate::proxy::Limits;
use berth_secrets::Redactor;

use crate::reflect::Reflect;
use crate::relay::{Counters, exchange};
use crate::rule::Host;
use crate::tls::{Interceptor, Replay};

/// How an intercepted exchange ended, when not normally.
pub(crate) type Ended = Result<(), (Verdict, String)>;

/// Serves one HTTPS request inside a CONNECT tunnel. `hello` is what the client has sent so far (its
/// ClientHello, already checked against the tunnel's host). `injections` go into the request; what `searcher`
/// finds (every secret the host receives, over HTTPS or not) is taken out of the response.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    tls: &Interceptor,
    limits: &Limits,
    client: &mut TcpStream,
    hello: Vec<u8>,
    upstream: &mut TcpStream,
    host: &Host,
    port: u16,
    injections: &[&Injection],
    searcher: Option<Redactor>,
    counters: &Counters,
) -> Ended {
    let error = |why: String| (Verdict::Error, why);
    let config = tls.server_config(host).map_err(|e| error(e.to_string()))?;
    let accept = TlsAcceptor::from(config).accept(Replay { prefix: hello, pos: 0, inner: client });
    let mut inside = match tokio::time::timeout(limits.hello_timeout, accept).await {
        Err(_) => return Err(error(in_time("the client's TLS handshake", limits.hello_timeout))),
        Ok(Err(e)) => return Err(error(format!("the client's TLS handshake with the proxy failed: {e}"))),
        Ok(Ok(stream)) => stream,
    };
    let shown = host.with_port(port);
    let (head, early) = match head::read_head(&mut inside, limits.max_head, limits.head_timeout).await {
        Ok(read) => read,
        Err(e) => return Err(error(e.reason())),
    };
    let req = match head::parse(&head) {
        Ok(req) if req.target.starts_with('/') => req,
        Ok(req) => {
            let why = format!("inside a tunnel the request target must be a path, not {:?}", req.target);
            return Err(fail(&mut inside, 400, &shown, "http_request_error", why).await);
        }
        Err(why) => return Err(fail(&mut inside, 400, &shown, "http_request_error", why).await),
    };
    let hosts: Vec<&[u8]> = req.values("host").collect();
    let agrees = |v: &[u8]| authority(&String::from_utf8_lossy(v), Some(443)).ok() == Some((host.clone(), port));
    if hosts.len() != 1 || !agrees(hosts[0]) {
        let why = format!("the request's Host header does not name the tunnel's host {shown}");
        let answer = answer::denied(&shown, None, &why);
        let _ = inside.write_all(&answer).await;
        let _ = inside.shutdown().await;
        return Err((Verdict::Denied, why));
    }
    let framing = match framing(&req) {
        Ok(framing) => framing,
        Err(why) => return Err(fail(&mut inside, 400, &shown, "http_request_error", why).await),
    };
    let name = match host {
        Host::Name(name) => ServerName::try_from(name.clone()).map_err(|e| error(e.to_string()))?,
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    let connect = TlsConnector::from(tls.client.clone()).connect(name, upstream);
    let outside = match tokio::time::timeout(limits.connect_timeout, connect).await {
        Err(_) => {
            let why = in_time(&format!("the TLS handshake with {shown}"), limits.connect_timeout);
            return Err(fail(&mut inside, 504, &shown, "tls_protocol_error", why).await);
        }
        Ok(Err(e)) => {
            // rustls's text can quote the server's certificate (the names it is valid for), which the server
            // chose: where a secret's value may come back, only the kind of failure is said.
            let why = match &searcher {
                None => format!("the TLS handshake with {shown} failed: {e}"),
                Some(_) => format!("the TLS handshake with {shown} failed: {}", handshake_failure(&e)),
            };
            return Err(fail(&mut inside, 502, &shown, "tls_certificate_error", why).await);
        }
        Ok(Ok(stream)) => stream,
    };
    let dest = Dest { host, port, authority: &shown, path: &req.target };
    let reflect = searcher.map(|r| Reflect::new(r, &req.method, req.minor_version, &shown));
    let head = origin_head(&req, &dest, injections, reflect.is_some());
    exchange(inside, early, outside, &head, framing, reflect, counters)
        .await
        .map_err(|e| (Verdict::Allowed, format!("the exchange ended with an error: {e}")))
}

/// Answers inside the client's TLS session and says why.
async fn fail<S: AsyncWrite + Unpin>(
    inside: &mut S,
    status: u16,
    dest: &str,
    kind: &str,
    why: String,
) -> (Verdict, String) {
    let _ = inside.write_all(&answer::failed(status, Some(dest), kind, &why)).await;
    let _ = inside.shutdown().await;
    (Verdict::Error, why)
}

/// What went wrong in a TLS handshake with a server, in words of the proxy's own (no text the server sent).
fn handshake_failure(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    match e.get_ref().and_then(|inner| inner.downcast_ref::<E>()) {
        Some(E::InvalidCertificate(c)) => match c {
            C::Expired | C::ExpiredContext { .. } => "the server's certificate has expired",
            C::NotValidYet | C::NotValidYetContext { .. } => "the server's certificate is not valid yet",
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the server's certificate is not valid for the host"
            }
            C::UnknownIssuer => "the server's certificate is not signed by a trusted authority",
            C::Revoked => "the server's certificate is revoked",
            _ => "the server's certificate was refused",
        },
        Some(E::AlertReceived(_)) => "the server ended the handshake with an alert",
        Some(_) => "the server broke the TLS protocol",
        None => "the connection failed during the handshake",
    }
}

fn in_time(what: &str, limit: Duration) -> String {
    format!("{what} did not finish within {} ms", limit.as_millis())
}
