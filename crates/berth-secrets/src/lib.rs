//! Secrets: values a sandbox needs (tokens, passwords, keys) that must not be shown or stored in the clear.
//!
//! A secret is stored by name with [`Vault::set`], sealed with ChaCha20-Poly1305 under a 256-bit key that lives
//! in its own file, apart from the data root's database, so a copy of the database (or of the whole data root
//! without the key) reveals nothing. A sandbox declared with a secret gets its value as an environment variable
//! of that name in every exec, which is why a name is held to [`check_name`]'s rules.
//!
//! Everything berth shows or keeps (streamed exec output, exec logs on disk, the journal, error messages) goes
//! through a [`Redactor`], which replaces each occurrence of a value, and of its common encodings, with
//! `[redacted:NAME]`. Redaction is defence in depth, not a guarantee: a program that holds a value can always
//! print it transformed (see [`Redactor`] for what is and is not caught).
#![forbid(unsafe_code)]

mod encode;
mod error;
mod key;
mod redact;
mod seal;
mod search;
mod vault;

pub use error::SecretError;
pub use redact::{MIN_DERIVED_LEN, MIN_SECRET_LEN, Redactor};
pub use vault::{MAX_VALUE_LEN, SecretInfo, Vault};
/// Values come back in a buffer that is wiped when dropped.
pub use zeroize::Zeroizing;

/// The longest secret name.
pub const MAX_NAME_LEN: usize = 64;

/// Checks a secret name: 1 to 64 of `A-Z`, `0-9` and `_`, not starting with a digit.
///
/// The name becomes an environment variable's name inside the sandbox and a file name in the vault, so it is
/// held to the portable subset of both (upper case by convention, which also keeps one spelling per secret).
pub fn check_name(name: &str) -> Result<(), SecretError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than 64 characters"
    } else if name.as_bytes()[0].is_ascii_digit() {
        "it starts with a digit"
    } else if !name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
        "it has a character other than A-Z, 0-9 and _"
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(80).collect();
    Err(SecretError::BadName { name: shown, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["A", "_", "GITHUB_TOKEN", "_1", "A1_B2", &"X".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1A", "9", "a", "Token", "A-B", "A B", "A.B", "../X", "É", "A\0", &"X".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
