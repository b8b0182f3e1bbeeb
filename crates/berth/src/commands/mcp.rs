//! `berth mcp`: berth's MCP server on stdin and stdout, for MCP clients that start their servers as
//! commands. Its tools are calls of the daemon's API over the unix socket (with `BERTH_TOKEN` as the bearer
//! token when it is set, as for every command).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use berth_client::{Client, ClientError};
use berth_mcp::{ApiError, Body, Call, Reply};

/// The daemon's socket, one connection per call.
struct Socket {
    path: PathBuf,
    token: Option<String>,
}

impl berth_mcp::Api for Socket {
    fn call(&self, call: Call) -> berth_mcp::ApiFuture {
        let (path, token) = (self.path.clone(), self.token.clone());
        Box::pin(async move {
            let answer = tokio::task::spawn_blocking(move || {
                let client = Client::connect_with_token(&path, token)?;
                match (call.method, call.body) {
                    ("GET", _) => client.get(&call.path),
                    ("DELETE", _) => client.delete(&call.path),
                    ("PUT", Body::Bytes(b)) => client.put_bytes(&call.path, &b),
                    ("POST", Body::Json(v)) => client.post_json(&call.path, &v),
                    ("POST", _) => client.post_json(&call.path, &serde_json::json!({})),
                    (method, _) => Err(ClientError::Invalid(format!("berth mcp does not send {method} requests"))),
                }
            })
            .await
            .map_err(|e| ApiError::transport(format!("the request failed unexpectedly: {e}")))?;
            match answer {
                Ok((status, body)) => Ok(Reply { status, body }),
                Err(ClientError::Api { status, code, message }) => {
                    let code =
                        code.and_then(|c| serde_json::to_value(c).ok()).and_then(|v| v.as_str().map(String::from));
                    Err(ApiError { status, code, message })
                }
                Err(e) => Err(ApiError::transport(e.to_string())),
            }
        })
    }
}

pub fn mcp(socket: &Path) -> anyhow::Result<i32> {
    let token = std::env::var("BERTH_TOKEN").ok().filter(|t| !t.is_empty());
    let api = Arc::new(Socket { path: socket.to_path_buf(), token });
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the async runtime")?;
    rt.block_on(berth_mcp::serve_stdio(api)).map_err(|e| anyhow::anyhow!("serving MCP on stdio: {e}"))?;
    Ok(0)
}
