//! The file and diff tools: a stat first, so a directory is listed and a file read, whatever they hold; a
//! move is one call of the API's, and so is a watch (bounded, so that it answers).

use base64::Engine as _;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use crate::api::{ApiError, Body, query_value, segment};
use crate::args::{DiffArgs, FileListArgs, FileMoveArgs, FileReadArgs, FileWatchArgs, FileWriteArgs};
use crate::server::{Berth, json_result};

const DEFAULT_READ_BYTES: u64 = 256 * 1024;

type Outcome = Result<CallToolResult, ApiError>;

fn route(sandbox: &str, route: &str, path: &str) -> String {
    format!("/v1/sandboxes/{}/{route}?path={}", segment(sandbox), query_value(path))
}

async fn stat(b: &Berth, ctx: &RequestContext<RoleServer>, sandbox: &str, path: &str) -> Result<Value, ApiError> {
    b.call(ctx, "GET", route(sandbox, "stat", path), Body::None).await?.json()
}

async fn listing(b: &Berth, ctx: &RequestContext<RoleServer>, sandbox: &str, path: &str) -> Outcome {
    let entries = b.call(ctx, "GET", route(sandbox, "files", path), Body::None).await?.json()?;
    let lines: Vec<String> = entries
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default();
            let kind = e["kind"].as_str().unwrap_or_default();
            let mode = e["mode"].as_u64().unwrap_or(0);
            match e["link_target"].as_str() {
                Some(t) => format!("{kind:<9} {mode:04o} {name} -> {t}"),
                None => format!("{kind:<9} {mode:04o} {:>10} {name}", e["size"].as_u64().unwrap_or(0)),
            }
        })
        .collect();
    let text = if lines.is_empty() { format!("{path} is empty") } else { format!("{path}:\n{}", lines.join("\n")) };
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({"path": path, "entries": entries}));
    Ok(r)
}

pub(crate) async fn read(b: &Berth, a: FileReadArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let entry = stat(b, ctx, &a.sandbox, &a.path).await?;
    if entry["kind"] == "directory" {
        return listing(b, ctx, &a.sandbox, &a.path).await;
    }
    let reply = b.call(ctx, "GET", route(&a.sandbox, "files", &a.path), Body::None).await?;
    let size = reply.body.len();
    let max = a.max_bytes.unwrap_or(DEFAULT_READ_BYTES) as usize;
    let mut bytes = reply.body;
    let truncated = size > max;
    bytes.truncate(max);
    let (content, encoding) = match String::from_utf8(bytes) {
        Ok(text) => (text, "utf-8"),
        // A cut may fall inside a character: keep what decodes.
        Err(e) if truncated && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            (String::from_utf8_lossy(&bytes).into_owned(), "utf-8")
        }
        Err(e) => (base64::engine::general_purpose::STANDARD.encode(e.into_bytes()), "base64"),
    };
    let mut text = content.clone();
    if encoding == "base64" {
        text = format!("{} is not UTF-8 text ({size} bytes); its content as base64:\n{content}", a.path);
    }
    if truncated {
        text.push_str(&format!("\n[... cut at {max} of {size} bytes: ask for more with max_bytes ...]"));
    }
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "path": a.path, "size": size, "encoding": encoding, "truncated": truncated, "content": content,
    }));
    Ok(r)
}

pub(crate) async fn write(b: &Berth, a: FileWriteArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let bytes = if a.base64 == Some(true) {
        match base64::engine::general_purpose::STANDARD.decode(a.content.trim()) {
            Ok(b) => b,
            Err(e) => {
                let message = format!("content is not valid base64: {e}");
                let mut r = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
                r.structured_content = Some(json!({"error": {"code": "invalid_request", "message": message}}));
                return Ok(r);
            }
        }
    } else {
        a.content.into_bytes()
    };
    let mut path = route(&a.sandbox, "files", &a.path);
    if a.parents != Some(false) {
        path.push_str("&parents=true");
    }
    if let Some(mode) = a.mode {
        path.push_str(&format!("&mode={}", query_value(&mode)));
    }
    let entry = b.call(ctx, "PUT", path, Body::Bytes(bytes)).await?.json()?;
    Ok(json_result(entry, None))
}

pub(crate) async fn move_to(b: &Berth, a: FileMoveArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let body = json!({"from": a.from, "to": a.to, "overwrite": a.overwrite.unwrap_or(false)});
    let path = format!("/v1/sandboxes/{}/move", segment(&a.sandbox));
    let entry = b.call(ctx, "POST", path, Body::Json(body)).await?.json()?;
    Ok(json_result(entry, None))
}

/// Longest a watch tool call waits.
const MAX_WATCH_SECONDS: f64 = 600.0;

pub(crate) async fn watch(b: &Berth, a: FileWatchArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let path = a.path.unwrap_or_else(|| "/workspace".into());
    let timeout = a.timeout_seconds.unwrap_or(30.0);
    if !(timeout > 0.0 && timeout <= MAX_WATCH_SECONDS) {
        return Err(ApiError {
            status: 400,
            code: Some("invalid_request".into()),
            message: format!("timeout_seconds must be more than 0 and at most {MAX_WATCH_SECONDS}, not {timeout}"),
        });
    }
    let mut query = format!(
        "{}&timeout_seconds={timeout}&quiet_seconds={}&max_events={}",
        route(&a.sandbox, "watch", &path),
        a.quiet_seconds.unwrap_or(1.0),
        a.max_events.unwrap_or(200)
    );
    if a.recursive.unwrap_or(true) {
        query.push_str("&recursive=true");
    }
    let reply = b.call(ctx, "GET", query, Body::None).await?;
    let (mut events, mut ended) = (Vec::new(), None);
    for line in reply.body.split(|c| *c == b'\n').filter(|l| !l.is_empty()) {
        let ev: Value = serde_json::from_slice(line)
            .map_err(|e| ApiError::transport(format!("the daemon's watch sent a line that is not JSON: {e}")))?;
        match ev["type"].as_str() {
            Some("ready") => {}
            Some("end") => ended = ev["reason"].as_str().map(String::from),
            _ => events.push(ev),
        }
    }
    let lines: Vec<String> = events
        .iter()
        .map(|e| {
            let slash = if e["dir"] == true { "/" } else { "" };
            let p = e["path"].as_str().unwrap_or_default();
            match e["from"].as_str() {
                Some(from) => format!("{:<8} {from}{slash} -> {p}{slash}", "rename"),
                None => format!("{:<8} {p}{slash}", e["type"].as_str().unwrap_or_default()),
            }
        })
        .collect();
    let ended = ended.unwrap_or_else(|| "the watch's stream ended".into());
    let text = match lines.is_empty() {
        true => format!("no changes under {path} ({ended})"),
        false => format!("{} change(s) under {path} ({ended}):\n{}", lines.len(), lines.join("\n")),
    };
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({"path": path, "events": events, "ended": ended}));
    Ok(r)
}

pub(crate) async fn list(b: &Berth, a: FileListArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let path = a.path.unwrap_or_else(|| "/workspace".into());
    let entry = stat(b, ctx, &a.sandbox, &path).await?;
    if entry["kind"] != "directory" {
        // Not a directory: its own entry is the listing.
        return Ok(json_result(json!({"path": path, "entries": [entry]}), None));
    }
    listing(b, ctx, &a.sandbox, &path).await
}

pub(crate) async fn diff(b: &Berth, a: DiffArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
    let patch = a.patch == Some(true);
    let mut path =
        format!("/v1/sandboxes/{}/diff?format={}", segment(&a.sandbox), if patch { "patch" } else { "json" });
    if let Some(against) = &a.against {
        path.push_str(&format!("&against={}", query_value(against)));
    }
    let reply = b.call(ctx, "GET", path, Body::None).await?;
    if patch {
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        let shown = if text.is_empty() { "no changes".to_string() } else { text.clone() };
        let mut r = CallToolResult::success(vec![ContentBlock::text(shown)]);
        r.structured_content = Some(json!({"patch": text}));
        return Ok(r);
    }
    let v = reply.json()?;
    let lines: Vec<String> = v["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let side = if c["new"].is_null() { &c["old"] } else { &c["new"] };
            let what = side["type"].as_str().unwrap_or_default();
            format!("{:<8} {} ({what})", c["kind"].as_str().unwrap_or_default(), c["path"].as_str().unwrap_or_default())
        })
        .collect();
    let against = v["against"].as_str().unwrap_or_default();
    let text = if lines.is_empty() {
        format!("no changes against {against}")
    } else {
        format!("{} change(s) against {against}:\n{}", lines.len(), lines.join("\n"))
    };
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(v);
    Ok(r)
}
