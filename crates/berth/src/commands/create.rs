//! `berth create`: a sandbox that lives in the daemon until it is removed or its time runs out.

use std::path::Path;

use berth_api::{CreateSandbox, Mount};
use berth_client::Client;

use super::output;
use crate::cli::CreateArgs;

pub fn create(socket: &Path, args: CreateArgs) -> anyhow::Result<i32> {
    let mode = match (args.dangerously_allow_all_net, args.net.as_deref()) {
        (true, Some(_)) => anyhow::bail!("--net and --dangerously-allow-all-net cannot be given together"),
        (true, None) => Some("allow_all".to_string()),
        (false, Some(m @ ("none" | "learn"))) => Some(m.to_string()),
        (false, Some(m)) => anyhow::bail!("--net must be none or learn, not {m:?} (use --allow-net to name hosts)"),
        (false, None) => None,
    };
    let mut add_hosts = std::collections::BTreeMap::new();
    for h in &args.add_hosts {
        let (name, ip) = h
            .split_once(':')
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--add-host {h:?} is not NAME:IP"))?;
        add_hosts.insert(name.to_string(), ip.trim_matches(|c| c == '[' || c == ']').to_string());
    }
    let network = berth_api::Network { mode, allow: args.allow_net, deny: args.deny_net, add_hosts };
    let request = CreateSandbox {
        name: args.name,
        image: args.image,
        memory_bytes: args.memory,
        pids: args.pids,
        cpus: args.cpus.map(|millis| millis as f64 / 1000.0),
        ttl_seconds: args.ttl.map(output::seconds),
        idle_timeout_seconds: args.idle_timeout.map(output::seconds),
        idle_pause_seconds: args.idle_pause.map(output::seconds),
        idle_hibernate_seconds: args.idle_hibernate.map(output::seconds),
        ttl_active_only: args.ttl_active_only,
        ttl_action: args.ttl_action,
        env: args.env.into_iter().collect(),
        labels: args.labels.into_iter().collect(),
        tenant: args.tenant,
        mounts: args
            .mounts
            .into_iter()
            .map(|m| Mount { host: m.host.to_string_lossy().into_owned(), target: m.target, readonly: m.readonly })
            .collect(),
        persistent: args.persistent,
        disk_bytes: args.disk,
        volumes: args.volumes,
        from_snapshot: args.from,
        outputs: args.outputs,
        network,
        secrets: args.secrets,
        budget: args.budget.unwrap_or_default(),
        isolation: args.isolation,
        desktop: match (args.desktop, args.resolution) {
            (_, Some(r)) => Some(berth_api::Desktop { width: r.width, height: r.height }),
            (true, None) => Some(berth_api::Desktop::default()),
            (false, None) => None,
        },
    };
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json("/v1/sandboxes", &request)?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let created: serde_json::Value = berth_client::decode(&body)?;
    let id = created
        .get("id")
        .and_then(|id| id.as_str())
        .ok_or_else(|| berth_client::ClientError::Protocol("the new sandbox has no id".into()))?;
    println!("{id}");
    Ok(0)
}
