//! `berth logs`: everything an exec wrote, from its log on the daemon's side.

use std::io::{self, Read, Write};
use std::path::Path;

use berth_client::Client;

use crate::cli::LogsArgs;

pub fn logs(socket: &Path, args: LogsArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let path = format!(
        "/v1/sandboxes/{}/execs/{}/log{}",
        berth_client::segment(&args.id),
        berth_client::segment(&args.exec_id),
        if args.follow { "?follow=true" } else { "" }
    );
    let mut stream = client.get_stream(&path)?;
    if args.json {
        let mut log = Vec::new();
        stream.read_to_end(&mut log)?;
        println!("{}", serde_json::to_string(&String::from_utf8_lossy(&log))?);
        return Ok(0);
    }
    let mut stdout = io::stdout().lock();
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        stdout.write_all(&buf[..n])?;
        stdout.flush()?;
    }
    Ok(0)
}
