//! The tools. Each is one or a few calls of berth's HTTP API; what a call may do, and why it fails, is the
//! API's to say.

use base64::Engine as _;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Body, segment};
use crate::args::*;
use crate::server::{Berth, failed, json_result};
use crate::{files, output};

/// An exec's timeout when none is given: a tool call should come back.
const DEFAULT_EXEC_TIMEOUT: f64 = 300.0;
/// A code run's, likewise.
const DEFAULT_RUN_TIMEOUT: f64 = 30.0;

type Outcome = Result<CallToolResult, ApiError>;

pub(crate) fn sandbox_path(sandbox: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}{rest}", segment(sandbox))
}

/// Put the fields that were given into `out`.
fn put<T: serde::Serialize>(out: &mut Map<String, Value>, name: &str, value: Option<T>) {
    if let Some(v) = value.and_then(|v| serde_json::to_value(v).ok()) {
        out.insert(name.to_string(), v);
    }
}

fn refuse(message: &str) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(message)]);
    r.structured_content = Some(json!({"error": {"code": "invalid_request", "message": message}}));
    r
}

#[tool_router]
impl Berth {
    #[tool(
        description = "Create a new Linux sandbox (isolated, root inside, nothing leaks to the host) and \
                       return its record; use its id or name in the other tools. It has no network unless \
                       allow_net (or net_mode) says what it may reach. Files persist between execs; \
                       everything is removed by sandbox_remove, or when ttl_seconds or idle_timeout_seconds \
                       run out. With desktop: true it has a virtual desktop (a screen, a window manager, a \
                       browser) for desktop_screenshot and desktop_action.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn sandbox_create(
        &self,
        Parameters(a): Parameters<CreateArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = Map::new();
        put(&mut body, "name", a.name);
        put(&mut body, "image", a.image);
        put(&mut body, "memory_bytes", a.memory_bytes);
        put(&mut body, "cpus", a.cpus);
        put(&mut body, "pids", a.pids);
        put(&mut body, "ttl_seconds", a.ttl_seconds);
        put(&mut body, "idle_timeout_seconds", a.idle_timeout_seconds);
        put(&mut body, "persistent", a.persistent);
        put(&mut body, "disk_bytes", a.disk_bytes);
        put(&mut body, "env", a.env);
        put(&mut body, "labels", a.labels);
        put(&mut body, "from_snapshot", a.from_snapshot);
        put(&mut body, "isolation", a.isolation);
        if a.desktop == Some(true) || a.desktop_width.is_some() || a.desktop_height.is_some() {
            let mut desktop = Map::new();
            put(&mut desktop, "width", a.desktop_width);
            put(&mut desktop, "height", a.desktop_height);
            body.insert("desktop".into(), Value::Object(desktop));
        }
        let mut network = Map::new();
        put(&mut network, "allow", a.allow_net);
        put(&mut network, "deny", a.deny_net);
        put(&mut network, "mode", a.net_mode);
        if !network.is_empty() {
            body.insert("network".into(), Value::Object(network));
        }
        self.json_tool(&ctx, "POST", "/v1/sandboxes".into(), Some(Value::Object(body)), None).await
    }

    #[tool(
        description = "List this host's sandboxes, running and stopped, oldest first, with their records.",
        annotations(read_only_hint = true)
    )]
    async fn sandbox_list(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.json_tool(&ctx, "GET", "/v1/sandboxes".into(), None, Some("sandboxes")).await
    }

    #[tool(
        description = "Show one sandbox's record: state, limits, network policy, creation and expiry times.",
        annotations(read_only_hint = true)
    )]
    async fn sandbox_inspect(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "GET", sandbox_path(&a.sandbox, ""), None, None).await
    }

    #[tool(
        description = "Pause a sandbox between steps: every process in it is frozen with its memory kept, so it \
                       uses no CPU. Any later exec, run_code or file call wakes it again where it was (or call \
                       sandbox_resume). Exec timeouts do not count the time paused.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn sandbox_pause(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/pause"), Some(Value::Object(Map::new())), None).await
    }

    #[tool(
        description = "Make a URL a person can open in a browser (or fetch with curl) that reaches a server \
                       the sandbox runs on its own 127.0.0.1:port (HTTP and WebSockets), such as the web app \
                       you are building; it carries a token for that port only unless public. Returns the \
                       preview with its url. Needs the daemon's TCP listener (berth daemon --listen).",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn sandbox_expose(
        &self,
        Parameters(a): Parameters<ExposeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = Map::new();
        put(&mut body, "port", Some(a.port));
        put(&mut body, "public", a.public);
        put(&mut body, "ttl_seconds", a.ttl_seconds);
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/previews"), Some(Value::Object(body)), None).await
    }

    #[tool(
        description = "Resume a paused sandbox: its processes continue exactly where they were.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn sandbox_resume(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/resume"), Some(Value::Object(Map::new())), None).await
    }

    #[tool(description = "Remove a sandbox: kill everything in it, delete its files, revoke its credentials. \
                       Returns the teardown receipt: the steps taken, declared outputs copied out with their \
                       SHA-256, the workspace's patch, and whether anything was left behind (clean).")]
    async fn sandbox_remove(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "DELETE", sandbox_path(&a.sandbox, ""), None, None).await
    }

    #[tool(description = "Run a command in a sandbox as root and wait for it: give argv (run directly) or command \
                       (a shell line, run with sh -c). Returns the exit code, stdout and stderr apart. Files \
                       and installed packages persist between execs, but not shell state such as cd or \
                       variables (use workdir and env). Long output is cut in the middle, keeping the head \
                       and the tail, and says so. Default timeout 300 s (exit code 124).")]
    async fn exec(&self, Parameters(a): Parameters<ExecArgs>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let argv = match (a.argv, a.command) {
            (Some(argv), None) if !argv.is_empty() => argv,
            (None, Some(line)) => vec!["sh".into(), "-c".into(), line],
            _ => return refuse("give either argv (a non-empty list) or command (a shell line), not both"),
        };
        let mut body = Map::new();
        body.insert("argv".into(), json!(argv));
        put(&mut body, "workdir", a.workdir);
        put(&mut body, "env", a.env);
        put(&mut body, "stdin", a.stdin);
        put(&mut body, "timeout_seconds", Some(a.timeout_seconds.unwrap_or(DEFAULT_EXEC_TIMEOUT)));
        put(&mut body, "max_output_bytes", a.max_output_bytes);
        let path = sandbox_path(&a.sandbox, "/execs");
        match self.call(&ctx, "POST", path, Body::Json(Value::Object(body))).await {
            Ok(reply) => {
                let o = output::exec(&reply.body);
                let mut r = CallToolResult::success(vec![ContentBlock::text(o.text)]);
                r.structured_content = Some(o.structured);
                r
            }
            Err(e) => failed(e),
        }
    }

    #[tool(description = "Run code in a live interpreter inside a sandbox (python by default; also javascript \
                       and bash), like a notebook cell: variables, imports and definitions persist between \
                       calls in the same context. Returns stdout, stderr, the value of a trailing expression, \
                       displayed values and images, and the error with its traceback if the code raised. The \
                       answer names the context; pass it back as `context` to keep using that state.")]
    async fn run_code(
        &self,
        Parameters(a): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run_code_in(a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Read a file from a sandbox. Text comes back as it is; a file that is not UTF-8 comes \
                       back as base64 (the answer says which). A directory gets its listing instead.",
        annotations(read_only_hint = true)
    )]
    async fn file_read(
        &self,
        Parameters(a): Parameters<FileReadArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        files::read(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(description = "Write a whole file in a sandbox, creating it (and, by default, its parent directories) \
                       or replacing it. content is UTF-8 text, or base64 with base64: true. Returns the file's \
                       entry (size, mode, owner).")]
    async fn file_write(
        &self,
        Parameters(a): Parameters<FileWriteArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        files::write(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "List a directory in a sandbox (default /workspace): each entry's name, kind (file, \
                       directory, symlink...), size, mode and modification time.",
        annotations(read_only_hint = true)
    )]
    async fn file_list(
        &self,
        Parameters(a): Parameters<FileListArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        files::list(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Move or rename a file, a symbolic link or a directory tree inside a sandbox, in one \
                       step (the parent of `to` must exist). An existing `to` is an error unless overwrite. \
                       Returns the entry at its new path.",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn file_move(
        &self,
        Parameters(a): Parameters<FileMoveArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        files::move_to(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Wait for changes under a directory of a sandbox (default /workspace, recursive) and \
                       return them: what was created, written, renamed, had its mode changed or was removed, \
                       as they happened (inotify inside the sandbox). Returns once the changes stop for \
                       quiet_seconds (default 1) after the first, or at timeout_seconds (default 30) with \
                       whatever came. Use it to wait for a build's output, a server's file or another agent's \
                       edits instead of polling with exec.",
        annotations(read_only_hint = true)
    )]
    async fn file_watch(
        &self,
        Parameters(a): Parameters<FileWatchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        files::watch(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Snapshot a sandbox's files (its root file system's changes and /workspace) at this \
                       instant, to restore later or to start new sandboxes from. Returns the snapshot's record.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn snapshot(
        &self,
        Parameters(a): Parameters<SnapshotArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = Map::new();
        put(&mut body, "name", a.name);
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/snapshots"), Some(Value::Object(body)), None).await
    }

    #[tool(description = "Roll a sandbox's files back to a snapshot (by id or name). A running sandbox is \
                       restarted on the restored files: its running processes end.")]
    async fn restore(&self, Parameters(a): Parameters<RestoreArgs>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let body = json!({"snapshot": a.snapshot});
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/restore"), Some(body), None).await
    }

    #[tool(
        description = "Fork a sandbox: make count (default 1) new running sandboxes whose files are \
                       copy-on-write copies of this one's right now, with the same limits and environment. \
                       Good for trying alternatives in parallel. Returns the new sandboxes' records.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn fork(&self, Parameters(a): Parameters<ForkArgs>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        let mut body = Map::new();
        put(&mut body, "count", a.count);
        put(&mut body, "with_processes", a.with_processes);
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/fork"), Some(Value::Object(body)), None).await
    }

    #[tool(
        description = "What changed in a sandbox's files compared with its parent snapshot, a snapshot, or \
                       its image's clean state: the list of added, modified and deleted paths, or with \
                       patch: true a git-style patch.",
        annotations(read_only_hint = true)
    )]
    async fn diff(&self, Parameters(a): Parameters<DiffArgs>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        files::diff(self, a, &ctx).await.unwrap_or_else(failed)
    }

    #[tool(
        description = "Let a running sandbox reach more network destinations, at once (rules such as \
                       \"pypi.org:443\" or \"*.github.com\"). Returns the policy as it now is.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn net_allow(
        &self,
        Parameters(a): Parameters<NetRulesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let body = json!({"allow": a.rules});
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/net"), Some(body), None).await
    }

    #[tool(description = "Forbid a sandbox some network destinations, at once; open connections to them are \
                       closed. Returns the policy as it now is and how many connections were closed.")]
    async fn net_deny(
        &self,
        Parameters(a): Parameters<NetRulesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let body = json!({"deny": a.rules});
        self.json_tool(&ctx, "POST", sandbox_path(&a.sandbox, "/net"), Some(body), None).await
    }

    #[tool(
        description = "A sandbox's egress log: every attempt to reach the network, with its destination, \
                       verdict (allowed, denied, error), the rule that decided, the reason and bytes moved. \
                       Use it to see why a download failed.",
        annotations(read_only_hint = true)
    )]
    async fn net_log(&self, Parameters(a): Parameters<NetLogArgs>, ctx: RequestContext<RoleServer>) -> CallToolResult {
        match self.call(&ctx, "GET", sandbox_path(&a.sandbox, "/net/log"), Body::None).await.and_then(|r| r.json()) {
            Ok(Value::Array(mut all)) => {
                let last = a.last.unwrap_or(100);
                let skipped = all.len().saturating_sub(last);
                all.drain(..skipped);
                json_result(json!({"attempts": all, "earlier_attempts_not_shown": skipped}), None)
            }
            Ok(other) => json_result(other, Some("attempts")),
            Err(e) => failed(e),
        }
    }

    #[tool(
        description = "Suggest the smallest egress allowlist for a sandbox, from what it reached: run a job \
                       once in a sandbox created with net_mode \"learn\", then give this list as allow_net to \
                       the sandboxes that run it from then on.",
        annotations(read_only_hint = true)
    )]
    async fn net_suggest(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.json_tool(&ctx, "GET", sandbox_path(&a.sandbox, "/net/suggest"), None, None).await
    }
}

impl Berth {
    /// Every tool.
    pub(crate) fn router() -> rmcp::handler::server::router::tool::ToolRouter<Berth> {
        Self::tool_router() + Self::desktop_router()
    }

    /// One call whose JSON answer is the result (an array under `key` in the structured content).
    pub(crate) async fn json_tool(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: &'static str,
        path: String,
        body: Option<Value>,
        key: Option<&str>,
    ) -> CallToolResult {
        let body = body.map_or(Body::None, Body::Json);
        match self.call(ctx, method, path, body).await.and_then(|r| r.json()) {
            Ok(v) => json_result(v, key),
            Err(e) => failed(e),
        }
    }

    async fn run_code_in(&self, a: RunCodeArgs, ctx: &RequestContext<RoleServer>) -> Outcome {
        let language = a.language.unwrap_or_else(|| "python".into());
        let contexts = sandbox_path(&a.sandbox, "/contexts");
        let context = match a.context {
            Some(c) => c,
            None => {
                let existing = if a.new_context == Some(true) {
                    None
                } else {
                    let list = self.call(ctx, "GET", contexts.clone(), Body::None).await?.json()?;
                    list.as_array()
                        .into_iter()
                        .flatten()
                        .find(|c| c["language"].as_str() == Some(language.as_str()))
                        .and_then(|c| c["id"].as_str().map(String::from))
                };
                match existing {
                    Some(id) => id,
                    None => {
                        let body = Body::Json(json!({"language": language}));
                        let made = self.call(ctx, "POST", contexts.clone(), body).await?.json()?;
                        made["id"]
                            .as_str()
                            .map(String::from)
                            .ok_or_else(|| ApiError::transport("the daemon's answer to a new context has no id"))?
                    }
                }
            }
        };
        let mut body = Map::new();
        body.insert("code".into(), Value::String(a.code));
        put(&mut body, "timeout_seconds", Some(a.timeout_seconds.unwrap_or(DEFAULT_RUN_TIMEOUT)));
        put(&mut body, "max_output_bytes", a.max_output_bytes);
        let path = format!("{contexts}/{}/run", segment(&context));
        let reply = self.call(ctx, "POST", path, Body::Json(Value::Object(body))).await?;
        let o = output::run(&context, &reply.body);
        let mut content = vec![ContentBlock::text(o.text)];
        for png in o.images {
            // Only well-formed images are attached: a client would choke on a bad one.
            if base64::engine::general_purpose::STANDARD.decode(&png).is_ok() {
                content.push(ContentBlock::image(png, "image/png"));
            }
        }
        let mut r = CallToolResult::success(content);
        r.structured_content = Some(o.structured);
        Ok(r)
    }
}
