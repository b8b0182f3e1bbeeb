//! `berth daemon`: the API server.

use std::path::Path;

use anyhow::Context;

pub fn daemon(root: &Path, socket: &Path) -> anyhow::Result<i32> {
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("berth daemon needs root (it creates sandboxes with their own host id ranges)");
    }
    // Checks the data root and the cgroup layout, and sweeps what crashed runs left, before serving.
    berth_runtime::Runtime::open(root)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the async runtime")?;
    rt.block_on(async {
        let serve = berthd::serve(root, socket);
        tokio::select! {
            r = serve => r.map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })?;
    Ok(0)
}
