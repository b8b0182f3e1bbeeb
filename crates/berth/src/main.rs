//! The `berth` command: one binary that is the CLI, (later) the daemon, and PID 1 inside every sandbox.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod exit;
mod oci;
mod oci_agent;

use clap::Parser;

fn main() {
    // PID 1 inside a sandbox takes this path before anything else runs: no argument parsing, no allocation
    // beyond what init itself needs.
    if std::env::args_os().nth(1).is_some_and(|a| a == "init") && std::process::id() == 1 {
        std::process::exit(berth_init::main());
    }
    // Started as `berth-oci` (or `berth oci`): an OCI runtime command line, for containerd's runc shim.
    if oci::invoked_as_oci() {
        std::process::exit(oci::main(std::env::args_os().skip(1).collect()));
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "oci") {
        std::process::exit(oci::main(std::env::args_os().skip(2).collect()));
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::BERTH_FAILED } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    if !matches!(cli.command, cli::Command::Daemon(_) | cli::Command::Shim) {
        berth_sys::process::default_sigpipe();
    }
    let code = match commands::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("berth: {}", exit::render(&e));
            exit::BERTH_FAILED
        }
    };
    std::process::exit(code);
}
