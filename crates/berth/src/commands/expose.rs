//! `berth expose ID PORT`, `berth expose ls ID`, `berth expose rm ID PREVIEW`.

use std::path::Path;

use berth_api::{CreatePreview, Preview};
use berth_client::Client;

use super::output;
use crate::cli::{ExposeArgs, ExposeCommand};

fn path(id: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}/previews{rest}", berth_client::segment(id))
}

pub fn expose(socket: &Path, args: ExposeArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match args.command {
        Some(ExposeCommand::Ls { id, json }) => {
            let (_, body) = client.get(&path(&id, ""))?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = berth_client::decode::<Vec<Preview>>(&body)?
                .into_iter()
                .map(|p| {
                    let expires = p
                        .expires_at_ms
                        .map(|t| format!("in {}", output::age(now, t.max(now))))
                        .unwrap_or_else(|| "-".into());
                    let access = if p.public { "public" } else { "token" };
                    vec![p.id, p.port.to_string(), access.into(), expires, p.url]
                })
                .collect();
            output::print_table(&["PREVIEW", "PORT", "ACCESS", "EXPIRES", "URL"], &rows)?;
            Ok(0)
        }
        Some(ExposeCommand::Rm { id, preview }) => {
            client.delete(&path(&id, &format!("/{}", berth_client::segment(&preview))))?;
            println!("removed preview {preview}");
            Ok(0)
        }
        None => {
            let (Some(id), Some(port)) = (args.id, args.port) else {
                anyhow::bail!("usage: berth expose ID PORT [--public] [--ttl DURATION]");
            };
            let req = CreatePreview { port, public: args.public, ttl_seconds: args.ttl.map(|t| t.as_secs_f64()) };
            let (_, body) = client.post_json(&path(&id, ""), &req)?;
            if args.json {
                output::print_raw(&body)?;
            } else {
                println!("{}", berth_client::decode::<Preview>(&body)?.url);
            }
            Ok(0)
        }
    }
}
