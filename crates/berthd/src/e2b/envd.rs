//! envd (port 49983): `process.Process` (a command is a berth exec: its output streamed, its timeout the
//! server's, its kill berth's) and `filesystem.Filesystem` (berth's files API), over the Connect protocol;
//! `/health`; `/files` (see `files`).

use axum::body::Bytes;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use berth_api::{ExecFrame, ExecRequest, FileEntry, FileKind, SandboxState};
use berth_engine::files::Got;
use berth_engine::{Access, Caller, Op};
use serde_json::{Value, json};

use super::E2b;
use super::connect::{self, code_of, err, ok};
use super::users::Who;

/// A process started through envd.
#[derive(Clone)]
pub(crate) struct Proc {
    exec_id: String,
    config: Value,
    tag: Option<String>,
    /// A PTY's terminal: where its keystrokes and resizes go.
    terminal: Option<tokio::sync::mpsc::Sender<berth_engine::TerminalInput>>,
}

impl Proc {
    pub(super) fn on_terminal(
        exec_id: String,
        config: Value,
        tag: Option<String>,
        terminal: tokio::sync::mpsc::Sender<berth_engine::TerminalInput>,
    ) -> Proc {
        Proc { exec_id, config, tag, terminal: Some(terminal) }
    }
}

pub(super) async fn serve(s: &std::sync::Arc<E2b>, id: &str, req: Request) -> Response {
    // A trailing slash on E2B_SANDBOX_URL makes the SDK ask for `//process.Process/Start`.
    let path = req.uri().path().trim_start_matches('/').to_string();
    if path == "health" {
        return health(s, id).await;
    }
    let Some(key) = s.key_for(id, req.headers()) else {
        return err(
            "unauthenticated",
            format!("no access token for sandbox {id}: connect to it again (Sandbox.connect) for a new one"),
        );
    };
    let Some(caller) = s.engine.caller(&key) else { return err("unauthenticated", super::NO_TOKEN) };
    let asked = super::users::asked(req.headers(), req.uri().query());
    if path == "files" {
        let who = s.who(&caller, id, asked).await;
        return super::files::serve(s, &caller, id, &who, req).await;
    }
    let timeout_ms: Option<u64> =
        req.headers().get("connect-timeout-ms").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let body = match axum::body::to_bytes(req.into_body(), connect::MAX_MESSAGE).await {
        Ok(b) => b,
        Err(_) => return err("resource_exhausted", format!("a message is at most {} bytes", connect::MAX_MESSAGE)),
    };
    let (service, method) = path.split_once('/').unwrap_or((&path, ""));
    let who = match method {
        "Start" | "Stat" | "ListDir" | "MakeDir" | "Move" | "Remove" => s.who(&caller, id, asked).await,
        _ => Who { user: asked, home: super::HOME.into() },
    };
    let streamed = matches!(method, "Start" | "Connect" | "WatchDir" | "StreamInput");
    let m = if streamed {
        match connect::messages(&body) {
            Ok(ms) => ms.into_iter().next().unwrap_or(Value::Null),
            Err(e) => return err("invalid_argument", e),
        }
    } else if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return err("invalid_argument", format!("the message is not JSON: {e}")),
        }
    };
    match (service, method) {
        ("process.Process", "Start") => start(s, &caller, id, &m, timeout_ms, &who).await,
        ("process.Process", "Connect") => attach(s, &caller, id, &m).await,
        ("process.Process", "List") => list(s, &caller, id).await,
        ("process.Process", "SendSignal") => signal(s, &caller, id, &m).await,
        ("process.Process", "SendInput") => input(s, &caller, id, &m["process"], &m["input"], false).await,
        ("process.Process", "CloseStdin") => input(s, &caller, id, &m["process"], &Value::Null, true).await,
        ("process.Process", "StreamInput") => stream_input(s, &caller, id, &body).await,
        ("process.Process", "Update") => resize(s, &caller, id, &m).await,
        ("filesystem.Filesystem", "Stat") => stat(s, &caller, id, &m, &who).await,
        ("filesystem.Filesystem", "ListDir") => list_dir(s, &caller, id, &m, &who).await,
        ("filesystem.Filesystem", "MakeDir") => make_dir(s, &caller, id, &m, &who).await,
        ("filesystem.Filesystem", "Move") => rename(s, &caller, id, &m, &who).await,
        ("filesystem.Filesystem", "Remove") => remove(s, &caller, id, &m, &who).await,
        ("filesystem.Filesystem", "CreateWatcher") => super::watch::create(s, &caller, id, &m).await,
        ("filesystem.Filesystem", "GetWatcherEvents") => super::watch::events(s, id, &m).await,
        ("filesystem.Filesystem", "RemoveWatcher") => super::watch::remove(s, id, &m),
        ("filesystem.Filesystem", "WatchDir") => super::watch::stream(s, &caller, id, &m).await,
        _ => err("unimplemented", format!("envd has no {path} on berth")),
    }
}

/// What a request for a port nothing serves gets.
pub(super) fn not_open(id: &str, port: u16) -> Response {
    let body = json!({"sandboxId": id, "message": format!("The sandbox is running but port is not open (nothing answers on its 127.0.0.1:{port})"), "code": 502});
    (axum::http::StatusCode::BAD_GATEWAY, axum::Json(body)).into_response()
}

/// 204 while the sandbox runs; 502 (as E2B's proxy answers, "was not found") once it is gone or paused.
async fn health(s: &E2b, id: &str) -> Response {
    match s.engine.get(id).await {
        Ok(sb) if sb.state == SandboxState::Running => axum::http::StatusCode::NO_CONTENT.into_response(),
        _ => {
            let body = json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502});
            (axum::http::StatusCode::BAD_GATEWAY, axum::Json(body)).into_response()
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// An exec's end as envd reports it.
fn end_event(r: &berth_api::ExecResult) -> Value {
    end_of(r.exit_code, r.killed || r.signal.is_some(), r.error.as_deref())
}

/// A command's end as envd reports it: its exit code, or that a signal ended it.
pub(super) fn end_of(exit_code: i32, killed: bool, error: Option<&str>) -> Value {
    if killed {
        return json!({"event": {"end": {"exitCode": -1, "exited": false, "status": "signal: killed", "error": "signal: killed"}}});
    }
    let mut end = json!({"exitCode": exit_code, "exited": true, "status": format!("exit status {exit_code}")});
    if let Some(e) = error {
        end["error"] = json!(e);
    }
    json!({"event": {"end": end}})
}

async fn start(s: &E2b, key: &Caller, id: &str, m: &Value, timeout_ms: Option<u64>, who: &Who) -> Response {
    let p = &m["process"];
    let Some(cmd) = p["cmd"].as_str().filter(|c| !c.is_empty()) else {
        return err("invalid_argument", "process.cmd names the command to run");
    };
    let mut argv = vec![cmd.to_string()];
    argv.extend(strings(&p["args"]));
    // A terminal: the command runs on a pseudo-terminal of the sandbox's own (see `pty`).
    let pty = match &m["pty"] {
        Value::Null => None,
        asked => match size_of(asked) {
            Some(size) => Some(size),
            None => return err("invalid_argument", "pty.size needs rows and cols between 1 and 9999"),
        },
    };
    let envs = p["envs"].as_object().cloned().unwrap_or_default();
    let cwd = p["cwd"].as_str().map(|c| who.absolute(c)).unwrap_or_else(|| who.home.clone());
    let Some(mut env) = envs
        .iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect::<Option<std::collections::BTreeMap<_, _>>>()
    else {
        return err("invalid_argument", "process.envs is an object of strings");
    };
    if who.user.is_none() {
        env.entry("HOME".into()).or_insert_with(|| who.home.clone());
    }
    let config = json!({"cmd": cmd, "args": strings(&p["args"]), "envs": envs, "cwd": cwd});
    let tag = m["tag"].as_str().map(str::to_string);
    if let Some((rows, cols)) = pty {
        let asked = super::pty::Asked { argv, env, cwd, user: who.user.clone(), rows, cols, config, tag };
        return super::pty::start(s, key, id, asked, timeout_ms).await;
    }
    let req = ExecRequest {
        argv,
        env,
        workdir: Some(cwd.clone()),
        max_output_bytes: Some(1u64 << 40),
        user: who.user.clone(),
        stdin_open: m["stdin"].as_bool() == Some(true),
        timeout_seconds: timeout_ms.filter(|ms| *ms > 0).map(|ms| ms as f64 / 1000.0),
        ..ExecRequest::default()
    };
    let mut frames = match exec(s, key, id, req).await {
        Ok(frames) => frames,
        Err(f) => return err(code_of(f.status), f.message),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let procs = s.procs_handle();
    let sandbox = id.to_string();
    tokio::spawn(async move {
        let mut pid = None;
        let b64 = base64::engine::general_purpose::STANDARD;
        {
            while let Some(frame) = frames.recv().await {
                let out = match frame {
                    ExecFrame::Started { exec_id, pid: p } => {
                        pid = Some(p);
                        let proc = Proc { exec_id, config: config.clone(), tag: tag.clone(), terminal: None };
                        procs.lock().unwrap_or_else(|e| e.into_inner()).insert((sandbox.clone(), p), proc);
                        connect::message(json!({"event": {"start": {"pid": p}}}))
                    }
                    ExecFrame::Output { stream, data, .. } => {
                        let which = match stream {
                            berth_api::Stream::Stderr => "stderr",
                            _ => "stdout",
                        };
                        connect::message(json!({"event": {"data": {which: b64.encode(data.as_bytes())}}}))
                    }
                    ExecFrame::Truncated { dropped_bytes } => {
                        let note = format!(
                            "\n[berth: {dropped_bytes} bytes of output left out here; the exec's log has them]\n"
                        );
                        connect::message(json!({"event": {"data": {"stderr": b64.encode(note.as_bytes())}}}))
                    }
                    ExecFrame::Exit(r) => {
                        if let Some(p) = pid {
                            procs.lock().unwrap_or_else(|e| e.into_inner()).remove(&(sandbox.clone(), p));
                        }
                        if r.timed_out {
                            let _ = tx
                                .send(connect::end(Some((
                                    "deadline_exceeded",
                                    "the command ran past its timeout and was killed, with every process it started"
                                        .into(),
                                ))))
                                .await;
                        } else {
                            let _ = tx.send(connect::message(end_event(&r))).await;
                            let _ = tx.send(connect::end(None)).await;
                        }
                        return;
                    }
                };
                if tx.send(out).await.is_err() {
                    // The client went away: the command runs on (as envd's do), to its own end.
                }
            }
        }
        let _ = tx.send(connect::end(Some(("unavailable", "the command's stream ended before it did".into())))).await;
    });
    connect::stream(rx)
}

/// Start an exec in sandbox `id` as `key`: the stream of its frames, the API's bound on a request body kept.
async fn exec(
    s: &E2b,
    key: &Caller,
    id: &str,
    req: ExecRequest,
) -> Result<tokio::sync::mpsc::Receiver<ExecFrame>, super::Failed> {
    let max = crate::listen::bounds().max_body_bytes;
    if serde_json::to_vec(&req).map_or(0, |b| b.len()) > max {
        return Err(super::Failed { status: 413, message: format!("the request body is larger than {max} bytes") });
    }
    let (info, frames) = s.run(key, Access::On(id, Op::Exec), s.engine.exec(id, req)).await?;
    frames.ok_or_else(|| super::Failed { status: 500, message: format!("exec {} gave no output", info.exec_id) })
}

impl E2b {
    pub(super) fn procs_handle(
        &self,
    ) -> std::sync::Arc<std::sync::Mutex<std::collections::HashMap<(String, i32), Proc>>> {
        std::sync::Arc::clone(&self.procs)
    }

    fn proc_of(&self, id: &str, selector: &Value) -> Option<(i32, Proc)> {
        let all = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pid) = selector["pid"].as_i64() {
            return all.get(&(id.to_string(), pid as i32)).map(|p| (pid as i32, p.clone()));
        }
        let tag = selector["tag"].as_str()?;
        all.iter().find(|((s, _), p)| s == id && p.tag.as_deref() == Some(tag)).map(|((_, pid), p)| (*pid, p.clone()))
    }
}

async fn attach(s: &E2b, key: &Caller, id: &str, m: &Value) -> Response {
    let Some((pid, proc)) = s.proc_of(id, &m["process"]) else {
        return err("not_found", format!("no running process {} in sandbox {id}", m["process"]));
    };
    let follow = crate::exec_http::log_stream(&s.engine, id, &proc.exec_id, true);
    let mut log = match s.run(key, Access::On(id, Op::ExecLog(&proc.exec_id)), follow).await {
        Ok(log) => log,
        Err(f) => return err(code_of(f.status), f.message),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let (key, sandbox, engine) = (key.clone(), id.to_string(), std::sync::Arc::clone(&s.engine));
    tokio::spawn(async move {
        let b64 = base64::engine::general_purpose::STANDARD;
        let _ = tx.send(connect::message(json!({"event": {"start": {"pid": pid}}}))).await;
        let which = if proc.terminal.is_some() { "pty" } else { "stdout" };
        while let Some(Ok(chunk)) = log.recv().await {
            if tx.send(connect::message(json!({"event": {"data": {which: b64.encode(&chunk)}}}))).await.is_err() {
                return;
            }
        }
        // Ended: its result, from the list of execs.
        let execs = Box::pin(engine.as_caller(&key, Access::On(&sandbox, Op::Execs), engine.execs(&sandbox))).await;
        let result = execs.ok().and_then(|xs| xs.into_iter().find(|x| x.exec_id == proc.exec_id)?.result);
        match result {
            Some(r) => {
                let _ = tx.send(connect::message(end_event(&r))).await;
                let _ = tx.send(connect::end(None)).await;
            }
            None => {
                let _ = tx.send(connect::end(Some(("unavailable", "the process's end is not known".into())))).await;
            }
        }
    });
    connect::stream(rx)
}

async fn list(s: &E2b, key: &Caller, id: &str) -> Response {
    let running: Vec<String> = match s.run(key, Access::On(id, Op::Execs), s.engine.execs(id)).await {
        Ok(execs) => execs.into_iter().filter(|x| x.running).map(|x| x.exec_id).collect(),
        Err(f) => return err(code_of(f.status), f.message),
    };
    let all = s.procs.lock().unwrap_or_else(|e| e.into_inner());
    let processes: Vec<Value> = all
        .iter()
        .filter(|((sb, _), p)| sb == id && running.contains(&p.exec_id))
        .map(|((_, pid), p)| {
            let mut v = json!({"pid": pid, "config": p.config});
            if let Some(t) = &p.tag {
                v["tag"] = json!(t);
            }
            v
        })
        .collect();
    ok(json!({"processes": processes}))
}

async fn signal(s: &E2b, key: &Caller, id: &str, m: &Value) -> Response {
    let Some((_, proc)) = s.proc_of(id, &m["process"]) else {
        return err("not_found", format!("no running process {} in sandbox {id}", m["process"]));
    };
    // SIGTERM and SIGKILL alike end the command's whole process tree (berth's kill).
    let killed = s.engine.kill_exec(id, &proc.exec_id);
    match s.run(key, Access::On(id, Op::KillExec(&proc.exec_id)), killed).await {
        Ok(_) => ok(json!({})),
        Err(f) => err(code_of(f.status), f.message),
    }
}

/// A PTY's size as `Start` and `Update` give it.
fn size_of(pty: &Value) -> Option<(u16, u16)> {
    let size = |k: &str| pty["size"][k].as_u64().filter(|n| *n > 0 && *n < 10_000).map(|n| n as u16);
    Some((size("rows")?, size("cols")?))
}

/// `Update`: a terminal's new size, set on the terminal the command's processes hold (they get SIGWINCH).
async fn resize(s: &E2b, key: &Caller, id: &str, m: &Value) -> Response {
    let Some((pid, proc)) = s.proc_of(id, &m["process"]) else {
        return err("not_found", format!("no running process {} in sandbox {id}", m["process"]));
    };
    let Some((rows, cols)) = size_of(&m["pty"]) else {
        return err("invalid_argument", "pty.size needs rows and cols between 1 and 9999");
    };
    let Some(terminal) = &proc.terminal else {
        return err("failed_precondition", format!("process {pid} has no terminal to resize"));
    };
    // As the caller could: a resize is a use of the process, as input is.
    if let Err(f) = s.run(key, Access::On(id, Op::Stdin(&proc.exec_id)), async { Ok(()) }).await {
        return err(code_of(f.status), f.message);
    }
    super::pty::resize(terminal, rows, cols).await
}

/// `SendInput` (and, with `close`, `CloseStdin`): bytes for a running process's stdin, which it must have been
/// started with (`stdin=True`).
async fn input(s: &E2b, key: &Caller, id: &str, selector: &Value, input: &Value, close: bool) -> Response {
    let Some((_, proc)) = s.proc_of(id, selector) else {
        return err("not_found", format!("no running process {selector} in sandbox {id}"));
    };
    let data = match input["stdin"].as_str().or(input["pty"].as_str()) {
        Some(b) => match base64::engine::general_purpose::STANDARD.decode(b) {
            Ok(d) => d,
            Err(e) => return err("invalid_argument", format!("input is base64: {e}")),
        },
        None => Vec::new(),
    };
    if let Some(terminal) = &proc.terminal {
        if let Err(f) = s.run(key, Access::On(id, Op::Stdin(&proc.exec_id)), async { Ok(()) }).await {
            return err(code_of(f.status), f.message);
        }
        // A terminal's input is never closed: its end of file is a keystroke (^D).
        return match close {
            true => ok(json!({})),
            false => super::pty::keys(terminal, data).await,
        };
    }
    let sent = s.engine.send_stdin(id, &proc.exec_id, data, close);
    match s.run(key, Access::On(id, Op::Stdin(&proc.exec_id)), sent).await {
        Ok(()) => ok(json!({})),
        Err(f) => err(if f.status == 409 { "failed_precondition" } else { code_of(f.status) }, f.message),
    }
}

/// `StreamInput`, a client stream: a `start` naming the process, then `data` messages, each written as it is
/// read; the answer comes when the client's stream ends.
async fn stream_input(s: &E2b, key: &Caller, id: &str, body: &[u8]) -> Response {
    let messages = match connect::messages(body) {
        Ok(ms) => ms,
        Err(e) => return err("invalid_argument", e),
    };
    let mut selector = Value::Null;
    for m in messages {
        if !m["start"].is_null() {
            selector = m["start"]["process"].clone();
        } else if !m["data"].is_null() {
            let r = input(s, key, id, &selector, &m["data"]["input"], false).await;
            if !r.status().is_success() {
                return r;
            }
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(2);
    let _ = tx.send(connect::message(json!({}))).await;
    let _ = tx.send(connect::end(None)).await;
    connect::stream(rx)
}

/// envd's `EntryInfo` for a file at `path`.
fn entry_info(path: &str, f: &FileEntry) -> Value {
    let kind = match f.kind {
        FileKind::File => "FILE_TYPE_FILE",
        FileKind::Directory => "FILE_TYPE_DIRECTORY",
        FileKind::Symlink => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_UNSPECIFIED",
    };
    let who = |n: u32| match n {
        0 => "root".to_string(),
        1000 => "user".to_string(),
        n => n.to_string(),
    };
    let lead = match f.kind {
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        _ => '-',
    };
    let bits: String =
        (0..9).rev().map(|i| if f.mode & (1 << i) != 0 { ['x', 'w', 'r'][i % 3] } else { '-' }).collect();
    let mut v = json!({
        "name": f.name, "type": kind, "path": path, "size": f.size, "mode": f.mode,
        "permissions": format!("{lead}{bits}"), "owner": who(f.uid), "group": who(f.gid),
        "modifiedTime": super::rfc3339(f.mtime_ms.max(0) as u64),
    });
    if let Some(t) = &f.link_target {
        v["symlinkTarget"] = json!(t);
    }
    v
}

/// A file call failed, as envd answers it.
fn file_err(f: super::Failed) -> Response {
    err(code_of(f.file_status()), f.message)
}

async fn stat_as(s: &E2b, key: &Caller, id: &str, path: &str, who: &Who) -> Result<FileEntry, Response> {
    let stat = s.engine.stat_file(id, who.user.as_deref(), path);
    s.run(key, Access::On(id, Op::Stat), stat).await.map_err(file_err)
}

async fn stat(s: &E2b, key: &Caller, id: &str, m: &Value, who: &Who) -> Response {
    let path = who.absolute(m["path"].as_str().unwrap_or(""));
    match stat_as(s, key, id, &path, who).await {
        Ok(f) => ok(json!({"entry": entry_info(&path, &f)})),
        Err(r) => r,
    }
}

async fn list_dir(s: &E2b, key: &Caller, id: &str, m: &Value, who: &Who) -> Response {
    let root = who.absolute(m["path"].as_str().unwrap_or(""));
    let depth = m["depth"].as_u64().filter(|d| *d > 0).unwrap_or(1);
    match stat_as(s, key, id, &root, who).await {
        Ok(f) if f.kind == FileKind::Directory => {}
        Ok(_) => return err("invalid_argument", format!("{root} is not a directory")),
        Err(r) => return r,
    }
    let mut entries = Vec::new();
    let mut todo = vec![(root.trim_end_matches('/').to_string(), 1u64)];
    while let Some((dir, level)) = todo.pop() {
        let read = s.engine.read_file(id, who.user.as_deref(), if dir.is_empty() { "/" } else { &dir });
        let files = match s.run(key, Access::On(id, Op::ReadFile), read).await {
            Ok(Got::Dir(files)) => files,
            Ok(Got::File(_)) => return err("internal", "berth's answer was not a directory listing"),
            Err(f) => return file_err(f),
        };
        for f in files {
            let path = format!("{dir}/{}", f.name);
            if f.kind == FileKind::Directory && level < depth {
                todo.push((path.clone(), level + 1));
            }
            entries.push(entry_info(&path, &f));
        }
    }
    ok(json!({"entries": entries}))
}

async fn make_dir(s: &E2b, key: &Caller, id: &str, m: &Value, who: &Who) -> Response {
    let path = who.absolute(m["path"].as_str().unwrap_or(""));
    let made = s.engine.make_dir(id, who.user.as_deref(), &path, true, None);
    match s.run(key, Access::On(id, Op::Mkdir), made).await {
        Ok((f, true)) => ok(json!({"entry": entry_info(&path, &f)})),
        Ok((_, false)) => err("already_exists", format!("{path} already exists")),
        Err(f) => file_err(f),
    }
}

async fn rename(s: &E2b, key: &Caller, id: &str, m: &Value, who: &Who) -> Response {
    let (Some(from), Some(to)) = (m["source"].as_str(), m["destination"].as_str()) else {
        return err("invalid_argument", "Move takes a source and a destination");
    };
    let (from, to) = (who.absolute(from), who.absolute(to));
    // As envd's Move (a rename): what is at the destination is replaced.
    let req = berth_api::MoveFile { from, to: to.clone(), overwrite: true, user: who.user.clone() };
    let moved = s.engine.move_file(id, req);
    match s.run(key, Access::On(id, Op::Move), moved).await {
        Ok(f) => ok(json!({"entry": entry_info(&to, &f)})),
        Err(f) => file_err(f),
    }
}

async fn remove(s: &E2b, key: &Caller, id: &str, m: &Value, who: &Who) -> Response {
    let path = who.absolute(m["path"].as_str().unwrap_or(""));
    let removed = s.engine.remove_file(id, who.user.as_deref(), &path, true);
    match s.run(key, Access::On(id, Op::RemoveFile), removed).await {
        Ok(()) => ok(json!({})),
        // As envd's RemoveAll: a path that is not there is removed already (the sandbox itself must be).
        Err(f) if f.status == 404 && s.engine.get(id).await.is_ok() => ok(json!({})),
        Err(f) => file_err(f),
    }
}
