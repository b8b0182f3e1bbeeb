//! `berth context`: live code contexts (a Python, JavaScript or bash interpreter whose state survives runs).

use std::time::Duration;

use clap::Subcommand;

use super::{parse_duration, parse_env, parse_id, parse_size};

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Start an interpreter in a running sandbox; prints the context's id.
    Create {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// python, javascript or bash.
        #[arg(long, short = 'l', default_value = "python", value_name = "LANGUAGE")]
        language: String,
        /// The interpreter's working directory (default /workspace).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// An environment variable for the interpreter (repeatable).
        #[arg(long, short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
        env: Vec<(String, String)>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a sandbox's contexts.
    Ls {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run code in a context (CODE, or standard input when it is absent or -); prints its output, its result
    /// and its error, and exits 1 when the code raised, 124 when it timed out, 130 when interrupted.
    Run {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(value_name = "CONTEXT")]
        context: String,
        #[arg(value_name = "CODE")]
        code: Option<String>,
        /// Interrupt the run after this long (server-side); a run that will not stop is killed with its
        /// interpreter, which is started afresh.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
        /// Bytes of output to show: the head and tail, the middle marked as dropped.
        #[arg(long, value_parser = parse_size, value_name = "SIZE")]
        max_output: Option<u64>,
        /// An environment variable for this run only (repeatable): set before the code runs, put back after.
        #[arg(long = "env", short = 'e', value_parser = parse_env, value_name = "KEY=VALUE")]
        env: Vec<(String, String)>,
        /// Print the run's frames as JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Interrupt the code running in a context (its state is kept).
    Interrupt {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(value_name = "CONTEXT")]
        context: String,
    },
    /// Start a context's interpreter afresh: its variables and imports are gone.
    Restart {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(value_name = "CONTEXT")]
        context: String,
    },
    /// Remove contexts, ending their interpreters.
    Rm {
        #[arg(value_parser = parse_id, value_name = "ID")]
        id: String,
        #[arg(required = true, value_name = "CONTEXT")]
        contexts: Vec<String>,
    },
}
