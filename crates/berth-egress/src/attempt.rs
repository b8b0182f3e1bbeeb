//! The record of one connection attempt, and the allowlist suggested from a run in learn mode.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::rule::{Host, Rule};

/// How the client asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// A `CONNECT` tunnel.
    #[serde(rename = "CONNECT")]
    Connect,
    /// A plain-HTTP request with an absolute URL.
    #[serde(rename = "HTTP")]
    Http,
}

/// What became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The policy let it through (it may still have ended with an error in transit).
    Allowed,
    /// The policy, an address check, the TLS server name check or a policy change refused it.
    Denied,
    /// It could not be served: a malformed request, or the destination could not be resolved or reached.
    Error,
}

/// One connection attempt, emitted when it ends (at once for a refusal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When the client's connection was handed to the proxy, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The destination host as requested, normalised (empty if the request could not be read).
    pub host: String,
    pub port: u16,
    pub method: Method,
    pub verdict: Verdict,
    /// The rule that decided, if one did.
    pub rule: Option<String>,
    pub reason: String,
    /// Bytes sent to the destination (for plain HTTP, the rewritten request head included).
    pub bytes_up: u64,
    /// Bytes received from the destination and passed to the client.
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// The client's port on the sandbox's loopback: with it the caller can tell which process connected.
    #[serde(default)]
    pub client_port: u16,
}

/// The smallest allowlist that would have allowed everything in `attempts` that was allowed: one exact
/// `host:port` rule per destination, deduplicated and sorted.
///
/// Rules are never widened into `*.domain` globs: a glob would also allow names that were never used, and
/// under a shared suffix (a CDN, a cloud provider) those can belong to anyone. Attempts that were denied or
/// failed, including connections closed by a policy change, suggest nothing.
pub fn suggest(attempts: &[Attempt]) -> Vec<String> {
    let mut rules = BTreeSet::new();
    for a in attempts.iter().filter(|a| a.verdict == Verdict::Allowed) {
        let Ok(host) = Host::parse(&a.host) else { continue };
        if let Ok(rule) = host.with_port(a.port).parse::<Rule>() {
            rules.insert(rule);
        }
    }
    let mut out: Vec<String> = rules.iter().map(Rule::to_string).collect();
    out.sort();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attempt(host: &str, port: u16, verdict: Verdict) -> Attempt {
        Attempt {
            client_port: 0,
            time_ms: 0,
            host: host.into(),
            port,
            method: Method::Connect,
            verdict,
            rule: None,
            reason: String::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    #[test]
    fn suggestions_are_exact_sorted_and_deduplicated() {
        let attempts = [
            attempt("registry.npmjs.org", 443, Verdict::Allowed),
            attempt("Registry.npmjs.org.", 443, Verdict::Allowed),
            attempt("api.github.com", 443, Verdict::Allowed),
            attempt("api.github.com", 80, Verdict::Allowed),
            attempt("evil.test", 443, Verdict::Denied),
            attempt("gone.test", 443, Verdict::Error),
            attempt("2606:4700::1111", 443, Verdict::Allowed),
            attempt("", 0, Verdict::Allowed),
        ];
        assert_eq!(
            suggest(&attempts),
            ["[2606:4700::1111]:443", "api.github.com:443", "api.github.com:80", "registry.npmjs.org:443"]
        );
    }

    #[test]
    fn attempts_serialise_with_plain_strings() {
        let json = serde_json::to_value(attempt("a.test", 443, Verdict::Denied)).unwrap();
        assert_eq!(json["method"], "CONNECT");
        assert_eq!(json["verdict"], "denied");
        assert_eq!(serde_json::from_value::<Attempt>(json).unwrap(), attempt("a.test", 443, Verdict::Denied));
    }
}
