//! Wire types of egress: a sandbox's network policy, live changes to it, and its egress log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A sandbox's egress policy. The sandbox never has a network interface but `lo`: egress goes through a
/// proxy the daemon runs for it (`HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` point there in every exec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    /// `none` (the default without rules: nothing gets out), `enforce` (the default with `allow` rules: only
    /// what they name), `learn` (everything, recorded, for `net/suggest`), or `allow_all`.
    pub mode: Option<String>,
    /// Exact host names, `*.example.com` globs, IP literals, each with an optional `:port`.
    pub allow: Vec<String>,
    /// The same forms; a deny rule wins over any allow rule.
    pub deny: Vec<String>,
    /// `NAME` → `IP`: how the proxy resolves NAME (naming an address this way lets it past the check that
    /// otherwise keeps loopback, private and link-local addresses out).
    pub add_hosts: BTreeMap<String, String>,
}

/// `POST /v1/sandboxes/{id}/net`: change a running sandbox's policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetChange {
    /// Rules to allow (a sandbox in `none` moves to `enforce`).
    pub allow: Vec<String>,
    /// Rules to deny; open connections they now forbid are closed.
    pub deny: Vec<String>,
}

/// What a policy change did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetChanged {
    pub network: Network,
    /// Open connections the new policy forbids, closed.
    pub closed: u64,
}

/// One egress attempt, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressRecord {
    pub time_ms: u64,
    pub sandbox: String,
    /// The exec that was running when the connection was made, when exactly one was (with several at once, or
    /// only processes an ended exec left behind, it is not named).
    #[serde(default)]
    pub exec: Option<String>,
    pub host: String,
    pub port: u16,
    /// `CONNECT` or `HTTP`.
    pub method: String,
    /// `allowed`, `denied` or `error`.
    pub verdict: String,
    /// The rule that decided, if one did.
    pub rule: Option<String>,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// `GET /v1/sandboxes/{id}/net/suggest`: the smallest allowlist of what the sandbox used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetSuggestion {
    pub allow: Vec<String>,
}

/// A secret, as the API lists it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    pub name: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The value's length.
    pub bytes: u64,
}
