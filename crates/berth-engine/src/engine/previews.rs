//! Preview URLs: one port of one sandbox, opened through the daemon's TCP listener at
//! `/preview/<sandbox>/<port>/…`, with a token of its own (not an API token) unless public, an optional
//! expiry, and an end when it is removed or its sandbox is. The previews are kept in `<root>/previews.json`
//! (their tokens as SHA-256 digests), so that they outlive a daemon restart as their sandboxes do.

use std::sync::Arc;

use berth_api::{CreatePreview, Preview};
use serde::{Deserialize, Serialize};

use super::{Engine, now_ms};
use crate::EngineError;
use crate::tokens::digest;

/// Previews one sandbox may have at once.
pub const MAX_PER_SANDBOX: usize = 32;

/// A preview as the daemon keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub id: String,
    pub sandbox_id: String,
    pub port: u16,
    pub public: bool,
    /// SHA-256 of its token, in hexadecimal (empty for a public one).
    pub token_digest: String,
    pub created_at_ms: u64,
    pub expires_at_ms: Option<u64>,
}

/// The previews the daemon holds.
#[derive(Default)]
pub(crate) struct Previews {
    kept: std::sync::Mutex<Vec<Kept>>,
    /// The daemon's TCP listener, which the URLs name.
    listen: std::sync::OnceLock<std::net::SocketAddr>,
    /// The domain under which each previewed port is a host (`<port>-<id>.<domain>`).
    domain: std::sync::OnceLock<String>,
}

fn token_query(token: Option<&str>) -> String {
    token.map(|t| format!("?berth_preview_token={t}")).unwrap_or_default()
}

fn random_hex(bytes: usize) -> Result<String, EngineError> {
    crate::tokens::random_hex(bytes).map_err(|e| berth_sys::SysError::new("draw a preview token", e).into())
}

/// A connection open through a preview, counted on its sandbox while it lives; the last one to close brings
/// the reaper's next pass (the sandbox may be idle from then on).
pub struct OpenConnection {
    count: Arc<std::sync::atomic::AtomicUsize>,
    reaper: Arc<tokio::sync::Notify>,
}

impl OpenConnection {
    pub fn new(count: &Arc<std::sync::atomic::AtomicUsize>, reaper: &Arc<tokio::sync::Notify>) -> OpenConnection {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        OpenConnection { count: Arc::clone(count), reaper: Arc::clone(reaper) }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if self.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.reaper.notify_one();
        }
    }
}

/// Why a request for a preview is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No preview of that port of that sandbox (or it expired, was removed, or its sandbox was).
    NotFound,
    /// A token was needed and none came, or it is not this port's.
    Token,
}

impl Engine {
    fn previews_file(&self) -> std::path::PathBuf {
        self.root.join("previews.json")
    }

    /// Read the kept previews (once, at start).
    pub(super) fn load_previews(&self) {
        let kept: Vec<Kept> =
            std::fs::read(self.previews_file()).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        if let Ok(mut k) = self.previews.kept.lock() {
            *k = kept;
        }
    }

    /// Write the previews whole under a new name and rename it into place.
    fn save_previews(&self, kept: &[Kept]) -> Result<(), EngineError> {
        let path = self.previews_file();
        let fresh = path.with_extension("json.new");
        let text = serde_json::to_vec_pretty(kept).map_err(|e| EngineError::Log(std::io::Error::other(e)))?;
        std::fs::write(&fresh, text).map_err(EngineError::Log)?;
        std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(EngineError::Log)?;
        std::fs::rename(&fresh, &path).map_err(EngineError::Log)
    }

    /// The daemon's TCP listener is at `addr` (the previews' URLs name it).
    pub fn set_listen_addr(&self, addr: std::net::SocketAddr) {
        let _ = self.previews.listen.set(addr);
    }

    /// Previews are hosts of their own under `domain` too.
    pub fn set_preview_domain(&self, domain: String) {
        let _ = self.previews.domain.set(domain);
    }

    /// The domain previews are hosts under, if any.
    pub fn preview_domain(&self) -> Option<&str> {
        self.previews.domain.get().map(String::as_str)
    }

    fn preview_url(&self, k: &Kept, token: Option<&str>) -> String {
        let base = self.previews.listen.get().map(|a| format!("http://{a}")).unwrap_or_default();
        format!("{base}/preview/{}/{}/{}", k.sandbox_id, k.port, token_query(token))
    }

    /// `http://<port>-<id>.<domain>[:<listener's port>]/`, when the daemon has a domain.
    fn preview_host_url(&self, k: &Kept, token: Option<&str>) -> Option<String> {
        let domain = self.previews.domain.get()?;
        let port = self.previews.listen.get().map(|a| a.port()).filter(|p| *p != 80);
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        Some(format!("http://{}-{}.{domain}{port}/{}", k.port, k.sandbox_id, token_query(token)))
    }

    fn shown(&self, k: &Kept, token: Option<String>) -> Preview {
        Preview {
            id: k.id.clone(),
            sandbox_id: k.sandbox_id.clone(),
            port: k.port,
            public: k.public,
            url: self.preview_url(k, token.as_deref()),
            host_url: self.preview_host_url(k, token.as_deref()),
            token,
            created_at_ms: k.created_at_ms,
            expires_at_ms: k.expires_at_ms,
        }
    }

    /// The previews of sandbox `sid` that have not expired (the expired ones are dropped).
    fn previews_of(&self, sid: &str) -> Vec<Kept> {
        let now = now_ms();
        let Ok(mut kept) = self.previews.kept.lock() else { return Vec::new() };
        let before = kept.len();
        kept.retain(|k| k.expires_at_ms.is_none_or(|t| t > now));
        if kept.len() != before {
            let _ = self.save_previews(&kept);
        }
        kept.iter().filter(|k| k.sandbox_id == sid).cloned().collect()
    }

    /// `POST /v1/sandboxes/{id}/previews`: open one port of a sandbox through the TCP listener.
    pub async fn create_preview(&self, id: &str, req: CreatePreview) -> Result<Preview, EngineError> {
        if self.previews.listen.get().is_none() {
            return Err(EngineError::Conflict(
                "this daemon has no TCP listener for previews to go through: start it with berth daemon --listen \
                 ADDR:PORT"
                    .into(),
            ));
        }
        if req.port == 0 {
            return Err(EngineError::invalid("port must be 1 to 65535: the port the sandbox serves on 127.0.0.1"));
        }
        let ttl_ms = match req.ttl_seconds {
            Some(t) if !(t > 0.0 && t <= berth_api::MAX_DURATION_SECONDS) => {
                return Err(EngineError::invalid(format!(
                    "ttl_seconds must be a positive number of seconds, at most {} (100 years)",
                    berth_api::MAX_DURATION_SECONDS
                )));
            }
            Some(t) => Some((t * 1000.0).ceil() as u64),
            None => None,
        };
        let sid = self.get(id).await?.id;
        if self.previews_of(&sid).len() >= MAX_PER_SANDBOX {
            return Err(EngineError::Conflict(format!(
                "sandbox {sid} has {MAX_PER_SANDBOX} previews, the most it may have: remove one first (berth expose rm)"
            )));
        }
        let token = match req.public {
            true => None,
            false => Some(format!("bpv_{}", random_hex(32)?)),
        };
        let created = now_ms();
        let kept = Kept {
            id: random_hex(6)?,
            sandbox_id: sid.clone(),
            port: req.port,
            public: req.public,
            token_digest: token.as_deref().map(digest).unwrap_or_default(),
            created_at_ms: created,
            expires_at_ms: ttl_ms.map(|t| created.saturating_add(t)),
        };
        {
            let mut all = self.previews.kept.lock().map_err(|_| EngineError::Log(std::io::Error::other("poisoned")))?;
            all.push(kept.clone());
            self.save_previews(&all)?;
        }
        let shown = self.shown(&kept, token);
        self.note_preview(
            &sid,
            "expose",
            serde_json::json!({"port": req.port, "public": req.public, "ttl_seconds": req.ttl_seconds}),
            serde_json::json!({"preview": kept.id, "expires_at_ms": kept.expires_at_ms}),
        )
        .await;
        Ok(shown)
    }

    /// `GET /v1/sandboxes/{id}/previews`: its previews, their URLs without tokens.
    pub async fn list_previews(&self, id: &str) -> Result<Vec<Preview>, EngineError> {
        let sid = self.get(id).await?.id;
        Ok(self.previews_of(&sid).iter().map(|k| self.shown(k, None)).collect())
    }

    /// `DELETE /v1/sandboxes/{id}/previews/{preview}`: the preview stops working at once.
    pub async fn remove_preview(&self, id: &str, preview: &str) -> Result<(), EngineError> {
        let sid = self.get(id).await?.id;
        let removed = {
            let mut all = self.previews.kept.lock().map_err(|_| EngineError::Log(std::io::Error::other("poisoned")))?;
            let before = all.len();
            all.retain(|k| !(k.sandbox_id == sid && k.id == preview));
            let removed = all.len() != before;
            if removed {
                self.save_previews(&all)?;
            }
            removed
        };
        if !removed {
            return Err(EngineError::NoPreview { sandbox: sid, preview: preview.to_string() });
        }
        self.note_preview(&sid, "unexpose", serde_json::json!({"preview": preview}), serde_json::json!({})).await;
        Ok(())
    }

    /// The sandbox is being removed: its previews end (how many did).
    pub(super) fn close_previews(&self, sid: &str) -> usize {
        let Ok(mut all) = self.previews.kept.lock() else { return 0 };
        let before = all.len();
        all.retain(|k| k.sandbox_id != sid);
        let closed = before - all.len();
        if closed > 0 {
            let _ = self.save_previews(&all);
        }
        closed
    }

    /// Whether a request may go through the preview of `port` of sandbox `id` with `token`: the preview's id.
    pub fn check_preview(&self, id: &str, port: u16, token: Option<&str>) -> Result<String, Refusal> {
        let now = now_ms();
        let all = self.previews.kept.lock().map_err(|_| Refusal::NotFound)?;
        let mut of_port = all
            .iter()
            .filter(|k| k.sandbox_id == id && k.port == port && k.expires_at_ms.is_none_or(|t| t > now))
            .peekable();
        if of_port.peek().is_none() {
            return Err(Refusal::NotFound);
        }
        let given = token.map(digest);
        of_port
            .find(|k| k.public || given.as_deref() == Some(k.token_digest.as_str()))
            .map(|k| k.id.clone())
            .ok_or(Refusal::Token)
    }

    /// A stream socket connected to `127.0.0.1:port` inside sandbox `id` (woken or resumed first, as any
    /// activity does), through its init, and what counts it as open until it is dropped.
    pub async fn connect_port(
        &self,
        id: &str,
        port: u16,
    ) -> Result<(tokio::net::UnixStream, Arc<OpenConnection>), EngineError> {
        let live = self.live_or_wake(id, "preview").await?;
        self.touch(&live, "preview").await?;
        let open = Arc::new(OpenConnection::new(&live.previews_open, &self.reap_wake));
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| berth_sys::SysError::new("make a socket pair for a preview", e))?;
        ours.set_nonblocking(true).map_err(|e| berth_sys::SysError::new("make a socket pair for a preview", e))?;
        live.session
            .send(&berth_init::protocol::Request::ConnectPort { port }, &[std::os::fd::AsFd::as_fd(&theirs)])?;
        drop(theirs);
        let stream = tokio::net::UnixStream::from_std(ours)
            .map_err(|e| berth_sys::SysError::new("watch a preview's socket", e))?;
        Ok((stream, open))
    }

    /// Journal one request through preview `preview` of sandbox `sid`.
    pub async fn journal_preview(&self, sid: &str, preview: &str, method: &str, path: &str, status: u16) {
        self.note_preview(
            sid,
            "preview",
            serde_json::json!({"preview": preview, "method": method, "path": path}),
            serde_json::json!({"status": status}),
        )
        .await;
    }

    async fn note_preview(&self, sid: &str, action: &str, args: serde_json::Value, result: serde_json::Value) {
        if let Ok(live) = self.live(sid).await {
            live.note(action, args, result);
        }
    }
}
