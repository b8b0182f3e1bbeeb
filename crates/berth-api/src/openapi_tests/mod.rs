//! `openapi.json` against the wire types: every schema must describe exactly what serde reads and writes.
//!
//! Samples of each type are serialized with serde_json and checked against their schema, both for types
//! (a small validator for the keywords the description uses) and for field sets (an object's keys must equal
//! its schema's `properties`, recursively). Request schemas are also checked against deserialization: which
//! fields are required, that unknown fields are refused, and the defaults.
//!
//! This module holds the shared helpers (the parsed description, schema lookup and `$ref`s) and the checks of
//! the description as a document (its version, its references, its operations); `validator` is the small
//! schema validator and field comparison, `schemas` holds the samples and checks each schema against them, `requests` which fields requests and
//! responses require,
//! `storage_samples` holds the samples of the durable-project and image types, `network_samples` those of
//! the egress types, `previews_samples` those of preview URLs, `pods_samples` those of pods,
//! `tenants_samples` those of tenants, and `desktop_samples` those of a sandbox's desktop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contexts_samples;
mod desktop_samples;
mod network_samples;
mod pods_samples;
mod previews_samples;
mod requests;
mod schemas;
mod storage_samples;
mod tenants_samples;
mod validator;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::*;
use schemas::all_codes;

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
            // A WebSocket route succeeds with 101 Switching Protocols.
            assert!(responses.keys().any(|s| s.starts_with('2') || s == "101"), "{at}: no success response");
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
