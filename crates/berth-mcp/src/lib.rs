//! berth's MCP server: tools for models (create a sandbox, exec, run code, read and write files, snapshot,
//! fork, diff, egress, see and use a desktop) that are calls of berth's HTTP API and nothing more. The
//! transport is chosen by the caller: `berth mcp` serves stdio and reaches the daemon over its socket; the
//! daemon serves streamable HTTP at `/mcp` and reaches itself in-process. Either way the API scopes, journals
//! and refuses each call.
#![forbid(unsafe_code)]

pub mod api;
mod args;
mod desktop;
mod files;
mod output;
mod server;
mod tools;

pub use api::{Api, ApiError, ApiFuture, Body, Call, Reply};
pub use server::{Berth, Scope, http_service, serve_stdio};
