//! `berth daemon`: the API server.

use std::path::Path;

use anyhow::Context;

pub fn daemon(root: &Path, socket: &Path, listen: Option<std::net::SocketAddr>) -> anyhow::Result<i32> {
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("berth daemon needs root (it creates sandboxes with their own host id ranges)");
    }
    // Checks the data root and the cgroup layout, and sweeps what crashed runs left, before serving.
    berth_runtime::Runtime::open(root)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the async runtime")?;
    rt.block_on(async {
        let serve = berthd::serve(root, socket, listen);
        tokio::select! {
            r = serve => r.map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })?;
    Ok(0)
}

/// `berth token create`: mint a token over the unix socket and print it.
pub fn token_create(socket: &Path, name: &str, json: bool) -> anyhow::Result<i32> {
    let client = crate::client::Client::connect(socket)?;
    let (_, body) = client.post_json("/v1/tokens", &serde_json::json!({ "name": name }))?;
    if json {
        println!("{}", String::from_utf8_lossy(&body));
    } else {
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        println!("{}", v["token"].as_str().unwrap_or_default());
    }
    Ok(0)
}
