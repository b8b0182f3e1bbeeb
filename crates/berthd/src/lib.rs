//! berthd: the daemon. It serves the HTTP API, owns the lifecycle of every sandbox on the host (TTL, idle
//! timeout, restart reconciliation), and runs execs with streamed, budgeted output.
//!
//! Sandboxes are built by a small single-threaded helper per sandbox, the shim (`berth shim`), because
//! building one forks the calling process into new namespaces, which a multi-threaded daemon must never do.
//! The shim stays alive as the sandbox's supervisor (its init dies with it) and outlives daemon restarts,
//! so a new daemon re-adopts running sandboxes from their shims. The daemon talks to each sandbox's init
//! directly over the init's control socket, which the shim hands over.
#![forbid(unsafe_code)]

pub mod bounds;
mod budget;
pub mod cluster;
mod contexts_http;
mod e2b;
mod engine;
mod error;
mod exec;
mod exec_http;
mod exec_log;
mod exec_sleep;
pub mod files;
mod http;
pub mod journal;
mod launch;
pub mod listen;
pub mod log;
mod mcp;
mod memory;
mod pods_http;
mod preview_http;
mod projects_http;
mod session;
mod shell;
pub mod shim;
pub mod store;
pub mod tokens;
mod usage_http;
mod web;

pub use bounds::Bounds;
pub use engine::{DEFAULT_DISK, Engine, StorageChoice, StorageOptions};
pub use error::EngineError;
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
