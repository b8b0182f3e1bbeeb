//! One module per verb.

mod bench;
mod info;
mod probe;
mod run;

use crate::cli::{Cli, Command};

/// Run a parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(&cli.root, args),
        Command::Probe(args) => probe::probe(args),
        Command::Info => info::info(&cli.root),
        Command::Bench(args) => bench::bench(&cli.root, args),
        Command::Init => anyhow::bail!("init runs only as PID 1 of a sandbox that berth created"),
    }
}
