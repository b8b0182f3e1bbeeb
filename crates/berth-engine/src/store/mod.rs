//! The daemon's database: SQLite in WAL mode at `<root>/berth.db`. It holds what must outlive a daemon
//! process and is not a sandbox's own: API token digests, idempotency results, and the record of every
//! sandbox, live or gone. A live sandbox's state of record is its shim (which is how a restarted daemon
//! re-adopts it); the database says which sandboxes a previous daemon had, so that one lost with its shim
//! is accounted for rather than forgotten.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

mod pods;
mod projects;
mod tenants;

pub use tenants::{Owned, TenantRow};

/// Schema migrations, in order; `PRAGMA user_version` says how many have run.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        sha256 TEXT NOT NULL UNIQUE,
        created_at_ms INTEGER NOT NULL
    );
    CREATE TABLE idempotency (
        key TEXT PRIMARY KEY,
        status INTEGER NOT NULL,
        body TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        record TEXT NOT NULL,
        gone_at_ms INTEGER,
        gone_reason TEXT
    );",
    "ALTER TABLE sandboxes ADD COLUMN spec TEXT;
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        name TEXT UNIQUE,
        record TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE TABLE volumes (
        name TEXT PRIMARY KEY,
        created_at_ms INTEGER NOT NULL
    );",
    "ALTER TABLE tokens ADD COLUMN scope TEXT;",
    "ALTER TABLE volumes ADD COLUMN owner TEXT;
    CREATE TABLE pods (
        id TEXT PRIMARY KEY,
        record TEXT NOT NULL,
        removed_at_ms INTEGER
    );",
    // The operation that froze a running sandbox for its own work (a fork, a snapshot), while it is frozen.
    "ALTER TABLE sandboxes ADD COLUMN frozen_for TEXT;",
    // Tenants: a token's grant (its tenant, read-only, a label selector), each tenant's quota, and the
    // owners of volumes and images.
    "ALTER TABLE tokens ADD COLUMN grants TEXT;
    CREATE TABLE tenants (
        name TEXT PRIMARY KEY,
        quota TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        egress_gone INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE tenancy (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        tenant TEXT NOT NULL,
        PRIMARY KEY (kind, name)
    );",
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("open the database {path}")]
    Open {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("migrate the database to version {version}")]
    Migrate {
        version: usize,
        #[source]
        source: rusqlite::Error,
    },
    #[error("query the database")]
    Query(#[from] rusqlite::Error),
    #[error("the database lock was poisoned")]
    Poisoned,
}

/// How long an idempotency result is kept.
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 3600 * 1000;

pub struct Store {
    conn: Mutex<Connection>,
    /// Live sandboxes' records to be written before anything else is done with the database (see
    /// [`Store::sandbox_live_later`]), oldest first.
    later: Mutex<Vec<berth_api::Sandbox>>,
}

impl Store {
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let path = root.join("berth.db");
        let open_err = |source| StoreError::Open { path: path.display().to_string(), source };
        // Owner-only before SQLite sees it: its -wal and -shm files take the same mode.
        if !path.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(&path);
        }
        let conn = Connection::open(&path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(open_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(open_err)?;
        let done: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(open_err)?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(done) {
            let version = i + 1;
            conn.execute_batch(&format!("BEGIN; {sql}; PRAGMA user_version = {version}; COMMIT;"))
                .map_err(|source| StoreError::Migrate { version, source })?;
        }
        Ok(Store { conn: Mutex::new(conn), later: Mutex::new(Vec::new()) })
    }

    /// Every use of the database: the records queued by [`Store::sandbox_live_later`] are written first.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        let conn = self.conn.lock().map_err(|_| StoreError::Poisoned)?;
        let queued = std::mem::take(&mut *self.later.lock().map_err(|_| StoreError::Poisoned)?);
        for record in &queued {
            upsert_live(&conn, record)?;
        }
        Ok(f(&conn)?)
    }

    /// Record a live sandbox as [`Store::sandbox_live`] does, but later: by the next [`Store::flush`] or
    /// before the next use of the database, whichever comes first, so in order with every other write and
    /// seen by every read. For a change whose state of record is also elsewhere (a pause is the cgroup's
    /// freezer, which a restarted daemon reads), so that its caller need not wait for the write.
    pub fn sandbox_live_later(&self, record: berth_api::Sandbox) {
        if let Ok(mut q) = self.later.lock() {
            q.push(record);
        }
    }

    /// Write what [`Store::sandbox_live_later`] queued.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.with(|_| Ok(()))
    }

    /// Add an operator's token (one no grant narrows).
    pub fn add_token(&self, id: &str, name: &str, sha256: &str, now_ms: u64) -> Result<(), StoreError> {
        self.add_granted_token(id, name, sha256, now_ms, &berth_api::Grant::default())
    }

    /// Every token: id, name, creation time and grant (never the digest).
    pub fn tokens(&self) -> Result<Vec<(String, String, u64, berth_api::Grant)>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT id, name, created_at_ms, grants FROM tokens ORDER BY created_at_ms")?;
            let rows = stmt.query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64, tenants::grant_of(r.get(3)?)))
            })?;
            rows.collect()
        })
    }

    /// Delete a token; whether it existed.
    pub fn revoke_token(&self, id: &str) -> Result<bool, StoreError> {
        self.with(|c| c.execute("DELETE FROM tokens WHERE id = ?1", [id]).map(|n| n > 0))
    }

    /// The id of the token with this digest.
    pub fn token_by_digest(&self, sha256: &str) -> Result<Option<String>, StoreError> {
        Ok(self.token_and_scope(sha256)?.map(|(id, _, _)| id))
    }

    /// The id of the token with this digest, the sandbox it is scoped to (a session token), and its grant.
    pub fn token_and_scope(
        &self,
        sha256: &str,
    ) -> Result<Option<(String, Option<String>, berth_api::Grant)>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT id, scope, grants FROM tokens WHERE sha256 = ?1", [sha256], |r| {
                Ok((r.get(0)?, r.get(1)?, tenants::grant_of(r.get(2)?)))
            })
            .optional()
        })
    }

    /// Add a token scoped to one sandbox.
    pub fn add_scoped_token(
        &self,
        id: &str,
        name: &str,
        sha256: &str,
        now_ms: u64,
        scope: &str,
        grant: &berth_api::Grant,
    ) -> Result<(), StoreError> {
        let grants = (!grant.is_full()).then(|| serde_json::to_string(grant).unwrap_or_default());
        self.with(|c| {
            c.execute(
                "INSERT INTO tokens (id, name, sha256, created_at_ms, scope, grants) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, name, sha256, now_ms as i64, scope, grants],
            )
            .map(|_| ())
        })
    }

    /// Delete every token scoped to a sandbox; their ids.
    pub fn revoke_scope(&self, scope: &str) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT id FROM tokens WHERE scope = ?1")?;
            let ids: Vec<String> = stmt.query_map([scope], |r| r.get(0))?.collect::<Result<_, _>>()?;
            c.execute("DELETE FROM tokens WHERE scope = ?1", [scope])?;
            Ok(ids)
        })
    }

    pub fn idempotent_get(&self, key: &str) -> Result<Option<(u16, serde_json::Value)>, StoreError> {
        let row: Option<(u16, String)> = self.with(|c| {
            c.query_row("SELECT status, body FROM idempotency WHERE key = ?1", [key], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })?;
        Ok(row.and_then(|(status, body)| serde_json::from_str(&body).ok().map(|b| (status, b))))
    }

    /// Keep a result for a day ([`IDEMPOTENCY_TTL_MS`]): long enough for any retry, not forever.
    pub fn idempotent_put(
        &self,
        key: &str,
        status: u16,
        body: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let expired = now_ms.saturating_sub(IDEMPOTENCY_TTL_MS) as i64;
            c.execute("DELETE FROM idempotency WHERE created_at_ms < ?1", [expired])?;
            c.execute(
                "INSERT OR REPLACE INTO idempotency (key, status, body, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
                params![key, status, body.to_string(), now_ms as i64],
            )
            .map(|_| ())
        })
    }

    /// Record a sandbox (again), as live.
    pub fn sandbox_live(&self, record: &berth_api::Sandbox) -> Result<(), StoreError> {
        self.with(|c| upsert_live(c, record))
    }

    pub fn sandbox_gone(&self, id: &str, reason: &str, now_ms: u64) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "UPDATE sandboxes SET gone_at_ms = ?2, gone_reason = ?3, spec = NULL, frozen_for = NULL \
                 WHERE id = ?1 AND gone_at_ms IS NULL",
                params![id, now_ms as i64, reason],
            )
            .map(|_| ())
        })
    }

    /// Mark sandbox `id` as frozen by operation `op` for its own work (None: no longer). Written before the
    /// freeze and cleared after the thaw, so that a daemon that died between the two leaves it for the next one,
    /// which thaws the sandbox at its adoption (see `engine::lifecycle`).
    pub fn set_frozen_for(&self, id: &str, op: Option<&str>) -> Result<(), StoreError> {
        self.with(|c| c.execute("UPDATE sandboxes SET frozen_for = ?2 WHERE id = ?1", params![id, op]).map(|_| ()))
    }

    /// The operation that froze sandbox `id` for its own work and has not thawed it, if one did.
    pub fn frozen_for(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT frozen_for FROM sandboxes WHERE id = ?1", [id], |r| r.get::<_, Option<String>>(0))
                .optional()
                .map(Option::flatten)
        })
    }

    /// Ids of the sandboxes recorded as live.
    pub fn live_ids(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT id FROM sandboxes WHERE gone_at_ms IS NULL ORDER BY id")?;
            let ids = stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(ids)
        })
    }

    /// Forget the removed sandboxes past the newest `keep`: their records go, and their ids are returned
    /// (oldest first) so that what is kept of them elsewhere can go too.
    pub fn forget_removed_beyond(&self, keep: usize) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT id FROM sandboxes WHERE gone_at_ms IS NOT NULL ORDER BY gone_at_ms DESC, id DESC LIMIT -1 OFFSET ?1",
            )?;
            let mut ids = stmt.query_map([keep as i64], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
            ids.reverse();
            for id in &ids {
                c.execute("DELETE FROM sandboxes WHERE id = ?1 AND gone_at_ms IS NOT NULL", [id])?;
            }
            Ok(ids)
        })
    }

    /// Why a sandbox is gone, if the database knows it and it is.
    pub fn gone_reason(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.with(|c| {
            c.query_row("SELECT gone_reason FROM sandboxes WHERE id = ?1 AND gone_at_ms IS NOT NULL", [id], |r| {
                r.get(0)
            })
            .optional()
        })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

fn upsert_live(c: &Connection, record: &berth_api::Sandbox) -> rusqlite::Result<()> {
    let json = serde_json::to_string(record).unwrap_or_default();
    c.execute(
        "INSERT INTO sandboxes (id, name, record) VALUES (?1, ?2, ?3)
         ON CONFLICT(id) DO UPDATE SET name = ?2, record = ?3, gone_at_ms = NULL, gone_reason = NULL",
        params![record.id, record.name, json],
    )
    .map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A running sandbox's record with only the fields a record must have.
    fn sample_record() -> berth_api::Sandbox {
        serde_json::from_value(serde_json::json!({
            "id": "0123456789ab", "name": "n", "image": "host", "state": "running", "created_at_ms": 1,
            "expires_at_ms": null, "idle_timeout_seconds": null, "last_activity_ms": 1, "memory_bytes": null,
            "pids": null, "cpus": null, "labels": {}, "pid": 7
        }))
        .unwrap()
    }

    #[test]
    fn state_survives_a_reopen_and_migrations_run_once() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(dir.path()).unwrap();
            s.add_token("t1", "ci", "abc", 1).unwrap();
            s.idempotent_put("create k", 201, &serde_json::json!({"id": "x"}), 1).unwrap();
            let mut rec = sample_record();
            s.sandbox_live(&rec).unwrap();
            rec.id = "ba9876543210".into();
            s.sandbox_live(&rec).unwrap();
            s.sandbox_gone("ba9876543210", "removed", 2).unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.token_by_digest("abc").unwrap(), Some("t1".into()));
        assert_eq!(s.token_by_digest("abd").unwrap(), None);
        assert_eq!(s.idempotent_get("create k").unwrap(), Some((201, serde_json::json!({"id": "x"}))));
        assert_eq!(s.live_ids().unwrap(), ["0123456789ab"]);
        assert_eq!(s.gone_reason("ba9876543210").unwrap(), Some("removed".into()));
    }

    #[test]
    fn a_frozen_for_marker_survives_a_reopen_and_goes_with_its_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = sample_record();
        {
            let s = Store::open(dir.path()).unwrap();
            s.sandbox_live(&rec).unwrap();
            assert_eq!(s.frozen_for("0123456789ab").unwrap(), None);
            s.set_frozen_for("0123456789ab", Some("fork")).unwrap();
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.frozen_for("0123456789ab").unwrap().as_deref(), Some("fork"));
        // A new record of it (the adoption writes one) leaves the marker alone.
        rec.pid = Some(8);
        s.sandbox_live(&rec).unwrap();
        assert_eq!(s.frozen_for("0123456789ab").unwrap().as_deref(), Some("fork"));
        s.set_frozen_for("0123456789ab", None).unwrap();
        assert_eq!(s.frozen_for("0123456789ab").unwrap(), None);
        // Gone, its marker goes too.
        s.set_frozen_for("0123456789ab", Some("snapshot")).unwrap();
        s.sandbox_gone("0123456789ab", "removed", 2).unwrap();
        assert_eq!(s.frozen_for("0123456789ab").unwrap(), None);
        assert_eq!(s.frozen_for("ba9876543210").unwrap(), None, "a sandbox the store does not know");
    }

    #[test]
    fn a_record_written_later_is_written_before_anything_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let rec = sample_record();
        s.sandbox_live(&rec).unwrap();
        let mut paused = serde_json::to_value(&rec).unwrap();
        paused["state"] = "paused".into();
        let mut rec: berth_api::Sandbox = serde_json::from_value(paused).unwrap();
        s.sandbox_live_later(rec.clone());
        // A read sees it.
        assert_eq!(s.record("0123456789ab").unwrap().unwrap().state, berth_api::SandboxState::Paused);
        // A removal after it is not undone by it.
        s.sandbox_live_later(rec.clone());
        s.sandbox_gone("0123456789ab", "removed", 2).unwrap();
        s.flush().unwrap();
        assert!(s.live_ids().unwrap().is_empty());
        // Queued and never flushed by hand: written when the store closes.
        rec.id = "ba9876543210".into();
        s.sandbox_live_later(rec);
        drop(s);
        assert_eq!(Store::open(dir.path()).unwrap().live_ids().unwrap(), ["ba9876543210"]);
    }
}
