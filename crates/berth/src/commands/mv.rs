//! `berth mv`: move or rename a file or a directory tree inside a sandbox, with the API's move.

use std::path::Path;

use berth_api::MoveFile;
use berth_client::Client;

use super::output;
use crate::cli::MvArgs;

/// A path as `berth mv` takes it: absolute, or relative to /workspace (as `berth cp`'s `ID:path`).
fn in_sandbox(path: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("/workspace/{path}") }
}

pub fn mv(socket: &Path, args: MvArgs) -> anyhow::Result<i32> {
    let client = Client::connect(socket)?;
    let req =
        MoveFile { from: in_sandbox(&args.from), to: in_sandbox(&args.to), overwrite: args.overwrite, user: args.user };
    let (_, body) = client.post_json(&format!("/v1/sandboxes/{}/move", berth_client::segment(&args.id)), &req)?;
    if args.json {
        output::print_raw(&body)?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_in_the_workspace() {
        assert_eq!(in_sandbox("a/b"), "/workspace/a/b");
        assert_eq!(in_sandbox("/etc/x"), "/etc/x");
    }
}
