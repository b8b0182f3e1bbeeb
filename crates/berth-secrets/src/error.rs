use std::io;
use std::path::PathBuf;

/// What went wrong with a secret or the vault; each message says which secret or file, what failed, and what
/// to do about it. No message ever contains a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "{name:?} is not a valid secret name: {reason}; a name is 1 to 64 of A-Z, 0-9 and _, not starting with a \
         digit, because it becomes an environment variable's name (for example GITHUB_TOKEN)"
    )]
    BadName { name: String, reason: &'static str },
    #[error(
        "the value of secret {name} is {len} bytes, over the limit of {max}: a secret is passed as an environment \
         variable, so it must stay small (store a large credential file in the sandbox's files instead)"
    )]
    TooLarge { name: String, len: usize, max: usize },
    #[error("the value of secret {name} contains a NUL byte, which an environment variable cannot hold")]
    NulByte { name: String },
    #[error(
        "the key file {} is missing but sealed secrets exist in {}: restore the key file, or, if it is lost, \
         delete that directory (the secrets cannot be recovered without the key) and set the secrets again",
        key.display(),
        dir.display()
    )]
    KeyMissing { key: PathBuf, dir: PathBuf },
    #[error(
        "the key file {} is not the key the secrets in {} were sealed with: restore the right key file, or remove \
         the secrets (delete that directory) and set them again",
        key.display(),
        dir.display()
    )]
    WrongKey { key: PathBuf, dir: PathBuf },
    #[error("the key file {} is {len} bytes, not {expected}: it is not a secrets key; restore the right key file", key.display())]
    KeyLength { key: PathBuf, len: u64, expected: usize },
    #[error(
        "the key file {} can be read or written by users other than its owner (mode {mode:04o}); make it private \
         with `chmod 600 {}` before secrets are used with it",
        key.display(),
        key.display()
    )]
    KeyMode { key: PathBuf, mode: u32 },
    #[error(
        "the key file {} is owned by uid {owner}, not by uid {uid} which runs berth: whoever owns it could read \
         every secret; give it to uid {uid} with chown",
        key.display()
    )]
    KeyOwner { key: PathBuf, owner: u32, uid: u32 },
    #[error("the key file {} is not a regular file", key.display())]
    KeyNotFile { key: PathBuf },
    #[error(
        "secret {name} cannot be opened: {} was changed, or copied from another secret's file, after it was sealed; \
         set the secret again",
        file.display()
    )]
    Tampered { name: String, file: PathBuf },
    #[error("secret {name} cannot be read: {} {reason}; set the secret again", file.display())]
    BadFormat { name: String, file: PathBuf, reason: &'static str },
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not get random bytes from the operating system: {0}")]
    Random(String),
    #[error("secret {name} could not be sealed (the cipher refused it)")]
    Seal { name: String },
}

impl SecretError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> SecretError {
        let path = path.into();
        move |source| SecretError::Io { action, path, source }
    }
}
