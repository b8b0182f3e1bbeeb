//! `berth expose`: preview URLs of what a sandbox serves on its own loopback.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{parse_duration, parse_id};

/// `berth expose ID PORT [--public] [--ttl D]`, or `berth expose ls|rm`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExposeArgs {
    #[command(subcommand)]
    pub command: Option<ExposeCommand>,
    /// The sandbox (id or name).
    #[arg(value_parser = parse_id, value_name = "ID", required = true)]
    pub id: Option<String>,
    /// The port it serves on its own 127.0.0.1.
    #[arg(value_name = "PORT", required = true, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Reachable without a token (anyone who can reach the daemon's listener can open it).
    #[arg(long)]
    pub public: bool,
    /// How long the URL works (default: until it is removed, or its sandbox is).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttl: Option<Duration>,
    /// Print the API's JSON instead of the URL.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ExposeCommand {
    /// List a sandbox's previews (their URLs without tokens).
    Ls {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a preview: its URL stops working at once.
    Rm {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// The preview's id (from berth expose ls).
        #[arg(value_name = "PREVIEW")]
        preview: String,
    },
}
