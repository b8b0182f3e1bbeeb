//! The verbs of durable projects, as data: stop, start, rebuild; snapshots, restore, reset, fork; diff and
//! export; volumes; the storage pool.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{parse_count, parse_id, parse_size};

#[derive(Debug, Args)]
pub struct IdArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: Option<SnapshotCommand>,
    /// The sandbox to snapshot (its id or name).
    #[arg(value_parser = parse_id, value_name = "ID", required = true)]
    pub id: Option<String>,
    /// A name to refer to the snapshot by, instead of its id.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Checkpoint the running processes too (the sandbox runs on): `create --from` the snapshot continues
    /// them. Needs CRIU 4.2 or newer on the host
    #[arg(long)]
    pub with_processes: bool,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// List snapshots.
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove snapshots by id or name.
    Rm {
        #[arg(value_parser = parse_id, value_name = "SNAPSHOT", required = true)]
        snapshots: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// The snapshot's id or name.
    #[arg(value_parser = parse_id, value_name = "SNAPSHOT")]
    pub snapshot: String,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Keep /workspace; only the root file system returns to the image's clean state.
    #[arg(long)]
    pub keep_workspace: bool,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// How many copies.
    #[arg(short = 'n', long, default_value = "1", value_parser = parse_count, value_name = "N")]
    pub count: u64,
    /// Fork the running processes too: each copy is restored from a checkpoint of the sandbox (which runs on)
    /// and continues its programs from that instant. Needs CRIU 4.2 or newer on the host
    #[arg(long)]
    pub with_processes: bool,
    /// Print the API's JSON instead of one new id per line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create an empty named volume.
    Create { name: String },
    /// List volumes and the sandboxes that use them.
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove volumes (refused while a sandbox uses one).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// List the pods this node's berth-oci reported (live ones first).
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a pod: its workspace, egress policy and containers (JSON).
    Show { id: String },
    /// Copy a pod's workspace, at one instant with the pod frozen, into a new volume a new pod can name.
    Fork {
        id: String,
        /// The new volume's name.
        #[arg(long)]
        workspace: String,
    },
    /// Print a pod's journal (JSON records, one a line).
    Journal { id: String },
    /// Show a removed pod's receipt (JSON).
    Receipt { id: String },
    /// Close a pod the daemon did not hear end (its sandbox container was deleted while no daemon ran):
    /// its receipt is written and its workspace is free to remove.
    Rm { id: String },
    /// What the cluster's database holds: every node's volumes and pods (berth daemon --cluster-db).
    Cluster {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Create a btrfs storage pool in a file under the data directory and mount it (the daemon mounts it at
    /// start-up from then on): copy-on-write forks and snapshots, and disk quotas. A running daemon makes it
    /// and uses it at once.
    Init {
        /// The pool's size (the file is sparse: it takes host disk only as it fills, and never more than
        /// this). Default: half the free space of the data root's file system, at most 512G.
        #[arg(long, value_parser = parse_size, value_name = "SIZE")]
        size: Option<u64>,
    },
    /// Show the storage pool: mode, size, free space, quotas.
    Info {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// Compare with a snapshot (id or name), `parent` (the snapshot it was created or forked from) or `image`
    /// (its clean state). Default: parent if it has one, else image.
    #[arg(long, value_name = "SNAPSHOT|parent|image")]
    pub against: Option<String>,
    /// Print a unified diff of the changed text files (git style; applies with git apply or patch -p1).
    #[arg(long)]
    pub patch: bool,
    /// Print the API's JSON.
    #[arg(long, conflicts_with = "patch")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The sandbox's id or name.
    #[arg(value_parser = parse_id, value_name = "ID")]
    pub id: String,
    /// A git repository on this host.
    #[arg(long, value_name = "PATH")]
    pub repo: PathBuf,
    /// The new branch (it must not exist yet).
    #[arg(long, value_name = "NAME")]
    pub branch: String,
    /// What the branch starts from. Default: the repository's HEAD.
    #[arg(long, value_name = "REF")]
    pub base: Option<String>,
    /// What the workspace's changes are taken against (as for berth diff).
    #[arg(long, value_name = "SNAPSHOT|parent|image")]
    pub against: Option<String>,
    /// The commit message.
    #[arg(long, short = 'm', value_name = "TEXT")]
    pub message: Option<String>,
    /// The commit's author, as `Name <email>`.
    #[arg(long, value_name = "NAME <EMAIL>")]
    pub author: Option<String>,
    /// Print the API's JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Import an image from a directory, a rootfs tarball (plain, gzip or zstd), an OCI image layout
    /// (directory or tar) or a docker save archive. Hostile entries are refused and listed.
    Import {
        /// The new image's name.
        name: String,
        /// Where to import it from (a path on this host).
        source: PathBuf,
        /// For this tenant's sandboxes only (without: every tenant may use it).
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// List images.
    Ls {
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove images (refused while a sandbox uses one).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Allow egress to RULEs on a running sandbox, at once.
    Allow {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(required = true, value_name = "RULE")]
        rules: Vec<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deny egress to RULEs on a running sandbox, at once; open connections they forbid are closed.
    Deny {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(required = true, value_name = "RULE")]
        rules: Vec<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every egress attempt: time, host, port, verdict, the rule that decided, bytes each way.
    Log {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// The smallest allowlist that would have let through what the sandbox reached (after --net learn).
    Suggest {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret; its value is read from stdin (one trailing newline is dropped) and sealed at once.
    Set {
        /// Letters A-Z, digits and _, not starting with a digit: it becomes an environment variable.
        name: String,
        /// For this tenant's sandboxes (each tenant's secrets are apart; without: for sandboxes of none).
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
    },
    /// List secrets (names, sizes, times; never values).
    Ls {
        /// This tenant's.
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove secrets.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
        /// This tenant's.
        #[arg(long, value_name = "NAME")]
        tenant: Option<String>,
    },
}
