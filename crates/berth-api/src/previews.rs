//! Preview URLs: a server a sandbox runs on its own loopback, reached through the daemon's TCP listener.

use serde::{Deserialize, Serialize};

/// `POST /v1/sandboxes/{id}/previews`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePreview {
    /// The port the sandbox serves on its own `127.0.0.1`.
    pub port: u16,
    /// Reachable without a token.
    #[serde(default)]
    pub public: bool,
    /// How long it works; without one, until it is removed or its sandbox is.
    #[serde(default)]
    pub ttl_seconds: Option<f64>,
}

/// A preview of one port of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    pub id: String,
    pub sandbox_id: String,
    pub port: u16,
    pub public: bool,
    /// The URL to open, its token in it unless public (the token is shown only when the preview is made; a
    /// listing gives the URL without it).
    pub url: String,
    /// The same as a host of its own (`http://<port>-<id>.<domain>/`), when the daemon has a `--domain`.
    pub host_url: Option<String>,
    /// The preview's own token (only in the answer that made it; `null` for a public one and in listings).
    pub token: Option<String>,
    pub created_at_ms: u64,
    pub expires_at_ms: Option<u64>,
}
