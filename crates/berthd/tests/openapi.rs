//! The router against `openapi.json` (berth-api's `OPENAPI`): the description lists exactly the routes in
//! `berthd::ROUTES`, the router answers each of them (and no other method on their paths), `ROUTES` lists every
//! `.route(...)` in berthd's source, and the daemon's own shapes (health, journal) match their schemas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use berthd::{Engine, ROUTES, app};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fn spec() -> Value {
    serde_json::from_str(berth_api::OPENAPI).unwrap()
}

/// (METHOD, path) of every operation in the description.
fn spec_routes() -> BTreeSet<(String, String)> {
    let spec = spec();
    let mut out = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.to_uppercase().as_str()) {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

fn listed_routes() -> BTreeSet<(String, String)> {
    let set: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(set.len(), ROUTES.len(), "ROUTES lists a route twice");
    set
}

async fn engine() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::Builder::new().prefix("berthd-openapi-").tempdir().unwrap();
    let engine = Engine::open(&dir.path().join("root")).await.unwrap();
    (dir, engine)
}

/// Send one request to a fresh router: (status, content type, body).
async fn call(engine: &Arc<Engine>, method: &str, path: &str) -> (StatusCode, String, Vec<u8>) {
    let mut req = Request::builder().method(method).uri(path);
    // Bodies that no handler takes (an unknown field), so that no request here changes anything.
    let body = if matches!(method, "POST" | "PUT" | "PATCH") {
        req = req.header(header::CONTENT_TYPE, "application/json");
        Body::from(r#"{"no_such_field_for_the_route_check": true}"#)
    } else {
        Body::empty()
    };
    let resp = app(Arc::clone(engine)).oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let ctype = resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, ctype, body)
}

/// Whether the router has no handler for this method and path: the fallback's 404, or 405.
fn unrouted(status: StatusCode, body: &[u8]) -> bool {
    let fallback = serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v["error"]["code"] == "not_found" && v["error"]["message"] == "no such route");
    status == StatusCode::METHOD_NOT_ALLOWED || (status == StatusCode::NOT_FOUND && fallback)
}

/// A concrete path for a route, its parameters filled with names of nothing.
fn concrete(path: &str) -> String {
    path.replace("{id}", "nosuchsandbox").replace("{exec}", "x999999")
}

#[test]
fn the_description_has_exactly_the_routes() {
    let (spec, listed) = (spec_routes(), listed_routes());
    assert_eq!(
        spec,
        listed,
        "openapi.json's operations (left) and berthd::ROUTES (right) differ: only in openapi.json {:?}, only in ROUTES {:?}",
        spec.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&spec).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn the_router_answers_every_listed_route_and_nothing_else_on_their_paths() {
    let (_dir, engine) = engine().await;
    // The check itself: a path nobody serves gets the fallback.
    let (status, _, body) = call(&engine, "GET", "/v1/no-such-route").await;
    assert!(unrouted(status, &body), "{status} {}", String::from_utf8_lossy(&body));

    let listed = listed_routes();
    let paths: BTreeSet<&String> = listed.iter().map(|(_, p)| p).collect();
    for path in paths {
        for method in METHODS {
            let (status, _, body) = call(&engine, method, &concrete(path)).await;
            let answered = !unrouted(status, &body);
            let is_listed = listed.contains(&(method.to_string(), path.clone()));
            assert_eq!(
                answered,
                is_listed,
                "{method} {path}: the router {} it but ROUTES {} it ({status} {})",
                if answered { "answers" } else { "does not answer" },
                if is_listed { "lists" } else { "does not list" },
                String::from_utf8_lossy(&body)
            );
        }
    }
}

#[tokio::test]
async fn openapi_json_is_served() {
    let (_dir, engine) = engine().await;
    let (status, ctype, body) = call(&engine, "GET", "/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ctype, "application/json");
    assert_eq!(body, berth_api::OPENAPI.as_bytes());
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(v["openapi"].as_str().unwrap().starts_with("3.1."));
}

#[tokio::test]
async fn errors_from_the_router_are_error_bodies_with_their_status() {
    let (_dir, engine) = engine().await;
    let spec = spec();
    for (method, template, query, status) in [
        ("GET", "/v1/sandboxes/{id}", "", 404),
        ("DELETE", "/v1/sandboxes/{id}", "", 404),
        ("GET", "/v1/sandboxes/{id}/journal", "", 404),
        ("GET", "/v1/sandboxes/{id}/shell", "", 404),
        ("GET", "/v1/sandboxes/{id}/execs/{exec}/log", "", 404),
        ("DELETE", "/v1/sandboxes/{id}/execs/{exec}", "", 404),
        ("POST", "/v1/sandboxes", "", 400),
        ("POST", "/v1/sandboxes/{id}/execs", "", 400),
        ("GET", "/v1/sandboxes/{id}/stat", "", 400),
        ("GET", "/v1/sandboxes/{id}/stat", "?path=/", 404),
        ("GET", "/v1/sandboxes/{id}/files", "?path=/&no_such_parameter=1", 400),
        ("POST", "/v1/sandboxes/{id}/mkdir", "?path=/x", 404),
    ] {
        let path = concrete(template) + query;
        let (got, ctype, body) = call(&engine, method, &path).await;
        assert_eq!(got.as_u16(), status, "{method} {path}");
        assert_eq!(ctype, "application/json", "{method} {path}");
        let v: Value = serde_json::from_slice(&body).unwrap();
        let code: berth_api::ErrorCode = serde_json::from_value(v["error"]["code"].clone()).unwrap();
        assert_eq!(code.status(), status);
        // The description lists this status for the operation.
        let resp = &spec["paths"][template][method.to_lowercase()]["responses"][status.to_string()];
        assert!(resp.is_object(), "{method} {template}: openapi.json has no {status} response");
    }
}

#[tokio::test]
async fn health_matches_its_schema() {
    let (_dir, engine) = engine().await;
    let (status, _, body) = call(&engine, "GET", "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let spec = spec();
    let health = &spec["components"]["schemas"]["Health"];
    assert_eq!(keys(&v), property_names(health));
    assert_eq!(v["status"], health["properties"]["status"]["const"]);
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn property_names(schema: &Value) -> BTreeSet<String> {
    schema["properties"].as_object().unwrap().keys().cloned().collect()
}

fn required(schema: &Value) -> BTreeSet<String> {
    schema["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect()
}

#[test]
fn journal_shapes_match_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let mut journal = berth_engine::journal::Journal::open(&path).unwrap();
    let record = journal
        .append("local", "exec", serde_json::json!({"argv": ["true"]}), serde_json::json!({"exit_code": 0}))
        .unwrap();
    let good = berth_engine::journal::verify(&path).unwrap();
    std::fs::write(&path, "not a record\n").unwrap();
    let bad = berth_engine::journal::verify(&path).unwrap();
    assert!(bad.first_bad.is_some());

    let spec = spec();
    let schemas = &spec["components"]["schemas"];
    let record = serde_json::to_value(&record).unwrap();
    assert_eq!(keys(&record), property_names(&schemas["JournalRecord"]));
    assert_eq!(keys(&record), required(&schemas["JournalRecord"]));
    for field in ["seq", "time_ms"] {
        assert!(record[field].is_u64(), "JournalRecord.{field}");
    }
    for field in ["actor", "action", "prev", "hash"] {
        assert!(record[field].is_string(), "JournalRecord.{field}");
    }
    let verdict = &schemas["JournalVerdict"];
    for v in [&good, &bad] {
        let v = serde_json::to_value(v).unwrap();
        assert_eq!(keys(&v), property_names(verdict));
        assert_eq!(keys(&v), required(verdict));
        assert!(v["ok"].is_boolean() && v["records"].is_u64());
    }
    // `first_bad` is a (line, why) pair: an array of an integer and a string, or null.
    let pair = &verdict["properties"]["first_bad"]["oneOf"][0];
    let first_bad = serde_json::to_value(&bad).unwrap()["first_bad"].clone();
    assert!(first_bad[0].is_u64() && first_bad[1].is_string() && first_bad.as_array().unwrap().len() == 2);
    assert_eq!(pair["prefixItems"][0]["type"], "integer");
    assert_eq!(pair["prefixItems"][1]["type"], "string");
    assert!(serde_json::to_value(&good).unwrap()["first_bad"].is_null());
}

/// `.route("path", get(a).post(b))` calls in berthd's source, as (METHOD, path). Routes built any other way
/// (`nest`, `route_service`) are not seen: list those in ROUTES by hand, and extend this scan.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    // Every .rs file under src, module directories (such as src/files/) included.
    let mut files = Vec::new();
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let Some(args) = rest.trim_start().strip_prefix('"') else { continue };
            let (path, after) = args.split_once('"').unwrap();
            // The second argument, up to the `)` that closes `.route(`.
            let mut depth = 0;
            let mut end = after.len();
            for (i, c) in after.char_indices() {
                match c {
                    '(' | '{' | '[' => depth += 1,
                    ')' | '}' | ']' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' | '}' | ']' => depth -= 1,
                    _ => {}
                }
            }
            let handler = &after[..end];
            // Method calls at the top level of the handler expression: `get(`, `.post(`, `routing::delete(`.
            let mut depth = 0;
            let mut word_start = None;
            for (i, c) in handler.char_indices() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    word_start.get_or_insert(i);
                    continue;
                }
                if let Some(s) = word_start.filter(|_| c == '(' && depth == 0) {
                    let word = handler[s..i].to_uppercase();
                    if METHODS.contains(&word.as_str()) {
                        out.insert((word, path.to_string()));
                    }
                }
                word_start = None;
                match c {
                    '(' | '{' | '[' => depth += 1,
                    ')' | '}' | ']' => depth -= 1,
                    _ => {}
                }
            }
        }
    }
    out
}

#[test]
fn routes_lists_every_route_in_the_source() {
    let (found, listed) = (routes_in_source(), listed_routes());
    assert_eq!(
        found,
        listed,
        ".route(...) calls in berthd/src (left) and ROUTES (right) differ: only in the source {:?}, only in ROUTES {:?}",
        found.difference(&listed).collect::<Vec<_>>(),
        listed.difference(&found).collect::<Vec<_>>()
    );
}

/// The limits the description states are the server's own constants, so that the two cannot drift apart.
#[test]
fn the_descriptions_limits_are_the_servers() {
    let spec = spec();
    let schemas = &spec["components"]["schemas"];
    for (schema, field) in [
        ("CreateSandbox", "ttl_seconds"),
        ("CreateSandbox", "idle_timeout_seconds"),
        ("ExecRequest", "timeout_seconds"),
        ("Budget", "cpu_seconds"),
        ("Budget", "wall_seconds"),
        ("SetTtl", "ttl_seconds"),
    ] {
        let max = schemas[schema]["properties"][field]["maximum"].as_f64();
        assert_eq!(max, Some(berth_api::MAX_DURATION_SECONDS), "{schema}.{field}");
    }
    let memory = schemas["CreateSandbox"]["properties"]["memory_bytes"]["minimum"].as_u64();
    assert_eq!(memory, Some(berth_runtime::spec::MIN_MEMORY), "CreateSandbox.memory_bytes");
    // The error codes the description lists are the server's, with a status each; 408 and 431 among them.
    let statuses: BTreeSet<u16> = schemas["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| serde_json::from_value::<berth_api::ErrorCode>(c.clone()).unwrap().status())
        .collect();
    assert_eq!(statuses, BTreeSet::from([400, 401, 403, 404, 408, 409, 413, 429, 431, 500, 503]));
}
