//! What the database keeps of tenants: each one's quota and the egress of its removed sandboxes, the tenant
//! a token is for (with what else narrows it), and which tenant owns each volume.

use berth_api::{Grant, Quota};
use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

/// A tenant as kept: its quota, when it was made, and the egress its removed sandboxes used.
pub struct TenantRow {
    pub name: String,
    pub quota: Quota,
    pub created_at_ms: u64,
    pub egress_gone: u64,
}

/// The kinds of thing a tenant can own that keep no record of their own to say so (a sandbox's, a
/// snapshot's and an image's do).
#[derive(Debug, Clone, Copy)]
pub enum Owned {
    Volume,
}

impl Owned {
    fn kind(self) -> &'static str {
        match self {
            Owned::Volume => "volume",
        }
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TenantRow> {
    let quota: String = r.get(1)?;
    Ok(TenantRow {
        name: r.get(0)?,
        quota: serde_json::from_str(&quota).unwrap_or_default(),
        created_at_ms: r.get::<_, i64>(2)? as u64,
        egress_gone: r.get::<_, i64>(3)? as u64,
    })
}

impl Store {
    /// Make a tenant, or give one a new quota (keeping what it has used).
    pub fn put_tenant(&self, name: &str, quota: &Quota, now_ms: u64) -> Result<(), StoreError> {
        let quota = serde_json::to_string(quota).unwrap_or_default();
        self.with(|c| {
            c.execute(
                "INSERT INTO tenants (name, quota, created_at_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT(name) DO UPDATE SET quota = excluded.quota",
                params![name, quota, now_ms as i64],
            )
            .map(|_| ())
        })
    }

    pub fn tenant(&self, name: &str) -> Result<Option<TenantRow>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT name, quota, created_at_ms, egress_gone FROM tenants WHERE name = ?1", [name], row)
                .optional()
        })
    }

    pub fn tenants(&self) -> Result<Vec<TenantRow>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT name, quota, created_at_ms, egress_gone FROM tenants ORDER BY name")?;
            let rows = stmt.query_map([], row)?;
            rows.collect()
        })
    }

    /// Remove a tenant and the tokens minted for it; whether it existed.
    pub fn remove_tenant(&self, name: &str) -> Result<bool, StoreError> {
        self.with(|c| {
            c.execute("DELETE FROM tokens WHERE json_extract(grants, '$.tenant') = ?1", [name])?;
            c.execute("DELETE FROM tenants WHERE name = ?1", [name]).map(|n| n > 0)
        })
    }

    /// Count the egress of a removed sandbox of tenant `name` against it.
    pub fn add_tenant_egress(&self, name: &str, bytes: u64) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute("UPDATE tenants SET egress_gone = egress_gone + ?2 WHERE name = ?1", params![name, bytes as i64])
                .map(|_| ())
        })
    }

    /// Say which tenant owns a volume (None: an operator's, which is kept as no row).
    pub fn set_owner(&self, what: Owned, name: &str, tenant: Option<&str>) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute("DELETE FROM tenancy WHERE kind = ?1 AND name = ?2", params![what.kind(), name])?;
            if let Some(t) = tenant {
                c.execute(
                    "INSERT INTO tenancy (kind, name, tenant) VALUES (?1, ?2, ?3)",
                    params![what.kind(), name, t],
                )?;
            }
            Ok(())
        })
    }

    /// The tenant that owns a volume, if one does.
    pub fn owner_of(&self, what: Owned, name: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT tenant FROM tenancy WHERE kind = ?1 AND name = ?2", params![what.kind(), name], |r| {
                r.get(0)
            })
            .optional()
        })
    }

    /// Add an operator's token, or a tenant's, or one narrowed otherwise (`grant`).
    pub fn add_granted_token(
        &self,
        id: &str,
        name: &str,
        sha256: &str,
        now_ms: u64,
        grant: &Grant,
    ) -> Result<(), StoreError> {
        let grants = (!grant.is_full()).then(|| serde_json::to_string(grant).unwrap_or_default());
        self.with(|c| {
            c.execute(
                "INSERT INTO tokens (id, name, sha256, created_at_ms, grants) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, name, sha256, now_ms as i64, grants],
            )
            .map(|_| ())
        })
    }
}

/// A token's grant as kept (none: it narrows nothing).
pub(super) fn grant_of(text: Option<String>) -> Grant {
    text.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
}
