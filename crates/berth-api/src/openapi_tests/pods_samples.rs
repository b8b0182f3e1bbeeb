//! Samples of the wire types of pods (`pods.rs`): the pod a node's berth-oci reports, its containers, the
//! events and forks it asks for, and a pod's receipt. `schemas` checks them with the rest.

use serde_json::Value;

use super::*;

fn container_sample() -> PodContainer {
    PodContainer {
        id: "c0ffee0123456789".into(),
        name: "agent".into(),
        cgroup: "kubepods.slice/kubepods-pod1234.slice/cri-containerd-c0ffee0123456789.scope".into(),
        state: "running".into(),
        execs: 3,
    }
}

fn pod_sample() -> Pod {
    Pod {
        id: "5f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        name: Some("agent-7d9f".into()),
        namespace: Some("agents".into()),
        uid: Some("0d6c1a4e-2b7f-4c39-9e51-7a8b3c2d1e0f".into()),
        workspace: Some("project-a".into()),
        workspace_path: Some("/var/lib/berth/pool/volumes/project-a".into()),
        egress: Some(super::network_samples::network_sample()),
        netns: Some("/var/run/netns/cni-7d9f".into()),
        env: vec!["HTTPS_PROXY=http://127.0.0.1:3128".into()],
        created_at_ms: 1_700_000_000_000,
        removed_at_ms: Some(1_700_000_600_000),
        containers: vec![
            PodContainer { id: "5f1e2d3c4b5a69788796a5b4c3d2e1f0".into(), name: String::new(), ..container_sample() },
            container_sample(),
        ],
    }
}

fn receipt_sample() -> PodReceipt {
    PodReceipt {
        pod: pod_sample(),
        journal_records: 9,
        journal_head: "3f2a".repeat(16),
        journal_verified: true,
        workspace_kept: Some("project-a".into()),
    }
}

/// Fully populated samples, by schema name.
pub(super) fn pods_full_samples() -> Vec<(&'static str, Value)> {
    let request = PodRequest {
        id: "5f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
        name: Some("agent-7d9f".into()),
        namespace: Some("agents".into()),
        uid: Some("0d6c1a4e-2b7f-4c39-9e51-7a8b3c2d1e0f".into()),
        workspace: Some("project-a".into()),
        egress: Some(super::network_samples::network_sample()),
        netns: Some("/var/run/netns/cni-7d9f".into()),
    };
    let event = PodEvent {
        kind: "container_created".into(),
        container: "c0ffee0123456789".into(),
        name: Some("agent".into()),
        cgroup: Some(container_sample().cgroup),
        args: Some(vec!["sh".into(), "-c".into(), "make test".into()]),
        pid: Some(4242),
    };
    vec![
        ("PodRequest", to_value(&request)),
        ("PodContainer", to_value(&container_sample())),
        ("Pod", to_value(&pod_sample())),
        ("PodEvent", to_value(&event)),
        ("PodFork", to_value(&PodFork { workspace: "project-a-fork".into() })),
        ("PodReceipt", to_value(&receipt_sample())),
        ("ClusterInfo", to_value(&cluster_sample())),
        ("ClusterVolume", to_value(&cluster_sample().volumes[0])),
        ("ClusterPod", to_value(&cluster_sample().pods[0])),
    ]
}

fn cluster_sample() -> ClusterInfo {
    ClusterInfo {
        node: "node-b".into(),
        volumes: vec![ClusterVolume {
            name: "project-a".into(),
            node: "node-a".into(),
            created_at_ms: 1_700_000_000_000,
        }],
        pods: vec![ClusterPod { node: "node-a".into(), pod: pod_sample() }],
    }
}

/// Samples with every optional value left out, and the other values of string fields that name a kind.
pub(super) fn pods_sparse_samples() -> Vec<(&'static str, Value)> {
    let live = Pod {
        id: "p".into(),
        name: None,
        namespace: None,
        uid: None,
        workspace: None,
        workspace_path: None,
        egress: None,
        netns: None,
        env: vec![],
        created_at_ms: 0,
        removed_at_ms: None,
        containers: vec![],
    };
    let request = PodRequest {
        id: "p".into(),
        name: None,
        namespace: None,
        uid: None,
        workspace: None,
        egress: None,
        netns: None,
    };
    let mut samples = vec![
        ("PodRequest", to_value(&request)),
        ("Pod", to_value(&live)),
        (
            "PodReceipt",
            to_value(&PodReceipt {
                pod: Pod { removed_at_ms: Some(1), ..live.clone() },
                journal_records: 0,
                journal_head: String::new(),
                journal_verified: false,
                workspace_kept: None,
            }),
        ),
    ];
    for state in ["created", "deleted"] {
        samples.push(("PodContainer", to_value(&PodContainer { state: state.into(), ..container_sample() })));
    }
    for kind in ["container_started", "exec", "container_deleted"] {
        let event = PodEvent {
            kind: kind.into(),
            container: "c0ffee0123456789".into(),
            name: None,
            cgroup: None,
            args: None,
            pid: None,
        };
        samples.push(("PodEvent", to_value(&event)));
    }
    samples
}
