//! The engine and the cluster's database (see `crate::cluster`): volume names held cluster-wide, pods
//! written for every node to see.

use berth_api::{ClusterInfo, Pod};

use super::Engine;
use crate::EngineError;
use crate::cluster::ClusterError;

impl From<ClusterError> for EngineError {
    fn from(e: ClusterError) -> Self {
        match e {
            ClusterError::Elsewhere { .. } => EngineError::Conflict(e.to_string()),
            ClusterError::Database(_) => EngineError::Unsupported(e.to_string()),
        }
    }
}

impl Engine {
    /// Hold volume `name` for this node in the cluster, if there is one.
    pub(super) async fn claim_volume(&self, name: &str) -> Result<(), EngineError> {
        match self.cluster.get() {
            Some(c) => Ok(c.claim_volume(name, super::now_ms()).await?),
            None => Ok(()),
        }
    }

    /// Give volume `name` up in the cluster (removed here); a failure is logged, the removal stands.
    pub(super) async fn release_volume(&self, name: &str) {
        if let Some(c) = self.cluster.get()
            && let Err(e) = c.release_volume(name).await
        {
            crate::log::warn(
                "cannot release a volume in the cluster database",
                serde_json::json!({"volume": name, "error": e.to_string()}),
            );
        }
    }

    /// Write the pod for the other nodes to see, in the background and in order: a slow database holds up
    /// no pod call, and a failure is logged (this node's store is the pod's record).
    pub(super) fn share_pod(&self, pod: &Pod) {
        if let Some(tx) = self.shares() {
            let _ = tx.send(Share::Pod(Box::new(pod.clone())));
        }
    }

    /// The queue of pod writes to the cluster's database, and its writer (started with the first).
    fn shares(&self) -> Option<&tokio::sync::mpsc::UnboundedSender<Share>> {
        let cluster = self.cluster.get()?;
        Some(self.pod_state.shares.get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Share>();
            let cluster = std::sync::Arc::clone(cluster);
            tokio::spawn(async move {
                while let Some(share) = rx.recv().await {
                    match share {
                        Share::Pod(pod) => {
                            if let Err(e) = cluster.put_pod(&pod).await {
                                crate::log::warn(
                                    "cannot write a pod to the cluster database",
                                    serde_json::json!({"pod": pod.id, "error": e.to_string()}),
                                );
                            }
                        }
                        Share::Written(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
            tx
        }))
    }

    /// What the cluster's database holds.
    /// What the cluster's database holds, with this node's own pod writes made first (a node reads what it
    /// wrote).
    pub async fn cluster_info(&self) -> Result<ClusterInfo, EngineError> {
        if let Some(tx) = self.shares() {
            let (done, written) = tokio::sync::oneshot::channel();
            if tx.send(Share::Written(done)).is_ok() {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), written).await;
            }
        }
        match self.cluster.get() {
            Some(c) => Ok(c.info().await?),
            None => Err(EngineError::Unsupported(
                "this daemon has no cluster database: start it with berth daemon --cluster-db URL --node NAME".into(),
            )),
        }
    }
}

/// What the writer of pod records to the cluster's database is asked, in order.
pub(super) enum Share {
    Pod(Box<Pod>),
    /// Answered once every write asked before it is made.
    Written(tokio::sync::oneshot::Sender<()>),
}
