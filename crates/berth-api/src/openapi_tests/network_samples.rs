//! Samples of the wire types of egress (`network.rs`): a sandbox's policy, live changes to it, its egress log
//! and the allowlist suggested from it, and the secrets the proxy can inject. `schemas` checks them with the
//! rest.

use serde_json::Value;

use super::*;

/// A fully populated policy, also the one the sandbox samples carry.
pub(super) fn network_sample() -> Network {
    Network {
        mode: Some("enforce".into()),
        allow: vec!["api.github.com:443".into(), "*.npmjs.org".into(), "[2001:db8::1]:8443".into()],
        deny: vec!["evil.npmjs.org".into(), "10.0.0.1".into()],
        add_hosts: map(&[("db.internal", "10.0.0.5")]),
    }
}

fn egress_record_sample() -> EgressRecord {
    EgressRecord {
        time_ms: 1_700_000_006_000,
        sandbox: "0123456789ab".into(),
        exec: Some("x3".into()),
        host: "registry.npmjs.org".into(),
        port: 443,
        method: "CONNECT".into(),
        verdict: "allowed".into(),
        rule: Some("*.npmjs.org".into()),
        reason: "registry.npmjs.org:443 is allowed by rule *.npmjs.org".into(),
        bytes_up: 1024,
        bytes_down: 65536,
        duration_ms: 250,
    }
}

/// Fully populated samples, by schema name.
pub(super) fn network_full_samples() -> Vec<(&'static str, Value)> {
    let change = NetChange { allow: vec!["pypi.org:443".into()], deny: vec!["evil.npmjs.org".into()] };
    let changed = NetChanged { network: network_sample(), closed: 2 };
    let secret = SecretInfo {
        name: "GITHUB_TOKEN".into(),
        created_at_ms: 1_700_000_000_000,
        updated_at_ms: 1_700_000_007_000,
        bytes: 40,
    };
    let suggestion = NetSuggestion { allow: vec!["api.github.com:443".into(), "registry.npmjs.org:443".into()] };
    vec![
        ("Network", to_value(&network_sample())),
        ("NetChange", to_value(&change)),
        ("NetChanged", to_value(&changed)),
        ("EgressRecord", to_value(&egress_record_sample())),
        ("NetSuggestion", to_value(&suggestion)),
        ("SecretInfo", to_value(&secret)),
    ]
}

/// Samples with every optional value left out, and the other values of string fields that name a kind.
pub(super) fn network_sparse_samples() -> Vec<(&'static str, Value)> {
    let mut samples = vec![
        ("Network", to_value(&Network::default())),
        ("NetChange", to_value(&NetChange::default())),
        ("NetChange", to_value(&NetChange { allow: vec!["pypi.org".into()], deny: vec![] })),
        ("NetChanged", to_value(&NetChanged { network: Network::default(), closed: 0 })),
        ("NetSuggestion", to_value(&NetSuggestion { allow: vec![] })),
    ];
    // A sandbox's record shows every mode by its canonical name, with or without rules.
    for mode in ["none", "enforce", "learn", "allow_all"] {
        let network = Network { mode: Some(mode.into()), ..Network::default() };
        samples.push(("Network", to_value(&network)));
        samples.push(("NetChanged", to_value(&NetChanged { network, closed: 0 })));
    }
    // A refusal by the mode (no rule), a request that could not be read, and a plain-HTTP request.
    let denied = EgressRecord {
        verdict: "denied".into(),
        rule: None,
        reason: "network access is off for this sandbox".into(),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        ..egress_record_sample()
    };
    let unreadable = EgressRecord {
        host: String::new(),
        port: 0,
        verdict: "error".into(),
        reason: "the request head did not arrive in time".into(),
        ..denied.clone()
    };
    let http = EgressRecord { method: "HTTP".into(), port: 80, ..egress_record_sample() };
    for record in [denied, unreadable, http] {
        samples.push(("EgressRecord", to_value(&record)));
    }
    samples
}

#[test]
fn network_requests_default_to_no_egress_and_refuse_unknown_fields() {
    // `{}` is the same policy as none at all: the schema's defaults are serde's.
    let empty: Network = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, Network::default());
    let create: CreateSandbox = serde_json::from_str("{}").unwrap();
    assert_eq!(create.network, Network::default());
    assert!(serde_json::from_str::<Network>(r#"{"allow_hosts": ["a.test"]}"#).is_err());
    assert!(serde_json::from_str::<NetChange>(r#"{"mode": "learn"}"#).is_err());
    // A sandbox record written before `network` and `owner` existed still reads.
    let mut old = to_value(&super::schemas::sandbox_sample());
    let o = old.as_object_mut().unwrap();
    o.remove("network");
    o.remove("owner");
    let read: Sandbox = serde_json::from_value(old).unwrap();
    assert_eq!((read.network, read.owner), (Network::default(), None));
}
