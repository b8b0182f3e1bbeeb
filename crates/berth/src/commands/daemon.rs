//! `berth daemon`: the API server.

use std::path::Path;

use anyhow::Context;

pub fn daemon(root: &Path, socket: &Path, args: crate::cli::DaemonArgs) -> anyhow::Result<i32> {
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("berth daemon needs root (it creates sandboxes with their own host id ranges)");
    }
    let bounds = args.bounds();
    bounds.check().map_err(anyhow::Error::msg)?;
    berth_runtime::backend(bounds.isolation)
        .available()
        .map_err(|why| anyhow::anyhow!("--isolation {}: {why}", bounds.isolation))?;
    if args.max_header_size < 1024 || args.max_header_size > 1 << 20 {
        anyhow::bail!("--max-header-size must be between 1k and 1m");
    }
    if args.header_timeout.is_zero() {
        anyhow::bail!("--header-timeout must be longer than zero");
    }
    if args.max_connections > 1 << 20 {
        anyhow::bail!("--max-connections must be at most 1048576");
    }
    let listeners = berthd::listen::Bounds {
        max_connections: args.max_connections,
        max_head_bytes: args.max_header_size as usize,
        head_timeout: args.header_timeout,
        max_body_bytes: usize::try_from(args.max_body_size).context("--max-body-size is too large")?,
    };
    // Checks the data root and the cgroup layout, and sweeps what crashed runs left, before serving.
    berth_runtime::Runtime::open(root)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the async runtime")?;
    rt.block_on(async {
        let cluster = match args.cluster_db.clone() {
            Some(db) => {
                let node = match args.node.clone() {
                    Some(n) => n,
                    None => rustix::system::uname().nodename().to_string_lossy().into_owned(),
                };
                berth_engine::cluster::check_node(&node).map_err(|e| anyhow::anyhow!("--node: {e}"))?;
                Some(berth_engine::cluster::ClusterOptions { db, node })
            }
            None => None,
        };
        let storage = berth_engine::StorageOptions {
            choice: args.storage,
            pool_size: args.pool_size,
            default_disk: args.default_disk,
            cluster,
        };
        // SIGINT or SIGTERM: stop serving, tear the warm pool down, exit (sandboxes stay, for the next daemon).
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("handle SIGTERM")?;
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        let tcp = berthd::Tcp { listen: args.listen, domain: args.domain.clone(), e2b_listen: args.e2b_listen };
        berthd::serve(root, socket, tcp, bounds, storage, listeners, shutdown).await.map_err(anyhow::Error::from)
    })?;
    Ok(0)
}

/// `berth token create`: mint a token over the unix socket and print it.
pub fn token_create(socket: &Path, req: &berth_api::MintToken, json: bool) -> anyhow::Result<i32> {
    let client = berth_client::Client::connect(socket)?;
    let (_, body) = client.post_json("/v1/tokens", req)?;
    if json {
        println!("{}", String::from_utf8_lossy(&body));
    } else {
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        println!("{}", v["token"].as_str().unwrap_or_default());
    }
    Ok(0)
}

/// `berth token ls`.
pub fn token_ls(socket: &Path, json: bool) -> anyhow::Result<i32> {
    let (_, body) = berth_client::Client::connect(socket)?.get("/v1/tokens")?;
    if json {
        println!("{}", String::from_utf8_lossy(&body));
        return Ok(0);
    }
    let tokens: Vec<berth_api::TokenInfo> = serde_json::from_slice(&body)?;
    for t in tokens {
        let mut reach = Vec::new();
        if let Some(tenant) = &t.grant.tenant {
            reach.push(format!("tenant={tenant}"));
        }
        if t.grant.read_only {
            reach.push("read-only".into());
        }
        reach.extend(t.grant.selector.iter().map(|(k, v)| format!("selector:{k}={v}")));
        let reach = if reach.is_empty() { "all".to_string() } else { reach.join(",") };
        println!("{}\t{}\t{}\t{}", t.id, t.created_at_ms, reach, t.name);
    }
    Ok(0)
}

/// `berth token rm ID`.
pub fn token_rm(socket: &Path, id: &str) -> anyhow::Result<i32> {
    berth_client::Client::connect(socket)?.delete(&format!("/v1/tokens/{}", berth_client::segment(id)))?;
    println!("revoked {id}");
    Ok(0)
}

/// `berth tenant create|ls|rm`.
pub fn tenant(socket: &Path, cmd: crate::cli::TenantCommand) -> anyhow::Result<i32> {
    use crate::cli::TenantCommand;
    let client = berth_client::Client::connect(socket)?;
    match cmd {
        TenantCommand::Create(a) => {
            let quota = berth_api::Quota {
                sandboxes: a.sandboxes,
                cpus: a.cpus,
                memory_bytes: a.memory,
                disk_bytes: a.disk,
                egress_bytes: a.egress,
            };
            let (_, body) =
                client.post_json("/v1/tenants", &berth_api::CreateTenant { name: a.name.clone(), quota })?;
            match a.json {
                true => super::output::print_raw(&body)?,
                false => println!("{}", a.name),
            }
        }
        TenantCommand::Ls { json } => {
            let (_, body) = client.get("/v1/tenants")?;
            if json {
                super::output::print_raw(&body)?;
                return Ok(0);
            }
            let tenants: Vec<berth_api::Tenant> = super::output::list(&body, "tenants")?;
            let of = |used: String, limit: Option<String>| match limit {
                Some(l) => format!("{used}/{l}"),
                None => used,
            };
            let rows: Vec<Vec<String>> = tenants
                .into_iter()
                .map(|t| {
                    let (u, q) = (&t.used, &t.quota);
                    vec![
                        t.name.clone(),
                        of(u.sandboxes.to_string(), q.sandboxes.map(|v| v.to_string())),
                        of(format!("{:.2}", u.cpus), q.cpus.map(|v| v.to_string())),
                        of(u.memory_bytes.to_string(), q.memory_bytes.map(|v| v.to_string())),
                        of(u.disk_bytes.to_string(), q.disk_bytes.map(|v| v.to_string())),
                        of(u.egress_bytes.to_string(), q.egress_bytes.map(|v| v.to_string())),
                    ]
                })
                .collect();
            super::output::print_table(&["TENANT", "SANDBOXES", "CPUS", "MEMORY", "DISK", "EGRESS"], &rows)?;
        }
        TenantCommand::Rm { names } => return Ok(super::output::remove_each(&client, "/v1/tenants", &names)),
    }
    Ok(0)
}
