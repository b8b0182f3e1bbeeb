//! Egress policy and proxy.
//!
//! A sandbox has no network interface but its loopback. Its only way out is a proxy the daemon runs for
//! it on the host: init accepts TCP connections on the sandbox's 127.0.0.1:3128 and hands each accepted
//! socket to the daemon, which passes it to [`Proxy::serve`]. The proxy reads one request (`CONNECT
//! host:port`, or a plain-HTTP request with an absolute URL), judges it against the sandbox's [`Policy`],
//! connects from the host, relays, and records an [`Attempt`].
//!
//! The threat is exfiltration by a client that follows instructions it should not, so every check assumes
//! a hostile client: names are judged before resolution and every resolved address after it, the proxy
//! connects to the address it checked, a TLS server name must match the tunnel's host, one connection
//! carries one plain-HTTP request, and a policy change closes what it no longer allows.
//!
//! # Semantics
//!
//! - **Rules** ([`Rule`]): `host`, `*.domain` (strict subdomains at any depth, never the apex), an IPv4 or
//!   IPv6 literal (`[v6]:port` with a port), each with an optional `:port` (none means any port). Names
//!   are case-insensitive and a trailing dot is ignored. Refused: a bare `*`, a glob of a single label
//!   (`*.com`), a `*` anywhere but as the whole first label, IPv6 with a port but no brackets, and names
//!   whose last label is numeric (`127.1`, `0x7f000001`: resolvers read those as addresses). There are no
//!   address ranges.
//! - **Modes** ([`Mode`]): `none` denies everything (the default), `enforce` allows what an allow rule
//!   names, `learn` and `allow_all` allow every name. Deny rules win over allow rules in every mode.
//! - **Addresses**: every address a name resolves to must pass (one refused address refuses the
//!   connection). Loopback, private, link-local, cloud metadata, carrier-grade NAT, unspecified,
//!   multicast, broadcast and reserved addresses, also inside IPv4-mapped, IPv4-compatible and NAT64 IPv6
//!   addresses, are refused in every mode unless an allow rule names that exact address (with a matching
//!   port, if it has one) or `add_hosts` maps the requested name to it. A deny rule naming an address
//!   refuses any name that resolves to it.
//! - **`add_hosts`** resolves a name without DNS and exempts that one address for that one name; it does
//!   not allow the name (in `enforce` an allow rule still has to).
//! - **Live changes** re-judge every open connection on its requested name and the address it reached.
//! - **TLS**: a tunnel whose first bytes are a ClientHello with a server name other than the CONNECT host
//!   is closed; a ClientHello without a server name, or a tunnel whose first bytes are not TLS (or whose
//!   server speaks first), is relayed.
//!
//! # Limits of what it sees
//!
//! Only the first ClientHello of a tunnel is read: a second one (after a HelloRetryRequest) and
//! Encrypted Client Hello's inner name are not checked (ECH's outer name is, and must match). Secrets are
//! injected into plain-HTTP requests, and into HTTPS requests only through interception, which an
//! [`Injection`] must ask for and which needs a [`CertificateAuthority`] the sandbox trusts; an
//! intercepted tunnel carries one HTTP/1.1 request. Attempts are handed to the sink as they happen: a
//! sink that queues them without bound can be made to grow by a client that opens many connections.

mod addr;
mod answer;
mod attempt;
mod connect;
mod head;
mod http;
mod inject;
mod intercept;
mod policy;
mod proxy;
mod reflect;
mod relay;
mod rule;
#[doc(hidden)]
pub mod sni;
mod tls;
mod upstream;

pub use addr::{METADATA, special_kind};
pub use attempt::{Attempt, Method, Verdict, suggest};
pub use inject::{Injection, InjectionError};
pub use policy::{Decision, Mode, ModeError, Policy};
pub use proxy::{Limits, LookupShare, OpenConnection, Proxy, lookup_share};
pub use rule::{Host, Rule, RuleError, Target};
pub use tls::{CertificateAuthority, TlsError};
pub use upstream::MAX_LOOKUPS;
