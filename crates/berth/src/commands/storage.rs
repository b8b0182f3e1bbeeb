//! `berth storage init|info`: the storage pool where sandboxes' files, snapshots and volumes live.

use std::path::Path;

use crate::cli::StorageCommand;
use crate::client::{self, Client};

pub fn storage(root: &Path, socket: &Path, cmd: StorageCommand) -> anyhow::Result<i32> {
    match cmd {
        StorageCommand::Init { size } => {
            if !rustix::process::geteuid().is_root() {
                anyhow::bail!("berth storage init needs root: it makes a file system and mounts it");
            }
            let pool = berth_storage::Pool::init(root, size)?;
            let info = pool.info()?;
            println!(
                "storage pool ready: {} at {} ({} bytes; quotas {})",
                info.mode,
                info.path.display(),
                info.size_bytes,
                if info.quotas { "on" } else { "off" }
            );
            println!("restart a running berth daemon so that it uses the pool");
            Ok(0)
        }
        StorageCommand::Info { json } => {
            // The daemon's view when one runs; else this host's pool as the daemon would open it.
            let info = match Client::connect(socket).and_then(|c| c.get("/v1/storage")) {
                Ok((_, body)) => client::decode::<berth_api::StorageInfo>(&body)?,
                Err(_) => {
                    let info = berth_storage::Pool::open(root)?.info()?;
                    berth_api::StorageInfo {
                        mode: info.mode.to_string(),
                        size_bytes: info.size_bytes,
                        free_bytes: info.free_bytes,
                        quotas: info.quotas,
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
            }
            Ok(0)
        }
    }
}
