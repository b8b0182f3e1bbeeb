use std::io;

/// A system call that failed, with what berth was doing when it did.
#[derive(Debug, thiserror::Error)]
#[error("{action}")]
pub struct SysError {
    action: String,
    #[source]
    source: io::Error,
}

pub type SysResult<T> = Result<T, SysError>;

impl SysError {
    pub fn new(action: impl Into<String>, source: impl Into<io::Error>) -> Self {
        Self { action: action.into(), source: source.into() }
    }

    /// The raw errno, when the failure came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The kind of the underlying I/O error.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    pub fn action(&self) -> &str {
        &self.action
    }
}

/// Attach an action to a failing call: `rustix::fs::mkdir(..).ctx(|| format!("create {path}"))`.
pub trait Context<T> {
    fn ctx<S: Into<String>>(self, action: impl FnOnce() -> S) -> SysResult<T>;
}

impl<T, E: Into<io::Error>> Context<T> for Result<T, E> {
    fn ctx<S: Into<String>>(self, action: impl FnOnce() -> S) -> SysResult<T> {
        self.map_err(|e| SysError::new(action(), e))
    }
}
