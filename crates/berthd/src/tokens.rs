//! API tokens for the TCP listener. Only their SHA-256 digests are kept (in `<root>/tokens.json`, mode 0600);
//! a token is shown once, when it is minted. Tokens are minted over the unix socket only, so reaching the
//! daemon over TCP never lets a client mint more.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use berth_api::MintedToken;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    id: String,
    name: String,
    sha256: String,
    created_at_ms: u64,
}

pub struct Tokens {
    path: PathBuf,
    stored: Mutex<Vec<Stored>>,
}

fn digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty())?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

impl Tokens {
    pub fn open(root: &Path) -> std::io::Result<Tokens> {
        let path = root.join("tokens.json");
        let stored = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Tokens { path, stored: Mutex::new(stored) })
    }

    /// Mint a token, persist its digest, and return it (the secret is not kept).
    pub fn mint(&self, name: &str) -> std::io::Result<MintedToken> {
        let token = format!("berth_{}", random_hex(32)?);
        let minted = MintedToken { id: random_hex(6)?, name: name.to_string(), token };
        let mut stored = self.stored.lock().map_err(|_| std::io::Error::other("token store poisoned"))?;
        stored.push(Stored {
            id: minted.id.clone(),
            name: minted.name.clone(),
            sha256: digest(&minted.token),
            created_at_ms: crate::engine::now_ms(),
        });
        let tmp = self.path.with_extension("json.new");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&*stored).map_err(std::io::Error::other)?)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        std::fs::rename(&tmp, &self.path)?;
        Ok(minted)
    }

    /// The id of the token, if `token` is a valid one.
    pub fn check(&self, token: &str) -> Option<String> {
        let d = digest(token);
        let stored = self.stored.lock().ok()?;
        // Compare every digest fully, so the time taken does not say how much of one matched.
        let mut found = None;
        for s in stored.iter() {
            let same =
                s.sha256.bytes().zip(d.bytes()).fold(s.sha256.len() ^ d.len(), |acc, (a, b)| acc | usize::from(a ^ b));
            if same == 0 {
                found = Some(s.id.clone());
            }
        }
        found
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_check_and_survive_a_reopen_but_are_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tokens::open(dir.path()).unwrap();
        let m = t.mint("ci").unwrap();
        assert_eq!(t.check(&m.token), Some(m.id.clone()));
        assert_eq!(t.check("berth_wrong"), None);
        assert_eq!(Tokens::open(dir.path()).unwrap().check(&m.token), Some(m.id));
        let on_disk = std::fs::read_to_string(dir.path().join("tokens.json")).unwrap();
        assert!(!on_disk.contains(&m.token), "only digests are stored");
    }
}
