//! The verbs that talk to the daemon over its socket, as data.

use std::time::Duration;

use berth_runtime::spec::BindMount;
use clap::Args;

use super::{parse_count, parse_cpus, parse_duration, parse_env, parse_mount, parse_sandbox_path, parse_size};

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Sandbox name, also its host name. Default: berth-<id>.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Image to build the root file system from. Default: host.
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,
    /// Memory limit (no swap), such as 512M or 2G.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory: Option<u64>,
    /// CPU limit in cores, such as 0.5 or 1.5.
    #[arg(long, value_parser = parse_cpus, value_name = "CORES")]
    pub cpus: Option<u64>,
    /// Most processes and threads that may exist at once.
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub pids: Option<u64>,
    /// Remove the sandbox this long after it was created, such as 30m or 8h.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// Remove the sandbox after this long without an exec.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Option<Duration>,
    /// Pause the sandbox (processes frozen, memory kept) after this long without activity; any exec, shell,
    /// context run or file call wakes it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_pause: Option<Duration>,
    /// Hibernate the sandbox (processes and memory written to disk, RAM released) after this long without
    /// activity; any exec, shell, context run or file call wakes it. Needs CRIU 4.2 or newer on the host
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_hibernate: Option<Duration>,
    /// The TTL counts only time running: time paused is added back at each resume.
    #[arg(long)]
    pub ttl_active_only: bool,
    /// What the end of the TTL does: remove the sandbox, or put it to sleep (hibernate, or pause) without a
    /// TTL until one is set again (berth ttl); any activity wakes it.
    #[arg(long, value_name = "remove|hibernate|pause", default_value = "remove", value_parser = parse_ttl_action)]
    pub ttl_action: berth_api::TtlAction,
    /// Set an environment variable for every exec (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
    pub env: Vec<(String, String)>,
    /// Attach a label (repeatable).
    #[arg(long = "label", short = 'l', value_parser = parse_label, value_name = "KEY=VALUE")]
    pub labels: Vec<(String, String)>,
    /// Create it in this tenant, counted against its quota (see `berth tenant`).
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// Bring a host directory or file in (repeatable).
    #[arg(long = "mount", short = 'm', value_parser = parse_mount, value_name = "HOST:SANDBOX[:ro]")]
    pub mounts: Vec<BindMount>,
    /// Keep the workspace and the root file system's changes through stop, start, rebuild and a host
    /// reboot (until berth rm).
    #[arg(long)]
    pub persistent: bool,
    /// Disk quota for the sandbox's files, such as 2G (needs a btrfs pool: berth storage init).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub disk: Option<u64>,
    /// Mount a named volume (repeatable; berth volume create NAME first).
    #[arg(long = "volume", short = 'v', value_parser = parse_volume, value_name = "NAME:SANDBOX[:ro]")]
    pub volumes: Vec<berth_api::VolumeMount>,
    /// Start from a snapshot's files (its id or name) instead of the image's clean state.
    #[arg(long, value_name = "SNAPSHOT")]
    pub from: Option<String>,
    /// Copy files matching this glob under /workspace out at teardown, into the receipt (repeatable), such as
    /// '/workspace/dist/*.whl' or '/workspace/**/report.json'.
    #[arg(long = "output", value_name = "GLOB")]
    pub outputs: Vec<String>,
    /// Network: none (the default: only loopback), or learn (everything allowed and recorded; berth net
    /// suggest then prints the allowlist the run needed).
    #[arg(long, value_name = "none|learn")]
    pub net: Option<String>,
    /// Allow egress to these (comma-separated, repeatable): host names, *.example.com globs, IP literals,
    /// each with an optional :port.
    #[arg(long = "allow-net", value_name = "RULE[,RULE...]", value_delimiter = ',')]
    pub allow_net: Vec<String>,
    /// Deny egress to these (same forms); a deny rule wins over any allow rule.
    #[arg(long = "deny-net", value_name = "RULE[,RULE...]", value_delimiter = ',')]
    pub deny_net: Vec<String>,
    /// Allow all egress (still never to the host's loopback or private addresses unless a rule names them).
    #[arg(long)]
    pub dangerously_allow_all_net: bool,
    /// Give the sandbox a secret (repeatable): NAME is an environment variable with its value in every exec;
    /// NAME@HOST keeps the value out of the sandbox (the variable holds a placeholder that the proxy replaces
    /// in requests to HOST only).
    #[arg(long = "secret", value_name = "NAME[@HOST]")]
    pub secrets: Vec<String>,
    /// Limits on what it may use, such as cpu=10m,egress=1G,wall=2h (CPU time, egress bytes both ways,
    /// running time; each optional). At 80 % of one a budget_warning event; at 100 % it is removed, with the
    /// limit in its receipt. What sandboxes it makes with its session token use counts against it.
    #[arg(long, value_parser = super::parse_budget, value_name = "KIND=AMOUNT[,...]")]
    pub budget: Option<berth_api::Budget>,
    /// How the proxy resolves NAME (repeatable); naming an address this way counts as a rule naming it.
    #[arg(long = "add-host", value_name = "NAME:IP")]
    pub add_hosts: Vec<String>,
    /// The boundary to run behind: namespaces (the host kernel's) or gvisor (a kernel of the sandbox's own;
    /// needs runsc). Default: the daemon's --isolation. `berth info` says which this host offers.
    #[arg(long, value_name = "KIND")]
    pub isolation: Option<berth_api::Isolation>,
    /// Give it a virtual desktop: a display server and a window manager run inside as its `user` (its
    /// `DISPLAY` is :0); `berth desktop` looks at it and acts on it.
    #[arg(long)]
    pub desktop: bool,
    /// The desktop's screen size, WIDTHxHEIGHT (implies --desktop). Default: 1280x800.
    #[arg(long, value_name = "WxH", value_parser = super::desktop::parse_size)]
    pub resolution: Option<berth_api::ScreenSize>,
    /// Print the new sandbox as JSON instead of only its id.
    #[arg(long)]
    pub json: bool,
}

fn parse_volume(s: &str) -> Result<berth_api::VolumeMount, String> {
    let bad = || format!("{s:?} is not NAME:SANDBOX[:ro]");
    let mut parts = s.split(':');
    let (name, target) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
    let readonly = match parts.next() {
        None | Some("rw") => false,
        Some("ro") => true,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() || name.is_empty() {
        return Err(bad());
    }
    let target = berth_runtime::spec::sandbox_path(target).map_err(|e| e.to_string())?;
    Ok(berth_api::VolumeMount { name: name.to_string(), target, readonly })
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Print the API's JSON (as it is; without this it is pretty-printed).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// The sandboxes' ids or names.
    #[arg(value_parser = parse_id, value_name = "ID", required_unless_present = "all", conflicts_with = "all")]
    pub ids: Vec<String>,
    /// Remove every sandbox.
    #[arg(long)]
    pub all: bool,
    /// Print what removing each sandbox did, as a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Kill the command and everything it started after this long (exit code 124).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Most bytes of output to send back (the middle is dropped beyond it; the exec's log keeps more).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_output: Option<u64>,
    /// Most bytes of output the exec's log keeps (head and tail; a marker says how much of the middle was
    /// dropped). Default and most: the daemon's --max-log-bytes.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_log_bytes: Option<u64>,
    /// Set an environment variable (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox. Default: /workspace (a named --user's home).
    #[arg(long, short = 'w', value_parser = parse_sandbox_path, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Run as this user of the sandbox's /etc/passwd (a name), or as these ids (UID or UID:GID). Default: root.
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
    /// Start the command, print its exec id and return; read its output with berth logs.
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Send this command's standard input to the command (read to its end first).
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// Print the API's NDJSON frames as they arrive.
    #[arg(long)]
    pub json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// The exec's id.
    #[arg(value_parser = parse_id, value_name = "EXEC_ID")]
    pub exec_id: String,
    /// Print the log as one JSON string.
    #[arg(long)]
    pub json: bool,
    /// Keep printing output as the exec produces it, until it ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct KillArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// The exec's id.
    #[arg(value_parser = parse_id, value_name = "EXEC_ID")]
    pub exec_id: String,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PsArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn parse_id(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().any(|c| c.is_control()) {
        return Err(format!("{s:?} is not an id"));
    }
    Ok(s.to_string())
}

/// Parse a label `KEY=VALUE`; the daemon checks the rest.
pub(crate) fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.chars().any(|c| c.is_control() || c.is_whitespace()) => {
            Ok((k.to_string(), v.to_string()))
        }
        _ => Err(format!("{s:?} is not KEY=VALUE with a non-empty KEY")),
    }
}

#[derive(Debug, Args)]
pub struct JournalArgs {
    /// Sandbox id or name (an id also works after the sandbox is gone).
    pub id: String,
    /// Check the journal's hash chain instead of printing it; exits non-zero if it was tampered with.
    #[arg(long)]
    pub verify: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep printing events as they happen.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print each event as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CpArgs {
    /// What to copy: a host path, or ID:/path inside a sandbox (ID:path is relative to /workspace).
    #[arg(value_name = "SRC")]
    pub src: String,
    /// Where to copy it, likewise; exactly one of SRC and DST is in a sandbox. Into an existing directory,
    /// the copy keeps SRC's name.
    #[arg(value_name = "DST")]
    pub dst: String,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// The directory to watch inside the sandbox (a relative path is in /workspace).
    #[arg(value_name = "PATH")]
    pub path: String,
    /// Watch every directory under PATH too, and those made later.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    /// Watch as this user of the sandbox's /etc/passwd (a name), or as these ids (UID or UID:GID), who must
    /// be able to list PATH. Default: root.
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
    /// Print each event as the API's JSON line (`ready` first, `end` last).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MvArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// What to move inside the sandbox: a file, a symbolic link or a directory (a relative path is in
    /// /workspace).
    #[arg(value_name = "FROM")]
    pub from: String,
    /// Its new path (likewise); its parent directory must exist.
    #[arg(value_name = "TO")]
    pub to: String,
    /// Replace what is at TO (a file or link, or an empty directory).
    #[arg(long)]
    pub overwrite: bool,
    /// Move as this user of the sandbox's /etc/passwd (a name), or as these ids (UID or UID:GID). Default: root.
    #[arg(long, short = 'u', value_name = "USER")]
    pub user: Option<String>,
    /// Print the moved entry as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShellArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Run this command line (with /bin/sh -c) instead of a login shell (/bin/bash -l, or /bin/sh).
    #[arg(long, value_name = "CMD")]
    pub cmd: Option<String>,
    /// The command's TERM. Default: xterm-256color.
    #[arg(long, value_name = "TERM")]
    pub term: Option<String>,
}

fn parse_ttl_action(s: &str) -> Result<berth_api::TtlAction, String> {
    match s {
        "remove" => Ok(berth_api::TtlAction::Remove),
        "pause" => Ok(berth_api::TtlAction::Pause),
        "hibernate" => Ok(berth_api::TtlAction::Hibernate),
        other => Err(format!("{other:?} is not remove, hibernate or pause")),
    }
}
