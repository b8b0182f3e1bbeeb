//! Files inside a running sandbox: read, write, list, stat, remove, move (rename) and make directories, and
//! move whole trees in and out as tar.
//!
//! The daemon is host root and the sandbox is not trusted, so every path goes through the same few rules:
//!
//! - A path is resolved from the sandbox's own root, `/proc/<init>/root`, with `openat2` and
//!   `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: `..` at the top, absolute symlinks and symlinks that climb
//!   out all stay inside the sandbox, and `/proc/*/root`-style magic links are refused. API paths must be
//!   absolute, and a `..` component is refused outright.
//! - Anything new is created relative to its parent's descriptor with `O_EXCL`/`O_NOFOLLOW` (or mkdirat,
//!   symlinkat), and a move is a `renameat2` between the two parents' descriptors, never by resolving a path
//!   string again; recursive removal and tar work from descriptors too.
//! - A file is opened `O_PATH` first and opened for I/O (through `/proc/self/fd`) only once it is known to be
//!   a regular file, so a device or a FIFO is never opened.
//! - Nothing on /proc, /sys or another kernel file system is read or written: there, the daemon's
//!   credentials would be the host's.
//! - The work runs on a thread whose file-system ids are the sandbox root's host ids (see
//!   `berth_sys::fsids`): the sandbox's file systems accept new files from it, and new files and
//!   directories are owned by root inside (they are also chowned to it explicitly).
//!
//! The tar functions also serve the CLI on the host side (`berth cp`), with the host's own ids.
//!
//! `error` holds `FileError`, `fs` the sandbox's file system (`SandboxFs`), `fd` the descriptor helpers under
//! it, and `archive` the tar code. The HTTP side is the daemon's (`files_http`).

mod archive;
mod error;
mod fd;
mod fs;

pub use archive::{extract_host, validate_tar, write_tar_host};
pub use error::{FileError, Result, io_err};
pub use fs::{Got, SandboxFs, parse_path};

/// The largest file the API reads or writes whole.
pub const MAX_FILE: u64 = 64 << 20;
/// Deepest directory tree walked (each level holds a descriptor open).
const MAX_DEPTH: usize = 256;

/// An octal mode such as `644`, `0644` or `0o644`.
pub fn parse_mode(m: Option<&str>) -> Result<Option<u32>> {
    let Some(m) = m else { return Ok(None) };
    let digits = m.strip_prefix("0o").unwrap_or(m);
    let octal = !digits.is_empty() && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(digits, 8) {
        Ok(v) if v <= 0o7777 && octal => Ok(Some(v)),
        _ => Err(FileError::Invalid(format!("{m:?} is not a file mode: use octal, such as 0644"))),
    }
}
