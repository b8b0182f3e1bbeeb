//! Addresses a sandbox must not reach by accident: the host's loopback, private networks, link-local
//! (and the cloud metadata service on it), carrier-grade NAT, multicast and the like.
//!
//! The proxy runs on the host, so an address it connects to is reached with the host's network position:
//! without this check any allowed or learned name that resolves (or is rebound) to 127.0.0.1 or
//! 169.254.169.254 would open the host's own services to the sandbox.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The well-known cloud metadata address (AWS, GCP, Azure, OpenStack and others).
pub const METADATA: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// Says which kind of special address `ip` is, or `None` for an ordinary public address.
pub fn special_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    if ip == METADATA {
        Some("cloud metadata")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else if a == 0 {
        Some("unspecified")
    } else if a == 127 {
        Some("loopback")
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) {
        Some("private")
    } else if a == 169 && b == 254 {
        Some("link-local")
    } else if a == 100 && (64..128).contains(&b) {
        Some("carrier-grade NAT")
    } else if (a == 192 && b == 0 && ip.octets()[2] == 0) || (a == 198 && (18..20).contains(&b)) {
        Some("reserved (IETF protocol assignments, benchmarking)")
    } else if (a, b, ip.octets()[2]) == (192, 0, 2)
        || (a, b, ip.octets()[2]) == (198, 51, 100)
        || (a, b, ip.octets()[2]) == (203, 0, 113)
    {
        Some("reserved (documentation)")
    } else if ip == Ipv4Addr::new(168, 63, 129, 16) {
        Some("cloud metadata")
    } else if (224..240).contains(&a) {
        Some("multicast")
    } else if a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) addresses
    // reach an IPv4 address: judge that address.
    let embeds_v4 = seg[..5] == [0; 5] && (seg[5] == 0xffff || seg[5] == 0) || seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if embeds_v4 {
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return v4_kind(Ipv4Addr::new(a, b, c, d));
    }
    if seg[..3] == [0x64, 0xff9b, 1] {
        return Some("local-use NAT64");
    }
    if seg[0] == 0x2002 {
        return Some("6to4");
    }
    if seg[..2] == [0x2001, 0xdb8] {
        return Some("reserved (documentation)");
    }
    if seg[..4] == [0x100, 0, 0, 0] {
        return Some("discard-only");
    }
    match seg[0] {
        s if s & 0xfe00 == 0xfc00 => Some("private (unique local)"),
        s if s & 0xffc0 == 0xfe80 => Some("link-local"),
        s if s & 0xffc0 == 0xfec0 => Some("private (site-local)"),
        s if s & 0xff00 == 0xff00 => Some("multicast"),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn kind(s: &str) -> Option<&'static str> {
        special_kind(s.parse().unwrap())
    }

    #[test]
    fn special_addresses() {
        for (addr, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.1.1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "private (unique local)"),
            ("fd12:3456::1", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ] {
            assert_eq!(kind(addr), Some(expected), "{addr}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert_eq!(kind(public), None, "{public}");
        }
    }
}
