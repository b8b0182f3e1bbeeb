//! Samples of the wire types of tenants (`tenants.rs`): a tenant, its quota and what it holds, and the body
//! that makes one. `schemas` checks them with the rest; the grant a token carries is `TokenInfo`'s there.

use serde_json::Value;

use super::*;

fn quota_sample() -> Quota {
    Quota {
        sandboxes: Some(10),
        cpus: Some(8.5),
        memory_bytes: Some(16 << 30),
        disk_bytes: Some(100 << 30),
        egress_bytes: Some(10 << 30),
    }
}

fn use_sample() -> TenantUse {
    TenantUse { sandboxes: 2, cpus: 1.5, memory_bytes: 512 << 20, disk_bytes: 2 << 30, egress_bytes: 70000 }
}

/// Fully populated samples, by schema name.
pub(super) fn tenants_full_samples() -> Vec<(&'static str, Value)> {
    let tenant =
        Tenant { name: "acme".into(), created_at_ms: 1_700_000_000_000, quota: quota_sample(), used: use_sample() };
    vec![
        ("Quota", to_value(&quota_sample())),
        ("TenantUse", to_value(&use_sample())),
        ("CreateTenant", to_value(&CreateTenant { name: "acme".into(), quota: quota_sample() })),
        ("Tenant", to_value(&tenant)),
    ]
}

/// Samples with every optional value left out: no limits, nothing held.
pub(super) fn tenants_sparse_samples() -> Vec<(&'static str, Value)> {
    vec![
        ("Quota", to_value(&Quota::default())),
        ("TenantUse", to_value(&TenantUse::default())),
        ("CreateTenant", to_value(&CreateTenant { name: "b".into(), ..CreateTenant::default() })),
        ("Tenant", to_value(&Tenant { name: "b".into(), ..Tenant::default() })),
    ]
}
