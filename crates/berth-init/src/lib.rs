//! berth-init is PID 1 inside every sandbox: it reaps orphans, forwards signals, and runs the commands it is
//! asked to over one control socket.
//!
//! It stays small on purpose (no async runtime, no allocation-heavy state): a thousand idle sandboxes mean a
//! thousand of these. It owns the protocol too, so that the supervisor on the other end (`berth run` today,
//! the daemon tomorrow, a microVM agent later) speaks exactly what init understands.
#![forbid(unsafe_code)]

mod agent;
pub mod memory;
pub mod protocol;
pub mod relay;
mod streams;
mod terminal;
mod trees;
pub mod watch;

pub use agent::run as main;
