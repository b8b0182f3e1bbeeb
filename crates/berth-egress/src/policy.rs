//! A sandbox's egress policy and the decisions it makes.
//!
//! Two checks guard every connection. [`Policy::decide`] judges the name the client asked for, before
//! anything is resolved. [`Policy::check_address`] then judges each address that name resolved to, so a
//! name that is allowed (or learned) cannot be pointed at the host's loopback, a private network or the
//! cloud metadata service. The proxy connects to the address that passed, never resolving again.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::addr::special_kind;
use crate::rule::{Host, Rule};

/// How the policy treats a destination that no deny rule names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// No egress at all.
    #[default]
    None,
    /// Only what an allow rule names.
    Enforce,
    /// Everything, recorded, so an allowlist can be suggested from what was used.
    Learn,
    /// Everything (`--dangerously-allow-all-net`).
    AllowAll,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Enforce => "enforce",
            Mode::Learn => "learn",
            Mode::AllowAll => "allow_all",
        })
    }
}

/// An unknown mode name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network mode {0:?}: use none, enforce, learn or allow_all")]
pub struct ModeError(pub String);

impl FromStr for Mode {
    type Err = ModeError;
    fn from_str(s: &str) -> Result<Mode, ModeError> {
        match s {
            "none" => Ok(Mode::None),
            "enforce" => Ok(Mode::Enforce),
            "learn" => Ok(Mode::Learn),
            "allow_all" | "allow-all" => Ok(Mode::AllowAll),
            _ => Err(ModeError(s.to_string())),
        }
    }
}

/// A sandbox's egress policy. The default denies everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Destinations allowed in [`Mode::Enforce`]; in every mode, an exact-IP rule here also lets that
    /// address through the special-address check.
    #[serde(default)]
    pub allow: Vec<Rule>,
    /// Destinations refused in every mode; a deny rule wins over any allow rule.
    #[serde(default)]
    pub deny: Vec<Rule>,
    /// Names the proxy resolves to a fixed address without DNS (`--add-host NAME:IP`). Such a mapping does
    /// not allow the name (an allow rule or the mode still has to), but the mapped address passes the
    /// special-address check for that name, since whoever wrote the mapping named the address.
    #[serde(default)]
    pub add_hosts: BTreeMap<String, IpAddr>,
    /// Why every destination is refused for now, whatever the rules say (a tenant's egress quota used up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
}

/// What the policy said about one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub allowed: bool,
    /// The rule that decided, in canonical form, if a rule did (rather than the mode or an address check).
    pub rule: Option<String>,
    /// A sentence a person can act on.
    pub reason: String,
}

impl Decision {
    pub(crate) fn deny(rule: Option<&Rule>, reason: String) -> Decision {
        Decision { allowed: false, rule: rule.map(Rule::to_string), reason }
    }
    fn allow(rule: Option<&Rule>, reason: String) -> Decision {
        Decision { allowed: true, rule: rule.map(Rule::to_string), reason }
    }
}

impl Policy {
    /// A policy in `mode` with no rules.
    pub fn new(mode: Mode) -> Policy {
        Policy { mode, ..Policy::default() }
    }

    /// Judges a request for `host:port` by name, before resolution. `host` is as the client wrote it
    /// (case and a trailing dot do not matter; IPv6 literals without brackets).
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        match Host::parse(host) {
            Ok(parsed) => self.decide_host(&parsed, port),
            Err(e) => Decision::deny(None, e.to_string()),
        }
    }

    pub(crate) fn decide_host(&self, host: &Host, port: u16) -> Decision {
        let dest = host.with_port(port);
        if let Some(why) = &self.closed {
            return Decision::deny(None, format!("{dest} is refused: {why}"));
        }
        if port == 0 {
            return Decision::deny(None, format!("{dest}: port 0 cannot be connected to"));
        }
        if let Some(rule) = self.deny.iter().find(|r| r.matches(host, port)) {
            return Decision::deny(Some(rule), format!("{dest} is denied by rule {rule}"));
        }
        match self.mode {
            Mode::None => Decision::deny(None, "network access is off for this sandbox".to_string()),
            Mode::Enforce => match self.allow.iter().find(|r| r.matches(host, port)) {
                Some(rule) => Decision::allow(Some(rule), format!("{dest} is allowed by rule {rule}")),
                None => Decision::deny(None, format!("no allow rule matches {dest}")),
            },
            Mode::Learn => Decision::allow(None, "learn mode allows every destination".to_string()),
            Mode::AllowAll => Decision::allow(None, "all network access is allowed".to_string()),
        }
    }

    /// The address `--add-host` maps `host` to, if any.
    pub(crate) fn mapped(&self, host: &Host) -> Option<IpAddr> {
        let Host::Name(name) = host else { return None };
        self.add_hosts
            .iter()
            .find(|(k, _)| k.strip_suffix('.').unwrap_or(k).eq_ignore_ascii_case(name))
            .map(|(_, ip)| *ip)
    }

    /// Judges one address that `host` resolved to (or is). Deny rules naming the address refuse it;
    /// a loopback, private, link-local, metadata or otherwise special address is refused unless an allow
    /// rule names that exact address or `add_hosts` maps `host` to it.
    pub fn check_address(&self, host: &str, ip: IpAddr, port: u16) -> Decision {
        match Host::parse(host) {
            Ok(parsed) => self.check_host_address(&parsed, ip, port),
            Err(e) => Decision::deny(None, e.to_string()),
        }
    }

    pub(crate) fn check_host_address(&self, host: &Host, ip: IpAddr, port: u16) -> Decision {
        let literal = matches!(host, Host::Ip(_));
        let what = if literal { ip.to_string() } else { format!("{host} resolves to {ip}, which") };
        if let Some(rule) = self.deny.iter().find(|r| r.names_ip(ip, port)) {
            return Decision::deny(Some(rule), format!("{what} is denied by rule {rule}"));
        }
        let Some(kind) = special_kind(ip) else {
            return Decision::allow(None, format!("{ip} is a public address"));
        };
        if let Some(rule) = self.allow.iter().find(|r| r.names_ip(ip, port)) {
            return Decision::allow(Some(rule), format!("{ip} is a {kind} address named by rule {rule}"));
        }
        if self.mapped(host).is_some_and(|m| m.to_canonical() == ip.to_canonical()) {
            return Decision::allow(None, format!("{ip} is a {kind} address mapped to {host} by add_hosts"));
        }
        Decision::deny(None, format!("{what} is a {kind} address; only a rule naming that exact address can allow it"))
    }

    /// Both checks for a connection already made to `ip`: used when the policy changes under it.
    pub(crate) fn judge_open(&self, host: &Host, port: u16, ip: IpAddr) -> Decision {
        let by_name = self.decide_host(host, port);
        if !by_name.allowed {
            return by_name;
        }
        let by_addr = self.check_host_address(host, ip, port);
        if by_addr.allowed { by_name } else { by_addr }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn policy(mode: Mode, allow: &[&str], deny: &[&str]) -> Policy {
        Policy {
            mode,
            allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
            deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
            add_hosts: BTreeMap::new(),
            closed: None,
        }
    }

    #[test]
    fn a_closed_policy_refuses_everything_with_its_reason() {
        let open = Policy::new(Mode::AllowAll);
        assert!(open.decide("example.com", 443).allowed);
        let closed = Policy { closed: Some("the egress quota is used up".into()), ..open };
        let d = closed.decide("example.com", 443);
        assert!(!d.allowed);
        assert_eq!(d.reason, "example.com:443 is refused: the egress quota is used up");
    }

    #[test]
    fn modes() {
        assert!(!Policy::default().decide("example.com", 443).allowed);
        assert!(!Policy::new(Mode::None).decide("1.1.1.1", 443).allowed);
        assert!(Policy::new(Mode::Learn).decide("example.com", 443).allowed);
        assert!(Policy::new(Mode::AllowAll).decide("example.com", 443).allowed);
        assert!(!Policy::new(Mode::Enforce).decide("example.com", 443).allowed);
        assert!(!Policy::new(Mode::AllowAll).decide("example.com", 0).allowed);
        assert!(!Policy::new(Mode::AllowAll).decide("bad host", 80).allowed);
        assert_eq!("allow-all".parse::<Mode>().unwrap(), Mode::AllowAll);
        assert_eq!(serde_json::to_string(&Mode::AllowAll).unwrap(), "\"allow_all\"");
    }

    #[test]
    fn rules_and_deny_wins() {
        let p = policy(Mode::Enforce, &["*.example.com:443", "api.github.com"], &["evil.example.com"]);
        let d = p.decide("a.example.com", 443);
        assert!(d.allowed);
        assert_eq!(d.rule.as_deref(), Some("*.example.com:443"));
        assert!(!p.decide("a.example.com", 80).allowed);
        assert!(!p.decide("example.com", 443).allowed);
        assert!(p.decide("API.GITHUB.COM.", 22).allowed);
        let d = p.decide("evil.example.com", 443);
        assert!(!d.allowed);
        assert_eq!(d.rule.as_deref(), Some("evil.example.com"));
        assert!(d.reason.contains("denied by rule evil.example.com"), "{}", d.reason);
        // Deny rules hold in every mode.
        for mode in [Mode::Learn, Mode::AllowAll] {
            let p = policy(mode, &[], &["evil.example.com"]);
            assert!(!p.decide("evil.example.com", 1).allowed);
        }
    }

    #[test]
    fn addresses() {
        let mut p = policy(Mode::AllowAll, &["10.0.0.5:5432"], &["1.2.3.4"]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(p.check_address("example.com", ip("8.8.8.8"), 443).allowed);
        let d = p.check_address("example.com", ip("1.2.3.4"), 443);
        assert!(!d.allowed && d.rule.as_deref() == Some("1.2.3.4"), "{d:?}");
        let d = p.check_address("localhost", ip("127.0.0.1"), 80);
        assert!(!d.allowed);
        assert!(d.reason.contains("loopback"), "{}", d.reason);
        assert!(!p.check_address("169.254.169.254", ip("169.254.169.254"), 80).allowed);
        assert!(!p.check_address("x.test", ip("::ffff:127.0.0.1"), 80).allowed);
        assert!(p.check_address("db.internal", ip("10.0.0.5"), 5432).allowed);
        assert!(!p.check_address("db.internal", ip("10.0.0.5"), 5433).allowed);
        p.add_hosts.insert("DB.test".to_string(), ip("10.0.0.9"));
        assert!(p.check_address("db.test", ip("10.0.0.9"), 1).allowed);
        assert!(!p.check_address("other.test", ip("10.0.0.9"), 1).allowed);
        assert_eq!(p.mapped(&Host::parse("db.test.").unwrap()), Some(ip("10.0.0.9")));
    }

    #[test]
    fn serde_round_trip() {
        let mut p = policy(Mode::Enforce, &["*.npmjs.org:443", "[::1]:8080"], &["10.0.0.1"]);
        p.add_hosts.insert("db".to_string(), "10.0.0.5".parse().unwrap());
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"*.npmjs.org:443\""), "{json}");
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p);
        let minimal: Policy = serde_json::from_str(r#"{"mode":"learn"}"#).unwrap();
        assert_eq!(minimal, Policy::new(Mode::Learn));
    }
}
