//! `berth storage init|info`: the storage pool where sandboxes' files, snapshots and volumes live.

use std::path::Path;

use berth_client::Client;

use crate::cli::StorageCommand;

pub fn storage(root: &Path, socket: &Path, cmd: StorageCommand) -> anyhow::Result<i32> {
    match cmd {
        StorageCommand::Init { size } => {
            // A running daemon makes the pool itself and uses it from its next sandbox on.
            if let Ok(c) = Client::connect(socket) {
                let (_, body) = c.post_json("/v1/storage", &berth_api::InitStorage { size_bytes: size })?;
                let info = berth_client::decode::<berth_api::StorageInfo>(&body)?;
                println!(
                    "storage pool ready: {} ({} bytes; quotas {}); the daemon uses it from now on",
                    info.mode,
                    info.size_bytes,
                    if info.quotas { "on" } else { "off" }
                );
                return Ok(0);
            }
            if !rustix::process::geteuid().is_root() {
                anyhow::bail!("berth storage init needs root: it makes a file system and mounts it");
            }
            let size = match size {
                Some(s) => s,
                None => berth_storage::auto_pool_size(root)?,
            };
            let pool = berth_storage::Pool::init(root, size)?;
            let info = pool.info()?;
            println!(
                "storage pool ready: {} at {} ({} bytes; quotas {})",
                info.mode,
                info.path.display(),
                info.size_bytes,
                if info.quotas { "on" } else { "off" }
            );
            Ok(0)
        }
        StorageCommand::Info { json } => {
            // The daemon's view when one runs; else this host's pool as the daemon would open it.
            let info = match Client::connect(socket).and_then(|c| c.get("/v1/storage")) {
                Ok((_, body)) => berth_client::decode::<berth_api::StorageInfo>(&body)?,
                Err(_) => {
                    let info = berth_storage::Pool::open(root)?.info()?;
                    berth_api::StorageInfo {
                        mode: info.mode.to_string(),
                        size_bytes: info.size_bytes,
                        free_bytes: info.free_bytes,
                        quotas: info.quotas,
                        bounded: false,
                        default_disk_bytes: None,
                        unbounded: Some(
                            "no daemon runs: a daemon started with --storage auto makes a pool where there is none"
                                .into(),
                        ),
                    }
                }
            };
            if json {
                println!("{}", serde_json::to_string(&info)?);
            } else {
                println!("mode:   {}", info.mode);
                println!("size:   {} bytes", info.size_bytes);
                println!("free:   {} bytes", info.free_bytes);
                println!("quotas: {}", if info.quotas { "on" } else { "off" });
                match (&info.unbounded, info.default_disk_bytes) {
                    (Some(why), _) => println!("bound:  none: {why}"),
                    (None, Some(d)) => {
                        println!("bound:  {d} bytes per sandbox by default (--disk), the pool's size in all")
                    }
                    (None, None) => println!("bound:  the pool's size in all"),
                }
            }
            Ok(0)
        }
    }
}
