//! `berth pod`: the pods a Kubernetes node runs with berth, as the node's daemon keeps them (see
//! `oci_agent`), and what the cluster's database holds.

use std::path::Path;

use berth_api::{ClusterInfo, Pod, PodFork};
use berth_client::Client;

use super::output;
use crate::cli::PodCommand;

pub fn pod(socket: &Path, cmd: PodCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let path = |id: &str, tail: &str| format!("/v1/pods/{}{tail}", berth_client::segment(id));
    match cmd {
        PodCommand::Ls { json } => {
            let (_, body) = client.get("/v1/pods")?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = berth_client::decode::<Vec<Pod>>(&body)?
                .into_iter()
                .map(|p| {
                    let state = if p.removed_at_ms.is_some() { "removed" } else { "live" };
                    let live = p.containers.iter().filter(|c| c.state != "deleted").count();
                    vec![
                        p.id.chars().take(12).collect(),
                        format!("{}/{}", p.namespace.unwrap_or_default(), p.name.unwrap_or_default()),
                        state.into(),
                        live.to_string(),
                        p.workspace.unwrap_or_else(|| "-".into()),
                        if p.egress.is_some() { "proxy".into() } else { "-".into() },
                        output::age(p.created_at_ms, now),
                    ]
                })
                .collect();
            output::print_table(&["POD", "NAME", "STATE", "CONTAINERS", "WORKSPACE", "EGRESS", "AGE"], &rows)?;
        }
        PodCommand::Show { id } => output::print_raw(&client.get(&path(&id, ""))?.1)?,
        PodCommand::Receipt { id } => output::print_raw(&client.get(&path(&id, "/receipt"))?.1)?,
        PodCommand::Rm { id } => output::print_raw(&client.delete(&path(&id, ""))?.1)?,
        PodCommand::Journal { id } => {
            let (_, body) = client.get(&path(&id, "/journal"))?;
            for record in berth_client::decode::<Vec<serde_json::Value>>(&body)? {
                println!("{record}");
            }
        }
        PodCommand::Fork { id, workspace } => {
            client.post_json(&path(&id, "/fork"), &PodFork { workspace: workspace.clone() })?;
            println!("{workspace}");
        }
        PodCommand::Cluster { json } => {
            let (_, body) = client.get("/v1/cluster")?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let info: ClusterInfo = berth_client::decode(&body)?;
            println!("node {}", info.node);
            let rows: Vec<Vec<String>> = info.volumes.into_iter().map(|v| vec![v.name, v.node]).collect();
            output::print_table(&["VOLUME", "NODE"], &rows)?;
            let rows: Vec<Vec<String>> = info
                .pods
                .into_iter()
                .map(|p| {
                    let state = if p.pod.removed_at_ms.is_some() { "removed" } else { "live" };
                    vec![p.pod.id.chars().take(12).collect(), p.node, state.into(), p.pod.workspace.unwrap_or_default()]
                })
                .collect();
            output::print_table(&["POD", "NODE", "STATE", "WORKSPACE"], &rows)?;
        }
    }
    Ok(0)
}
