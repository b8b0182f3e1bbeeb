//! Secrets the proxy writes into requests, so the sandbox only ever holds a placeholder.
//!
//! The proxy replaces a placeholder with its value only in the head of a plain-HTTP request whose
//! destination (already allowed by the policy, and the only host the request can reach) matches the
//! injection's rule, and, for an injection that asks for it, in the head of an HTTPS request inside an
//! intercepted tunnel to such a host. Responses from every host a secret goes to are searched for the value,
//! which is replaced with the placeholder (see [`crate::reflect`]).

use std::fmt;

use crate::rule::{Host, Rule};

/// A secret value written into requests to matching hosts in place of a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Injection {
    /// Which destinations receive the value.
    pub host_rule: Rule,
    /// What the sandbox writes where the secret belongs (at least 8 visible ASCII characters).
    pub placeholder: String,
    /// The secret.
    pub value: String,
    /// A header to add with the value when the request does not carry that header at all.
    pub header: Option<String>,
    /// Inject into HTTPS only (and never into plain HTTP): CONNECT tunnels to matching hosts are intercepted (the proxy terminates
    /// TLS with a certificate from the sandbox's own authority, see [`crate::CertificateAuthority`], and
    /// speaks verified TLS to the real host). Without it, tunnels pass untouched and the placeholder
    /// arrives as the sandbox wrote it.
    pub intercept_tls: bool,
}

/// Why an injection cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectionError {
    #[error("a secret placeholder must be at least 8 characters, so it cannot occur by accident")]
    ShortPlaceholder,
    #[error("a secret placeholder may contain only visible ASCII characters (no spaces)")]
    BadPlaceholder,
    #[error("a secret value may not be empty or contain control characters (such as line breaks)")]
    BadValue,
    #[error("{0:?} is not a valid HTTP header name")]
    BadHeader(String),
}

// The value must never reach a log through Debug.
impl fmt::Debug for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Injection")
            .field("host_rule", &self.host_rule.to_string())
            .field("placeholder", &self.placeholder)
            .field("value", &"<redacted>")
            .field("header", &self.header)
            .field("intercept_tls", &self.intercept_tls)
            .finish()
    }
}

impl Injection {
    /// Checks the injection can be written into a request head without breaking its syntax.
    pub fn validate(&self) -> Result<(), InjectionError> {
        if self.placeholder.len() < 8 {
            return Err(InjectionError::ShortPlaceholder);
        }
        if !self.placeholder.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InjectionError::BadPlaceholder);
        }
        if self.value.is_empty() || self.value.chars().any(char::is_control) {
            return Err(InjectionError::BadValue);
        }
        if let Some(h) = &self.header {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if h.is_empty() || !h.bytes().all(token) {
                return Err(InjectionError::BadHeader(h.clone()));
            }
        }
        Ok(())
    }

    pub(crate) fn applies_to(&self, host: &Host, port: u16) -> bool {
        self.host_rule.matches(host, port)
    }
}

/// `hay` with every `needle` replaced by `with`, or `None` if there was none.
pub(crate) fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let mut out = Vec::new();
    let mut last = 0;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if &hay[i..i + needle.len()] == needle {
            out.extend_from_slice(&hay[last..i]);
            out.extend_from_slice(with);
            i += needle.len();
            last = i;
        } else {
            i += 1;
        }
    }
    if last == 0 {
        return None;
    }
    out.extend_from_slice(&hay[last..]);
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn inj(placeholder: &str, value: &str, header: Option<&str>) -> Injection {
        Injection {
            host_rule: "api.test".parse().unwrap(),
            placeholder: placeholder.into(),
            value: value.into(),
            header: header.map(Into::into),
            intercept_tls: false,
        }
    }

    #[test]
    fn validation_and_redaction() {
        assert!(inj("BERTH_SECRET_1", "s3cr3t", Some("Authorization")).validate().is_ok());
        assert_eq!(inj("short", "v", None).validate(), Err(InjectionError::ShortPlaceholder));
        assert_eq!(inj("has space!", "v", None).validate(), Err(InjectionError::BadPlaceholder));
        assert_eq!(inj("PLACEHOLDER", "a\r\nb", None).validate(), Err(InjectionError::BadValue));
        assert_eq!(inj("PLACEHOLDER", "", None).validate(), Err(InjectionError::BadValue));
        assert!(inj("PLACEHOLDER", "v", Some("Bad Header")).validate().is_err());
        assert!(!format!("{:?}", inj("PLACEHOLDER", "s3cr3t", None)).contains("s3cr3t"));
    }

    #[test]
    fn replacing() {
        assert_eq!(replace(b"a XX b XX", b"XX", b"yyy").unwrap(), b"a yyy b yyy");
        assert_eq!(replace(b"XXX", b"XX", b"y").unwrap(), b"yX");
        assert!(replace(b"abc", b"XX", b"y").is_none());
    }
}
