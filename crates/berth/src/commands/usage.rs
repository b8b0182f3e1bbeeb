//! `berth usage` and `berth budget`: what sandboxes have used, and the limits on it.

use std::path::Path;

use berth_api::Usage;
use berth_client::Client;

use super::output;
use crate::cli::{BudgetArgs, TtlArgs, UsageArgs};

pub fn usage(socket: &Path, args: UsageArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    if let (true, Some(id)) = (args.history, &args.id) {
        let (_, body) = client.get(&format!("/v1/sandboxes/{}/usage/history", berth_client::segment(id)))?;
        if args.json {
            output::print_raw(&body)?;
        } else {
            history(&berth_client::decode::<Vec<berth_api::UsagePoint>>(&body)?)?;
        }
        return Ok(0);
    }
    let path = match &args.id {
        Some(id) => format!("/v1/sandboxes/{}/usage", berth_client::segment(id)),
        None => "/v1/usage".to_string(),
    };
    let (_, body) = client.get(&path)?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let all: Vec<Usage> = match &args.id {
        Some(_) => vec![berth_client::decode(&body)?],
        None => berth_client::decode(&body)?,
    };
    table(&all)?;
    Ok(0)
}

/// A table of recent usage points: when, CPU used since the point before (in cores), memory and disk.
fn history(points: &[berth_api::UsagePoint]) -> anyhow::Result<()> {
    let mib = |b: u64| format!("{:.1}M", b as f64 / (1u64 << 20) as f64);
    let now = berthd_now_ms();
    let mut rows = Vec::with_capacity(points.len());
    for pair in points.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let seconds = (b.at_ms.saturating_sub(a.at_ms) as f64 / 1000.0).max(0.001);
        rows.push(vec![
            format!("{} ago", output::age(b.at_ms, now)),
            format!("{:.2}", (b.cpu_seconds - a.cpu_seconds).max(0.0) / seconds),
            mib(b.memory_bytes),
            mib(b.disk_bytes),
        ]);
    }
    output::print_table(&["TIME", "CPU (cores)", "MEMORY", "DISK"], &rows)
}

pub fn budget(socket: &Path, args: BudgetArgs) -> anyhow::Result<i32> {
    let mut change = berth_api::Budget::default();
    for b in args.budget {
        change.cpu_seconds = b.cpu_seconds.or(change.cpu_seconds);
        change.egress_bytes = b.egress_bytes.or(change.egress_bytes);
        change.wall_seconds = b.wall_seconds.or(change.wall_seconds);
    }
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json(&format!("/v1/sandboxes/{}/budget", berth_client::segment(&args.id)), &change)?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    table(&[berth_client::decode(&body)?])?;
    Ok(0)
}

pub fn ttl(socket: &Path, args: TtlArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let change = berth_api::SetTtl { ttl_seconds: args.ttl.0 };
    let (_, body) = client.post_json(&format!("/v1/sandboxes/{}/ttl", berth_client::segment(&args.id)), &change)?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let s: berth_api::Sandbox = berth_client::decode(&body)?;
    match s.expires_at_ms {
        Some(at) => println!("{} is removed in {:.0} s", s.name, at.saturating_sub(berthd_now_ms()) as f64 / 1000.0),
        None => println!("{} has no TTL", s.name),
    }
    Ok(0)
}

fn berthd_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn limit(used: f64, limit: Option<f64>, unit: &str) -> String {
    match limit {
        Some(l) => format!("{used:.1}/{l}{unit} ({:.0}%)", used / l * 100.0),
        None => format!("{used:.1}{unit}"),
    }
}

fn table(all: &[Usage]) -> anyhow::Result<()> {
    let mib = |b: u64| format!("{:.1}M", b as f64 / (1u64 << 20) as f64);
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|u| {
            vec![
                u.id.clone(),
                u.name.clone(),
                limit(u.charged.cpu_seconds, u.budget.cpu_seconds, "s"),
                mib(u.memory_bytes),
                mib(u.peak_memory_bytes),
                format!("{:.2}", u.memory_gib_seconds),
                mib(u.disk_bytes),
                format!("{}/{}", u.egress_bytes_out, u.egress_bytes_in),
                u.execs.to_string(),
                limit(u.running_seconds, u.budget.wall_seconds, "s"),
            ]
        })
        .collect();
    output::print_table(
        &["ID", "NAME", "CPU", "MEM", "PEAK", "GIB-S", "DISK", "EGRESS OUT/IN", "EXECS", "RUNNING"],
        &rows,
    )
}
