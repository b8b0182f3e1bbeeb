//! State the nodes of a cluster share, in PostgreSQL (`berth daemon --cluster-db URL --node NAME`); SQLite
//! stays each daemon's own store. A volume lives on one node's disk, so with a cluster database every volume
//! name is the cluster's: the node that makes it holds it, and another node naming it (for a pod's workspace,
//! a fork, or `POST /v1/volumes`) is told where it is instead of silently making an empty one of its own.
//! Every node's pods are written there too, so any node can say where each pod runs and what it uses.

use std::time::Duration;

use berth_api::{ClusterInfo, ClusterPod, ClusterVolume, Pod};

/// The tables, made by the first node that connects (under an advisory lock, as two nodes may start at
/// once).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS berth_volumes (
    name TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS berth_pods (
    node TEXT NOT NULL,
    id TEXT NOT NULL,
    record TEXT NOT NULL,
    removed_at_ms BIGINT,
    PRIMARY KEY (node, id)
);";

/// How long one call to the database may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong with the cluster's database.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("the volume {name:?} is on node {node}: run the pod there, or choose another name")]
    Elsewhere { name: String, node: String },
    #[error("the cluster database: {0}")]
    Database(String),
}

impl From<tokio_postgres::Error> for ClusterError {
    fn from(e: tokio_postgres::Error) -> Self {
        // The server's own message says what it refused; the client's alone is often only "db error".
        let text = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        };
        ClusterError::Database(text)
    }
}

/// `berth daemon --cluster-db URL --node NAME`.
#[derive(Clone)]
pub struct ClusterOptions {
    pub db: String,
    pub node: String,
}

impl std::fmt::Debug for ClusterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection string may hold a password.
        f.debug_struct("ClusterOptions").field("node", &self.node).finish_non_exhaustive()
    }
}

/// A connection to the cluster's database, as node `node`.
pub struct Cluster {
    /// The connection, made again when the server closed it (a restart of the database).
    client: tokio::sync::Mutex<tokio_postgres::Client>,
    url: String,
    node: String,
}

/// Connect to `url`, the connection's task running in the background.
async fn open(url: &str) -> Result<tokio_postgres::Client, ClusterError> {
    let (client, connection) = timed(tokio_postgres::connect(url, tokio_postgres::NoTls)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            crate::log::warn("the cluster database connection ended", serde_json::json!({"error": e.to_string()}));
        }
    });
    Ok(client)
}

async fn timed<T>(f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>) -> Result<T, ClusterError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ClusterError::Database(format!("no answer in {} s", CALL_TIMEOUT.as_secs()))),
    }
}

/// Node names: what Kubernetes names nodes (a DNS label or subdomain).
pub fn check_node(node: &str) -> Result<(), String> {
    let ok = !node.is_empty()
        && node.len() <= 253
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
        && !node.starts_with(['-', '.']);
    match ok {
        true => Ok(()),
        false => Err(format!("{node:?} is not a node name (letters, digits, '-' and '.', as Kubernetes names nodes)")),
    }
}

impl Cluster {
    /// Connect to the database at `url` (a libpq connection string or `postgresql://` URL) and make the
    /// tables if they are not there.
    pub async fn connect(url: &str, node: &str) -> Result<Cluster, ClusterError> {
        check_node(node).map_err(ClusterError::Database)?;
        let client = open(url).await?;
        timed(
            client.batch_execute(&format!(
                "SELECT pg_advisory_lock(4851723); {SCHEMA} SELECT pg_advisory_unlock(4851723);"
            )),
        )
        .await?;
        Ok(Cluster { client: tokio::sync::Mutex::new(client), url: url.to_string(), node: node.to_string() })
    }

    /// The connection, made again first if the server closed it (a restart of the database: its connection
    /// task has read the close by the time the server takes connections again).
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, tokio_postgres::Client>, ClusterError> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            *client = open(&self.url).await?;
        }
        Ok(client)
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Hold volume `name` for this node: recorded as this node's, or already this node's. Another node's is
    /// [`ClusterError::Elsewhere`].
    pub async fn claim_volume(&self, name: &str, now_ms: u64) -> Result<(), ClusterError> {
        let client = self.client().await?;
        let rows = timed(client.query(
            "INSERT INTO berth_volumes (name, node, created_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE berth_volumes.node = EXCLUDED.node
             RETURNING node",
            &[&name, &self.node, &(now_ms as i64)],
        ))
        .await?;
        if !rows.is_empty() {
            return Ok(());
        }
        let holder = timed(client.query_opt("SELECT node FROM berth_volumes WHERE name = $1", &[&name])).await?;
        match holder {
            Some(row) => Err(ClusterError::Elsewhere { name: name.to_string(), node: row.get(0) }),
            // Released between the two statements: try once more.
            None => {
                drop(client);
                Box::pin(self.claim_volume(name, now_ms)).await
            }
        }
    }

    /// This node no longer holds volume `name` (removed here).
    pub async fn release_volume(&self, name: &str) -> Result<(), ClusterError> {
        let client = self.client().await?;
        timed(client.execute("DELETE FROM berth_volumes WHERE name = $1 AND node = $2", &[&name, &self.node])).await?;
        Ok(())
    }

    /// Write this node's record of a pod.
    pub async fn put_pod(&self, pod: &Pod) -> Result<(), ClusterError> {
        let client = self.client().await?;
        let record = serde_json::to_string(pod).unwrap_or_default();
        let removed = pod.removed_at_ms.map(|t| t as i64);
        timed(client.execute(
            "INSERT INTO berth_pods (node, id, record, removed_at_ms) VALUES ($1, $2, $3, $4)
             ON CONFLICT (node, id) DO UPDATE SET record = EXCLUDED.record, removed_at_ms = EXCLUDED.removed_at_ms",
            &[&self.node, &pod.id, &record, &removed],
        ))
        .await?;
        Ok(())
    }

    /// Every node's volumes and pods (live pods first).
    pub async fn info(&self) -> Result<ClusterInfo, ClusterError> {
        let client = self.client().await?;
        let volumes = timed(client.query("SELECT name, node, created_at_ms FROM berth_volumes ORDER BY name", &[]))
            .await?
            .iter()
            .map(|r| ClusterVolume { name: r.get(0), node: r.get(1), created_at_ms: r.get::<_, i64>(2) as u64 })
            .collect();
        let pods = timed(
            client.query("SELECT node, record FROM berth_pods ORDER BY removed_at_ms IS NOT NULL, node, id", &[]),
        )
        .await?
        .iter()
        .filter_map(|r| {
            let pod: Pod = serde_json::from_str(&r.get::<_, String>(1)).ok()?;
            Some(ClusterPod { node: r.get(0), pod })
        })
        .collect();
        Ok(ClusterInfo { node: self.node.clone(), volumes, pods })
    }
}
