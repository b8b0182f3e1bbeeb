//! berth-sys owns every system call berth makes and all of its `unsafe` code.
//!
//! Other crates forbid `unsafe`; what they need from the kernel they ask of this crate through small, safe
//! functions whose names say what they do. Which mounts and which limits is decided elsewhere and handed
//! down as data; the two filters that are policy by nature, the seccomp policy and the landlock rule set,
//! live here as data beside the code that installs them.

pub mod btrfs;
pub mod clone;
mod error;
pub mod fd;
pub mod fsids;
pub mod landlock;
pub mod mount;
pub mod mountinfo;
pub mod net;
pub mod process;
pub mod pty;
pub mod seccomp;
pub mod uts;

pub use error::{SysError, SysResult};
