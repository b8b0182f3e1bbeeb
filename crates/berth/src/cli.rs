//! The command line, as data. Each verb's behaviour lives in `commands/`.

use std::path::PathBuf;
use std::time::Duration;

use berth_bench::{BenchArgs, BenchClientArgs};
use berth_runtime::spec::{self, BindMount};
use clap::{Args, Parser, Subcommand};

mod api;
mod contexts;
mod desktop;
mod previews;
mod projects;
mod tenants;
mod usage;
pub use api::*;
pub use contexts::*;
pub use desktop::*;
pub use previews::*;
pub use projects::*;
pub use tenants::*;
pub use usage::*;

#[derive(Debug, Parser)]
#[command(name = "berth", version, about = "Sandboxes where AI coding agents live and do their work")]
pub struct Cli {
    /// berth's data directory.
    #[arg(long, global = true, env = "BERTH_ROOT", default_value = "/var/lib/berth", value_name = "DIR")]
    pub root: PathBuf,

    /// The berth daemon's socket.
    #[arg(long, global = true, env = "BERTH_SOCKET", default_value = berth_client::DEFAULT_SOCKET, value_name = "PATH")]
    pub socket: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in a new, ephemeral sandbox and remove the sandbox when it ends.
    Run(RunArgs),
    /// Report what this process can see and do, as JSON (run it inside a sandbox to inspect one).
    Probe(ProbeArgs),
    /// Show what berth would use on this host: cgroup version, kernel features.
    Info(InfoArgs),
    /// Time `berth run -- true` against bubblewrap and unshare doing the same, in one run.
    Bench(BenchArgs),
    /// Serve the HTTP API on the unix socket (`--socket`) and own every sandbox's lifecycle.
    Daemon(DaemonArgs),
    /// Mint API tokens for the daemon's TCP listener.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Tenants: teams sharing the daemon, each with its quota and tokens that reach its resources only.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// The supervisor of one daemon-managed sandbox (started by the daemon only).
    #[command(hide = true)]
    Shim,
    /// Create a sandbox in the daemon and print its id.
    Create(Box<CreateArgs>),
    /// List the daemon's sandboxes.
    Ls(LsArgs),
    /// Show one sandbox as JSON.
    Inspect(InspectArgs),
    /// What sandboxes have used (CPU, memory, disk, egress) and their budgets; one sandbox, or all running.
    Usage(UsageArgs),
    /// Change a running sandbox's budget, such as berth budget ID cpu=10m,egress=1G,wall=2h.
    Budget(BudgetArgs),
    /// Give a sandbox a new TTL counted from now (berth ttl ID 2h), or none (berth ttl ID none).
    Ttl(TtlArgs),
    /// Remove sandboxes and say what removing each took.
    Rm(RmArgs),
    /// Run a command in a sandbox and stream its output; exits with the command's exit code.
    Exec(ExecArgs),
    /// Print what an exec's log kept of its output (all of it within the log's bound).
    Logs(LogsArgs),
    /// Kill an exec and everything it started.
    Kill(KillArgs),
    /// List a sandbox's execs.
    Ps(PsArgs),
    /// Print a sandbox's journal of actions, or check its hash chain (--verify).
    Journal(JournalArgs),
    /// Print lifecycle events (created, exec started/finished, timed out, killed, reaped, removed).
    Events(EventsArgs),
    /// Copy a file or a directory tree between the host and a sandbox: berth cp SRC DST, either as ID:/path.
    Cp(CpArgs),
    /// Move or rename a file or a directory tree inside a sandbox: berth mv ID FROM TO.
    Mv(MvArgs),
    /// Print what changes under a directory of a sandbox as it happens, a line a change, until interrupted:
    /// berth watch ID PATH [--recursive].
    Watch(WatchArgs),
    /// Open an interactive shell (or run --cmd) on a terminal in a sandbox; exits with its exit code.
    Shell(ShellArgs),
    /// Live code contexts: interpreters whose variables and imports survive from one run to the next.
    #[command(subcommand)]
    Context(ContextCommand),
    /// A sandbox's virtual desktop (berth create --desktop): screenshots, clicks, typing, keys, windows.
    #[command(subcommand)]
    Desktop(DesktopCommand),
    /// Print a URL (through the daemon's --listen) that reaches what a sandbox serves on its own
    /// 127.0.0.1:PORT, with a token for that port only unless --public; `expose ls|rm` list and remove them.
    Expose(ExposeArgs),
    /// Stop a sandbox's processes and keep its files (berth start brings it back).
    Stop(IdArgs),
    /// Freeze every process of a sandbox, keeping their memory (no CPU used); berth resume, or any exec,
    /// shell, context run or file call, continues them where they were.
    Pause(IdArgs),
    /// Continue a paused sandbox's processes.
    Resume(IdArgs),
    /// Write a sandbox's processes and their memory to disk and release its RAM (needs CRIU 4.2 or newer);
    /// berth wake, or any exec, shell, context run or file call, brings them back where they were.
    Hibernate(IdArgs),
    /// Bring a hibernated sandbox's processes back.
    Wake(IdArgs),
    /// Start a stopped sandbox again on its kept files.
    Start(IdArgs),
    /// Replace a sandbox's runtime with a fresh one from its image, keeping its files.
    Rebuild(IdArgs),
    /// Snapshot a sandbox's files (berth snapshot ID), or list (ls) and remove (rm) snapshots.
    Snapshot(SnapshotArgs),
    /// Roll a sandbox's files back to a snapshot.
    Restore(RestoreArgs),
    /// Return a sandbox to its image's clean state.
    Reset(ResetArgs),
    /// Copy a sandbox's files, copy-on-write, into new sandboxes; prints their ids.
    Fork(ForkArgs),
    /// List what changed in a sandbox's files, or print it as a patch.
    Diff(DiffArgs),
    /// Commit a sandbox's workspace changes to a new branch of a host git repository.
    Export(ExportArgs),
    /// Named volumes that sandboxes mount.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Pods a Kubernetes node runs with berth (berth-oci under containerd), as its daemon keeps them.
    #[command(subcommand)]
    Pod(PodCommand),
    /// Show a removed sandbox's receipt: outputs with digests, what was revoked and flushed, the leak check.
    Receipt(IdArgs),
    /// A sandbox's egress: allow or deny rules live, its egress log, a suggested allowlist.
    #[command(subcommand)]
    Net(NetCommand),
    /// Secrets: set (value on stdin), list, remove. Sandboxes get them with create --secret.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Images: import, list, remove.
    #[command(subcommand)]
    Image(ImageCommand),
    /// The storage pool where sandboxes' files, snapshots and volumes live.
    #[command(subcommand)]
    Storage(StorageCommand),
    /// Serve MCP on stdin and stdout: tools for models (sandboxes, exec, code, files, snapshots, forks, diffs,
    /// egress) that call the daemon at --socket, with BERTH_TOKEN as the bearer token when it is set.
    Mcp,
    /// PID 1 inside a sandbox (started by berth only).
    #[command(hide = true)]
    Init,
    /// The in-sandbox side of `berth bench --egress` (started by it only).
    #[command(hide = true)]
    BenchClient(BenchClientArgs),
}

/// `berth info`: always JSON; `--json` asks for it on one line, as every reading command takes it.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Print the JSON object on one line (it is printed indented otherwise).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Memory limit (no swap), such as 512M or 2G. Default: half of the host's memory.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory: Option<u64>,
    /// Most processes and threads that may exist at once.
    #[arg(long, value_parser = parse_count, default_value = "4096", value_name = "N")]
    pub pids: u64,
    /// CPU limit in cores, such as 0.5 or 1.5.
    #[arg(long, value_parser = parse_cpus, value_name = "CORES")]
    pub cpus: Option<u64>,
    /// Kill the command and everything it started after this long (exit code 124), such as 30s or 5m.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
    /// Set an environment variable (repeatable).
    #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox (created if missing).
    #[arg(long, short = 'w', value_parser = parse_sandbox_path, default_value = "/workspace", value_name = "DIR")]
    pub workdir: String,
    /// Bring a host directory or file in (repeatable). Files root writes land owned by the host path's owner.
    #[arg(long = "mount", short = 'm', value_parser = parse_mount, value_name = "HOST:SANDBOX[:ro]")]
    pub mounts: Vec<BindMount>,
    /// Image to build the root file system from.
    #[arg(long, default_value = "host", value_name = "NAME")]
    pub image: String,
    /// Keep the root file system's changes and /workspace in this host directory (made if missing), and
    /// pick them up again on the next run with the same directory. Default: nothing outlives the run.
    #[arg(long, value_name = "DIR")]
    pub state: Option<std::path::PathBuf>,
    /// Sandbox name, also its host name. Default: berth-<number>.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print one JSON object describing the run on stdout when it ends.
    #[arg(long)]
    pub json: bool,
    /// The boundary to run behind: namespaces (the host kernel's, the default) or gvisor (a kernel of the
    /// sandbox's own, in user space; needs runsc). `berth info` says which this host offers.
    #[arg(long, default_value = "namespaces", value_name = "KIND")]
    pub isolation: berth_runtime::spec::Isolation,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A DNS name for preview hosts: labels of letters, digits and `-`, dot-separated.
fn parse_domain(s: &str) -> Result<String, String> {
    let s = s.trim_end_matches('.').to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.len() > 200 || !s.split('.').all(label_ok) {
        return Err(format!("{s:?} is not a domain name (such as preview.example.com)"));
    }
    Ok(s)
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("tcp").multiple(true).args(["listen", "e2b_listen"])))]
pub struct DaemonArgs {
    /// Also serve the API over TCP at ADDR:PORT; every request there needs a bearer token. Preview URLs
    /// (berth expose) go through it.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Also serve an E2B-compatible API at ADDR:PORT, its control plane and all sandbox traffic on that one
    /// port: E2B_API_URL=E2B_SANDBOX_URL=http://ADDR:PORT and E2B_API_KEY=<a berth token> (docs/e2b.md).
    #[arg(long, value_name = "ADDR:PORT")]
    pub e2b_listen: Option<std::net::SocketAddr>,
    /// Serve previews host-based too: port P of sandbox ID is the host P-ID.DOMAIN on the --listen port
    /// (point a wildcard DNS name at the listener); with --e2b-listen, E2B's host forms under DOMAIN.
    #[arg(long, value_name = "DOMAIN", requires = "tcp", value_parser = parse_domain)]
    pub domain: Option<String>,
    /// Most output one exec or shell keeps in its log: head and tail, the middle dropped with a marker.
    #[arg(long, value_parser = parse_size, value_name = "SIZE", default_value = "16M")]
    pub max_log_bytes: u64,
    /// Most finished execs (with their logs) kept per sandbox; the oldest go first.
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "128")]
    pub max_exec_records: usize,
    /// Most bytes of one sandbox's journal (egress records may take half).
    #[arg(long, value_parser = parse_size, value_name = "SIZE", default_value = "64M")]
    pub max_journal_bytes: u64,
    /// Most execs and shells one sandbox may have running at once.
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "64")]
    pub max_running_execs: usize,
    /// Most connections one sandbox may have open through its egress proxy.
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "128")]
    pub max_proxy_connections: usize,
    /// Most proxy connections of one sandbox still sending their request head.
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "32")]
    pub max_proxy_pending: usize,
    /// Most host-name lookups one sandbox may have in progress (at most 64, the daemon's whole).
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "8")]
    pub max_lookups: usize,
    /// Memory limit of a sandbox created without --memory (no swap), or `none`.
    #[arg(long, value_parser = parse_optional_size, value_name = "SIZE|none", default_value = "4G")]
    pub default_memory: Limit,
    /// Process limit of a sandbox created without --pids, or `none`.
    #[arg(long, value_parser = parse_optional_count, value_name = "N|none", default_value = "4096")]
    pub default_pids: Limit,
    /// Removed sandboxes whose journal, receipt and outputs are kept (the oldest go first).
    #[arg(long, value_parser = parse_count_usize, value_name = "N", default_value = "1000")]
    pub keep_removed: usize,
    /// Sandboxes kept built ahead (host image, default limits, at most 64) for creates that ask for nothing
    /// else; 0: none. They are torn down when the daemon stops.
    #[arg(long, value_parser = parse_warm, value_name = "N", default_value = "0")]
    pub warm: usize,
    /// A PostgreSQL database the cluster's nodes share (a libpq connection string or postgresql:// URL):
    /// volume names are held cluster-wide, by the node whose disk has them, and every node's pods are
    /// written there. Without it the daemon keeps to its own node.
    #[arg(long, env = "BERTH_CLUSTER_DB", value_name = "URL", hide_env_values = true)]
    pub cluster_db: Option<String>,
    /// Let pods' egress policies (berth.dev/egress) reach special addresses (loopback, private networks,
    /// link-local, cloud metadata) that an exact rule or berth.dev/egress-hosts names, such as in-cluster
    /// services. Without it such a pod is refused: the pod's author is not the node's operator, and the proxy
    /// connects from this daemon's network.
    #[arg(long)]
    pub pod_egress_special: bool,
    /// This node's name in the cluster's database (default: the host name; on Kubernetes, the node's name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME", requires = "cluster_db")]
    pub node: Option<String>,
    /// The boundary of a sandbox created without --isolation: namespaces or gvisor (needs runsc; the daemon
    /// refuses to start without it). The warm pool holds namespaces sandboxes only.
    #[arg(long, default_value = "namespaces", value_name = "KIND")]
    pub isolation: berth_api::Isolation,
    /// How sandboxes' files are bounded. auto: make a btrfs storage pool (a sparse file under the data root)
    /// when there is none and the host can, else warn that they are not bounded; pool: the same, but refuse
    /// to start without one; none: use the data root as it is.
    #[arg(long, default_value = "auto", value_name = "auto|pool|none")]
    pub storage: berth_engine::StorageChoice,
    /// The size of a pool the daemon makes. Default: half the free space of the data root's file system, at
    /// most 512G.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub pool_size: Option<u64>,
    /// The disk quota of a sandbox created without --disk, when the pool enforces quotas.
    #[arg(long, default_value = "10G", value_parser = parse_size, value_name = "SIZE")]
    pub default_disk: u64,
    /// Connections each listener (the socket, the TCP listener) serves at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value = "512", value_parser = parse_count_usize)]
    pub max_connections: usize,
    /// Largest request head (request line and headers), on every listener; a larger one is answered 431.
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_size)]
    pub max_header_size: u64,
    /// Time a request head has to arrive (also how long a kept-alive connection may sit idle); a client that
    /// is slower is answered 408 and its connection closed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Largest JSON request body; a larger one is answered 413 (file and tar uploads have a bound of their own).
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = parse_size)]
    pub max_body_size: u64,
}

impl DaemonArgs {
    pub fn bounds(&self) -> berth_engine::Bounds {
        berth_engine::Bounds {
            max_log_bytes: self.max_log_bytes,
            max_exec_records: self.max_exec_records,
            max_journal_bytes: self.max_journal_bytes,
            max_running_execs: self.max_running_execs,
            max_proxy_connections: self.max_proxy_connections,
            max_proxy_pending: self.max_proxy_pending,
            max_lookups: self.max_lookups,
            default_memory_bytes: self.default_memory.0,
            default_pids: self.default_pids.0,
            keep_removed: self.keep_removed,
            warm: self.warm,
            isolation: self.isolation,
            pod_egress_special: self.pod_egress_special,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token (printed once; only its digest is kept).
    Create {
        /// A name to recognise the token by.
        #[arg(long, default_value = "")]
        name: String,
        /// Reach this tenant's sandboxes, snapshots, volumes, secrets and images only, within its quota.
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
        /// Reading requests only: nothing the token sends can change anything.
        #[arg(long)]
        read_only: bool,
        /// Reach only sandboxes with this label (repeatable); those it creates get it.
        #[arg(long = "selector", value_parser = parse_label, value_name = "KEY=VALUE")]
        selector: Vec<(String, String)>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// List tokens (ids, names, creation times; never the secrets).
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by id: requests carrying it are refused from now on.
    Rm {
        /// The token's id (from `berth token ls`).
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Try a TCP connection to HOST:PORT and report whether it succeeded (repeatable).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Vec<String>,
    /// Try to read a path and report whether it succeeded (repeatable).
    #[arg(long, value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Try to create and write a file at a path and report whether it succeeded (repeatable).
    #[arg(long, value_name = "PATH")]
    pub write: Vec<PathBuf>,
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    spec::parse_size(s).map_err(|e| e.to_string())
}
/// A limit, or `none` for no limit.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<u64>);

fn parse_optional_size(s: &str) -> Result<Limit, String> {
    if s == "none" { Ok(Limit(None)) } else { parse_size(s).map(|n| Limit(Some(n))) }
}
fn parse_optional_count(s: &str) -> Result<Limit, String> {
    if s == "none" { Ok(Limit(None)) } else { parse_count(s).map(|n| Limit(Some(n))) }
}
fn parse_count(s: &str) -> Result<u64, String> {
    spec::parse_count(s).map_err(|e| e.to_string())
}
fn parse_count_usize(s: &str) -> Result<usize, String> {
    spec::parse_count(s).map(|n| n as usize).map_err(|e| e.to_string())
}
fn parse_warm(s: &str) -> Result<usize, String> {
    s.parse::<usize>().map_err(|_| format!("{s:?} is not a whole number (0 for no pool)"))
}
fn parse_cpus(s: &str) -> Result<u64, String> {
    spec::parse_cpus(s).map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<Duration, String> {
    spec::parse_duration(s).map_err(|e| e.to_string())
}
fn parse_env(s: &str) -> Result<(String, String), String> {
    spec::parse_env(s).map_err(|e| e.to_string())
}
fn parse_mount(s: &str) -> Result<BindMount, String> {
    spec::parse_mount(s).map_err(|e| e.to_string())
}
fn parse_sandbox_path(s: &str) -> Result<String, String> {
    spec::sandbox_path(s).map_err(|e| e.to_string())
}
