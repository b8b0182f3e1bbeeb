//! `berth net allow|deny|log|suggest`: a sandbox's egress.

use std::path::Path;

use berth_api::{EgressRecord, NetChange, NetChanged, NetSuggestion};
use berth_client::Client;

use super::output;
use crate::cli::NetCommand;

fn path(id: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}/net{rest}", berth_client::segment(id))
}

pub fn net(socket: &Path, cmd: NetCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match cmd {
        NetCommand::Allow { id, rules, json } => change(&client, &id, NetChange { allow: rules, deny: vec![] }, json),
        NetCommand::Deny { id, rules, json } => change(&client, &id, NetChange { allow: vec![], deny: rules }, json),
        NetCommand::Log { id, json } => {
            let (_, body) = client.get(&path(&id, "/log"))?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = output::list::<EgressRecord>(&body, "records")?
                .into_iter()
                .map(|r| {
                    vec![
                        output::age(r.time_ms, output::now_ms()),
                        format!("{}:{}", r.host, r.port),
                        r.method,
                        r.verdict,
                        r.rule.unwrap_or_else(|| "-".into()),
                        format!("{}/{}", r.bytes_up, r.bytes_down),
                        r.reason,
                    ]
                })
                .collect();
            output::print_table(&["AGE", "DESTINATION", "METHOD", "VERDICT", "RULE", "UP/DOWN", "REASON"], &rows)?;
            Ok(0)
        }
        NetCommand::Suggest { id, json } => {
            let (_, body) = client.get(&path(&id, "/suggest"))?;
            if json {
                output::print_raw(&body)?;
            } else {
                let s: NetSuggestion = berth_client::decode(&body)?;
                println!("{}", s.allow.join(","));
            }
            Ok(0)
        }
    }
}

fn change(client: &Client, id: &str, change: NetChange, json: bool) -> anyhow::Result<i32> {
    let (_, body) = client.post_json(&path(id, ""), &change)?;
    if json {
        output::print_raw(&body)?;
    } else {
        let c: NetChanged = berth_client::decode(&body)?;
        println!(
            "allow: {}; deny: {}; closed {} connection(s)",
            if c.network.allow.is_empty() { "-".into() } else { c.network.allow.join(",") },
            if c.network.deny.is_empty() { "-".into() } else { c.network.deny.join(",") },
            c.closed
        );
    }
    Ok(0)
}

/// `berth secret set|ls|rm`.
pub fn secret(socket: &Path, cmd: crate::cli::SecretCommand) -> anyhow::Result<i32> {
    use crate::cli::SecretCommand;
    let client = Client::connect(socket)?;
    match cmd {
        SecretCommand::Set { name, tenant } => {
            let mut value = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut value)?;
            if value.last() == Some(&b'\n') {
                value.pop();
                if value.last() == Some(&b'\r') {
                    value.pop();
                }
            }
            if value.is_empty() {
                anyhow::bail!("no value on stdin: pipe it in, such as: printf %s \"$TOKEN\" | berth secret set {name}");
            }
            let path = format!("/v1/secrets/{}{}", berth_client::segment(&name), tenant_query(tenant.as_deref()));
            client.put_bytes(&path, &value)?;
            println!("{name}");
        }
        SecretCommand::Ls { tenant, json } => {
            let (_, body) = client.get(&format!("/v1/secrets{}", tenant_query(tenant.as_deref())))?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = output::list::<berth_api::SecretInfo>(&body, "secrets")?
                .into_iter()
                .map(|s| vec![s.name, s.bytes.to_string(), output::age(s.updated_at_ms, now)])
                .collect();
            output::print_table(&["NAME", "BYTES", "UPDATED"], &rows)?;
        }
        SecretCommand::Rm { names, tenant: None } => {
            return Ok(output::remove_each(&client, "/v1/secrets", &names));
        }
        SecretCommand::Rm { names, tenant: Some(t) } => {
            let mut failed = 0;
            for name in &names {
                let path = format!("/v1/secrets/{}{}", berth_client::segment(name), tenant_query(Some(&t)));
                match client.delete(&path) {
                    Ok(_) => println!("removed {name}"),
                    Err(e) => {
                        eprintln!("berth: {name}: {e}");
                        failed = 1;
                    }
                }
            }
            return Ok(failed);
        }
    }
    Ok(0)
}

/// `?tenant=NAME`, or nothing.
fn tenant_query(tenant: Option<&str>) -> String {
    tenant.map(|t| format!("?tenant={}", berth_client::segment(t))).unwrap_or_default()
}
