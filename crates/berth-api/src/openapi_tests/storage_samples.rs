//! Samples of the wire types of durable projects and images (`storage.rs`): snapshots, forks, restore and
//! reset, diffs, exports, volumes, the storage pool and image imports. `schemas` checks them with the rest.

use serde_json::Value;

use super::schemas::sandbox_sample;
use super::*;

pub(super) fn all_change_kinds() -> Vec<ChangeKind> {
    use ChangeKind::*;
    match Added {
        Added | Modified | Deleted => {}
    }
    vec![Added, Modified, Deleted]
}

fn snapshot_sample() -> Snapshot {
    Snapshot {
        id: "fedcba987654".into(),
        name: Some("before-upgrade".into()),
        sandbox_id: "0123456789ab".into(),
        image: "host".into(),
        created_at_ms: 1_700_000_004_000,
        origin: "snapshot".into(),
        with_processes: true,
        tenant: Some("acme".into()),
    }
}

fn path_state_sample() -> PathState {
    PathState { file_type: "symlink".into(), mode: 0o777, size: 11, symlink_target: Some("/etc/hosts".into()) }
}

fn image_sample() -> Image {
    Image {
        name: "debian".into(),
        kind: "oci".into(),
        created_at_ms: 1_700_000_005_000,
        layers: 2,
        files: 9000,
        bytes: 120 << 20,
        rejected: vec![RejectedEntry { path: "dev/sda".into(), reason: "device files are not imported".into() }],
        env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()],
        cmd: vec!["bash".into()],
        workdir: Some("/srv".into()),
        used_by: vec!["0123456789ab".into()],
        tenant: Some("acme".into()),
    }
}

pub(super) fn import_frame_samples() -> Vec<ImportFrame> {
    // Naming every variant here makes a new one a compile error until it has a sample.
    match (ImportFrame::Progress { layer: 0, layers: 0, bytes_done: 0, bytes_total: 0 }) {
        ImportFrame::Progress { .. } | ImportFrame::Done { .. } | ImportFrame::Error { .. } => {}
    }
    vec![
        ImportFrame::Progress { layer: 1, layers: 2, bytes_done: 4096, bytes_total: 1 << 20 },
        ImportFrame::Done { image: image_sample() },
        ImportFrame::Error {
            error: ApiError { code: ErrorCode::InvalidRequest, message: "layer 2 is corrupt or truncated".into() },
        },
    ]
}

/// Fully populated samples, by schema name.
pub(super) fn storage_full_samples() -> Vec<(&'static str, Value)> {
    let change = Change {
        path: "/workspace/link".into(),
        kind: ChangeKind::Modified,
        old: Some(PathState { symlink_target: Some("/etc/hostname".into()), size: 13, ..path_state_sample() }),
        new: Some(path_state_sample()),
    };
    let export = ExportRequest {
        repo: "/srv/project".into(),
        branch: "berth/agent-1".into(),
        base: Some("main".into()),
        against: Some("parent".into()),
        message: Some("Fix the build".into()),
        author_name: Some("Agent".into()),
        author_email: Some("agent@example.com".into()),
    };
    let storage = StorageInfo {
        mode: "btrfs".into(),
        size_bytes: 100 << 30,
        free_bytes: 60 << 30,
        quotas: false,
        bounded: false,
        default_disk_bytes: Some(10 << 30),
        unbounded: Some("sandboxes' files are not bounded: the storage pool is on btrfs with quotas off".into()),
    };
    let mut samples = vec![
        ("CreateSnapshot", to_value(&CreateSnapshot { name: Some("before-upgrade".into()), with_processes: true })),
        ("Snapshot", to_value(&snapshot_sample())),
        ("ForkRequest", to_value(&ForkRequest { count: Some(3), with_processes: true })),
        (
            "Forked",
            to_value(&Forked {
                parent: "fedcba987654".into(),
                sandboxes: vec![sandbox_sample()],
                errors: vec!["cannot start the sandbox: out of host id blocks".into()],
            }),
        ),
        ("RestoreRequest", to_value(&RestoreRequest { snapshot: "before-upgrade".into() })),
        ("ResetRequest", to_value(&ResetRequest { keep_workspace: true })),
        ("SetTtl", to_value(&SetTtl { ttl_seconds: Some(600.0) })),
        ("PathState", to_value(&path_state_sample())),
        ("Change", to_value(&change)),
        ("Diff", to_value(&Diff { against: "fedcba987654".into(), changes: vec![change.clone()] })),
        ("ExportRequest", to_value(&export)),
        ("Exported", to_value(&Exported { branch: "berth/agent-1".into(), commit: "3f2a".repeat(10), files: 4 })),
        ("CreateVolume", to_value(&CreateVolume { name: "cache".into() })),
        (
            "Volume",
            to_value(&Volume {
                name: "cache".into(),
                created_at_ms: 1_700_000_000_500,
                used_by: vec!["0123456789ab".into(), "pod:5f1e2d3c4b5a69788796a5b4c3d2e1f0".into()],
                tenant: Some("acme".into()),
            }),
        ),
        ("StorageInfo", to_value(&storage)),
        ("InitStorage", to_value(&InitStorage { size_bytes: Some(20 << 30) })),
        (
            "ImportImage",
            to_value(&ImportImage {
                name: "debian".into(),
                source: "/srv/images/debian.tar".into(),
                tenant: Some("acme".into()),
            }),
        ),
        ("RejectedEntry", to_value(&image_sample().rejected[0])),
        ("Image", to_value(&image_sample())),
    ];
    samples.extend(import_frame_samples().iter().map(|f| ("ImportFrame", to_value(f))));
    samples
}

/// Samples with every optional value left out, and the other values of string fields that name a kind.
pub(super) fn storage_sparse_samples() -> Vec<(&'static str, Value)> {
    let added = Change {
        path: "/workspace/new".into(),
        kind: ChangeKind::Added,
        old: None,
        new: Some(PathState { file_type: "dir".into(), mode: 0o755, size: 0, symlink_target: None }),
    };
    let deleted = Change {
        path: "/etc/motd".into(),
        kind: ChangeKind::Deleted,
        old: Some(PathState { file_type: "other".into(), mode: 0, size: 0, symlink_target: None }),
        new: None,
    };
    let image = Image {
        name: "host".into(),
        kind: "host".into(),
        created_at_ms: 0,
        layers: 0,
        files: 0,
        bytes: 0,
        rejected: vec![],
        env: vec![],
        cmd: vec![],
        workdir: None,
        used_by: vec![],
        tenant: None,
    };
    let mut samples = vec![
        ("CreateSnapshot", to_value(&CreateSnapshot::default())),
        ("Snapshot", to_value(&Snapshot { name: None, origin: "fork".into(), tenant: None, ..snapshot_sample() })),
        ("ForkRequest", to_value(&ForkRequest::default())),
        ("Forked", to_value(&Forked { parent: "fedcba987654".into(), sandboxes: vec![], errors: vec![] })),
        ("ResetRequest", to_value(&ResetRequest::default())),
        ("SetTtl", to_value(&SetTtl::default())),
        ("Change", to_value(&added)),
        ("Change", to_value(&deleted)),
        ("Diff", to_value(&Diff { against: "image".into(), changes: vec![] })),
        ("ExportRequest", to_value(&ExportRequest::default())),
        ("InitStorage", to_value(&InitStorage::default())),
        ("Volume", to_value(&Volume { name: "v".into(), created_at_ms: 0, used_by: vec![], tenant: None })),
        ("Image", to_value(&image)),
        ("ImportFrame", to_value(&ImportFrame::Done { image })),
    ];
    for (mode, quotas) in [("reflink", false), ("copy", false), ("btrfs", true)] {
        let info = StorageInfo {
            mode: mode.into(),
            size_bytes: 0,
            free_bytes: 0,
            quotas,
            bounded: quotas,
            default_disk_bytes: quotas.then_some(10 << 30),
            unbounded: (!quotas).then(|| "sandboxes' files are not bounded".into()),
        };
        samples.push(("StorageInfo", to_value(&info)));
    }
    for kind in ["directory", "tarball", "docker"] {
        samples.push(("Image", to_value(&Image { kind: kind.into(), ..image_sample() })));
    }
    samples
}
