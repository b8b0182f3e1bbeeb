//! `berth stop|start|rebuild|snapshot|restore|reset|fork|diff|export|volume`: durable projects through the
//! daemon.

use std::path::Path;

use berth_api::{
    CreateSnapshot, CreateVolume, Diff, ExportRequest, Exported, ForkRequest, Forked, ResetRequest, RestoreRequest,
    Sandbox, Snapshot, Volume,
};
use berth_client::Client;

use super::output;
use crate::cli::VolumeCommand;
use crate::cli::{DiffArgs, ExportArgs, ForkArgs, IdArgs, ResetArgs, RestoreArgs, SnapshotArgs, SnapshotCommand};

fn sandbox_path(id: &str, verb: &str) -> String {
    format!("/v1/sandboxes/{}/{verb}", berth_client::segment(id))
}

/// Print a sandbox the way stop, start and friends report one: its id and state, or the API's JSON.
fn report(body: &[u8], json: bool) -> anyhow::Result<i32> {
    if json {
        output::print_raw(body)?;
    } else {
        let s: Sandbox = berth_client::decode(body)?;
        println!("{} {}", s.id, serde_json::to_value(s.state)?.as_str().unwrap_or_default());
    }
    Ok(0)
}

/// `berth stop|start|rebuild ID`
pub fn lifecycle(socket: &Path, verb: &str, args: IdArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json(&sandbox_path(&args.id, verb), &serde_json::json!({}))?;
    report(&body, args.json)
}

pub fn snapshot(socket: &Path, args: SnapshotArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match args.command {
        Some(SnapshotCommand::Ls { json }) => {
            let (_, body) = client.get("/v1/snapshots")?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = output::list::<Snapshot>(&body, "snapshots")?
                .into_iter()
                .map(|s| {
                    vec![
                        s.id,
                        s.name.unwrap_or_else(|| "-".into()),
                        s.sandbox_id,
                        s.origin,
                        output::age(s.created_at_ms, now),
                    ]
                })
                .collect();
            output::print_table(&["ID", "NAME", "SANDBOX", "ORIGIN", "AGE"], &rows)?;
            Ok(0)
        }
        Some(SnapshotCommand::Rm { snapshots }) => Ok(output::remove_each(&client, "/v1/snapshots", &snapshots)),
        None => {
            let id = args.id.unwrap_or_default();
            let (_, body) = client.post_json(
                &sandbox_path(&id, "snapshots"),
                &CreateSnapshot { name: args.name, with_processes: args.with_processes },
            )?;
            if args.json {
                output::print_raw(&body)?;
            } else {
                println!("{}", berth_client::decode::<Snapshot>(&body)?.id);
            }
            Ok(0)
        }
    }
}

pub fn restore(socket: &Path, args: RestoreArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) =
        client.post_json(&sandbox_path(&args.id, "restore"), &RestoreRequest { snapshot: args.snapshot })?;
    report(&body, args.json)
}

pub fn reset(socket: &Path, args: ResetArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let (_, body) =
        client.post_json(&sandbox_path(&args.id, "reset"), &ResetRequest { keep_workspace: args.keep_workspace })?;
    report(&body, args.json)
}

pub fn fork(socket: &Path, args: ForkArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let count = u32::try_from(args.count).unwrap_or(u32::MAX);
    let (_, body) = client.post_json(
        &sandbox_path(&args.id, "fork"),
        &ForkRequest { count: Some(count), with_processes: args.with_processes },
    )?;
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let forked: Forked = berth_client::decode(&body)?;
    for s in &forked.sandboxes {
        println!("{}", s.id);
    }
    if forked.sandboxes.len() < count as usize {
        eprintln!("berth: only {} of {count} forks could be made", forked.sandboxes.len());
        for e in &forked.errors {
            eprintln!("berth: {e}");
        }
        return Ok(1);
    }
    Ok(0)
}

pub fn diff(socket: &Path, args: DiffArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let mut query = Vec::new();
    if let Some(a) = &args.against {
        query.push(format!("against={}", berth_client::segment(a)));
    }
    if args.patch {
        query.push("format=patch".to_string());
    }
    let path = format!("{}?{}", sandbox_path(&args.id, "diff"), query.join("&"));
    let (_, body) = client.get(&path)?;
    if args.patch {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(&body)?;
        out.flush()?;
        return Ok(0);
    }
    if args.json {
        output::print_raw(&body)?;
        return Ok(0);
    }
    let diff: Diff = berth_client::decode(&body)?;
    for c in &diff.changes {
        let mark = match c.kind {
            berth_api::ChangeKind::Added => "A",
            berth_api::ChangeKind::Modified => "M",
            berth_api::ChangeKind::Deleted => "D",
        };
        let mut detail = String::new();
        if let (Some(o), Some(n)) = (&c.old, &c.new) {
            if o.file_type != n.file_type {
                detail = format!("  ({} -> {})", o.file_type, n.file_type);
            } else if o.mode != n.mode {
                detail = format!("  (mode {:o} -> {:o})", o.mode, n.mode);
            } else if o.symlink_target != n.symlink_target {
                detail = format!("  (-> {})", n.symlink_target.clone().unwrap_or_default());
            }
        }
        println!("{mark} {}{detail}", c.path);
    }
    Ok(0)
}

pub fn export(socket: &Path, args: ExportArgs) -> anyhow::Result<i32> {
    let repo = std::fs::canonicalize(&args.repo)
        .map_err(|e| anyhow::anyhow!("cannot use the repository {}: {e}", args.repo.display()))?;
    let (author_name, author_email) = match &args.author {
        Some(a) => {
            let (name, rest) = a
                .split_once('<')
                .ok_or_else(|| anyhow::anyhow!("--author must look like 'Name <email>', not {a:?}"))?;
            (Some(name.trim().to_string()), Some(rest.trim_end().trim_end_matches('>').trim().to_string()))
        }
        None => (None, None),
    };
    let req = ExportRequest {
        repo: repo.to_string_lossy().into_owned(),
        branch: args.branch,
        base: args.base,
        against: args.against,
        message: args.message,
        author_name,
        author_email,
    };
    let client = Client::connect(socket)?;
    let (_, body) = client.post_json(&sandbox_path(&args.id, "export"), &req)?;
    if args.json {
        output::print_raw(&body)?;
    } else {
        let e: Exported = berth_client::decode(&body)?;
        println!("{} {} ({} files)", e.branch, e.commit, e.files);
    }
    Ok(0)
}

pub fn volume(socket: &Path, cmd: VolumeCommand) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    match cmd {
        VolumeCommand::Create { name } => {
            let (_, body) = client.post_json("/v1/volumes", &CreateVolume { name })?;
            println!("{}", berth_client::decode::<Volume>(&body)?.name);
        }
        VolumeCommand::Ls { json } => {
            let (_, body) = client.get("/v1/volumes")?;
            if json {
                output::print_raw(&body)?;
                return Ok(0);
            }
            let now = output::now_ms();
            let rows: Vec<Vec<String>> = output::list::<Volume>(&body, "volumes")?
                .into_iter()
                .map(|v| {
                    let used = if v.used_by.is_empty() { "-".into() } else { v.used_by.join(",") };
                    vec![v.name, output::age(v.created_at_ms, now), used]
                })
                .collect();
            output::print_table(&["NAME", "AGE", "USED BY"], &rows)?;
        }
        VolumeCommand::Rm { names } => {
            return Ok(output::remove_each(&client, "/v1/volumes", &names));
        }
    }
    Ok(0)
}
