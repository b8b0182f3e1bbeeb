//! The web view's logins: a cookie and a key that together stand for the API token a browser logged in with.
//! The engine keeps them beside the tokens because a revoked token ends its logins; the web view (a
//! transport) opens, reads and closes them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::tokens::{digest, random_hex};

/// How long a login lasts, and how many are kept (the oldest goes first).
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
const MAX_LOGINS: usize = 64;

/// Open web logins, by the digest of their cookie.
#[derive(Default)]
pub struct Logins {
    open: std::sync::Mutex<HashMap<String, Login>>,
}

struct Login {
    /// The digest of the token it was opened with (checked again at each request: revoked, it ends here).
    token: String,
    key: String,
    opened: Instant,
}

impl Logins {
    /// Open a login for a token (by its digest): the cookie's value and the key.
    pub fn open(&self, token: String) -> std::io::Result<(String, String)> {
        let (cookie, key) = (random_hex(32)?, random_hex(32)?);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, l| l.opened.elapsed() < LIFETIME);
        while open.len() >= MAX_LOGINS {
            let Some(oldest) = open.iter().min_by_key(|(_, l)| l.opened).map(|(k, _)| k.clone()) else { break };
            open.remove(&oldest);
        }
        open.insert(digest(&cookie), Login { token, key: digest(&key), opened: Instant::now() });
        Ok((cookie, key))
    }

    /// The token digest of the login this cookie and key open, if they open one.
    pub fn token(&self, cookie: &str, key: &str) -> Option<String> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let login = open.get(&digest(cookie))?;
        (login.opened.elapsed() < LIFETIME && login.key == digest(key)).then(|| login.token.clone())
    }

    pub fn close(&self, cookie: &str) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&digest(cookie));
    }

    /// End the login with this key (the page's logout: its cookie is for `/v1/` and does not come with it).
    pub fn close_by_key(&self, key: &str) {
        let key = digest(key);
        self.open.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, l| l.key != key);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_login_needs_its_cookie_and_its_key() {
        let logins = Logins::default();
        let (cookie, key) = logins.open("t1".into()).unwrap();
        assert_eq!(logins.token(&cookie, &key).as_deref(), Some("t1"));
        assert_eq!(logins.token(&cookie, "other"), None);
        assert_eq!(logins.token(&key, &key), None);
        logins.close(&cookie);
        assert_eq!(logins.token(&cookie, &key), None);
        let (cookie, key) = logins.open("t2".into()).unwrap();
        logins.close_by_key(&key);
        assert_eq!(logins.token(&cookie, &key), None);
    }

    #[test]
    fn the_oldest_login_goes_first() {
        let logins = Logins::default();
        let first = logins.open("first".into()).unwrap();
        for _ in 0..MAX_LOGINS {
            logins.open("later".into()).unwrap();
        }
        assert_eq!(logins.token(&first.0, &first.1), None);
        assert_eq!(logins.open.lock().unwrap().len(), MAX_LOGINS);
    }
}
