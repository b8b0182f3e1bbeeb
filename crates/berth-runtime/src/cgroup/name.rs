//! Which sandbox names may become cgroup directory names.

use super::CgroupError;

/// The longest name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// Check that `name` is safe as one path component: 1 to 64 characters from `[A-Za-z0-9_.-]`,
/// not containing `..` (so neither `.` nor `..` can escape or alias the parent).
pub fn validate_name(name: &str) -> Result<(), CgroupError> {
    match problem(name) {
        Some(reason) => Err(CgroupError::InvalidName { name: name.to_owned(), reason }),
        None => Ok(()),
    }
}

/// What is wrong with `name`, if anything.
pub(crate) fn problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("longer than 64 characters")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
        Some("only letters, digits, '_', '.' and '-' are allowed")
    } else if name == "." || name.contains("..") {
        Some("must not be '.' or contain '..'")
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn good_names_pass() {
        for name in ["a", "sb-1234", "agent_7.run", "A.b-c_d", &"x".repeat(64)] {
            assert!(validate_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn bad_names_fail_with_a_reason() {
        let long = "x".repeat(65);
        for name in ["", ".", "..", "a..b", "../etc", "a/b", "/abs", "sp ace", "nul\0", "é", &long] {
            let err = validate_name(name).unwrap_err();
            assert!(matches!(err, CgroupError::InvalidName { .. }), "{name:?}: {err}");
            assert!(err.to_string().contains("invalid cgroup name"), "{err}");
        }
    }
}
