//! The code interpreter (port 49999): `/execute` runs code in one of berth's live contexts and streams its
//! output, results and error as E2B's NDJSON lines; `/contexts` makes, lists, restarts and removes them. A
//! run without a context goes to the sandbox's default context of its language (python unless told), made
//! on first use.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use berth_api::{Context, ContextLanguage, CreateContext, RunCode, RunFrame};
use berth_engine::{Access, Caller, Op};
use serde_json::{Value, json};

use super::{E2b, Failed, HOME, rfc3339};

const MAX_BODY: usize = 16 << 20;

/// An error as the code interpreter's SDK reads it: a status and a sentence.
fn fail(status: u16, message: impl Into<String>) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), message.into()).into_response()
}

fn failed(f: Failed) -> Response {
    fail(f.status, f.message)
}

pub(super) async fn serve(s: &E2b, id: &str, req: Request) -> Response {
    let path = req.uri().path().trim_start_matches('/').trim_end_matches('/').to_string();
    if path == "health" {
        return "OK".into_response();
    }
    let Some(key) = s.caller_for(id, req.headers()) else {
        return fail(
            401,
            format!("no access token for sandbox {id}: connect to it again (Sandbox.connect) for a new one"),
        );
    };
    let method = req.method().clone();
    let body = match axum::body::to_bytes(req.into_body(), MAX_BODY).await {
        Ok(b) if b.is_empty() => Value::Null,
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(v) => v,
            Err(e) => return fail(400, format!("the body is not JSON: {e}")),
        },
        Err(_) => return fail(413, format!("a request is at most {MAX_BODY} bytes")),
    };
    let parts: Vec<&str> = path.split('/').collect();
    match (method, parts.as_slice()) {
        (Method::POST, ["execute"]) => execute(s, &key, id, &body).await,
        (Method::POST, ["contexts"]) => {
            let language = match language(body["language"].as_str()) {
                Ok(l) => l,
                Err(r) => return r,
            };
            match make(s, &key, id, language, body["cwd"].as_str()).await {
                Ok(c) => axum::Json(c).into_response(),
                Err(r) => r,
            }
        }
        (Method::GET, ["contexts"]) => list(s, &key, id).await,
        (Method::DELETE, ["contexts", ctx]) => {
            let (sandbox, c) = (id.to_string(), ctx.to_string());
            let remove = |e: std::sync::Arc<crate::Engine>| async move { e.remove_context(&sandbox, &c).await };
            match s.run_detached(&key, Access::On(id, Op::RemoveContext(ctx)), remove).await {
                Ok(()) => StatusCode::NO_CONTENT.into_response(),
                Err(f) => failed(f),
            }
        }
        (Method::POST, ["contexts", ctx, "restart"]) => {
            let (sandbox, c) = (id.to_string(), ctx.to_string());
            let restart = |e: std::sync::Arc<crate::Engine>| async move { e.restart_context(&sandbox, &c).await };
            match s.run_detached(&key, Access::On(id, Op::RestartContext(ctx)), restart).await {
                Ok(_) => StatusCode::NO_CONTENT.into_response(),
                Err(f) => failed(f),
            }
        }
        (m, _) => fail(404, format!("the code interpreter has no {m} /{path}")),
    }
}

/// berth's context language for E2B's name of one.
fn language(name: Option<&str>) -> Result<ContextLanguage, Response> {
    match name.map(str::to_ascii_lowercase).as_deref() {
        None | Some("python" | "python3") => Ok(ContextLanguage::Python),
        Some("js" | "javascript" | "node") => Ok(ContextLanguage::Javascript),
        Some("bash" | "sh") => Ok(ContextLanguage::Bash),
        Some(other) => Err(fail(400, format!("berth's contexts run python, javascript and bash, not {other}"))),
    }
}

/// E2B's view of a context.
fn context_json(c: &Context) -> Value {
    json!({"id": c.id, "language": c.language, "cwd": c.cwd})
}

async fn make(
    s: &E2b,
    key: &Caller,
    id: &str,
    language: ContextLanguage,
    cwd: Option<&str>,
) -> Result<Value, Response> {
    let req = CreateContext { language, cwd: Some(cwd.unwrap_or(HOME).to_string()), env: Default::default() };
    let sandbox = id.to_string();
    let made =
        s.run_detached(key, Access::On(id, Op::MakeContext), |e| async move { e.create_context(&sandbox, req).await });
    made.await.map(|c| context_json(&c)).map_err(failed)
}

/// The sandbox's default context of a language (the one runs without a context go to), made on first use
/// and remembered while the daemon runs.
async fn default_context(s: &E2b, key: &Caller, id: &str, language: ContextLanguage) -> Result<String, Response> {
    let which = (id.to_string(), language.name().to_string());
    let known = s.defaults.lock().unwrap_or_else(|p| p.into_inner()).get(&which).cloned();
    if let Some(ctx) = known {
        match s.run(key, Access::On(id, Op::Context(&ctx)), s.engine.get_context(id, &ctx)).await {
            Ok(_) => return Ok(ctx),
            Err(f) if f.status == 404 => {}
            Err(f) => return Err(failed(f)),
        }
    }
    let c = make(s, key, id, language, None).await?;
    let ctx = c["id"].as_str().unwrap_or_default().to_string();
    s.defaults.lock().unwrap_or_else(|p| p.into_inner()).insert(which, ctx.clone());
    Ok(ctx)
}

async fn list(s: &E2b, key: &Caller, id: &str) -> Response {
    // As E2B's: a python and a javascript context are always there.
    for language in [ContextLanguage::Python, ContextLanguage::Javascript] {
        if let Err(r) = default_context(s, key, id, language).await {
            return r;
        }
    }
    match s.run(key, Access::On(id, Op::Contexts), s.engine.list_contexts(id)).await {
        Ok(all) => axum::Json(all.iter().map(context_json).collect::<Vec<_>>()).into_response(),
        Err(f) => failed(f),
    }
}

/// `'abc'` as E2B shows it: one level of quotes off a string's repr.
fn unquoted(text: &str) -> String {
    let t = text.as_bytes();
    if t.len() >= 2 && (t[0] == b'\'' || t[0] == b'"') && t[t.len() - 1] == t[0] {
        return text[1..text.len() - 1].to_string();
    }
    text.to_string()
}

fn line(v: Value) -> Bytes {
    let mut b = serde_json::to_vec(&v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

async fn execute(s: &E2b, key: &Caller, id: &str, body: &Value) -> Response {
    let Some(code) = body["code"].as_str() else { return fail(400, "the body's code is the code to run") };
    if !body["context_id"].is_null() && !body["language"].is_null() {
        return fail(400, "give a context_id or a language, not both");
    }
    let env = match &body["env_vars"] {
        Value::Null => Default::default(),
        Value::Object(m) if m.values().all(Value::is_string) => {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
        }
        _ => return fail(400, "env_vars is an object of strings"),
    };
    let ctx = match body["context_id"].as_str() {
        Some(c) => c.to_string(),
        None => {
            let language = match language(body["language"].as_str()) {
                Ok(l) => l,
                Err(r) => return r,
            };
            match default_context(s, key, id, language).await {
                Ok(c) => c,
                Err(r) => return r,
            }
        }
    };
    let run = RunCode { code: code.to_string(), timeout_seconds: None, max_output_bytes: Some(1u64 << 40), env };
    // The API's bound on a request body holds here too.
    let max = crate::listen::bounds().max_body_bytes;
    if serde_json::to_vec(&run).map_or(0, |b| b.len()) > max {
        return fail(413, format!("the request body is larger than {max} bytes"));
    }
    let mut frames = match s.run(key, Access::On(id, Op::Run(&ctx)), s.engine.run_context(id, &ctx, run)).await {
        Ok(frames) => frames,
        Err(f) => return failed(f),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut pending = [String::new(), String::new()];
        let now = || rfc3339(berth_engine::now_ms());
        {
            while let Some(frame) = frames.recv().await {
                // Output goes out a line (or several) at a time, as Jupyter's streams give it: what follows
                // the last newline waits for the rest of its line, or for anything else the run sends.
                let mut out: Vec<Value> = Vec::new();
                let flush = |pending: &mut [String; 2], out: &mut Vec<Value>| {
                    for (i, name) in ["stdout", "stderr"].iter().enumerate() {
                        if !pending[i].is_empty() {
                            out.push(
                                json!({"type": name, "text": std::mem::take(&mut pending[i]), "timestamp": now()}),
                            );
                        }
                    }
                };
                let (which, data) = match &frame {
                    RunFrame::Stdout { data } => (Some(0), data.as_str()),
                    RunFrame::Stderr { data } => (Some(1), data.as_str()),
                    _ => (None, ""),
                };
                if let Some(i) = which {
                    pending[i].push_str(data);
                    if let Some(at) = pending[i].rfind('\n') {
                        let rest = pending[i].split_off(at + 1);
                        let lines = std::mem::replace(&mut pending[i], rest);
                        let name = ["stdout", "stderr"][i];
                        out.push(json!({"type": name, "text": lines, "timestamp": now()}));
                    }
                } else {
                    flush(&mut pending, &mut out);
                }
                out.extend(match frame {
                    RunFrame::Stdout { .. } | RunFrame::Stderr { .. } => vec![],
                    RunFrame::Result { is_main, data } => {
                        let mut r = json!({"type": "result", "is_main_result": is_main});
                        for (mime, field) in [
                            ("text/html", "html"),
                            ("text/markdown", "markdown"),
                            ("image/svg+xml", "svg"),
                            ("image/png", "png"),
                            ("image/jpeg", "jpeg"),
                            ("application/pdf", "pdf"),
                            ("text/latex", "latex"),
                            ("application/json", "json"),
                            ("application/javascript", "javascript"),
                        ] {
                            if let Some(v) = data.get(mime) {
                                r[field] = v.clone();
                            }
                        }
                        if let Some(t) = data.get("text/plain").and_then(Value::as_str) {
                            r["text"] = json!(unquoted(t));
                        }
                        vec![r]
                    }
                    RunFrame::Error { name, value, traceback } => {
                        vec![json!({"type": "error", "name": name, "value": value, "traceback": traceback})]
                    }
                    RunFrame::Truncated { dropped_bytes } => vec![json!({
                        "type": "stderr", "timestamp": now(),
                        "text": format!("\n[berth: {dropped_bytes} bytes of output left out here]\n"),
                    })],
                    RunFrame::End(end) => vec![
                        json!({"type": "number_of_executions", "execution_count": end.execution_count}),
                        json!({"type": "end_of_execution"}),
                    ],
                });
                for v in out {
                    if tx.send(line(v)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let lines = tokio_stream::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), Ok::<_, std::io::Error>);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_lose_one_level_of_quotes() {
        assert_eq!(unquoted("'abc'"), "abc");
        assert_eq!(unquoted("\"a\""), "a");
        assert_eq!(unquoted("2"), "2");
        assert_eq!(unquoted("'"), "'");
    }
}
