//! `berth info`: what berth finds on this host.

use std::path::Path;

use berth_runtime::Runtime;
use berth_runtime::cgroup::Version;

pub fn info(root: &Path, socket: &Path, one_line: bool) -> anyhow::Result<i32> {
    let runtime = Runtime::open(root)?;
    let cgroups = match runtime.hierarchy().version() {
        Version::V1 => "v1",
        Version::V2 => "v2",
    };
    let landlock = berth_sys::landlock::abi_version();
    // The running daemon's storage and what bounds sandboxes' files (`bounded`, `unbounded`); without a
    // daemon, the pool as a daemon would find it here.
    let daemon = berth_client::Client::connect(socket)
        .and_then(|c| c.get("/v1/storage"))
        .ok()
        .and_then(|(_, body)| serde_json::from_slice::<serde_json::Value>(&body).ok());
    let storage = daemon.unwrap_or_else(|| local_storage(root));
    // What one sandbox may take of the host: as the daemon at --socket keeps it, or the defaults when none
    // answers there.
    let (bounds_from, bounds) = match daemon_info(socket) {
        Some(d) => (format!("the daemon at {}", socket.display()), d.bounds),
        None => (
            format!("defaults (no daemon answers at {}; its flags may change them)", socket.display()),
            berth_engine::bounds::table(&berth_engine::Bounds::default()),
        ),
    };
    let info = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "root": root,
        "cgroups": cgroups,
        "landlock_abi": landlock,
        "isolation": isolation(),
        // What each sandbox's rules get from that ABI (each sandbox's record says what its init reported).
        "sandbox_landlock": berth_sys::landlock::sandbox_status().as_str(),
        "storage": storage,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        "bounds_from": bounds_from,
        "bounds": bounds,
    });
    match one_line {
        true => println!("{}", serde_json::to_string(&info)?),
        false => println!("{}", serde_json::to_string_pretty(&info)?),
    }
    Ok(0)
}

/// The boundaries this host offers (`--isolation`), and why one is missing.
fn isolation() -> serde_json::Value {
    let each = berth_runtime::backends().map(|b| {
        let name = b.isolation().as_str();
        match b.available() {
            Ok(offered) => {
                let mut entry = serde_json::json!({
                    "name": name,
                    "available": true,
                    "default": b.isolation() == berth_api::Isolation::default(),
                    "detail": offered.detail,
                });
                for (key, value) in offered.facts {
                    entry[key] = value.into();
                }
                entry
            }
            Err(reason) => serde_json::json!({"name": name, "available": false, "reason": reason}),
        }
    });
    serde_json::Value::Array(each.collect())
}

fn daemon_info(socket: &Path) -> Option<berth_api::DaemonInfo> {
    let client = berth_client::Client::connect(socket).ok()?;
    let (_, body) = client.get("/v1/info").ok()?;
    serde_json::from_slice(&body).ok()
}

/// The data root's pool as a daemon would open it, when none runs.
fn local_storage(root: &Path) -> serde_json::Value {
    match berth_storage::Pool::open(root).and_then(|p| p.info()) {
        Ok(i) => serde_json::json!({
            "mode": i.mode.to_string(), "size_bytes": i.size_bytes, "free_bytes": i.free_bytes, "quotas": i.quotas,
            "daemon": "not running",
            "hint": match (i.mode, i.quotas) {
                (berth_storage::Mode::Btrfs, true) => serde_json::Value::Null,
                (berth_storage::Mode::Btrfs, false) => "disk quotas are off, so sandboxes' files are not bounded: turn them on with `btrfs quota enable`".into(),
                _ => "no btrfs pool yet: a daemon started with --storage auto (the default) makes one, or run `berth storage init`; without one, sandboxes' files are not bounded and forks copy files".into(),
            },
        }),
        Err(e) => serde_json::json!({"error": e.to_string()}),
    }
}
