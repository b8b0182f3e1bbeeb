//! Network rules: what an allow or deny list is made of, and the host names requests are checked against.
//!
//! A rule is parsed once, stored in a canonical form (lower case, no trailing dot, IPv6 in its shortest
//! form) and printed back in that form, so what a person reads in a policy is exactly what is enforced.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a rule (or a requested host) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("a network rule cannot be empty")]
    Empty,
    #[error("network rule {0:?} contains white space or control characters")]
    Whitespace(String),
    #[error("network rule {0:?} would allow every host; to allow all egress use --dangerously-allow-all-net instead")]
    BareWildcard(String),
    #[error(
        "network rule {0:?} covers a whole top-level domain; name at least two labels after \"*.\" \
         (for example *.example.com)"
    )]
    TopLevelGlob(String),
    #[error("network rule {0:?}: \"*\" may only stand alone as the first label, as in *.example.com")]
    MisplacedWildcard(String),
    #[error("network rule {0:?} has an invalid port: give a number from 1 to 65535 after the last \":\"")]
    BadPort(String),
    #[error("network rule {0:?}: an IPv6 address with a port must be written in brackets, as in [::1]:8080")]
    Ipv6NeedsBrackets(String),
    #[error("{0:?} is not a valid host name: {1}")]
    BadHost(String, &'static str),
}

/// A destination host as requested by a client: a DNS name or an IP literal, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// An IP literal. IPv4-mapped IPv6 literals are kept as written; matching compares canonical forms.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as it appears in a request (no brackets, no port).
    pub fn parse(s: &str) -> Result<Host, RuleError> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Host::Ip(ip));
        }
        normalise_name(s).map(Host::Name)
    }

    /// Writes `host:port`, with brackets around an IPv6 literal.
    pub fn with_port(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Validates and normalises a DNS name: lower case, a single trailing dot dropped, labels of letters,
/// digits, `-` and `_`. A name whose last label is all digits is refused: it is not a name but a numeric
/// address in a form (`2130706433`, `127.1`, `0x7f000001`) that resolvers expand differently, which would let a client
/// dodge an IP rule.
pub(crate) fn normalise_name(s: &str) -> Result<String, RuleError> {
    let bad = |why| RuleError::BadHost(s.to_string(), why);
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > 253 {
        return Err(bad("it is longer than 253 characters"));
    }
    let mut last = "";
    for label in name.split('.') {
        if label.is_empty() {
            return Err(bad("it has an empty label"));
        }
        if label.len() > 63 {
            return Err(bad("a label is longer than 63 characters"));
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(bad("only letters, digits, '-', '_' and '.' are allowed"));
        }
        last = label;
    }
    let hex =
        last.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("0x")) && last[2..].bytes().all(|b| b.is_ascii_hexdigit());
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("its last label is numeric, which makes it an address, not a name"));
    }
    Ok(name.to_ascii_lowercase())
}

/// What a rule names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Exactly this host name.
    Name(String),
    /// Every strict subdomain of this name, at any depth (`*.example.com` is stored as `example.com`
    /// and matches `a.example.com` and `a.b.example.com`, not `example.com`).
    Subdomains(String),
    /// Exactly this address, requested as a literal or reached through resolution.
    Ip(IpAddr),
}

/// One allow or deny rule: a target and an optional port (no port means any port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Rule {
    pub target: Target,
    pub port: Option<u16>,
}

impl Rule {
    /// True if a request for `host:port` is matched by this rule's name (IP rules match IP literals only).
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.target, host) {
            (Target::Name(rule), Host::Name(name)) => rule == name,
            (Target::Subdomains(suffix), Host::Name(name)) => {
                name.len() > suffix.len() + 1
                    && name.ends_with(suffix.as_str())
                    && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
            }
            (Target::Ip(rule), Host::Ip(ip)) => rule.to_canonical() == ip.to_canonical(),
            _ => false,
        }
    }

    /// True if this rule names exactly the address `ip` (on `port`): the only thing that lets a
    /// connection reach a loopback, private or otherwise special address.
    pub fn names_ip(&self, ip: IpAddr, port: u16) -> bool {
        match self.target {
            Target::Ip(rule) => rule.to_canonical() == ip.to_canonical() && self.port.is_none_or(|p| p == port),
            _ => false,
        }
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Rule, RuleError> {
        if s.is_empty() {
            return Err(RuleError::Empty);
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(RuleError::Whitespace(s.to_string()));
        }
        if let Some(inner) = s.strip_prefix('[') {
            let (addr, rest) = inner.split_once(']').ok_or_else(|| RuleError::BadHost(s.to_string(), "no ']'"))?;
            let ip: Ipv6Addr =
                addr.parse().map_err(|_| RuleError::BadHost(s.to_string(), "not an IPv6 address in brackets"))?;
            let port = match rest {
                "" => None,
                _ => Some(parse_port(s, rest.strip_prefix(':').unwrap_or("x"))?),
            };
            return Ok(Rule { target: Target::Ip(IpAddr::V6(ip)), port });
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Rule { target: Target::Ip(ip), port: None });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => return Err(RuleError::Ipv6NeedsBrackets(s.to_string())),
            Some((host, port)) => (host, Some(parse_port(s, port)?)),
            None => (s, None),
        };
        if let Ok(ip) = host.parse::<Ipv4Addr>() {
            return Ok(Rule { target: Target::Ip(IpAddr::V4(ip)), port });
        }
        if host == "*" || host == "*." {
            return Err(RuleError::BareWildcard(s.to_string()));
        }
        let target = match host.strip_prefix("*.") {
            Some(rest) => {
                if rest.contains('*') {
                    return Err(RuleError::MisplacedWildcard(s.to_string()));
                }
                let suffix = normalise_name(rest)?;
                if !suffix.contains('.') {
                    return Err(RuleError::TopLevelGlob(s.to_string()));
                }
                Target::Subdomains(suffix)
            }
            None if host.contains('*') => return Err(RuleError::MisplacedWildcard(s.to_string())),
            None => Target::Name(normalise_name(host)?),
        };
        Ok(Rule { target, port })
    }
}

fn parse_port(rule: &str, port: &str) -> Result<u16, RuleError> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RuleError::BadPort(rule.to_string()));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(RuleError::BadPort(rule.to_string())),
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.target, self.port) {
            (Target::Name(n), None) => f.write_str(n),
            (Target::Name(n), Some(p)) => write!(f, "{n}:{p}"),
            (Target::Subdomains(n), None) => write!(f, "*.{n}"),
            (Target::Subdomains(n), Some(p)) => write!(f, "*.{n}:{p}"),
            (Target::Ip(ip), None) => write!(f, "{ip}"),
            (Target::Ip(IpAddr::V6(ip)), Some(p)) => write!(f, "[{ip}]:{p}"),
            (Target::Ip(ip), Some(p)) => write!(f, "{ip}:{p}"),
        }
    }
}

impl TryFrom<String> for Rule {
    type Error = RuleError;
    fn try_from(s: String) -> Result<Rule, RuleError> {
        s.parse()
    }
}

impl From<Rule> for String {
    fn from(rule: Rule) -> String {
        rule.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rule(s: &str) -> Rule {
        s.parse().unwrap()
    }
    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    #[test]
    fn canonical_round_trip() {
        for (input, canonical) in [
            ("api.github.com", "api.github.com"),
            ("API.GitHub.com.", "api.github.com"),
            ("example.com:443", "example.com:443"),
            ("*.npmjs.org:443", "*.npmjs.org:443"),
            ("*.Example.COM", "*.example.com"),
            ("10.0.0.5", "10.0.0.5"),
            ("10.0.0.5:80", "10.0.0.5:80"),
            ("::1", "::1"),
            ("[::1]", "::1"),
            ("[0:0::1]:8080", "[::1]:8080"),
            ("localhost", "localhost"),
            ("_svc.example.com", "_svc.example.com"),
        ] {
            let r = rule(input);
            assert_eq!(r.to_string(), canonical, "{input}");
            assert_eq!(rule(canonical), r, "{input}");
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{canonical}\""));
            assert_eq!(serde_json::from_str::<Rule>(&json).unwrap(), r);
        }
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            " ",
            "a b",
            "*",
            "*:443",
            "*.com",
            "*.com:443",
            "a.*.com",
            "*example.com",
            "**.a.com",
            "ex*.com",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:+1",
            "fe80::1%eth0",
            "1.2.3.4:80:90",
            "[::1",
            "[::1]80",
            "[1.2.3.4]",
            "exa mple.com",
            "a..b",
            ".a.com",
            "a/b",
            "é.com",
            "1.2.3",
            "2130706433",
            "a.b.c.12",
            "0x7f000001",
            "a.0X1f",
            "example.com\n",
        ] {
            assert!(bad.parse::<Rule>().is_err(), "{bad:?} was accepted");
        }
        assert!(serde_json::from_str::<Rule>("\"*\"").is_err());
        // Without brackets, a trailing ":80" is part of the IPv6 address, never a port.
        assert_eq!(rule("::1:80"), Rule { target: Target::Ip("::1:80".parse().unwrap()), port: None });
        let e = "*".parse::<Rule>().unwrap_err().to_string();
        assert!(e.contains("--dangerously-allow-all-net"), "{e}");
    }

    #[test]
    fn matching() {
        let exact = rule("api.github.com");
        assert!(exact.matches(&name("API.github.com."), 443));
        assert!(!exact.matches(&name("github.com"), 443));
        assert!(!exact.matches(&name("x.api.github.com"), 443));

        let glob = rule("*.example.com:443");
        assert!(glob.matches(&name("a.example.com"), 443));
        assert!(glob.matches(&name("a.b.example.com"), 443));
        assert!(!glob.matches(&name("example.com"), 443));
        assert!(!glob.matches(&name("badexample.com"), 443));
        assert!(!glob.matches(&name("a.example.com"), 80));

        let ip = rule("10.0.0.5");
        assert!(ip.matches(&name("10.0.0.5"), 1));
        assert!(ip.matches(&name("::ffff:10.0.0.5"), 1));
        assert!(!ip.matches(&name("10.0.0.6"), 1));
        assert!(ip.names_ip("10.0.0.5".parse().unwrap(), 9));
        assert!(!rule("10.0.0.5:80").names_ip("10.0.0.5".parse().unwrap(), 9));
        assert!(!rule("example.com").matches(&name("1.2.3.4"), 80));
        assert!(rule("[::1]:8080").matches(&name("::1"), 8080));
    }
}
