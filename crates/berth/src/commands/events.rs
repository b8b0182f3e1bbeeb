//! `berth events [-f]`: the daemon's lifecycle events, recent ones or as they happen.

use std::io::Write;
use std::path::Path;

use berth_api::LifecycleEvent;
use berth_client::Client;

use crate::cli::EventsArgs;

pub fn events(socket: &Path, args: EventsArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let mut out = std::io::stdout().lock();
    if !args.follow {
        let (_, body) = client.get("/v1/events")?;
        let list: Vec<LifecycleEvent> = serde_json::from_slice(&body)?;
        for ev in &list {
            print(&mut out, ev, args.json)?;
        }
        return Ok(0);
    }
    let mut stream = client.get_stream("/v1/events?follow=true")?;
    // Server-sent events: `data: <json>` lines; everything else (event names, keep-alives) is framing.
    while let Some(line) = stream.next_line()? {
        let Some(data) = line.strip_prefix(b"data:") else { continue };
        if let Ok(ev) = serde_json::from_slice::<LifecycleEvent>(data.trim_ascii()) {
            print(&mut out, &ev, args.json)?;
        }
    }
    Ok(0)
}

fn print(out: &mut impl Write, ev: &LifecycleEvent, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(ev)?)?;
    } else {
        let kind = serde_json::to_value(ev.kind)?;
        let exec = ev.exec_id.as_deref().unwrap_or("-");
        let exit = ev.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "{:>6} {} {} {:<14} {:<6} {}",
            ev.seq,
            ev.time_ms,
            ev.sandbox,
            kind.as_str().unwrap_or(""),
            exec,
            exit
        )?;
    }
    out.flush()?;
    Ok(())
}
