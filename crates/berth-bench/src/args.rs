//! `berth bench`'s command line, as data: the options of `berth bench` and of the hidden `berth bench-client`.
//!
//! The `berth` binary puts them under its own subcommands (and adds its global `--root` and `--socket`), so
//! the doc comments here are the help those commands print.

use std::time::Duration;

use berth_runtime::spec;
use clap::Args;
use clap::builder::ArgPredicate;

/// `berth bench`'s options: which benchmark (none of the `Instead:` flags: `berth run -- true` against its
/// peers), how many rounds, and each benchmark's own settings.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Timed runs of each case (default 200; 10 with --storage, whose rounds copy whole workspaces).
    #[arg(long, value_parser = parse_count_usize, default_value = "200",
        default_value_if("storage", ArgPredicate::IsPresent, "10"))]
    pub runs: usize,
    /// Untimed runs of each case first (default 10; 1 with --storage).
    #[arg(long, default_value = "10", default_value_if("storage", ArgPredicate::IsPresent, "1"))]
    pub warmup: usize,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Instead: time `exec true` on a running sandbox through the daemon at --socket (raw API and CLI)
    /// against `nsenter` into the same sandbox.
    #[arg(long)]
    pub exec: bool,
    /// With --exec or --hibernate: the isolation of the sandbox it times. Behind gvisor the peer of --exec is
    /// `runsc exec` of the same sandbox (entered in runsc's mount namespace, where its state is) instead of
    /// nsenter, and that of --hibernate is `runsc checkpoint` and `runsc restore` of the same program in a
    /// bundle of the host's /usr, instead of CRIU.
    #[arg(long, default_value = "namespaces", value_name = "KIND")]
    pub isolation: berth_api::Isolation,
    /// With --exec: output size for the throughput case (head -c SIZE /dev/zero; default 2G). With --egress:
    /// bytes pushed through each throughput round (default 1G).
    #[arg(long, default_value = "2G", value_parser = parse_size, value_name = "SIZE",
        default_value_if("egress", ArgPredicate::IsPresent, "1G"))]
    pub bytes: u64,
    /// With --exec: idle sandboxes to measure.
    #[arg(long, default_value = "100", value_parser = parse_count_usize)]
    pub idle: usize,
    /// With --exec: the daemon's pid, if it cannot be found by its socket.
    #[arg(long, value_name = "PID")]
    pub daemon_pid: Option<i32>,
    /// Instead: time snapshot, fork, restore through the daemon at --socket (whose data root is --root)
    /// against `cp -a` of the same workspace, with and without reflinks, in the same storage pool.
    #[arg(long, conflicts_with = "exec")]
    pub storage: bool,
    /// With --storage: files in the workspace.
    #[arg(long, default_value = "20000", value_parser = parse_count, value_name = "N")]
    pub files: u64,
    /// With --storage: their total size.
    #[arg(long, default_value = "1G", value_parser = parse_size, value_name = "SIZE")]
    pub size: u64,
    /// Instead: time a sandboxed program's connections through its egress proxy (init on 127.0.0.1:3128, the
    /// daemon at --socket) against direct loopback connections from the host: throughput, per-connection
    /// latency, and how soon a live `net deny` closes an open tunnel.
    #[arg(long, conflicts_with_all = ["exec", "storage"])]
    pub egress: bool,
    /// Instead: a soak of the daemon at --socket: concurrent clients each looping as an agent would (create,
    /// ten execs, file writes and reads, now and then a snapshot and a fork, rm) for --duration, counting
    /// errors, sampling the daemon's memory, and checking that nothing is left behind. Exits 1 on any error or
    /// leftover.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress"])]
    pub soak: bool,
    /// Instead: time a step of code in a live context of a sandbox of the daemon at --socket (`1 + 1`, and an
    /// import already made) against the same step as a new interpreter per exec (`python3 -c`), as a client
    /// without contexts runs it.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak"])]
    pub contexts: bool,
    /// Instead: the cost of metering: the daemon's CPU at --socket over --window with no sandboxes, then with
    /// --idle idle sandboxes (each sampled every second), per sandbox per minute.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts"])]
    pub metering: bool,
    /// With --metering: how long each measurement lasts.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub window: Duration,
    /// Instead: time pause and resume of a sandbox of the daemon at --socket through the API, against writing
    /// the same cgroup's freezer files directly (and waiting for the kernel to say frozen), interleaved.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "metering"])]
    pub pause: bool,
    /// Instead: density of paused sandboxes: --idle sandboxes created and paused, then the memory and CPU of
    /// the daemon, the shims and the inits over a quiet minute, and exec on one paused sandbox while the rest
    /// stay paused.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause"])]
    pub density: bool,
    /// Instead: hibernate and wake through the API of a sandbox of the daemon at --socket holding 256 MiB of
    /// touched memory, and its first exec after the wake, against CRIU dumping and restoring the same program
    /// on the host; --runs rounds (a new sandbox each).
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density"])]
    pub hibernate: bool,
    /// Instead: forks through the API of a sandbox of the daemon at --socket holding 64 MiB of touched memory
    /// in a running program: of its files only, with its processes into one child and into four, and the
    /// first exec in a child; --runs rounds (a new sandbox each, at most 20).
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density", "hibernate"])]
    pub fork_processes: bool,
    /// Instead: time to first exec through the API (create, then `exec true`) on two daemons of the bench's
    /// own, one cold and one with a warm pool (--warm 1), against `bwrap ... true` and `unshare ... true`, with
    /// the exec round trip against `nsenter` in the same run.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density"])]
    pub first_exec: bool,
    /// Instead: `berth run --isolation gvisor -- true` against `runsc run` of a bundle of the host's /usr with
    /// the same flags, and `berth run -- true` (namespaces), interleaved; and the memory an idle gVisor sandbox
    /// is charged.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density", "first_exec"])]
    pub gvisor: bool,
    /// Instead: a request through a preview URL of a sandbox of the daemon at --socket (which needs --listen)
    /// against the same request to the same server program run on the host's loopback, interleaved: a small
    /// page (a new connection each), and --bytes of one file.
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density", "first_exec", "gvisor"])]
    pub preview: bool,
    /// Instead: how long a change in a sandbox's directory takes to reach a client of the API's watch, against
    /// an inotify watch the host holds itself on the same directory (a namespaces sandbox of the daemon at
    /// --socket).
    #[arg(long, conflicts_with_all = ["exec", "storage", "egress", "soak", "contexts", "pause", "density", "first_exec", "gvisor", "preview"])]
    pub watch: bool,
    /// With --soak: clients looping at once, each on its own connections.
    #[arg(long, default_value = "20", value_parser = parse_count_usize, value_name = "N")]
    pub clients: usize,
    /// With --soak: how long the clients start new loops.
    #[arg(long, default_value = "3m", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// With --soak: stop after this many loops in all, if that comes before --duration.
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub loops: Option<u64>,
    /// With --soak: how long the daemon is left idle after the loops before its memory is read again.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub settle: Duration,
}

/// The options `berth bench --egress` starts `berth bench-client` with in the sandbox.
#[derive(Debug, Args)]
pub struct BenchClientArgs {
    /// The proxy inside the sandbox.
    #[arg(long, default_value = "127.0.0.1:3128", value_name = "ADDR:PORT")]
    pub proxy: String,
    /// Where `berth bench --egress` waits for commands, reached through the proxy.
    #[arg(long, value_name = "HOST:PORT")]
    pub control: String,
}

fn parse_size(s: &str) -> Result<u64, String> {
    spec::parse_size(s).map_err(|e| e.to_string())
}
fn parse_count(s: &str) -> Result<u64, String> {
    spec::parse_count(s).map_err(|e| e.to_string())
}
fn parse_count_usize(s: &str) -> Result<usize, String> {
    spec::parse_count(s).map(|n| n as usize).map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<Duration, String> {
    spec::parse_duration(s).map_err(|e| e.to_string())
}
