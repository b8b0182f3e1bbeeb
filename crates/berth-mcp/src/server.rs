//! The MCP server: berth's tools behind rmcp's handler, over stdio or streamable HTTP.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

use crate::api::{Api, ApiError, Body, Call, Reply};

/// Who is calling, as the daemon's `/mcp` route found it: put into the HTTP request's extensions, where the
/// server reads it to list only the tools the caller's credentials can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The whole API (the unix socket, an API token).
    Full,
    /// A sandbox's session token: its own record, and sandboxes it creates.
    Session,
}

/// The tools a session token can never use (the API refuses it every route they call); they are not listed
/// to a session token's caller.
const BEYOND_A_SESSION: &[&str] =
    &["snapshot", "restore", "fork", "net_allow", "net_deny", "net_suggest", "sandbox_expose"];

const INSTRUCTIONS: &str = "berth runs Linux sandboxes. Create one with sandbox_create, run commands in it \
    with exec (or code in a live interpreter with run_code), move files with file_write, file_read, \
    file_list and file_move (and wait for changes with file_watch), snapshot, fork and diff its files, and remove it with sandbox_remove when done. A sandbox has \
    no network unless it is allowed destinations (allow_net on create, net_allow later). A sandbox created \
    with desktop: true has a screen to use like a person: take a screenshot with desktop_screenshot, then act \
    with desktop_action in that screenshot's pixels (its size as coordinates_in), then take another.";

/// berth's MCP server.
#[derive(Clone)]
pub struct Berth {
    api: Arc<dyn Api>,
    tool_router: ToolRouter<Berth>,
}

impl Berth {
    pub fn new(api: Arc<dyn Api>) -> Berth {
        Berth { api, tool_router: Berth::router() }
    }

    /// One API call on behalf of the MCP request `ctx`: over HTTP it carries that request's credentials.
    pub(crate) async fn call(
        &self,
        ctx: &RequestContext<RoleServer>,
        method: &'static str,
        path: String,
        body: Body,
    ) -> Result<Reply, ApiError> {
        let authorization = http_parts(ctx)
            .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        self.api.call(Call { method, path, body, authorization }).await
    }

    fn visible(&self, ctx: &RequestContext<RoleServer>) -> Vec<Tool> {
        let session = http_parts(ctx).and_then(|p| p.extensions.get::<Scope>()) == Some(&Scope::Session);
        let mut tools = self.tool_router.list_all();
        if session {
            tools.retain(|t| !BEYOND_A_SESSION.contains(&t.name.as_ref()));
        }
        tools
    }
}

fn http_parts(ctx: &RequestContext<RoleServer>) -> Option<&http::request::Parts> {
    ctx.extensions.get::<http::request::Parts>()
}

/// A failed call as a tool error: the API's sentence as the text, its code and status alongside.
pub(crate) fn failed(e: ApiError) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(e.message.clone())]);
    r.structured_content = Some(json!({"error": {"code": e.code, "message": e.message}, "status": e.status}));
    r
}

/// A JSON answer as a result: pretty text for the model, and the value itself (an array under `key`, since
/// structured content is an object).
pub(crate) fn json_result(v: Value, key: Option<&str>) -> CallToolResult {
    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
    let structured = match (v, key) {
        (Value::Object(o), _) => Value::Object(o),
        (other, k) => json!({ k.unwrap_or("value"): other }),
    };
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

impl ServerHandler for Berth {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("berth", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult { tools: self.visible(&ctx), ..Default::default() })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.tool_router.call(ToolCallContext::new(self, request, ctx)).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_router.get(name).cloned()
    }
}

/// Serve MCP on this process's stdin and stdout until the client goes away.
pub async fn serve_stdio(api: Arc<dyn Api>) -> Result<(), String> {
    let running = Berth::new(api).serve(rmcp::transport::stdio()).await.map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// MCP's streamable HTTP transport as a tower service, to mount in a router. Stateless: every request stands
/// alone (no session is kept between them), and a request body may be at most `max_body` bytes.
pub fn http_service(api: Arc<dyn Api>, max_body: usize) -> StreamableHttpService<Berth, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // Every listener decides who may connect (socket permissions, bearer tokens): any Host will do.
        .disable_allowed_hosts();
    config.max_request_body_bytes = max_body;
    // Each request gets a server of its own: a clone of one whose tools (and their schemas) are built once.
    let server = Berth::new(api);
    StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config)
}
