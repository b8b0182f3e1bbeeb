//! `FileError`, why a files operation failed: its API error code, and the errors a failed system call or a
//! file the API will not move turns into.

use std::io;

use berth_api::ErrorCode;
use rustix::fs::FileType;
use rustix::io::Errno;

use super::MAX_FILE;
use super::fd::{kind_name, kind_of};

/// Why a files operation failed; each maps to an API error code.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// 400: a bad path, an escape attempt, or something the API will not touch.
    #[error("{0}")]
    Invalid(String),
    /// 404
    #[error("{0}")]
    NotFound(String),
    /// 409: a directory where a file was wanted (or the reverse), not empty, exists, read-only.
    #[error("{0}")]
    Conflict(String),
    /// 413
    #[error("{0}")]
    TooLarge(String),
    /// 500
    #[error("{0}")]
    Internal(String),
}

impl FileError {
    pub fn code(&self) -> ErrorCode {
        match self {
            FileError::Invalid(_) => ErrorCode::InvalidRequest,
            FileError::NotFound(_) => ErrorCode::NotFound,
            FileError::Conflict(_) => ErrorCode::Conflict,
            FileError::TooLarge(_) => ErrorCode::PayloadTooLarge,
            FileError::Internal(_) => ErrorCode::Internal,
        }
    }
}

pub type Result<T, E = FileError> = std::result::Result<T, E>;

/// A failed system call on `path`, doing `what`, as the error its errno deserves.
pub(super) fn sys(what: &str, path: &str, e: Errno) -> FileError {
    let message = format!("cannot {what} {path}: {}", io::Error::from(e));
    match e {
        Errno::NOENT => FileError::NotFound(message),
        Errno::LOOP => FileError::Invalid(format!(
            "{message} (a symbolic link that is never followed here, such as /proc/*/root, or too many links)"
        )),
        Errno::XDEV | Errno::NAMETOOLONG | Errno::INVAL => FileError::Invalid(message),
        Errno::ISDIR
        | Errno::NOTDIR
        | Errno::EXIST
        | Errno::NOTEMPTY
        | Errno::BUSY
        | Errno::ROFS
        | Errno::ACCESS
        | Errno::PERM
        | Errno::TXTBSY
        | Errno::NOSPC
        | Errno::DQUOT
        | Errno::MLINK
        | Errno::FBIG => FileError::Conflict(message),
        _ => FileError::Internal(message),
    }
}

pub fn io_err(what: &str, path: &str, e: io::Error) -> FileError {
    match e.raw_os_error() {
        Some(n) => sys(what, path, Errno::from_raw_os_error(n)),
        None => FileError::Internal(format!("cannot {what} {path}: {e}")),
    }
}

pub(super) fn too_large(path: &str, size: u64) -> FileError {
    FileError::TooLarge(format!("{path} is {size} bytes; the files API moves at most {MAX_FILE} bytes at once"))
}

pub(super) fn not_regular(path: &str, t: FileType) -> FileError {
    FileError::Conflict(format!("{path} is a {}, not a regular file", kind_name(kind_of(t))))
}
