//! Pods' records (see `engine::pods`): one row a pod, live or removed.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

impl Store {
    /// Write a pod's record (made or changed).
    pub fn put_pod(&self, pod: &berth_api::Pod) -> Result<(), StoreError> {
        let record = serde_json::to_string(pod).unwrap_or_default();
        self.with(|c| {
            c.execute(
                "INSERT INTO pods (id, record, removed_at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO UPDATE SET record = excluded.record, removed_at_ms = excluded.removed_at_ms",
                params![pod.id, record, pod.removed_at_ms.map(|t| t as i64)],
            )
            .map(|_| ())
        })
    }

    pub fn pod(&self, id: &str) -> Result<Option<berth_api::Pod>, StoreError> {
        let text: Option<String> =
            self.with(|c| c.query_row("SELECT record FROM pods WHERE id = ?1", [id], |r| r.get(0)).optional())?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Every pod, live ones first, each group oldest first.
    pub fn pods(&self) -> Result<Vec<berth_api::Pod>, StoreError> {
        self.pod_records("SELECT record FROM pods ORDER BY removed_at_ms IS NOT NULL, rowid")
    }

    /// The live pods, oldest first (what volumes' users, forks and start-up look at: removed pods' records
    /// are not read for them).
    pub fn live_pods(&self) -> Result<Vec<berth_api::Pod>, StoreError> {
        self.pod_records("SELECT record FROM pods WHERE removed_at_ms IS NULL ORDER BY rowid")
    }

    /// Forget the removed pods past the newest `keep`, oldest first; their ids.
    pub fn forget_removed_pods_beyond(&self, keep: usize) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT id FROM pods WHERE removed_at_ms IS NOT NULL ORDER BY removed_at_ms DESC, rowid DESC \
                 LIMIT -1 OFFSET ?1",
            )?;
            let mut ids = stmt.query_map([keep as i64], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
            ids.reverse();
            for id in &ids {
                c.execute("DELETE FROM pods WHERE id = ?1 AND removed_at_ms IS NOT NULL", [id])?;
            }
            Ok(ids)
        })
    }

    fn pod_records(&self, sql: &str) -> Result<Vec<berth_api::Pod>, StoreError> {
        let rows: Vec<String> = self.with(|c| {
            let mut stmt = c.prepare(sql)?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })?;
        Ok(rows.iter().filter_map(|t| serde_json::from_str(t).ok()).collect())
    }
}
