//! One module per verb.

mod context;
mod cp;
mod create;
mod daemon;
mod desktop;
mod events;
mod exec;
mod expose;
mod image;
mod info;
mod inspect;
mod journal;
mod kill;
mod logs;
mod ls;
mod mcp;
mod mv;
mod net;
mod output;
mod pods;
mod probe;
mod projects;
mod ps;
mod rm;
mod run;
mod shell;
mod storage;
mod usage;
mod watch;

use crate::cli::{Cli, Command};

/// Run a parsed command line; returns the process exit code.
pub fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run(args) => run::run(&cli.root, args),
        Command::Probe(args) => probe::probe(args),
        Command::Info(args) => info::info(&cli.root, &cli.socket, args.json),
        Command::Bench(args) => berth_bench::run(&cli.root, &cli.socket, args),
        Command::Daemon(args) => daemon::daemon(&cli.root, &cli.socket, args),
        Command::Token(crate::cli::TokenCommand::Create { name, tenant, read_only, selector, json }) => {
            let req = berth_api::MintToken { name, tenant, read_only, selector: selector.into_iter().collect() };
            daemon::token_create(&cli.socket, &req, json)
        }
        Command::Tenant(cmd) => daemon::tenant(&cli.socket, cmd),
        Command::Token(crate::cli::TokenCommand::Ls { json }) => daemon::token_ls(&cli.socket, json),
        Command::Token(crate::cli::TokenCommand::Rm { id }) => daemon::token_rm(&cli.socket, &id),
        Command::Shim => Ok(berth_engine::shim::main(&cli.root)),
        Command::Create(args) => create::create(&cli.socket, *args),
        Command::Ls(args) => ls::ls(&cli.socket, args),
        Command::Inspect(args) => inspect::inspect(&cli.socket, args),
        Command::Usage(args) => usage::usage(&cli.socket, args),
        Command::Budget(args) => usage::budget(&cli.socket, args),
        Command::Ttl(args) => usage::ttl(&cli.socket, args),
        Command::Rm(args) => rm::rm(&cli.socket, args),
        Command::Exec(args) => exec::exec(&cli.socket, args),
        Command::Logs(args) => logs::logs(&cli.socket, args),
        Command::Kill(args) => kill::kill(&cli.socket, args),
        Command::Ps(args) => ps::ps(&cli.socket, args),
        Command::Journal(args) => journal::journal(&cli.socket, args),
        Command::Events(args) => events::events(&cli.socket, args),
        Command::Cp(args) => cp::cp(&cli.socket, args),
        Command::Mv(args) => mv::mv(&cli.socket, args),
        Command::Watch(args) => watch::watch(&cli.socket, args),
        Command::Shell(args) => shell::shell(&cli.socket, args),
        Command::Context(cmd) => context::context(&cli.socket, cmd),
        Command::Desktop(cmd) => desktop::desktop(&cli.socket, cmd),
        Command::Expose(args) => expose::expose(&cli.socket, args),
        Command::Pause(args) => projects::lifecycle(&cli.socket, "pause", args),
        Command::Resume(args) => projects::lifecycle(&cli.socket, "resume", args),
        Command::Hibernate(args) => projects::lifecycle(&cli.socket, "hibernate", args),
        Command::Wake(args) => projects::lifecycle(&cli.socket, "wake", args),
        Command::Stop(args) => projects::lifecycle(&cli.socket, "stop", args),
        Command::Start(args) => projects::lifecycle(&cli.socket, "start", args),
        Command::Rebuild(args) => projects::lifecycle(&cli.socket, "rebuild", args),
        Command::Snapshot(args) => projects::snapshot(&cli.socket, args),
        Command::Restore(args) => projects::restore(&cli.socket, args),
        Command::Reset(args) => projects::reset(&cli.socket, args),
        Command::Fork(args) => projects::fork(&cli.socket, args),
        Command::Diff(args) => projects::diff(&cli.socket, args),
        Command::Export(args) => projects::export(&cli.socket, args),
        Command::Volume(cmd) => projects::volume(&cli.socket, cmd),
        Command::Pod(cmd) => pods::pod(&cli.socket, cmd),
        Command::Receipt(args) => rm::receipt(&cli.socket, args),
        Command::Secret(cmd) => net::secret(&cli.socket, cmd),
        Command::Net(cmd) => net::net(&cli.socket, cmd),
        Command::Image(cmd) => image::image(&cli.socket, cmd),
        Command::Storage(cmd) => storage::storage(&cli.root, &cli.socket, cmd),
        Command::Mcp => mcp::mcp(&cli.socket),
        Command::BenchClient(args) => berth_bench::run_client(args),
        Command::Init => anyhow::bail!("init runs only as PID 1 of a sandbox that berth created"),
    }
}
