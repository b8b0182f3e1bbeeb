//! A small validator for the JSON Schema keywords `openapi.json` uses, and the field-set comparison: an
//! object's keys must be exactly its schema's `properties`, all the way down.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::resolve;

/// Check `v` against schema `s`, for the keywords openapi.json uses (string formats and lengths aside).
pub(super) fn validate(spec: &Value, s: &Value, v: &Value, at: &str) -> Result<(), String> {
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
pub(super) fn properties(spec: &Value, s: &Value) -> BTreeMap<String, Value> {
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
pub(super) fn compare_fields(spec: &Value, s: &Value, v: &Value, at: &str) {
    let s = resolve(spec, s);
    // `{}`: any JSON value at all (a result's representations by MIME type, say).
    if s.as_object().is_some_and(|o| o.is_empty()) {
        return;
    }
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
pub(super) fn assert_full(v: &Value, at: &str) {
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
