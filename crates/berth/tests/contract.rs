//! The API against its own description: schemathesis (installed by scripts/setup into target/venv) reads
//! `/v1/openapi.json` from a private daemon's TCP listener and sends what it generates from it, valid and
//! invalid, with a token. Every check it has must pass: no server errors, only documented statuses and
//! content types, bodies and server-sent events that match their schemas, schema-valid requests accepted
//! and schema-violating ones refused.
//!
//! What it generates acts on this daemon's own data root and sandboxes only: generated bind mounts are
//! pointed at an empty directory of the test's (tests/contract/hooks.py), and the routes that read or write
//! host paths are not served on the TCP listener.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::daemon::Daemon;
use common::text;

/// Examples per operation in each phase: enough to reach every status, few enough for a minute or two.
const MAX_EXAMPLES: &str = "3";
/// Fixed, so a failure can be replayed; set BERTH_CONTRACT_SEED to explore others.
const SEED: &str = "1";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_api_keeps_its_description() {
    let st = workspace().join("target/venv/bin/st");
    assert!(
        st.exists(),
        "{} is missing: run scripts/setup, which installs schemathesis (pinned) into target/venv",
        st.display()
    );
    let (d, addr) = Daemon::start_with_tcp(&[]);
    let token = d.berth(&["token", "create", "--name", "contract"]);
    assert!(token.status.success(), "{}", text(&token.stderr));
    let token = text(&token.stdout).trim().to_string();

    // Where generated bind mounts point: an empty directory not owned by root (so read-write is allowed).
    let mounts = d.dir.path().join("mount-here");
    std::fs::create_dir(&mounts).unwrap();
    std::os::unix::fs::chown(&mounts, Some(65534), Some(65534)).unwrap();
    let work = d.dir.path().join("schemathesis");
    std::fs::create_dir(&work).unwrap();

    let seed = std::env::var("BERTH_CONTRACT_SEED").unwrap_or_else(|_| SEED.to_string());
    let started = Instant::now();
    let out = Command::new(&st)
        .current_dir(&work)
        .env("SCHEMATHESIS_HOOKS", workspace().join("crates/berth/tests/contract/hooks.py"))
        .env("BERTH_CONTRACT_MOUNT_HOST", &mounts)
        .args(["run", &format!("http://{addr}/v1/openapi.json"), "--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES, "--seed", &seed])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        // The shell is a WebSocket: the description states its handshake, which schemathesis's HTTP client
        // cannot complete (tests/shell.rs drives it).
        .args(["--exclude-path-regex", "/shell$"])
        .args(["--no-color", "--output-truncate", "true"])
        .output()
        .unwrap();
    let report = text(&out.stdout);
    eprintln!("schemathesis (seed {seed}, {:.0?}):\n{report}{}", started.elapsed(), text(&out.stderr));
    assert!(out.status.success(), "schemathesis found the API and its description disagree (output above)");
    // The run reached the operations and found nothing (the summary's own words).
    let selected = report.lines().find_map(|l| l.trim().strip_prefix("Selected: ")?.split('/').next());
    let tested = report.lines().find_map(|l| l.trim().strip_prefix("Tested: "));
    assert!(selected.is_some() && selected == tested, "not every selected operation was tested (output above)");
    assert!(!report.contains("failure"), "schemathesis reported failures (output above)");
}
