//! Tenants: the teams that share one daemon. A token minted for a tenant reaches that tenant's sandboxes,
//! snapshots, volumes, secrets and images only, and what the tenant makes is held to its quota.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a tenant's sandboxes may hold together. A limit left out is not bounded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// Sandboxes that exist at once (running, paused, hibernated or stopped).
    pub sandboxes: Option<u64>,
    /// CPU cores, the sum of its sandboxes' `cpus`.
    pub cpus: Option<f64>,
    /// Memory, the sum of its sandboxes' `memory_bytes`.
    pub memory_bytes: Option<u64>,
    /// Disk, the sum of its sandboxes' `disk_bytes`.
    pub disk_bytes: Option<u64>,
    /// Egress through the proxy, both directions, by every sandbox the tenant has had: past it, each of its
    /// sandboxes' proxy refuses new connections and closes open ones, until the quota is raised.
    pub egress_bytes: Option<u64>,
}

/// `POST /v1/tenants` (unix socket only): make a tenant, or change the quota of one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// 1-32 characters: lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    #[serde(default)]
    pub quota: Quota,
}

/// A tenant, what it may hold, and what it holds now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub name: String,
    pub created_at_ms: u64,
    pub quota: Quota,
    pub used: TenantUse,
}

/// What a tenant's sandboxes hold now, as its quota counts it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantUse {
    pub sandboxes: u64,
    pub cpus: f64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub egress_bytes: u64,
}

/// What a token may reach, beyond who it is. Every field narrows; none widens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Grant {
    /// The tenant whose resources it reaches (none: every sandbox, as an operator's token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Look, never change: only reading requests are served.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Labels a sandbox must carry for it to be reached; the sandboxes the token creates get them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
}

impl Grant {
    /// Whether a sandbox with `labels` is within the selector.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    /// Whether it narrows nothing.
    pub fn is_full(&self) -> bool {
        self.tenant.is_none() && !self.read_only && self.selector.is_empty()
    }
}

/// Check a tenant's name: 1-32 characters, lowercase letters, digits and `-`, starting with a letter.
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{:?} is not a tenant name: use 1-32 lowercase letters, digits and -, starting with a letter",
            name.chars().take(40).collect::<String>()
        )),
    }
}
