//! What the engine reports, and the API error code each maps to.

use berth_api::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{message}")]
    InvalidRequest { message: String },
    #[error("there is no sandbox {0:?}")]
    NoSandbox(String),
    #[error("sandbox {sandbox} has no exec {exec:?}")]
    NoExec { sandbox: String, exec: String },
    #[error("sandbox {sandbox} has no code context {context:?}: see GET /v1/sandboxes/{sandbox}/contexts")]
    NoContext { sandbox: String, context: String },
    #[error("the name {name:?} is already used by sandbox {id}: choose another, or remove that sandbox first")]
    NameTaken { name: String, id: String },
    #[error("the name {0:?} is already used by a sandbox being created at this moment: choose another")]
    NameBeingTaken(String),
    #[error("sandbox {id} is busy ({op}); try again when that has finished")]
    Busy { id: String, op: &'static str },
    #[error("sandbox {id} is {state}: {hint}")]
    WrongState { id: String, state: String, hint: String },
    #[error("sandbox {sandbox} has no preview {preview:?}: see GET /v1/sandboxes/{sandbox}/previews")]
    NoPreview { sandbox: String, preview: String },
    #[error("there is no snapshot {0:?}")]
    NoSnapshot(String),
    #[error("there is no volume {0:?}")]
    NoVolume(String),
    #[error("there is no pod {0:?} on this node: see GET /v1/pods")]
    NoPod(String),
    #[error("there is no image {0:?}: see berth image ls")]
    NoImage(String),
    #[error("there is no secret {0:?}: set it with berth secret set {0}")]
    NoSecret(String),
    #[error("{0}")]
    Conflict(String),
    /// What the caller's token may not do.
    #[error("{0}")]
    Unauthorized(String),
    /// What the caller's token is not granted (it is read-only, or the call is an operator's).
    #[error("{0}")]
    Forbidden(String),
    /// What the tenant's quota does not leave room for.
    #[error("{0}")]
    Quota(String),
    #[error("there is no tenant {0:?}: make it with berth tenant create {0}")]
    NoTenant(String),
    /// What this host lacks for the operation (CRIU for hibernation).
    #[error("{0}")]
    Unsupported(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("cannot start the sandbox's supervisor")]
    SpawnShim(#[source] std::io::Error),
    #[error("the sandbox could not be created: {0}")]
    Create(String),
    #[error("the sandbox's supervisor stopped answering")]
    ShimGone,
    #[error("the sandbox's init stopped answering")]
    InitGone,
    #[error("cannot keep the exec's output log")]
    Log(#[source] std::io::Error),
    #[error(transparent)]
    Sys(#[from] berth_sys::SysError),
    /// A files operation's own refusal or failure, with its own code.
    #[error(transparent)]
    Files(#[from] crate::files::FileError),
}

impl EngineError {
    pub fn invalid(message: impl Into<String>) -> EngineError {
        EngineError::InvalidRequest { message: message.into() }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            EngineError::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            EngineError::NoSandbox(_)
            | EngineError::NoExec { .. }
            | EngineError::NoContext { .. }
            | EngineError::NoPreview { .. } => ErrorCode::NotFound,
            EngineError::NameTaken { .. }
            | EngineError::NameBeingTaken(_)
            | EngineError::Busy { .. }
            | EngineError::WrongState { .. }
            | EngineError::Conflict(_) => ErrorCode::Conflict,
            EngineError::Unauthorized(_) => ErrorCode::Unauthorized,
            EngineError::Forbidden(_) => ErrorCode::Forbidden,
            EngineError::Quota(_) => ErrorCode::QuotaExceeded,
            EngineError::NoTenant(_)
            | EngineError::NoSnapshot(_)
            | EngineError::NoVolume(_)
            | EngineError::NoPod(_)
            | EngineError::NoImage(_)
            | EngineError::NoSecret(_) => ErrorCode::NotFound,
            EngineError::Unsupported(_) => ErrorCode::Unavailable,
            EngineError::Create(m) if m.contains("too many sandboxes") => ErrorCode::Unavailable,
            EngineError::Create(_)
            | EngineError::SpawnShim(_)
            | EngineError::ShimGone
            | EngineError::InitGone
            | EngineError::Log(_)
            | EngineError::Storage(_)
            | EngineError::Sys(_) => ErrorCode::Internal,
            EngineError::Files(e) => e.code(),
        }
    }
}
