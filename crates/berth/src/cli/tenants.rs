//! `berth tenant`: the teams that share one daemon, each with its quota (operators only: the unix socket).

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Make a tenant, or set a tenant's quota anew (a limit left out is not bounded). Mint its tokens with
    /// `berth token create --tenant NAME`.
    Create(TenantArgs),
    /// List tenants, their quotas and what their sandboxes hold now.
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a tenant that holds nothing (no sandboxes, snapshots, volumes or images): the tokens minted
    /// for it are revoked and its secrets removed.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct TenantArgs {
    /// 1-32 lowercase letters, digits and -, starting with a letter.
    pub name: String,
    /// Sandboxes that may exist at once (any state).
    #[arg(long, value_name = "N")]
    pub sandboxes: Option<u64>,
    /// CPU cores, all its sandboxes' --cpus together.
    #[arg(long, value_name = "CORES")]
    pub cpus: Option<f64>,
    /// Memory, all its sandboxes' --memory together (e.g. 4G).
    #[arg(long, value_parser = super::parse_size, value_name = "SIZE")]
    pub memory: Option<u64>,
    /// Disk, all its sandboxes' --disk together (e.g. 20G).
    #[arg(long, value_parser = super::parse_size, value_name = "SIZE")]
    pub disk: Option<u64>,
    /// Egress through the proxy by all its sandboxes, ever (e.g. 1G): past it, their egress is closed.
    #[arg(long, value_parser = super::parse_size, value_name = "SIZE")]
    pub egress: Option<u64>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}
