//! berth-engine: every sandbox on a host and every command on them, as a library. It owns the lifecycle of
//! each sandbox (create, pause, hibernate, fork, TTL and idle timeouts, restart reconciliation), runs execs
//! with streamed, budgeted output, and keeps the store, the journal, tokens, metering and the cluster
//! database. It serves nothing: the daemon's transports (the HTTP API, the E2B listener, MCP, the web view,
//! previews) call its methods, and the compiler keeps them from reaching further in (this crate has no HTTP
//! server among its dependencies).
//!
//! Sandboxes are built by a small single-threaded helper per sandbox, the shim (`berth shim`), because
//! building one forks the calling process into new namespaces, which a multi-threaded daemon must never do.
//! The shim stays alive as the sandbox's supervisor (its init dies with it) and outlives daemon restarts,
//! so a new engine re-adopts running sandboxes from their shims. The engine talks to each sandbox's init
//! directly over the init's control socket, which the shim hands over.
#![forbid(unsafe_code)]

pub mod bounds;
pub mod cluster;
mod engine;
mod error;
pub mod exec;
pub mod exec_hibernation;
pub mod exec_log;
pub mod files;
#[cfg(test)]
mod isolation_guard;
pub mod journal;
pub mod launch;
pub mod log;
pub mod logins;
pub mod memory;
pub mod output_budget;
pub mod session;
pub mod shim;
pub mod store;
pub mod tokens;

pub use bounds::Bounds;
pub use engine::*;
pub use error::EngineError;

/// Sleep until `at`; forever when there is no `at` (a `select!` branch that is off until a time is set).
pub(crate) async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
