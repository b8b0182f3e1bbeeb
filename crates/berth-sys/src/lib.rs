//! berth-sys owns every system call berth makes and all of its `unsafe` code.
//!
//! Other crates forbid `unsafe`; what they need from the kernel they ask of this crate through small, safe
//! functions whose names say what they do. This crate holds no policy: which mounts, which limits, which
//! filter is decided elsewhere and handed down as data.

pub mod clone;
mod error;
pub mod fd;
pub mod landlock;
pub mod mount;
pub mod net;
pub mod process;
pub mod seccomp;

pub use error::{SysError, SysResult};
