//! `berth info`: what berth finds on this host.

use std::path::Path;

use berth_runtime::Runtime;
use berth_runtime::cgroup::Version;

pub fn info(root: &Path) -> anyhow::Result<i32> {
    let runtime = Runtime::open(root)?;
    let cgroups = match runtime.hierarchy().version() {
        Version::V1 => "v1",
        Version::V2 => "v2",
    };
    let landlock = berth_sys::landlock::abi_version();
    let info = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "root": root,
        "cgroups": cgroups,
        "landlock_abi": landlock,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    });
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(0)
}
