//! berth-runtime builds one sandbox from a spec, runs it, and destroys it, leaving nothing behind.
//!
//! It owns the sandbox's shape (namespaces, id ranges, the layered root, limits, hardening) and its
//! lifecycle on one host. It does not own a database, an API or a scheduler: callers (the CLI's one-shot
//! `run`, the daemon) hold sandboxes and decide when they end.
#![forbid(unsafe_code)]

pub mod backend;
pub mod cgroup;
pub mod checkpoint;
mod child;
mod claims;
pub mod gvisor;
mod gvisor_backend;
mod gvisor_checkpoint;
pub mod ids;
pub mod image;
pub mod oci;
pub mod plan;
mod rename;
mod restore;
pub mod retarget;
mod sandbox;
pub mod spec;
pub mod trace;

use std::path::PathBuf;

pub use backend::{Backend, Dump, FileIds, FileRoot, Offered, OomScope, Supports, TerminalAt, Wake, backend, backends};
pub use restore::reservation_owner;
pub use sandbox::{Runtime, Sandbox, Stdio, Teardown, new_id, supervised, sweep_sandbox};

/// What went wrong building, running or destroying a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("berth needs root to create sandboxes (it maps each sandbox's root to an unprivileged host id range)")]
    NotRoot,
    #[error("sandbox {id} is already running")]
    Running { id: String },
    #[error(
        "{path} holds files that are not a sandbox's state: give a new or empty directory (berth takes over its \
         ownership)"
    )]
    ForeignState { path: PathBuf },
    #[error("cannot use the storage directory {path}")]
    Storage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the data directory {path} cannot be used: {reason}")]
    DataRoot { path: PathBuf, reason: String },
    #[error("cannot prepare the data directory {path}")]
    PrepareRoot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("claim a host id range")]
    ClaimIds {
        #[source]
        source: std::io::Error,
    },
    #[error("all {max} host id ranges are in use: too many sandboxes are running")]
    TooManySandboxes { max: u32 },
    #[error("there is no image named {name:?} (available: host)")]
    UnknownImage { name: String },
    #[error("cannot prepare the image {name:?}")]
    PrepareImage {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error("the {isolation} isolation is not available on this host: {reason}")]
    IsolationUnavailable { isolation: spec::Isolation, reason: String },
    #[error("the {isolation} isolation cannot {what}")]
    IsolationCannot { isolation: spec::Isolation, what: &'static str },
    #[error("cannot mount {path}: it does not exist on the host")]
    MountSource { path: PathBuf },
    #[error(
        "berth will not mount {path} read-write: it is owned by root on the host, so what a sandbox writes there \
         (setuid programs included) would be root's; mount it read-only (:ro) or give it an unprivileged owner"
    )]
    RootOwnedMount { path: PathBuf },
    #[error("too many mounts: at most {max} are allowed")]
    TooManyMounts { max: usize },
    #[error("cannot prepare the sandbox's directories")]
    PrepareSandbox {
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    Sys(#[from] berth_sys::SysError),
    #[error("the sandbox could not be set up: {message}")]
    Setup { message: String },
    #[error("the sandbox's init stopped answering")]
    InitGone,
    #[error(transparent)]
    Protocol(#[from] berth_init::protocol::ProtocolError),
    #[error("{message}")]
    Checkpoint { message: String },
    #[error("the sandbox was not fully removed; left behind: {}", leftovers.join(", "))]
    Leak { leftovers: Vec<String> },
}

/// Render an error and its causes on one line, each cause once: `a: b: c`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}
