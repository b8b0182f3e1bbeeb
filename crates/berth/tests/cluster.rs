//! Two nodes' daemons sharing a cluster database: Debian's PostgreSQL 15, started by the test with a
//! private data directory, listening on a unix socket of its own only. A volume (a pod's workspace, a fork,
//! or one made through the API) is held by the node whose disk has it: the other node is told where it is,
//! instead of making an empty one of its own; every node's pods are listed from either node.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL server of the test's own, run as the `postgres` user (it refuses to run as root).
struct Postgres {
    dir: tempfile::TempDir,
}

impl Postgres {
    fn start() -> Postgres {
        assert!(
            Path::new(PG_BIN).join("initdb").exists(),
            "PostgreSQL 15 is missing: run scripts/setup, which installs Debian's postgresql-15"
        );
        let dir = tempfile::Builder::new().prefix("bpg-").tempdir_in("/tmp").unwrap();
        let as_postgres = |script: &str| {
            let out = Command::new("runuser").args(["-u", "postgres", "--", "sh", "-c", script]).output().unwrap();
            assert!(out.status.success(), "{script}: {}{}", text(&out.stdout), text(&out.stderr));
        };
        assert!(Command::new("chown").arg("postgres:postgres").arg(dir.path()).status().unwrap().success());
        let d = dir.path().display();
        as_postgres(&format!("{PG_BIN}/initdb -D {d}/data -A trust -U berth >/dev/null"));
        as_postgres(&format!(
            "{PG_BIN}/pg_ctl -D {d}/data -l {d}/log -w -o \"-k {d} -c listen_addresses=''\" start >/dev/null"
        ));
        Postgres { dir }
    }

    fn restart(&self) {
        let d = self.dir.path().display();
        let script = format!(
            "{PG_BIN}/pg_ctl -D {d}/data -l {d}/log -w -m fast -o \"-k {d} -c listen_addresses=''\" restart >/dev/null"
        );
        let out = Command::new("runuser").args(["-u", "postgres", "--", "sh", "-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    /// The libpq connection string of its one database.
    fn url(&self) -> String {
        format!("host={} user=berth dbname=postgres", self.dir.path().display())
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let d = self.dir.path().display();
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", "sh", "-c", &format!("{PG_BIN}/pg_ctl -D {d}/data -m immediate stop")])
            .output();
    }
}

fn call(d: &Daemon, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, answer) = d.http(method, path, body);
    (status, serde_json::from_str(&answer).unwrap_or(Value::String(answer)))
}

#[test]
fn nodes_sharing_a_cluster_database_hold_each_volume_on_one_node() {
    let pg = Postgres::start();
    let url = pg.url();
    let a = Daemon::start_with(&["--cluster-db", &url, "--node", "node-a"]);
    let b = Daemon::start_with(&["--cluster-db", &url, "--node", "node-b"]);

    // A pod on node A makes its workspace there.
    let (status, pod) = call(&a, "POST", "/v1/pods", r#"{"id": "pod-a1", "name": "agent", "workspace": "project-a"}"#);
    assert_eq!(status, 201, "{pod}");
    // Node B does not make an empty one of the same name: it says where the workspace is.
    for (path, body) in
        [("/v1/pods", r#"{"id": "pod-b1", "workspace": "project-a"}"#), ("/v1/volumes", r#"{"name": "project-a"}"#)]
    {
        let (status, answer) = call(&b, "POST", path, body);
        assert_eq!(status, 409, "{path}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("is on node node-a"), "{answer}");
    }
    let (status, missing) = call(&b, "GET", "/v1/pods/pod-b1", "");
    assert_eq!(status, 404, "nothing was recorded of the refused pod: {missing}");
    let vols: Vec<String> =
        call(&b, "GET", "/v1/volumes", "").1.as_array().unwrap().iter().map(|v| v["name"].to_string()).collect();
    assert!(vols.is_empty(), "node B made no volume: {vols:?}");

    // A fork's copy is held by the node that made it; names are the cluster's.
    let (status, forked) = call(&a, "POST", "/v1/pods/pod-a1/fork", r#"{"workspace": "project-a-2"}"#);
    assert_eq!(status, 201, "{forked}");
    let (status, own) = call(&b, "POST", "/v1/volumes", r#"{"name": "scratch-b"}"#);
    assert_eq!(status, 201, "{own}");
    let (status, taken) = call(&a, "POST", "/v1/pods/pod-a1/fork", r#"{"workspace": "scratch-b"}"#);
    assert_eq!(status, 409, "{taken}");
    assert!(taken["error"]["message"].as_str().unwrap().contains("is on node node-b"), "{taken}");

    // Either node lists every node's volumes and pods.
    let (status, info) = call(&b, "GET", "/v1/cluster", "");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["node"], "node-b");
    let held: Vec<(String, String)> = info["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["node"].as_str().unwrap().to_string()))
        .collect();
    let want = [("project-a", "node-a"), ("project-a-2", "node-a"), ("scratch-b", "node-b")];
    assert_eq!(held, want.map(|(v, n)| (v.to_string(), n.to_string())));
    let table = text(&b.berth(&["pod", "cluster"]).stdout);
    assert!(table.starts_with("node node-b\n"), "{table}");
    for (volume, node) in want {
        assert!(table.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [volume, node]), "{table}");
    }
    let pods = info["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{info}");
    assert_eq!((pods[0]["node"].as_str(), pods[0]["pod"]["id"].as_str()), (Some("node-a"), Some("pod-a1")));
    assert_eq!(pods[0]["pod"]["workspace"], "project-a");

    // A restarted database is connected to again.
    pg.restart();
    let (status, answer) = call(&a, "POST", "/v1/volumes", r#"{"name": "after-restart"}"#);
    assert_eq!(status, 201, "{answer}");
    assert_eq!(call(&a, "DELETE", "/v1/volumes/after-restart", "").0, 200);

    // The pod ends (the cluster sees it removed); once its node removes the volume, the name is free, and
    // node B makes a workspace of that name of its own.
    let (status, _) = call(&a, "DELETE", "/v1/pods/pod-a1", "");
    assert_eq!(status, 200);
    let info = call(&a, "GET", "/v1/cluster", "").1;
    assert!(info["pods"][0]["pod"]["removed_at_ms"].as_u64().is_some(), "{info}");
    for v in ["project-a", "project-a-2"] {
        let (status, answer) = call(&a, "DELETE", &format!("/v1/volumes/{v}"), "");
        assert_eq!(status, 200, "{answer}");
    }
    let (status, pod) = call(&b, "POST", "/v1/pods", r#"{"id": "pod-b2", "workspace": "project-a"}"#);
    assert_eq!(status, 201, "{pod}");
    let info = call(&a, "GET", "/v1/cluster", "").1;
    let holder = info["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "project-a").unwrap();
    assert_eq!(holder["node"], "node-b");
    assert_eq!(call(&b, "DELETE", "/v1/pods/pod-b2", "").0, 200);

    // The database holds just what was said: two volumes (scratch-b, and project-a now on node B) and two
    // pods (the refused one is in neither).
    let psql = Command::new(Path::new(PG_BIN).join("psql"))
        .args(["-h", pg.path().to_str().unwrap(), "-U", "berth", "-d", "postgres", "-Atc"])
        .arg("SELECT count(*) FROM berth_volumes; SELECT count(*) FROM berth_pods")
        .output()
        .unwrap();
    assert_eq!(text(&psql.stdout), "2\n2\n", "{}", text(&psql.stderr));
}

#[test]
fn a_daemon_without_its_cluster_database_says_so() {
    // Nothing listens there: the daemon does not start, and says why.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("host={} user=berth dbname=postgres connect_timeout=2", dir.path().display());
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--socket")
        .arg(dir.path().join("berth.sock"))
        .args(["daemon", "--storage", "none", "--cluster-db", &url, "--node", "node-x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot use the cluster's database"), "{}", text(&out.stderr));
    // A node name Kubernetes would not give is refused before anything is tried.
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("--root")
        .arg(dir.path().join("root"))
        .args(["daemon", "--storage", "none", "--cluster-db", &url, "--node", "no/such node"])
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("is not a node name"), "{}", text(&out.stderr));
    // Without a database, the cluster call says what is missing.
    let d = Daemon::start();
    let (status, answer) = call(&d, "GET", "/v1/cluster", "");
    assert_eq!(status, 503, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("--cluster-db"), "{answer}");
}
