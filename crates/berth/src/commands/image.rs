//! `berth image import|ls|rm`: the root file systems sandboxes are built from.

use std::io::{IsTerminal, Write};
use std::path::Path;

use berth_api::{Image, ImportFrame, ImportImage};
use berth_client::Client;

use super::output;
use crate::cli::ImageCommand;

pub fn image(socket: &Path, cmd: ImageCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match cmd {
        ImageCommand::Import { name, source, tenant, json } => import(&client, name, &source, tenant, json),
        ImageCommand::Ls { json } => {
            let (_, body) = client.get("/v1/images")?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = output::list::<Image>(&body, "images")?
                .into_iter()
                .map(|i| {
                    let age = if i.created_at_ms == 0 { "-".into() } else { output::age(i.created_at_ms, now) };
                    vec![i.name, i.kind, i.files.to_string(), i.bytes.to_string(), age, i.used_by.len().to_string()]
                })
                .collect();
            output::print_table(&["NAME", "KIND", "FILES", "BYTES", "AGE", "SANDBOXES"], &rows)?;
            Ok(0)
        }
        ImageCommand::Rm { names } => Ok(output::remove_each(&client, "/v1/images", &names)),
    }
}

fn import(client: &Client, name: String, source: &Path, tenant: Option<String>, json: bool) -> anyhow::Result<i32> {
    let source = std::fs::canonicalize(source)
        .map_err(|e| anyhow::anyhow!("cannot use the image source {}: {e}", source.display()))?;
    let req = ImportImage { name, source: source.to_string_lossy().into_owned(), tenant };
    let mut stream = client.post_json_stream("/v1/images", &req)?;
    let bar = std::io::stderr().is_terminal() && !json;
    while let Some(line) = stream.next_line()? {
        let frame: ImportFrame = berth_client::decode(&line)?;
        match frame {
            ImportFrame::Progress { layer, layers, bytes_done, bytes_total } => {
                if bar {
                    draw_bar(layer, layers, bytes_done, bytes_total);
                }
            }
            ImportFrame::Done { image } => {
                if bar {
                    eprint!("\r\x1b[K");
                }
                if json {
                    println!("{}", serde_json::to_string(&image)?);
                } else {
                    println!("{} ({} files, {} bytes, {} layers)", image.name, image.files, image.bytes, image.layers);
                    for r in &image.rejected {
                        eprintln!("berth: rejected {}: {}", r.path, r.reason);
                    }
                }
                return Ok(0);
            }
            ImportFrame::Error { error } => {
                if bar {
                    eprint!("\r\x1b[K");
                }
                eprintln!("berth: {}", error.message);
                return Ok(1);
            }
        }
    }
    anyhow::bail!("the daemon stopped answering before the import finished")
}

fn draw_bar(layer: u32, layers: u32, done: u64, total: u64) {
    const WIDTH: usize = 30;
    let frac = if total == 0 { 0.0 } else { (done as f64 / total as f64).min(1.0) };
    let filled = (frac * WIDTH as f64) as usize;
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r\x1b[Klayer {}/{} [{}{}] {:>3}% {} MiB",
        layer.max(1),
        layers.max(1),
        "#".repeat(filled),
        " ".repeat(WIDTH - filled),
        (frac * 100.0) as u32,
        done >> 20
    );
    let _ = err.flush();
}
