//! TLS for the E2B listener under `--domain D`, the form E2B's SDKs keep (`E2B_DOMAIN=D`: the API at
//! `https://api.D`, each sandbox port at `https://<port>-<id>.D`): a certificate authority of berth's own,
//! made once and kept under the data root, signs a certificate for `D` and `*.D`. The listener takes TLS and
//! plain HTTP on the same port, telling them apart by the first byte a client sends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

const CA_NAME: &str = "berth E2B listener CA";
/// Connections served at once.
const MAX_CONNECTIONS: usize = 512;
/// How long a client has to start speaking, and to finish a TLS handshake or a request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the authority's certificate is: what a client trusts (`SSL_CERT_FILE`, or the system's store).
pub fn ca_path(root: &Path) -> PathBuf {
    root.join("e2b").join("ca.pem")
}

/// The server configuration for `domain`, its authority made first if there is none yet.
pub(crate) fn config(root: &Path, domain: &str) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
    let dir = root.join("e2b");
    let (cert, key) = (ca_path(root), dir.join("ca.key"));
    let ca = match (std::fs::read_to_string(&cert), std::fs::read_to_string(&key)) {
        (Ok(c), Ok(k)) => {
            berth_egress::CertificateAuthority::from_pem_named(CA_NAME, &c, &k).map_err(|e| e.to_string())?
        }
        _ => {
            let ca = berth_egress::CertificateAuthority::generate_named(CA_NAME).map_err(|e| e.to_string())?;
            std::fs::create_dir_all(&dir).map_err(|e| format!("make {}: {e}", dir.display()))?;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&key)
                .map_err(|e| format!("write {}: {e}", key.display()))?;
            std::io::Write::write_all(&mut f, ca.key_pem().as_bytes()).map_err(|e| e.to_string())?;
            std::fs::write(&cert, ca.certificate_pem()).map_err(|e| format!("write {}: {e}", cert.display()))?;
            ca
        }
    };
    ca.server_config_for(&[domain.to_string(), format!("*.{domain}")]).map_err(|e| e.to_string())
}

/// Serve `app` on `listener`: TLS with `tls` when a connection starts with a TLS handshake, plain HTTP
/// otherwise (or always, without `tls`).
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((io, _)) = listener.accept().await else { continue };
        // Streams send many small frames: each goes at once, not held for the last one's acknowledgement.
        let _ = io.set_nodelay(true);
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else { continue };
        let (app, acceptor) = (app.clone(), acceptor.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT);
            let service = TowerToHyperService::new(app);
            let mut first = [0u8; 1];
            let handshake =
                matches!(tokio::time::timeout(HEAD_TIMEOUT, io.peek(&mut first)).await, Ok(Ok(1))) && first[0] == 0x16;
            match acceptor.filter(|_| handshake) {
                Some(a) => {
                    if let Ok(Ok(stream)) = tokio::time::timeout(HEAD_TIMEOUT, a.accept(io)).await {
                        let _ = http.serve_connection(TokioIo::new(stream), service).with_upgrades().await;
                    }
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(io), service).with_upgrades().await;
                }
            }
        });
    }
}
