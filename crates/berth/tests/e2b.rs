//! The unmodified E2B SDKs (`e2b` and `e2b-code-interpreter` from PyPI, pinned in `scripts/setup`) against a
//! real daemon's `--e2b-listen`: the pytest suite in `tests/e2b/`, sync and async, pointed at berth the way
//! the SDK's users do (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Then what it did is checked on berth's
//! side: journaled under the token, torn down with receipts, nothing left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

#[test]
fn the_e2b_sdks_work_against_berth() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join("target/venv/bin/python");
    let check = Command::new(&python).args(["-c", "import e2b, e2b_code_interpreter, pytest"]).output();
    assert!(
        check.as_ref().is_ok_and(|o| o.status.success()),
        "the E2B SDKs are not installed in {}: run scripts/setup",
        python.display()
    );
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let d = Daemon::start_with(&["--e2b-listen", &format!("127.0.0.1:{port}"), "--domain", "e2b.test"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the E2B listener did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let minted: Value =
        serde_json::from_slice(&d.berth(&["token", "create", "--name", "e2b", "--json"]).stdout).unwrap();
    let (token_id, token) = (minted["id"].as_str().unwrap(), minted["token"].as_str().unwrap());

    let child = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(repo.join("crates/berth/tests/e2b"))
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", token)
        .env("BERTH_E2B_BAD_KEY", "berth_0000")
        .env("BERTH_E2B_DOMAIN", "e2b.test")
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::daemon::wait_output(child, Duration::from_secs(900));
    assert!(out.status.success(), "the SDKs' suite failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains(" passed"), "{}", text(&out.stdout));

    // E2B's JavaScript SDK, a smoke test on the machine's Node.js.
    let npm = repo.join("target/npm");
    assert!(
        npm.join("node_modules/e2b").is_dir(),
        "the e2b npm package is not under {}: run scripts/setup",
        npm.display()
    );
    let js = Command::new("node")
        .arg(repo.join("crates/berth/tests/e2b/smoke.mjs"))
        .env("NPM_DIR", &npm)
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let js = common::daemon::wait_output(js, Duration::from_secs(120));
    assert!(js.status.success(), "the JavaScript SDK's smoke test failed:\n{}\n{}", text(&js.stdout), text(&js.stderr));
    let seen: Value = serde_json::from_slice(&js.stdout).unwrap();
    assert_eq!(seen["stdout"], "from-js\n/home/user\nuser\n", "{seen}");
    assert_eq!((seen["owner"].as_str(), seen["root"].as_str()), (Some("user"), Some("root\n")), "{seen}");
    assert_eq!((seen["stderr"].as_str(), seen["exit"].as_i64()), (Some("err\n"), Some(0)), "{seen}");
    assert_eq!((seen["file"].as_str(), seen["exists"].as_bool()), (Some("written by js"), Some(true)), "{seen}");
    assert_eq!((seen["killed"].as_bool(), seen["failed"].as_i64()), (Some(true), Some(4)), "{seen}");
    assert_eq!(seen["listed"], serde_json::json!([seen["id"]]), "{seen}");
    assert_eq!(
        (seen["running"].as_bool(), seen["kill"].as_bool(), seen["after"].as_bool()),
        (Some(true), Some(true), Some(false)),
        "{seen}"
    );

    // On berth's side: each sandbox the suite made was created and removed under its token, with a receipt.
    let (_, events) = d.http("GET", "/v1/events", "");
    let events: Vec<Value> = serde_json::from_str(&events).unwrap();
    let made: Vec<&str> =
        events.iter().filter(|e| e["kind"] == "created").filter_map(|e| e["sandbox"].as_str()).collect();
    assert!(made.len() >= 10, "{made:?}");
    for id in &made {
        let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        let journal: Vec<Value> = serde_json::from_str(&journal).unwrap();
        assert_eq!(journal[0]["action"], "create");
        assert_eq!(journal[0]["actor"], format!("token:{token_id}"), "{id}");
        let (status, receipt) = d.http("GET", &format!("/v1/sandboxes/{id}/receipt"), "");
        assert_eq!(status, 200, "{id} has no receipt: {receipt}");
    }
    assert!(d.ids().is_empty(), "the suite left {:?}", d.ids());
}

#[test]
fn the_e2b_sdks_reach_berth_by_domain_over_tls() {
    const DOMAIN: &str = "berth-e2b.test";
    const ADDR: &str = "127.0.44.1";
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join("target/venv/bin/python");
    // The names resolve to the listener by a DNS server of the test's own (a wildcard, which /etc/hosts cannot do).
    let dns = common::dns::Dns::start(|name, _| {
        let ours = name == DOMAIN || name.ends_with(&format!(".{DOMAIN}"));
        common::dns::Answer::A(if ours { vec![ADDR.parse().unwrap()] } else { vec![] })
    });
    let d = Daemon::start_with(&["--e2b-listen", &format!("{ADDR}:443"), "--domain", DOMAIN]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect((ADDR, 443)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the E2B listener did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ca = d.root().join("e2b/ca.pem");
    assert!(std::fs::read_to_string(&ca).unwrap().contains("BEGIN CERTIFICATE"), "no CA at {}", ca.display());
    let token = text(&d.berth(&["token", "create", "--name", "e2b-tls"]).stdout).trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {}\noptions attempts:2 timeout:2\n", dns.addr())).unwrap();
    // In a mount namespace of its own, so that the DNS server is the suite's alone.
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\""])
        .arg(&resolv)
        .arg(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(repo.join("crates/berth/tests/e2b_domain"))
        .arg(repo.join("crates/berth/tests/e2b"))
        .env("E2B_DOMAIN", DOMAIN)
        .env("E2B_API_KEY", &token)
        .env("BERTH_E2B_BAD_KEY", "berth_0000")
        .env("SSL_CERT_FILE", &ca)
        .env_remove("E2B_API_URL")
        .env_remove("E2B_SANDBOX_URL")
        .env_remove("E2B_DEBUG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::daemon::wait_output(child, Duration::from_secs(900));
    assert!(out.status.success(), "the SDKs over TLS failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    // The domain's own test and the whole suite the plain-HTTP test runs, all of it over TLS this time.
    let passed = text(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .find_map(|w| (w[1].trim_end_matches(',') == "passed").then(|| w[0].parse::<usize>().ok()).flatten());
    assert!(passed.is_some_and(|n| n >= 20), "{}", text(&out.stdout));
    // Plain HTTP still works on the same port.
    let (status, _) = common::daemon::tcp_http(&format!("{ADDR}:443"), "GET", "/v2/sandboxes", None, "");
    assert_eq!(status, 401);
    assert!(d.ids().is_empty(), "{:?}", d.ids());
}

/// An E2B client's handle on a sandbox goes on working through a restart of the daemon (its sandbox lives on
/// in its shim): the access token it holds is sealed with the daemon's key, not only remembered.
#[test]
fn a_sandbox_handle_outlives_a_daemon_restart() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join("target/venv/bin/python");
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let mut d = Daemon::start_with(&["--e2b-listen", &listen]);
    let token = text(&d.berth(&["token", "create", "--name", "e2b-restart"]).stdout).trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = r#"
import os, sys, time
from e2b import Sandbox
sb = Sandbox.create("base")
sb.commands.run("echo before > state")
open(sys.argv[1], "w").write(sb.sandbox_id)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
print(sb.commands.run("cat state; echo after").stdout, end="")
print(sb.files.read("state"), end="")
import httpx
headers = {"E2b-Sandbox-Id": sb.sandbox_id, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json"}
for forged in ["e2b_" + "A" * 150, "e2b_" + sb.sandbox_id]:
    r = httpx.post(os.environ["E2B_SANDBOX_URL"] + "/process.Process/List", content="{}", headers={**headers, "X-Access-Token": forged})
    print(r.status_code, r.json()["code"])
sb.kill()
"#;
    let child = Command::new(&python)
        .args(["-c", script])
        .arg(&ready)
        .arg(&go)
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", &token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        assert!(std::time::Instant::now() < deadline, "the script did not make its sandbox");
        std::thread::sleep(Duration::from_millis(50));
    }
    d.stop();
    d.spawn();
    let up = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < up, "the E2B listener did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&go, "").unwrap();
    let out = common::daemon::wait_output(child, Duration::from_secs(120));
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(text(&out.stdout), "before\nafter\nbefore\n401 unauthenticated\n401 unauthenticated\n");
    assert!(d.ids().is_empty(), "{:?}", d.ids());
}
