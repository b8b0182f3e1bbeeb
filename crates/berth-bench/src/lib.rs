//! berth's benchmarks: every measurement `berth bench` makes, and the half of `berth bench --egress` that runs
//! inside a sandbox (`berth bench-client`).
//!
//! Each benchmark times berth against the nearest peer doing the same work (bubblewrap and unshare, nsenter,
//! `cp -a`, the kernel's freezer, CRIU, runsc, direct loopback connections) in one run on this machine,
//! interleaved round by round where it can be, and prints a table or, with `--json`, JSON. One module per
//! benchmark; `startup` (plain `berth bench`) also holds the timing of whole command lines that others share,
//! and `daemon` (the daemon's side of `--exec`, and `--density`) the reading of the daemon's processes from
//! /proc.
//!
//! The crate owns the benchmarks and their options (`BenchArgs`, `BenchClientArgs`), not the command line:
//! the `berth` binary puts the options under its `bench` and hidden `bench-client` subcommands and calls
//! `run` or `run_client`. The daemon is reached through `berth-client`. Where a benchmark needs berth as a
//! program (`berth run`, a daemon of its own, the client inside a sandbox) it starts the running executable
//! again, which is `berth`.
#![forbid(unsafe_code)]

use std::path::Path;

mod args;
mod contexts;
mod daemon;
mod egress;
mod egress_client;
mod exec;
mod first_exec;
mod fork_processes;
mod gvisor;
mod hibernate;
mod hibernate_gvisor;
mod metering;
mod pause;
mod preview;
mod soak;
mod soak_check;
mod startup;
mod storage;
mod watch;

pub use args::{BenchArgs, BenchClientArgs};

/// `berth bench`: run the benchmark `args` pick (plain `berth bench` when they pick none) against the data
/// root `root` and the daemon at `socket`; returns the process exit code.
pub fn run(root: &Path, socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    match args {
        args if args.storage => storage::bench_storage(root, socket, args),
        args if args.egress => egress::bench_egress(socket, args),
        args if args.metering => metering::bench_meter(socket, args),
        args if args.density => daemon::density(socket, args),
        args if args.pause => pause::bench_pause(socket, args),
        args if args.hibernate => hibernate::bench_hibernate(socket, args),
        args if args.fork_processes => fork_processes::bench_fork_processes(socket, args),
        args if args.contexts => contexts::bench_contexts(socket, args),
        args if args.soak => soak::bench_soak(socket, args),
        args if args.first_exec => first_exec::bench_first_exec(args),
        args if args.exec => exec::bench_exec(socket, args),
        args if args.gvisor => gvisor::bench_gvisor(root, args),
        args if args.preview => preview::bench_preview(socket, args),
        args if args.watch => watch::bench_watch(root, socket, args),
        args => startup::bench(root, args),
    }
}

/// `berth bench-client` (hidden): the in-sandbox side of `berth bench --egress`, which starts it; returns the
/// process exit code.
pub fn run_client(args: BenchClientArgs) -> anyhow::Result<i32> {
    egress_client::bench_client(args)
}
