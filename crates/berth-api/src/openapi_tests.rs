//! `openapi.json` against the wire types: every schema must describe exactly what serde reads and writes.
//!
//! Samples of each type are serialized with serde_json and checked against their schema, both for types
//! (a small validator for the keywords the description uses) and for field sets (an object's keys must equal
//! its schema's `properties`, recursively). Request schemas are also checked against deserialization: which
//! fields are required, that unknown fields are refused, and the defaults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;

const METHODS: [&str; 8] = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];

fn spec() -> Value {
    serde_json::from_str(OPENAPI).expect("openapi.json is not JSON")
}

fn schema<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["components"]["schemas"].get(name).unwrap_or_else(|| panic!("openapi.json has no schema {name}"))
}

/// Follow `$ref`s to the schema they name.
fn resolve<'a>(spec: &'a Value, s: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => named(spec, r),
        None => s,
    }
}

/// The schema a reference such as `#/components/schemas/Sandbox` names.
fn named<'a>(spec: &'a Value, reference: &str) -> &'a Value {
    let name = reference.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("unexpected {reference}"));
    resolve(spec, schema(spec, name))
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Check `v` against schema `s`, for the keywords openapi.json uses (string formats and lengths aside).
fn validate(spec: &Value, s: &Value, v: &Value, at: &str) -> Result<(), String> {
    let s = resolve(spec, s);
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for part in all {
            validate(spec, part, v, at)?;
        }
    }
    for (key, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let passed = alts.iter().filter(|a| validate(spec, a, v, at).is_ok()).count();
            if passed == 0 || (exactly_one && passed > 1) {
                return Err(format!("{at}: {v} matches {passed} of the {key} alternatives"));
            }
        }
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return Err(format!("{at}: bad type {t}")),
        };
        let fits = |t: &str| match t {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => false,
        };
        if !types.iter().any(|t| fits(t)) {
            return Err(format!("{at}: {v} is not of type {t}"));
        }
    }
    if let Some(c) = s.get("const").filter(|c| *c != v) {
        return Err(format!("{at}: {v} is not {c}"));
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array).filter(|e| !e.contains(v)) {
        return Err(format!("{at}: {v} is not one of {e:?}"));
    }
    if v.is_number() {
        match s.get("format").and_then(Value::as_str) {
            Some("uint64") if !v.is_u64() => return Err(format!("{at}: {v} is not a uint64")),
            Some("int64") if !v.is_i64() => return Err(format!("{at}: {v} is not an int64")),
            Some("uint32") if v.as_u64().and_then(|n| u32::try_from(n).ok()).is_none() => {
                return Err(format!("{at}: {v} is not a uint32"));
            }
            Some("int32") if v.as_i64().and_then(|n| i32::try_from(n).ok()).is_none() => {
                return Err(format!("{at}: {v} is not an int32"));
            }
            _ => {}
        }
        let n = v.as_f64().unwrap();
        if s.get("minimum").and_then(Value::as_f64).is_some_and(|m| n < m) {
            return Err(format!("{at}: {v} is below the minimum"));
        }
        if s.get("maximum").and_then(Value::as_f64).is_some_and(|m| n > m) {
            return Err(format!("{at}: {v} is above the maximum"));
        }
        if s.get("exclusiveMinimum").and_then(Value::as_f64).is_some_and(|m| n <= m) {
            return Err(format!("{at}: {v} is not above the exclusive minimum"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                return Err(format!("{at}: required field {r} is missing"));
            }
        }
        for (k, fv) in obj {
            let here = format!("{at}.{k}");
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => validate(spec, ps, fv, &here)?,
                (None, Some(Value::Bool(false))) => return Err(format!("{at}: field {k} is not in the schema")),
                (None, Some(extra @ Value::Object(_))) => validate(spec, extra, fv, &here)?,
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            validate(spec, items, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// An object schema's properties, through `$ref` and `allOf`.
fn properties(spec: &Value, s: &Value) -> BTreeMap<String, Value> {
    let s = resolve(spec, s);
    let mut out: BTreeMap<String, Value> = s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for part in s.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        out.extend(properties(spec, part));
    }
    out
}

/// The keys of every object in `v` must be exactly the `properties` of its schema, all the way down.
fn compare_fields(spec: &Value, s: &Value, v: &Value, at: &str) {
    let s = resolve(spec, s);
    if let Some(alts) = s.get("oneOf").or_else(|| s.get("anyOf")).and_then(Value::as_array) {
        let fitting: Vec<&Value> = alts.iter().filter(|a| validate(spec, a, v, at).is_ok()).collect();
        assert_eq!(fitting.len(), 1, "{at}: {v} fits {} alternatives", fitting.len());
        return compare_fields(spec, fitting[0], v, at);
    }
    match v {
        Value::Object(obj) => {
            let props = properties(spec, s);
            if props.is_empty() {
                // A map: its values follow `additionalProperties`. An object schema with neither says nothing.
                let Some(extra @ Value::Object(_)) = s.get("additionalProperties") else {
                    panic!("{at}: the schema of {v} declares no properties");
                };
                for (k, fv) in obj {
                    compare_fields(spec, extra, fv, &format!("{at}.{k}"));
                }
                return;
            }
            let keys: BTreeSet<&String> = obj.keys().collect();
            let declared: BTreeSet<&String> = props.keys().collect();
            assert_eq!(keys, declared, "{at}: serde's fields (left) differ from the schema's properties (right)");
            for (k, fv) in obj {
                compare_fields(spec, &props[k], fv, &format!("{at}.{k}"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                compare_fields(spec, &s["items"], item, &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

/// A sample is fully populated when it has no nulls and no empty arrays or maps, so that every field and
/// every nested object is there to be compared.
fn assert_full(v: &Value, at: &str) {
    match v {
        Value::Null => panic!("{at} is null in a sample meant to be fully populated"),
        Value::Array(a) => {
            assert!(!a.is_empty(), "{at} is empty in a sample meant to be fully populated");
            a.iter().enumerate().for_each(|(i, x)| assert_full(x, &format!("{at}[{i}]")));
        }
        Value::Object(o) => {
            assert!(!o.is_empty(), "{at} is empty in a sample meant to be fully populated");
            o.iter().for_each(|(k, x)| assert_full(x, &format!("{at}.{k}")));
        }
        _ => {}
    }
}

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
    match SandboxState::Gone {
        SandboxState::Creating | SandboxState::Running | SandboxState::Stopping | SandboxState::Gone => {}
    }
    vec![SandboxState::Creating, SandboxState::Running, SandboxState::Stopping, SandboxState::Gone]
}

fn all_streams() -> Vec<Stream> {
    match Stream::Stdout {
        Stream::Stdout | Stream::Stderr => {}
    }
    vec![Stream::Stdout, Stream::Stderr]
}

fn all_codes() -> Vec<ErrorCode> {
    use ErrorCode::*;
    match Internal {
        InvalidRequest | Unauthorized | NotFound | Conflict | PayloadTooLarge | Internal | Unavailable => {}
    }
    vec![InvalidRequest, Unauthorized, NotFound, Conflict, PayloadTooLarge, Internal, Unavailable]
}

fn all_event_kinds() -> Vec<EventKind> {
    use EventKind::*;
    match Created {
        Created | Adopted | ExecStarted | ExecFinished | ExecTimedOut | ExecKilled | Removed | Reaped => {}
    }
    vec![Created, Adopted, ExecStarted, ExecFinished, ExecTimedOut, ExecKilled, Removed, Reaped]
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
fn full_samples() -> Vec<(&'static str, Value)> {
    let mount = Mount { host: "/srv/project".into(), target: "/workspace/project".into(), readonly: true };
    let create = CreateSandbox {
        name: Some("agent-1".into()),
        image: Some("host".into()),
        memory_bytes: Some(256 << 20),
        pids: Some(512),
        cpus: Some(1.5),
        ttl_seconds: Some(3600.0),
        idle_timeout_seconds: Some(600.5),
        env: map(&[("LANG", "C.UTF-8")]),
        labels: map(&[("team", "core")]),
        mounts: vec![mount.clone()],
    };
    let sandbox = Sandbox {
        id: "0123456789ab".into(),
        name: "agent-1".into(),
        image: "host".into(),
        state: SandboxState::Running,
        created_at_ms: 1_700_000_000_000,
        expires_at_ms: Some(1_700_000_360_000),
        idle_timeout_seconds: Some(600.5),
        last_activity_ms: 1_700_000_001_000,
        memory_bytes: Some(256 << 20),
        pids: Some(512),
        cpus: Some(1.5),
        labels: map(&[("team", "core")]),
        pid: Some(31337),
    };
    let request = ExecRequest {
        argv: vec!["sh".into(), "-c".into(), "make test".into()],
        env: map(&[("CI", "1")]),
        workdir: Some("/workspace/project".into()),
        timeout_seconds: Some(30.5),
        max_output_bytes: Some(65536),
        detach: true,
    };
    let info = ExecInfo {
        exec_id: "x3".into(),
        argv: vec!["sleep".into(), "1".into()],
        started_at_ms: 1_700_000_002_000,
        running: false,
        result: Some(result_sample()),
    };
    let teardown = Teardown {
        id: "0123456789ab".into(),
        steps: vec!["killed 3 processes".into()],
        leftovers: vec!["cgroup /sys/fs/cgroup/berth/0123456789ab".into()],
    };
    let error =
        ErrorBody { error: ApiError { code: ErrorCode::NotFound, message: "there is no sandbox \"x\"".into() } };
    let mut samples = vec![
        ("CreateSandbox", to_value(&create)),
        ("Mount", to_value(&mount)),
        ("Sandbox", to_value(&sandbox)),
        ("ExecRequest", to_value(&request)),
        ("ExecResult", to_value(&result_sample())),
        ("ExecInfo", to_value(&info)),
        ("Teardown", to_value(&teardown)),
        ("ErrorBody", to_value(&error)),
        ("ApiError", to_value(&error.error)),
        ("LifecycleEvent", to_value(&event_sample())),
        ("FileEntry", to_value(&file_sample())),
        ("Extracted", to_value(&Extracted { entries: 3 })),
    ];
    samples.extend(frame_samples().iter().map(|f| ("ExecFrame", to_value(f))));
    samples
}

/// Samples with every optional value left out, which must validate too.
fn sparse_samples() -> Vec<(&'static str, Value)> {
    let sandbox = Sandbox {
        id: "0123456789ab".into(),
        name: "berth-1".into(),
        image: "host".into(),
        state: SandboxState::Creating,
        created_at_ms: 0,
        expires_at_ms: None,
        idle_timeout_seconds: None,
        last_activity_ms: 0,
        memory_bytes: None,
        pids: None,
        cpus: None,
        labels: BTreeMap::new(),
        pid: None,
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
        error: None,
    };
    let info =
        ExecInfo { exec_id: "x0".into(), argv: vec!["true".into()], started_at_ms: 0, running: true, result: None };
    vec![
        ("CreateSandbox", to_value(&CreateSandbox::default())),
        ("Mount", to_value(&Mount { host: "/a".into(), target: "/b".into(), readonly: false })),
        ("Sandbox", to_value(&sandbox)),
        ("ExecRequest", to_value(&ExecRequest { argv: vec!["true".into()], ..ExecRequest::default() })),
        ("ExecResult", to_value(&result)),
        ("ExecFrame", to_value(&ExecFrame::Exit(result))),
        ("ExecInfo", to_value(&info)),
        ("Teardown", to_value(&Teardown::default())),
        ("LifecycleEvent", to_value(&LifecycleEvent { exec_id: None, exit_code: None, ..event_sample() })),
        ("FileEntry", to_value(&FileEntry { kind: FileKind::File, link_target: None, ..file_sample() })),
        ("Extracted", to_value(&Extracted { entries: 0 })),
    ]
}

#[test]
fn the_description_is_openapi_3_1() {
    let spec = spec();
    let version = spec["openapi"].as_str().expect("no openapi version");
    assert!(version.starts_with("3.1."), "openapi is {version}, not 3.1.x");
    assert!(spec["info"]["title"].is_string() && spec["info"]["version"].is_string());
    assert!(spec["paths"].as_object().is_some_and(|p| !p.is_empty()));
    let bearer = &spec["components"]["securitySchemes"]["bearer"];
    assert_eq!((bearer["type"].as_str(), bearer["scheme"].as_str()), (Some("http"), Some("bearer")));
}

#[test]
fn every_ref_names_a_component() {
    fn walk(spec: &Value, v: &Value, at: &str) {
        match v {
            Value::Object(o) => {
                if let Some(r) = o.get("$ref") {
                    let r = r.as_str().unwrap();
                    let mut target = spec;
                    for part in r.strip_prefix("#/").unwrap_or_else(|| panic!("{at}: {r} is not local")).split('/') {
                        target = target.get(part).unwrap_or_else(|| panic!("{at}: {r} names nothing"));
                    }
                }
                o.iter().for_each(|(k, x)| walk(spec, x, &format!("{at}/{k}")));
            }
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(spec, x, &format!("{at}/{i}"))),
            _ => {}
        }
    }
    let spec = spec();
    walk(&spec, &spec, "#");
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
    ] {
        assert_eq!(schema(&spec, name)["enum"].as_array().unwrap(), &values, "{name}");
    }
}

#[test]
fn frames_are_one_of_by_type() {
    let spec = spec();
    let frame = schema(&spec, "ExecFrame");
    assert_eq!(frame["discriminator"]["propertyName"], "type");
    let mapping = frame["discriminator"]["mapping"].as_object().unwrap();
    let alternatives: BTreeSet<&str> =
        frame["oneOf"].as_array().unwrap().iter().map(|a| a["$ref"].as_str().unwrap()).collect();
    let mapped: BTreeSet<&str> = mapping.values().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(alternatives, mapped, "ExecFrame's oneOf and its discriminator mapping differ");
    let tags: BTreeSet<String> =
        frame_samples().iter().map(|f| to_value(f)["type"].as_str().unwrap().to_string()).collect();
    assert_eq!(tags, mapping.keys().cloned().collect(), "frame types (left) and the mapping (right) differ");
    for f in frame_samples() {
        let v = to_value(&f);
        let tag = v["type"].as_str().unwrap();
        let target = named(&spec, mapping[tag].as_str().unwrap());
        assert_eq!(properties(&spec, target)["type"]["const"], tag, "{tag} maps to a schema for another type");
        validate(&spec, target, &v, tag).unwrap();
    }
}

/// For a request type: a property is `required` exactly when serde refuses the object without it; unknown
/// fields are refused, as `additionalProperties: false` says; and each `default` is what serde fills in.
fn check_request<T: Serialize + DeserializeOwned>(spec: &Value, name: &str, full: &T) {
    let s = schema(spec, name);
    let full = to_value(full);
    assert_eq!(s["additionalProperties"], false, "{name} refuses unknown fields: say additionalProperties false");
    let mut unknown = full.clone();
    unknown["no_such_field"] = Value::Bool(true);
    assert!(serde_json::from_value::<T>(unknown).is_err(), "{name} took an unknown field");
    let required: BTreeSet<&str> =
        s["required"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap()).collect();
    let minimal: serde_json::Map<String, Value> = full
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| required.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let minimal = to_value(&serde_json::from_value::<T>(Value::Object(minimal)).unwrap());
    for (field, prop) in properties(spec, s) {
        let mut without = full.clone();
        without.as_object_mut().unwrap().remove(&field);
        let refused = serde_json::from_value::<T>(without).is_err();
        assert_eq!(refused, required.contains(field.as_str()), "{name}.{field}: refused without it, and required");
        if let Some(default) = prop.get("default") {
            assert_eq!(&minimal[&field], default, "{name}.{field}: serde's default differs from the schema's");
        }
    }
}

#[test]
fn request_schemas_match_deserialization() {
    let spec = spec();
    let samples = full_samples();
    let sample = |name: &str| samples.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    check_request(&spec, "CreateSandbox", &serde_json::from_value::<CreateSandbox>(sample("CreateSandbox")).unwrap());
    check_request(&spec, "Mount", &serde_json::from_value::<Mount>(sample("Mount")).unwrap());
    check_request(&spec, "ExecRequest", &serde_json::from_value::<ExecRequest>(sample("ExecRequest")).unwrap());
}

#[test]
fn response_schemas_require_every_field() {
    // Responses are only serialized, and serde writes every field (nulls included): all are required.
    let spec = spec();
    for (name, sample) in full_samples() {
        if matches!(name, "CreateSandbox" | "Mount" | "ExecRequest") {
            continue;
        }
        let mut s = resolve(&spec, schema(&spec, name));
        if name == "ExecFrame" {
            let tag = sample["type"].as_str().unwrap();
            s = named(&spec, s["discriminator"]["mapping"][tag].as_str().unwrap());
        }
        let mut required: BTreeSet<String> =
            s["required"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap().to_string()).collect();
        for part in s["allOf"].as_array().into_iter().flatten() {
            let part = resolve(&spec, part);
            required.extend(part["required"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap().to_string()));
        }
        let keys: BTreeSet<String> = sample.as_object().unwrap().keys().cloned().collect();
        assert_eq!(required, keys, "{name}: required (left) and serialized fields (right) differ");
    }
}

#[test]
fn operations_are_complete_and_errors_are_error_bodies() {
    let spec = spec();
    let codes: BTreeMap<String, u16> =
        all_codes().into_iter().map(|c| (to_value(&c).as_str().unwrap().to_string(), c.status())).collect();
    let mut ids = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap().iter().filter(|(m, _)| METHODS.contains(&m.as_str())) {
            let at = format!("{} {path}", method.to_uppercase());
            assert!(ids.insert(op["operationId"].as_str().unwrap_or_else(|| panic!("{at}: no operationId"))));
            // Every `{param}` of the path is declared, and no other path parameter.
            let params: BTreeSet<String> = item["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(op["parameters"].as_array().into_iter().flatten())
                .map(|p| match p["$ref"].as_str() {
                    Some(r) => &spec["components"]["parameters"][r.trim_start_matches("#/components/parameters/")],
                    None => p,
                })
                .inspect(|p| assert!(p["name"].is_string() && p["schema"].is_object(), "{at}: parameter {p}"))
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect();
            let in_path: BTreeSet<String> =
                path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).map(String::from).collect();
            assert_eq!(params, in_path, "{at}: path parameters");
            let responses = op["responses"].as_object().unwrap_or_else(|| panic!("{at}: no responses"));
            assert!(responses.keys().any(|s| s.starts_with('2')), "{at}: no success response");
            for (status, resp) in responses {
                let resp = match resp["$ref"].as_str() {
                    Some(r) => &spec["components"]["responses"][r.trim_start_matches("#/components/responses/")],
                    None => resp,
                };
                let status: u16 = status.parse().unwrap_or_else(|_| panic!("{at}: status {status}"));
                if status < 400 {
                    continue;
                }
                assert_eq!(
                    resp["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/ErrorBody",
                    "{at} {status}: errors are ErrorBody"
                );
                // Each error response names its code first, as `code`; that code's status must be this one.
                let desc = resp["description"].as_str().unwrap();
                let code = desc.strip_prefix('`').and_then(|d| d.split('`').next()).unwrap_or_default();
                assert_eq!(codes.get(code), Some(&status), "{at} {status}: {desc:?} names a code of another status");
            }
        }
    }
}
