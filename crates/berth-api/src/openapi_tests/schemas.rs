//! Each wire type against its schema: fully populated and sparse samples of every type, validated and
//! compared field by field; string enums, and the discriminators of the NDJSON frames (`ExecFrame`,
//! `ImportFrame`); which fields requests and responses require is `requests`. The samples of durable projects and
//! images (`storage.rs`) are in `storage_samples`, those of egress (`network.rs`) in `network_samples`,
//! those of pods (`pods.rs`) in `pods_samples`, those of tenants (`tenants.rs`) in `tenants_samples`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::contexts_samples::{contexts_full_samples, contexts_sparse_samples};
use super::desktop_samples::desktop_samples;
use super::network_samples::{network_full_samples, network_sample, network_sparse_samples};
use super::pods_samples::{pods_full_samples, pods_sparse_samples};
use super::previews_samples::preview_samples;
use super::storage_samples::{all_change_kinds, import_frame_samples, storage_full_samples, storage_sparse_samples};
use super::tenants_samples::{tenants_full_samples, tenants_sparse_samples};
use super::validator::{assert_full, compare_fields, properties, validate};
use super::*;

fn result_sample() -> ExecResult {
    ExecResult {
        exec_id: "x3".into(),
        exit_code: 137,
        signal: Some(9),
        duration_ms: 1500,
        timed_out: true,
        killed: true,
        bytes_dropped: 4096,
        output_bytes: 70000,
        log_bytes_dropped: 2048,
        oom_killed: true,
        error: Some("cannot run sh: no such file".into()),
    }
}

fn frame_samples() -> Vec<ExecFrame> {
    // Naming every variant here makes a new one a compile error until it has a sample.
    match (ExecFrame::Truncated { dropped_bytes: 0 }) {
        ExecFrame::Started { .. } | ExecFrame::Output { .. } | ExecFrame::Truncated { .. } | ExecFrame::Exit(_) => {}
    }
    vec![
        ExecFrame::Started { exec_id: "x0".into(), pid: 4242 },
        ExecFrame::Output { stream: Stream::Stderr, seq: 7, data: "warning\n".into() },
        ExecFrame::Truncated { dropped_bytes: 100 },
        ExecFrame::Exit(result_sample()),
    ]
}

fn all_states() -> Vec<SandboxState> {
    use SandboxState::*;
    match Gone {
        Creating | Running | Paused | Hibernated | Stopping | Stopped | Gone => {}
    }
    vec![Creating, Running, Paused, Hibernated, Stopping, Stopped, Gone]
}

fn all_streams() -> Vec<Stream> {
    match Stream::Stdout {
        Stream::Stdout | Stream::Stderr => {}
    }
    vec![Stream::Stdout, Stream::Stderr]
}

pub(super) fn all_codes() -> Vec<ErrorCode> {
    use ErrorCode::*;
    match Internal {
        InvalidRequest | Unauthorized | Forbidden | NotFound | RequestTimeout | Conflict | PayloadTooLarge
        | HeadersTooLarge | QuotaExceeded | Internal | Unavailable => {}
    }
    vec![
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        RequestTimeout,
        Conflict,
        PayloadTooLarge,
        HeadersTooLarge,
        QuotaExceeded,
        Internal,
        Unavailable,
    ]
}

fn all_event_kinds() -> Vec<EventKind> {
    use EventKind::*;
    match Created {
        Created | Adopted | ExecStarted | ExecFinished | ExecTimedOut | ExecKilled | Removed | Reaped | Stopped
        | Started | Snapshotted | Restored | Forked | BudgetWarning | Paused | Resumed | Hibernated | Woken => {}
    }
    vec![
        Created,
        Adopted,
        ExecStarted,
        ExecFinished,
        ExecTimedOut,
        ExecKilled,
        Removed,
        Reaped,
        Stopped,
        Started,
        Snapshotted,
        Restored,
        Forked,
        BudgetWarning,
        Paused,
        Resumed,
        Hibernated,
        Woken,
    ]
}

fn all_file_kinds() -> Vec<FileKind> {
    use FileKind::*;
    match File {
        File | Directory | Symlink | Fifo | Socket | CharDevice | BlockDevice => {}
    }
    vec![File, Directory, Symlink, Fifo, Socket, CharDevice, BlockDevice]
}

fn event_sample() -> LifecycleEvent {
    LifecycleEvent {
        seq: 12,
        time_ms: 1_700_000_003_000,
        sandbox: "0123456789ab".into(),
        kind: EventKind::ExecFinished,
        exec_id: Some("x3".into()),
        exit_code: Some(2),
    }
}

/// A fully populated sandbox, also the children of a fork.
pub(super) fn sandbox_sample() -> Sandbox {
    Sandbox {
        id: "0123456789ab".into(),
        name: "agent-1".into(),
        image: "host".into(),
        state: SandboxState::Running,
        created_at_ms: 1_700_000_000_000,
        expires_at_ms: Some(1_700_000_360_000),
        idle_timeout_seconds: Some(600.5),
        last_activity_ms: 1_700_000_001_000,
        last_activity: Some("exec".into()),
        idle_pause_seconds: Some(30.0),
        ttl_active_only: true,
        ttl_action: TtlAction::Hibernate,
        paused_at_ms: Some(1_700_000_002_000),
        hibernated_at_ms: Some(1_700_000_003_000),
        idle_hibernate_seconds: Some(600.0),
        memory_bytes: Some(256 << 20),
        pids: Some(512),
        cpus: Some(1.5),
        labels: map(&[("team", "core")]),
        pid: Some(31337),
        landlock: Some("enforced".into()),
        persistent: true,
        disk_bytes: Some(1 << 30),
        parent: Some("fedcba987654".into()),
        network: network_sample(),
        owner: Some("abcdefabcdef".into()),
        tenant: Some("acme".into()),
        usage: Some(usage_sample()),
        isolation: Isolation::Gvisor,
        desktop: Some(Desktop { width: 1280, height: 800 }),
    }
}

/// A fully populated usage record, with a budget of every kind.
pub(super) fn usage_sample() -> Usage {
    Usage {
        id: "0123456789ab".into(),
        name: "agent-1".into(),
        cpu_seconds: 12.5,
        memory_bytes: 64 << 20,
        memory_gib_seconds: 3.25,
        peak_memory_bytes: 128 << 20,
        disk_bytes: 4096,
        egress_bytes_out: 1024,
        egress_bytes_in: 65536,
        execs: 7,
        running_seconds: 90.5,
        paused_seconds: 0.0,
        hibernated_seconds: 30.0,
        budget: budget_sample(),
        charged: Charged { cpu_seconds: 14.5, egress_bytes: 70000, wall_seconds: 90.5 },
        sampled_at_ms: 1_700_000_090_500,
    }
}

fn budget_sample() -> Budget {
    Budget { cpu_seconds: Some(600.0), egress_bytes: Some(1 << 30), wall_seconds: Some(7200.0) }
}

fn file_sample() -> FileEntry {
    FileEntry {
        name: "link".into(),
        kind: FileKind::Symlink,
        size: 11,
        mode: 0o777,
        mtime_ms: -1_000,
        uid: 0,
        gid: 65534,
        link_target: Some("/etc/hosts".into()),
    }
}

/// Fully populated samples of every type with an object schema, by schema name.
pub(super) fn full_samples() -> Vec<(&'static str, Value)> {
    let mount = Mount { host: "/srv/project".into(), target: "/workspace/project".into(), readonly: true };
    let volume = VolumeMount { name: "cache".into(), target: "/root/.cache".into(), readonly: true };
    let create = CreateSandbox {
        name: Some("agent-1".into()),
        image: Some("host".into()),
        memory_bytes: Some(256 << 20),
        pids: Some(512),
        cpus: Some(1.5),
        ttl_seconds: Some(3600.0),
        idle_timeout_seconds: Some(600.5),
        idle_pause_seconds: Some(30.0),
        idle_hibernate_seconds: Some(600.0),
        ttl_active_only: true,
        ttl_action: TtlAction::Hibernate,
        env: map(&[("LANG", "C.UTF-8")]),
        labels: map(&[("team", "core")]),
        tenant: Some("acme".into()),
        mounts: vec![mount.clone()],
        persistent: true,
        disk_bytes: Some(1 << 30),
        volumes: vec![volume.clone()],
        from_snapshot: Some("base".into()),
        outputs: vec!["/workspace/dist/*.whl".into()],
        network: network_sample(),
        secrets: vec!["GITHUB_TOKEN@api.github.com".into()],
        budget: budget_sample(),
        isolation: Some(Isolation::Gvisor),
        desktop: Some(Desktop { width: 1280, height: 800 }),
    };
    let request = ExecRequest {
        argv: vec!["sh".into(), "-c".into(), "make test".into()],
        env: map(&[("CI", "1")]),
        workdir: Some("/workspace/project".into()),
        timeout_seconds: Some(30.5),
        max_output_bytes: Some(65536),
        max_log_bytes: Some(1 << 20),
        detach: true,
        stdin: Some("input\n".into()),
        stdin_open: true,
        user: Some("user".into()),
    };
    let info = ExecInfo {
        exec_id: "x3".into(),
        argv: vec!["sleep".into(), "1".into()],
        started_at_ms: 1_700_000_002_000,
        running: false,
        result: Some(result_sample()),
    };
    let output = OutputFile {
        path: "/workspace/dist/app.whl".into(),
        saved_as: "/var/lib/berth/outputs/0123456789ab/files/dist/app.whl".into(),
        bytes: 1234,
        sha256: "ab".repeat(32),
    };
    let teardown = Teardown {
        id: "0123456789ab".into(),
        steps: vec!["killed 3 processes".into()],
        leftovers: vec!["cgroup /sys/fs/cgroup/berth/0123456789ab".into()],
        name: "agent-1".into(),
        reason: "remove".into(),
        outputs: vec![output.clone()],
        patch: Some(output.clone()),
        revoked: vec!["session token tok1".into()],
        flushed: [("journal".to_string(), 12u64)].into_iter().collect(),
        clean: false,
        started_at_ms: 1_700_000_000_000,
        finished_at_ms: 1_700_000_000_050,
        usage: Some(usage_sample()),
    };
    let error =
        ErrorBody { error: ApiError { code: ErrorCode::NotFound, message: "there is no sandbox \"x\"".into() } };
    let mint = MintToken {
        name: "ci".into(),
        tenant: Some("acme".into()),
        read_only: true,
        selector: map(&[("team", "core")]),
    };
    let mut samples = vec![
        ("CreateSandbox", to_value(&create)),
        ("Mount", to_value(&mount)),
        ("VolumeMount", to_value(&volume)),
        ("Sandbox", to_value(&sandbox_sample())),
        ("ExecRequest", to_value(&request)),
        ("ExecResult", to_value(&result_sample())),
        ("ExecInfo", to_value(&info)),
        ("Teardown", to_value(&teardown)),
        ("OutputFile", to_value(&output)),
        ("ErrorBody", to_value(&error)),
        ("Usage", to_value(&usage_sample())),
        (
            "UsagePoint",
            to_value(&UsagePoint {
                at_ms: 1_700_000_005_000,
                cpu_seconds: 1.25,
                memory_bytes: 1 << 20,
                disk_bytes: 4096,
            }),
        ),
        ("Budget", to_value(&budget_sample())),
        ("Charged", to_value(&usage_sample().charged)),
        ("ApiError", to_value(&error.error)),
        ("LifecycleEvent", to_value(&event_sample())),
        ("FileEntry", to_value(&file_sample())),
        ("Extracted", to_value(&Extracted { entries: 3 })),
        (
            "MoveFile",
            to_value(&MoveFile {
                from: "/workspace/a".into(),
                to: "/workspace/b".into(),
                overwrite: true,
                user: Some("user".into()),
            }),
        ),
        (
            "WatchEvent",
            to_value(&WatchEvent {
                kind: WatchKind::Rename,
                path: Some("src/new.rs".into()),
                from: Some("src/old.rs".into()),
                dir: true,
                reason: Some("shown in full".into()),
            }),
        ),
        ("MintToken", to_value(&mint)),
        (
            "TokenInfo",
            to_value(&TokenInfo {
                id: "a1b2c3".into(),
                name: "ci".into(),
                created_at_ms: 1_700_000_000_000,
                grant: mint.grant(),
            }),
        ),
        (
            "DaemonInfo",
            to_value(&DaemonInfo {
                version: "0.1.0".into(),
                bounds: vec![Bound {
                    resource: "exec log".into(),
                    bound: "16 MiB per exec or shell".into(),
                    set_by: "berth daemon --max-log-bytes".into(),
                    note: "the middle is dropped, with a marker".into(),
                }],
                warm: WarmPool { size: 2, ready: 1, served: 5, missed: 0 },
                isolation: Isolation::Namespaces,
                isolations: vec![IsolationInfo {
                    isolation: Isolation::Gvisor,
                    available: false,
                    detail: "runsc (gVisor) is not installed".into(),
                }],
            }),
        ),
        ("MintedToken", to_value(&MintedToken { id: "a1b2c3".into(), name: "ci".into(), token: "berth_00ff".into() })),
    ];
    samples.extend(frame_samples().iter().map(|f| ("ExecFrame", to_value(f))));
    samples.extend(storage_full_samples());
    samples.extend(network_full_samples());
    samples.extend(contexts_full_samples());
    samples.extend(preview_samples(true));
    samples.extend(desktop_samples(true));
    samples.extend(pods_full_samples());
    samples.extend(tenants_full_samples());
    samples
}

/// Samples with every optional value left out, which must validate too.
pub(super) fn sparse_samples() -> Vec<(&'static str, Value)> {
    let sandbox = Sandbox {
        id: "0123456789ab".into(),
        name: "berth-1".into(),
        image: "host".into(),
        state: SandboxState::Creating,
        created_at_ms: 0,
        expires_at_ms: None,
        idle_timeout_seconds: None,
        last_activity_ms: 0,
        last_activity: None,
        idle_pause_seconds: None,
        ttl_active_only: false,
        ttl_action: TtlAction::Remove,
        paused_at_ms: None,
        hibernated_at_ms: None,
        idle_hibernate_seconds: None,
        memory_bytes: None,
        pids: None,
        cpus: None,
        labels: BTreeMap::new(),
        pid: None,
        landlock: None,
        persistent: false,
        disk_bytes: None,
        parent: None,
        network: Network::default(),
        owner: None,
        tenant: None,
        usage: None,
        isolation: Isolation::Namespaces,
        desktop: None,
    };
    let result = ExecResult {
        exec_id: "x0".into(),
        exit_code: 0,
        signal: None,
        duration_ms: 0,
        timed_out: false,
        killed: false,
        bytes_dropped: 0,
        output_bytes: 0,
        log_bytes_dropped: 0,
        oom_killed: false,
        error: None,
    };
    let info =
        ExecInfo { exec_id: "x0".into(), argv: vec!["true".into()], started_at_ms: 0, running: true, result: None };
    let mut samples = vec![
        ("CreateSandbox", to_value(&CreateSandbox::default())),
        ("Mount", to_value(&Mount { host: "/a".into(), target: "/b".into(), readonly: false })),
        ("VolumeMount", to_value(&VolumeMount { name: "v".into(), target: "/v".into(), readonly: false })),
        ("Sandbox", to_value(&sandbox)),
        ("ExecRequest", to_value(&ExecRequest { argv: vec!["true".into()], ..ExecRequest::default() })),
        ("ExecResult", to_value(&result)),
        ("ExecFrame", to_value(&ExecFrame::Exit(result))),
        ("ExecInfo", to_value(&info)),
        ("Teardown", to_value(&Teardown::default())),
        ("LifecycleEvent", to_value(&LifecycleEvent { exec_id: None, exit_code: None, ..event_sample() })),
        ("FileEntry", to_value(&FileEntry { kind: FileKind::File, link_target: None, ..file_sample() })),
        ("Extracted", to_value(&Extracted { entries: 0 })),
        ("MoveFile", to_value(&MoveFile { from: "/a".into(), to: "/b".into(), ..MoveFile::default() })),
        ("WatchEvent", to_value(&WatchEvent::of(WatchKind::Ready))),
        ("MintToken", to_value(&MintToken::default())),
        (
            "TokenInfo",
            to_value(&TokenInfo {
                id: "a1b2c3".into(),
                name: "session 0123456789ab".into(),
                created_at_ms: 0,
                grant: Grant::default(),
            }),
        ),
        ("Budget", to_value(&Budget::default())),
        ("Usage", to_value(&Usage::default())),
    ];
    samples.extend(storage_sparse_samples());
    samples.extend(network_sparse_samples());
    samples.extend(contexts_sparse_samples());
    samples.extend(preview_samples(false));
    samples.extend(desktop_samples(false));
    samples.extend(pods_sparse_samples());
    samples.extend(tenants_sparse_samples());
    samples
}

#[test]
fn samples_validate_against_their_schemas() {
    let spec = spec();
    for (name, sample) in full_samples().into_iter().chain(sparse_samples()) {
        if let Err(e) = validate(&spec, schema(&spec, name), &sample, name) {
            panic!("{name}: {e}\nsample: {sample}");
        }
    }
}

#[test]
fn schema_properties_equal_serde_fields() {
    let spec = spec();
    for (name, sample) in full_samples() {
        assert_full(&sample, name);
        compare_fields(&spec, schema(&spec, name), &sample, name);
    }
}

#[test]
fn every_object_schema_has_a_sample() {
    let spec = spec();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    fn reach(spec: &Value, s: &Value, out: &mut BTreeSet<String>) {
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            let name = r.trim_start_matches("#/components/schemas/");
            if out.insert(name.to_string()) {
                reach(spec, schema(spec, name), out);
            }
            return;
        }
        match s {
            Value::Object(o) => o.values().for_each(|x| reach(spec, x, out)),
            Value::Array(a) => a.iter().for_each(|x| reach(spec, x, out)),
            _ => {}
        }
    }
    for (name, _) in full_samples() {
        covered.insert(name.to_string());
        reach(&spec, schema(&spec, name), &mut covered);
    }
    // These are the daemon's own types (its health literal and its journal), not berth-api's: berthd's tests
    // check them.
    for name in ["Health", "JournalRecord", "JournalVerdict"] {
        covered.insert(name.into());
    }
    let declared: BTreeSet<String> = spec["components"]["schemas"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(covered, declared, "schemas without a sample (right only), or samples without a schema (left only)");
}

#[test]
fn string_enums_list_every_variant() {
    let spec = spec();
    for (name, values) in [
        ("SandboxState", all_states().iter().map(to_value).collect::<Vec<_>>()),
        ("Stream", all_streams().iter().map(to_value).collect()),
        ("ErrorCode", all_codes().iter().map(to_value).collect()),
        ("EventKind", all_event_kinds().iter().map(to_value).collect()),
        ("FileKind", all_file_kinds().iter().map(to_value).collect()),
        ("ChangeKind", all_change_kinds().iter().map(to_value).collect()),
        ("TtlAction", [TtlAction::Remove, TtlAction::Pause, TtlAction::Hibernate].iter().map(to_value).collect()),
        (
            "WatchKind",
            [
                WatchKind::Ready,
                WatchKind::Create,
                WatchKind::Write,
                WatchKind::Remove,
                WatchKind::Rename,
                WatchKind::Chmod,
                WatchKind::Overflow,
                WatchKind::End,
            ]
            .iter()
            .map(to_value)
            .collect(),
        ),
    ] {
        assert_eq!(schema(&spec, name)["enum"].as_array().unwrap(), &values, "{name}");
    }
}

#[test]
fn frames_are_one_of_by_type() {
    let spec = spec();
    let exec: Vec<Value> = frame_samples().iter().map(to_value).collect();
    let import: Vec<Value> = import_frame_samples().iter().map(to_value).collect();
    for (name, samples) in [("ExecFrame", exec), ("ImportFrame", import)] {
        let frame = schema(&spec, name);
        assert_eq!(frame["discriminator"]["propertyName"], "type", "{name}");
        let mapping = frame["discriminator"]["mapping"].as_object().unwrap();
        let alternatives: BTreeSet<&str> =
            frame["oneOf"].as_array().unwrap().iter().map(|a| a["$ref"].as_str().unwrap()).collect();
        let mapped: BTreeSet<&str> = mapping.values().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(alternatives, mapped, "{name}'s oneOf and its discriminator mapping differ");
        let tags: BTreeSet<String> = samples.iter().map(|v| v["type"].as_str().unwrap().to_string()).collect();
        assert_eq!(
            tags,
            mapping.keys().cloned().collect(),
            "{name}: frame types (left) and the mapping (right) differ"
        );
        for v in &samples {
            let tag = v["type"].as_str().unwrap();
            let target = named(&spec, mapping[tag].as_str().unwrap());
            assert_eq!(
                properties(&spec, target)["type"]["const"],
                tag,
                "{name}: {tag} maps to a schema for another type"
            );
            validate(&spec, target, v, tag).unwrap();
        }
    }
}
