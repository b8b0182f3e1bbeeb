//! Pods: the containers a Kubernetes node runs with `runtimeClassName: berth`, as berth-oci reports them to
//! the node's daemon, which keeps what Kubernetes has no word for: a workspace volume per pod, a journal of
//! the pod's containers and execs, a copy of the workspace taken with the pod frozen, and a receipt.

use serde::{Deserialize, Serialize};

/// `POST /v1/pods`: a pod's sandbox container is being created on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodRequest {
    /// The pod's id on the node: its sandbox container's id (containerd's pod sandbox id).
    pub id: String,
    /// The pod's name, namespace and uid, as the kubelet gave them.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    /// The volume mounted at /workspace in each of the pod's containers (annotation `berth.dev/workspace`),
    /// made if there is none of that name.
    #[serde(default)]
    pub workspace: Option<String>,
    /// The egress policy of the pod (annotations `berth.dev/egress` and `berth.dev/egress-hosts`): the
    /// daemon's proxy listens on 127.0.0.1:3128 in the pod's network namespace, and every other way out of
    /// it is dropped.
    #[serde(default)]
    pub egress: Option<crate::Network>,
    /// The pod's network namespace (a path), needed with `egress`: a pod on the host's network has none.
    #[serde(default)]
    pub netns: Option<String>,
}

/// One of a pod's containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodContainer {
    pub id: String,
    /// The container's name in the pod (empty for the pod's sandbox container).
    pub name: String,
    /// Its cgroup, relative to the hierarchy's root.
    pub cgroup: String,
    /// `created`, `running` or `deleted`.
    pub state: String,
    /// Execs started in it.
    pub execs: u64,
}

/// A pod as the node's daemon knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    pub id: String,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub workspace: Option<String>,
    /// Where the workspace volume is on the node (for berth-oci, which mounts it).
    pub workspace_path: Option<String>,
    /// The egress policy its proxy holds, if it has one.
    pub egress: Option<crate::Network>,
    pub netns: Option<String>,
    /// Variables every process of the pod's containers gets (`NAME=value`): the proxy's, with `egress`.
    pub env: Vec<String>,
    pub created_at_ms: u64,
    /// When its sandbox container was deleted (then the pod is gone and its receipt is kept).
    pub removed_at_ms: Option<u64>,
    pub containers: Vec<PodContainer>,
}

/// `POST /v1/pods/{id}/events`: something berth-oci did to one of the pod's containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodEvent {
    /// `container_created`, `container_started`, `exec` or `container_deleted`.
    pub kind: String,
    pub container: String,
    /// For `container_created`: the container's name in the pod and its cgroup.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub cgroup: Option<String>,
    /// For `container_created` and `exec`: the program and its arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// For `exec`: the exec's host pid.
    #[serde(default)]
    pub pid: Option<i32>,
}

impl PodEvent {
    /// An event of `kind` about `container`, with nothing else said.
    pub fn about(kind: &str, container: &str) -> PodEvent {
        PodEvent { kind: kind.into(), container: container.into(), name: None, cgroup: None, args: None, pid: None }
    }
}

/// `POST /v1/pods/{id}/fork`: copy the pod's workspace as it is at one instant into a new volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodFork {
    /// The new volume's name: a pod that names it (`berth.dev/workspace`) starts from the copy.
    pub workspace: String,
}

/// What a pod's teardown leaves: kept at `GET /v1/pods/{id}/receipt` once it is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReceipt {
    pub pod: Pod,
    /// The journal's records and the hash of its last one (what a later copy of it must end with).
    pub journal_records: u64,
    pub journal_head: String,
    /// Whether the journal's hash chain checked out at teardown.
    pub journal_verified: bool,
    /// The workspace volume, kept (pods come and go; the workspace is the durable project).
    pub workspace_kept: Option<String>,
}

/// A volume as the cluster's database records it: which node's disk holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterVolume {
    pub name: String,
    pub node: String,
    pub created_at_ms: u64,
}

/// A pod as the node that runs it last wrote it to the cluster's database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPod {
    pub node: String,
    pub pod: Pod,
}

/// `GET /v1/cluster`: what the cluster's database holds, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// This daemon's node name (`berth daemon --node`).
    pub node: String,
    pub volumes: Vec<ClusterVolume>,
    /// Every node's pods, live ones first.
    pub pods: Vec<ClusterPod>,
}
