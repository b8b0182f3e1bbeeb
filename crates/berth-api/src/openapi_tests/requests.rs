//! Which fields requests and responses require: a request schema's `required`, `additionalProperties` and
//! defaults against what serde accepts and fills in, and a response's `required` against what serde writes
//! (every field, but the few it leaves out when they are empty). The samples are `schemas`'.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::desktop_samples::ACTION_VARIANTS;
use super::schemas::{full_samples, sparse_samples};
use super::validator::properties;
use super::*;

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

/// The request schemas: exactly those that refuse unknown fields (with the desktop's actions, `ACTION_VARIANTS`).
const REQUESTS: [&str; 30] = [
    "Budget",
    "CreatePreview",
    "CreateContext",
    "RunCode",
    "CreateSandbox",
    "InitStorage",
    "Mount",
    "VolumeMount",
    "ExecRequest",
    "MintToken",
    "MoveFile",
    "CreateSnapshot",
    "ForkRequest",
    "RestoreRequest",
    "ResetRequest",
    "SetTtl",
    "ExportRequest",
    "CreateVolume",
    "ImportImage",
    "Network",
    "NetChange",
    "PodRequest",
    "PodEvent",
    "PodFork",
    "CreateTenant",
    "Quota",
    "Desktop",
    "DesktopActions",
    "ScreenSize",
    "WaitSettled",
];

#[test]
fn request_schemas_match_deserialization() {
    let spec = spec();
    let samples = full_samples();
    fn check<T: Serialize + DeserializeOwned>(spec: &Value, samples: &[(&str, Value)], name: &str) {
        let sample = samples.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no sample of {name}"));
        check_request(spec, name, &serde_json::from_value::<T>(sample.1.clone()).unwrap());
    }
    check::<CreateSandbox>(&spec, &samples, "CreateSandbox");
    check::<Mount>(&spec, &samples, "Mount");
    check::<VolumeMount>(&spec, &samples, "VolumeMount");
    check::<ExecRequest>(&spec, &samples, "ExecRequest");
    check::<MintToken>(&spec, &samples, "MintToken");
    check::<MoveFile>(&spec, &samples, "MoveFile");
    check::<CreateSnapshot>(&spec, &samples, "CreateSnapshot");
    check::<ForkRequest>(&spec, &samples, "ForkRequest");
    check::<RestoreRequest>(&spec, &samples, "RestoreRequest");
    check::<ResetRequest>(&spec, &samples, "ResetRequest");
    check::<SetTtl>(&spec, &samples, "SetTtl");
    check::<ExportRequest>(&spec, &samples, "ExportRequest");
    check::<CreateVolume>(&spec, &samples, "CreateVolume");
    check::<ImportImage>(&spec, &samples, "ImportImage");
    check::<InitStorage>(&spec, &samples, "InitStorage");
    check::<Network>(&spec, &samples, "Network");
    check::<NetChange>(&spec, &samples, "NetChange");
    check::<CreateContext>(&spec, &samples, "CreateContext");
    check::<RunCode>(&spec, &samples, "RunCode");
    check::<Budget>(&spec, &samples, "Budget");
    check::<CreatePreview>(&spec, &samples, "CreatePreview");
    check::<PodRequest>(&spec, &samples, "PodRequest");
    check::<PodEvent>(&spec, &samples, "PodEvent");
    check::<PodFork>(&spec, &samples, "PodFork");
    check::<CreateTenant>(&spec, &samples, "CreateTenant");
    check::<Quota>(&spec, &samples, "Quota");
    check::<Desktop>(&spec, &samples, "Desktop");
    check::<DesktopActions>(&spec, &samples, "DesktopActions");
    check::<ScreenSize>(&spec, &samples, "ScreenSize");
    check::<WaitSettled>(&spec, &samples, "WaitSettled");
    for name in ACTION_VARIANTS {
        check::<DesktopAction>(&spec, &samples, name);
    }
    let closed: BTreeSet<&str> = spec["components"]["schemas"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| s["additionalProperties"] == false)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        closed,
        REQUESTS.into_iter().chain(ACTION_VARIANTS).collect(),
        "schemas refusing unknown fields (left) and REQUESTS (right)"
    );
}

#[test]
fn response_schemas_require_what_serde_always_writes() {
    // Responses are only serialized. serde writes every field (nulls and `#[serde(default)]` fields included),
    // but those marked `skip_serializing_if`, which it leaves out when they are empty: a field is required
    // exactly when every sample of its schema has it (the sparse samples leave such fields out). A field that
    // may be left out is not also null: its type says so.
    let spec = spec();
    let mut seen: BTreeMap<String, (&Value, BTreeSet<String>)> = BTreeMap::new();
    for (name, sample) in full_samples().into_iter().chain(sparse_samples()) {
        if REQUESTS.contains(&name) || ACTION_VARIANTS.contains(&name) {
            continue;
        }
        let (mut s, mut at) = (resolve(&spec, schema(&spec, name)), name.to_string());
        if let Some(mapping) = s["discriminator"]["mapping"].as_object() {
            let tag = sample["type"].as_str().unwrap();
            s = named(&spec, mapping[tag].as_str().unwrap());
            at = format!("{name} ({tag})");
        }
        let keys: BTreeSet<String> = sample.as_object().unwrap().keys().cloned().collect();
        let always = &mut seen.entry(at).or_insert_with(|| (s, keys.clone())).1;
        always.retain(|k| keys.contains(k));
    }
    for (name, (s, always)) in seen {
        let mut required: BTreeSet<String> =
            s["required"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap().to_string()).collect();
        for part in s["allOf"].as_array().into_iter().flatten() {
            let part = resolve(&spec, part);
            required.extend(part["required"].as_array().into_iter().flatten().map(|r| r.as_str().unwrap().to_string()));
        }
        assert_eq!(required, always, "{name}: required (left) and the fields every sample has (right) differ");
        for (field, prop) in properties(&spec, s).into_iter().filter(|(f, _)| !required.contains(f)) {
            let types = prop["type"].as_array().cloned().unwrap_or_else(|| vec![prop["type"].clone()]);
            let alternatives = prop["oneOf"].as_array().into_iter().chain(prop["anyOf"].as_array()).flatten();
            let nullable = types.iter().any(|t| t == "null") || alternatives.into_iter().any(|a| a["type"] == "null");
            assert!(!nullable, "{name}.{field}: serde leaves it out when empty, so it is never null");
        }
    }
}
