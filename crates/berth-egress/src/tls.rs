//! TLS interception, used only for tunnels to hosts that an [`Injection`](crate::Injection) with
//! `intercept_tls` names: the proxy must see the request to put a secret in it.
//!
//! Each sandbox gets a certificate authority of its own, which only that sandbox trusts; the proxy
//! presents a certificate for the tunnel's host signed by it, and opens its own verified TLS connection
//! to the real host. One crypto provider, ring, is used and passed explicitly to every configuration, so
//! nothing depends on a process-wide default.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::rule::Host;

/// Why a certificate authority or a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("could not create a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("could not configure TLS: {0}")]
    Config(#[from] rustls::Error),
    #[error("the certificate authority's certificate is not a PEM certificate: {0}")]
    Pem(String),
    #[error("an upstream root certificate is not usable: {0}")]
    Root(String),
}

/// The subject of every sandbox CA. Fixed, so a CA can be rebuilt from its stored certificate and key.
const CA_NAME: &str = "berth sandbox egress CA";

/// A sandbox's certificate authority. Install [`CertificateAuthority::certificate_pem`] in the sandbox's
/// trust store; keep [`CertificateAuthority::key_pem`] on the host only.
pub struct CertificateAuthority {
    params: CertificateParams,
    key: KeyPair,
    der: CertificateDer<'static>,
    pem: String,
}

impl CertificateAuthority {
    /// A new authority with a fresh ECDSA P-256 key.
    pub fn generate() -> Result<CertificateAuthority, TlsError> {
        Self::generate_named(CA_NAME)
    }

    /// The same, with a name of its own (what a browser or `openssl x509` shows).
    pub fn generate_named(name: &str) -> Result<CertificateAuthority, TlsError> {
        let key = KeyPair::generate()?;
        let params = ca_params(name);
        let cert = params.self_signed(&key)?;
        Ok(CertificateAuthority { params, key, der: cert.der().clone(), pem: cert.pem() })
    }

    /// An authority made earlier by [`CertificateAuthority::generate`], from its stored certificate and key.
    pub fn from_pem(certificate_pem: &str, key_pem: &str) -> Result<CertificateAuthority, TlsError> {
        Self::from_pem_named(CA_NAME, certificate_pem, key_pem)
    }

    /// One made by [`CertificateAuthority::generate_named`] with `name`.
    pub fn from_pem_named(name: &str, certificate_pem: &str, key_pem: &str) -> Result<CertificateAuthority, TlsError> {
        let der =
            CertificateDer::from_pem_slice(certificate_pem.as_bytes()).map_err(|e| TlsError::Pem(e.to_string()))?;
        let key = KeyPair::from_pem(key_pem)?;
        Ok(CertificateAuthority { params: ca_params(name), key, der, pem: certificate_pem.to_string() })
    }

    /// A server configuration (HTTP/1.1) presenting a certificate this authority signs for `names` (which may
    /// be wildcards, `*.example.test`).
    pub fn server_config_for(&self, names: &[String]) -> Result<Arc<ServerConfig>, TlsError> {
        let (chain, private) = self.leaf_for(names)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    pub fn certificate_der(&self) -> &[u8] {
        &self.der
    }

    /// The private key, PKCS#8 PEM. Whoever has it can impersonate any host to the sandbox.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    fn leaf(&self, host: &Host) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        self.leaf_for(&[host.to_string()])
    }

    /// A certificate for `names` (the first its common name) signed by this authority, with its chain and key.
    fn leaf_for(&self, names: &[String]) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let mut params = CertificateParams::new(names.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, names.first().cloned().unwrap_or_default());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &Issuer::from_params(&self.params, &self.key))?;
        let chain = vec![cert.der().clone(), self.der.clone()];
        Ok((chain, PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()))))
    }
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// Most leaf configurations kept; past it the cache starts afresh (a glob can name unboundedly many hosts).
const MAX_LEAVES: usize = 1024;

/// Everything interception needs: the authority, cached per-host server configurations, and the client
/// configuration used towards real hosts.
pub(crate) struct Interceptor {
    ca: CertificateAuthority,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<Host, Arc<ServerConfig>>>,
    pub client: Arc<ClientConfig>,
}

impl Interceptor {
    /// Real hosts are verified against the Mozilla roots plus `extra_roots` (DER), for private services.
    pub(crate) fn new(ca: CertificateAuthority, extra_roots: &[Vec<u8>]) -> Result<Interceptor, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in extra_roots {
            roots.add(CertificateDer::from(der.clone())).map_err(|e| TlsError::Root(e.to_string()))?;
        }
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Interceptor { ca, provider, leaves: Mutex::new(HashMap::new()), client: Arc::new(client) })
    }

    /// The configuration presenting a certificate for `host`, made once per host.
    pub(crate) fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, TlsError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let (chain, key) = self.ca.leaf(host)?;
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // Only HTTP/1.1 is understood inside the tunnel.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() >= MAX_LEAVES {
            leaves.clear();
        }
        leaves.insert(host.clone(), config.clone());
        Ok(config)
    }
}

/// A client stream whose first bytes (the ClientHello, already read to check its server name) are
/// replayed before the rest.
pub(crate) struct Replay<'a> {
    pub prefix: Vec<u8>,
    pub pos: usize,
    pub inner: &'a mut TcpStream,
}

impl AsyncRead for Replay<'_> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut *this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replay<'_> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_survives_a_round_trip_through_pem() {
        let ca = CertificateAuthority::generate().unwrap();
        let again = CertificateAuthority::from_pem(ca.certificate_pem(), &ca.key_pem()).unwrap();
        assert_eq!(again.certificate_der(), ca.certificate_der());
        let interceptor = Interceptor::new(again, &[]).unwrap();
        let host = Host::parse("api.test").unwrap();
        let first = interceptor.server_config(&host).unwrap();
        assert!(Arc::ptr_eq(&first, &interceptor.server_config(&host).unwrap()));
        assert!(CertificateAuthority::from_pem("not pem", &ca.key_pem()).is_err());
    }
}
