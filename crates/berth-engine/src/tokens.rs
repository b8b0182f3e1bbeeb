//! API tokens for the TCP listener. Only their SHA-256 digests are kept (in the daemon's database); a token
//! is shown once, when it is minted. Tokens are minted over the unix socket only, so reaching the daemon
//! over TCP never lets a client mint more.

use std::sync::Arc;

use berth_api::{Grant, MintedToken};
use sha2::{Digest, Sha256};

use crate::store::{Store, StoreError};

pub struct Tokens {
    store: Arc<Store>,
}

/// SHA-256 of a secret, in hexadecimal: what is kept of tokens (API, session, preview).
pub fn digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// `bytes` random bytes (from `getrandom`), in hexadecimal.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty())?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Tokens {
    pub fn new(store: Arc<Store>) -> Tokens {
        Tokens { store }
    }

    /// Mint a token that reaches what `grant` allows, store its digest, and return it (the secret itself is
    /// not kept).
    pub fn mint(&self, name: &str, grant: &Grant) -> std::io::Result<MintedToken> {
        // 256 random bits: a digest lookup cannot be used to guess one.
        let token = format!("berth_{}", random_hex(32)?);
        let minted = MintedToken { id: random_hex(6)?, name: name.to_string(), token };
        self.store
            .add_granted_token(&minted.id, &minted.name, &digest(&minted.token), crate::engine::now_ms(), grant)
            .map_err(std::io::Error::other)?;
        Ok(minted)
    }

    /// Mint a session token: it works for sandbox `sandbox` only (itself and the sandboxes it creates), and
    /// is revoked when the sandbox stops or is removed. It stays within the sandbox's tenant.
    pub fn mint_session(&self, sandbox: &str, tenant: Option<&str>) -> std::io::Result<MintedToken> {
        let token = format!("berth_s_{}", random_hex(32)?);
        let minted = MintedToken { id: random_hex(6)?, name: format!("session {sandbox}"), token };
        let grant = Grant { tenant: tenant.map(str::to_string), ..Grant::default() };
        self.store
            .add_scoped_token(
                &minted.id,
                &minted.name,
                &digest(&minted.token),
                crate::engine::now_ms(),
                sandbox,
                &grant,
            )
            .map_err(std::io::Error::other)?;
        Ok(minted)
    }

    /// Revoke every session token of a sandbox; their ids.
    pub fn revoke_session(&self, sandbox: &str) -> std::io::Result<Vec<String>> {
        self.store.revoke_scope(sandbox).map_err(std::io::Error::other)
    }

    /// The token's id, for a session token its sandbox, and what it may reach.
    pub fn check_scoped(&self, token: &str) -> Option<(String, Option<String>, Grant)> {
        self.check_digest(&digest(token))
    }

    /// The same for a token known by its digest only (a web view's login keeps no more).
    pub fn check_digest(&self, sha256: &str) -> Option<(String, Option<String>, Grant)> {
        self.store.token_and_scope(sha256).ok().flatten()
    }

    /// Every token (ids, names, creation times; no secrets).
    pub fn list(&self) -> std::io::Result<Vec<berth_api::TokenInfo>> {
        let rows = self.store.tokens().map_err(std::io::Error::other)?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at_ms, grant)| berth_api::TokenInfo { id, name, created_at_ms, grant })
            .collect())
    }

    /// Revoke a token: requests carrying it are refused from now on. Whether it existed.
    pub fn revoke(&self, id: &str) -> std::io::Result<bool> {
        self.store.revoke_token(id).map_err(std::io::Error::other)
    }

    /// The id of the token, if `token` is a valid one.
    pub fn check(&self, token: &str) -> Option<String> {
        self.store.token_by_digest(&digest(token)).ok().flatten()
    }
}

impl From<StoreError> for crate::EngineError {
    fn from(e: StoreError) -> crate::EngineError {
        crate::EngineError::Log(std::io::Error::other(e))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_check_and_survive_a_reopen_but_are_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tokens::new(Arc::new(Store::open(dir.path()).unwrap()));
        let m = t.mint("ci", &Grant::default()).unwrap();
        assert_eq!(t.check(&m.token), Some(m.id.clone()));
        assert_eq!(t.check("berth_wrong"), None);
        drop(t);
        let again = Tokens::new(Arc::new(Store::open(dir.path()).unwrap()));
        assert_eq!(again.check(&m.token), Some(m.id));
        let db = std::fs::read(dir.path().join("berth.db")).unwrap_or_default();
        let wal = std::fs::read(dir.path().join("berth.db-wal")).unwrap_or_default();
        let needle = m.token.as_bytes();
        assert!(!db.windows(needle.len()).any(|w| w == needle) && !wal.windows(needle.len()).any(|w| w == needle));
    }
}
