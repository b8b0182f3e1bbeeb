//! What the database keeps of durable projects: the spec a sandbox is started again from, its snapshots,
//! and the named volumes.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

impl Store {
    /// Keep what a sandbox is built from, so it can be started again after a stop or a lost supervisor.
    pub fn put_spec(&self, id: &str, spec: &serde_json::Value) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute("UPDATE sandboxes SET spec = ?2 WHERE id = ?1", params![id, spec.to_string()]).map(|_| ())
        })
    }

    /// A sandbox's last record, removed or not.
    pub fn record(&self, id: &str) -> Result<Option<berth_api::Sandbox>, StoreError> {
        let text: Option<String> =
            self.with(|c| c.query_row("SELECT record FROM sandboxes WHERE id = ?1", [id], |r| r.get(0)).optional())?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    pub fn spec(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<Option<String>> =
            self.with(|c| c.query_row("SELECT spec FROM sandboxes WHERE id = ?1", [id], |r| r.get(0)).optional())?;
        Ok(text.flatten().and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// The sandbox not removed (running or stopped) that has this name, if one has.
    pub fn id_named(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT id FROM sandboxes WHERE name = ?1 AND gone_at_ms IS NULL LIMIT 1", [name], |r| r.get(0))
                .optional()
        })
    }

    /// Sandboxes not removed whose record says they are kept without a runtime (`lifecycle::KEPT`: stopped or
    /// hibernated).
    pub fn stopped(&self) -> Result<Vec<berth_api::Sandbox>, StoreError> {
        let records: Vec<String> = self.with(|c| {
            // Filtered in SQL: the reaper asks twice a second, and running sandboxes are most rows.
            let mut stmt = c.prepare(
                "SELECT record FROM sandboxes WHERE gone_at_ms IS NULL AND json_extract(record, '$.state') IN \
                 ('stopped', 'hibernated')",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })?;
        Ok(records
            .iter()
            .filter_map(|r| serde_json::from_str::<berth_api::Sandbox>(r).ok())
            .filter(|r| crate::engine::lifecycle::KEPT.contains(&r.state))
            .collect())
    }

    pub fn add_snapshot(&self, snap: &berth_api::Snapshot) -> Result<(), StoreError> {
        let json = serde_json::to_string(snap).unwrap_or_default();
        self.with(|c| {
            c.execute(
                "INSERT INTO snapshots (id, name, record, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![snap.id, snap.name, json, snap.created_at_ms as i64],
            )
            .map(|_| ())
        })
    }

    /// A snapshot by id or name.
    pub fn snapshot(&self, id_or_name: &str) -> Result<Option<berth_api::Snapshot>, StoreError> {
        let text: Option<String> = self.with(|c| {
            c.query_row("SELECT record FROM snapshots WHERE id = ?1 OR name = ?1", [id_or_name], |r| r.get(0))
                .optional()
        })?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    pub fn snapshots(&self) -> Result<Vec<berth_api::Snapshot>, StoreError> {
        let records: Vec<String> = self.with(|c| {
            let mut stmt = c.prepare("SELECT record FROM snapshots ORDER BY created_at_ms, id")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })?;
        Ok(records.iter().filter_map(|r| serde_json::from_str(r).ok()).collect())
    }

    pub fn remove_snapshot(&self, id: &str) -> Result<bool, StoreError> {
        self.with(|c| c.execute("DELETE FROM snapshots WHERE id = ?1", [id]).map(|n| n > 0))
    }

    /// Add a volume; false if the name is taken.
    pub fn add_volume(&self, name: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.add_volume_owned(name, now_ms, None)
    }

    /// Add a volume that belongs to `owner` (the pods of a namespace: `pods/<namespace>`); false if the name
    /// is taken.
    pub fn add_volume_owned(&self, name: &str, now_ms: u64, owner: Option<&str>) -> Result<bool, StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT OR IGNORE INTO volumes (name, created_at_ms, owner) VALUES (?1, ?2, ?3)",
                params![name, now_ms as i64, owner],
            )
            .map(|n| n > 0)
        })
    }

    /// Volume `name`'s owner: `None` if there is no such volume, `Some(None)` for one made through the API.
    pub fn volume_owner(&self, name: &str) -> Result<Option<Option<String>>, StoreError> {
        self.with(|c| c.query_row("SELECT owner FROM volumes WHERE name = ?1", [name], |r| r.get(0)).optional())
    }

    pub fn volumes(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT name, created_at_ms FROM volumes ORDER BY name")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
    }

    pub fn remove_volume(&self, name: &str) -> Result<bool, StoreError> {
        self.with(|c| c.execute("DELETE FROM volumes WHERE name = ?1", [name]).map(|n| n > 0))
    }

    /// The specs of every sandbox not removed (running or stopped), by id.
    pub fn specs(&self) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let rows: Vec<(String, Option<String>)> = self.with(|c| {
            let mut stmt = c.prepare("SELECT id, spec FROM sandboxes WHERE gone_at_ms IS NULL")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })?;
        Ok(rows.into_iter().filter_map(|(id, s)| Some((id, serde_json::from_str(&s?).ok()?))).collect())
    }
}
