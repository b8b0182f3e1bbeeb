//! berthd: the daemon's transports onto the engine (`berth_engine`). Each one translates and never decides:
//! the HTTP API on the unix socket and the TCP listener (`http` and its `*_http` route modules), previews of
//! sandboxes' ports, the web view, the E2B-compatible listener, MCP at `/mcp`, the WebSocket shell, and the
//! listeners' own bounds (`listen`). What a transport needs that the engine lacks, the engine grows.
#![forbid(unsafe_code)]

mod contexts_http;
mod desktop_http;
mod e2b;
mod exec_http;
mod files_http;
mod http;
pub mod listen;
mod mcp;
mod pods_http;
mod preview_http;
mod projects_http;
mod shell;
mod tenants_http;
mod usage_http;
mod web;

pub use berth_engine::{Bounds, DEFAULT_DISK, Engine, EngineError, StorageChoice, StorageOptions};
pub use http::ROUTES;
pub use http::{app, serve, tcp_app};

/// The daemon's TCP listener: where (none: the unix socket only), and the domain under which each previewed
/// port of a sandbox is a host of its own (`<port>-<id>.<domain>`).
#[derive(Debug, Clone, Default)]
pub struct Tcp {
    pub listen: Option<std::net::SocketAddr>,
    pub domain: Option<String>,
    /// Where to serve the E2B-compatible API (control plane and sandbox traffic on one port).
    pub e2b_listen: Option<std::net::SocketAddr>,
}
