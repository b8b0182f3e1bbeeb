//! The warm pool (`berth daemon --warm N`): a create that asks for the defaults takes a sandbox built ahead and
//! gets its own record, name, environment and credentials; two taken sandboxes share nothing; the pool refills;
//! a create it cannot serve is built cold; and the daemon's stop leaves nothing of the pool behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use serde_json::{Value, json};

fn warm(d: &Daemon) -> Value {
    let (status, body) = d.http("GET", "/v1/info", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["warm"].clone()
}

/// Wait until the pool holds `n` ready sandboxes; returns their ids (their shims' sockets).
fn ready(d: &Daemon, n: u64) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ids: BTreeSet<String> = std::fs::read_dir(d.root().join("run/pool"))
            .map(|e| {
                e.flatten().filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock").map(str::to_string)).collect()
            })
            .unwrap_or_default();
        if warm(d)["ready"] == n && ids.len() as u64 == n {
            return ids;
        }
        assert!(Instant::now() < deadline, "the pool did not reach {n} ready: {}", warm(d));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create(d: &Daemon, req: Value) -> Value {
    let (status, body) = d.http("POST", "/v1/sandboxes", &req.to_string());
    assert_eq!(status, 201, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn sh(d: &Daemon, id: &str, script: &str) -> String {
    d.sh(id, script)
}

#[test]
fn pooled_creates_are_the_callers_own_and_share_nothing() {
    let mut d = Daemon::start_with(&["--warm", "2"]);
    let pooled = ready(&d, 2);
    assert!(d.ids().is_empty(), "pooled sandboxes must not be listed: {:?}", d.ids());

    // A named create with its own labels, environment and TTL, from the pool.
    let a =
        create(&d, json!({"name": "alpha", "labels": {"team": "a"}, "env": {"GREETING": "hello"}, "ttl_seconds": 600}));
    let a_id = a["id"].as_str().unwrap().to_string();
    assert!(pooled.contains(&a_id), "{a_id} was not one of the pool's {pooled:?}");
    assert_eq!(a["name"], "alpha");
    assert_eq!(a["labels"]["team"], "a");
    assert_eq!(a["state"], "running");
    assert!(a["expires_at_ms"].as_u64().unwrap() > a["created_at_ms"].as_u64().unwrap());
    assert_eq!(warm(&d)["served"], 1);
    let seen = sh(&d, &a_id, "hostname; cat /etc/hostname; grep -c alpha /etc/hosts; echo $GREETING $BERTH_SANDBOX_ID");
    assert_eq!(seen, format!("alpha\nalpha\n1\nhello {a_id}\n"));
    // Its session token works against the API from inside, as a cold sandbox's does.
    let me = sh(
        &d,
        &a_id,
        "python3 -c \"import json,os,urllib.request as u; r=u.Request(os.environ['BERTH_API']+'/v1/sandboxes/'+os.environ['BERTH_SANDBOX_ID'], headers={'Authorization':'Bearer '+os.environ['BERTH_TOKEN']}); print(json.load(u.build_opener(u.ProxyHandler({})).open(r))['name'])\"",
    );
    assert_eq!(me.trim(), "alpha");
    let a_map = sh(&d, &a_id, "cat /proc/self/uid_map");
    sh(
        &d,
        &a_id,
        "echo a > /tmp/left; echo a > /workspace/left; echo a > /etc/left; sleep 600 >/dev/null 2>&1 & echo started",
    );

    // The pool refills behind the take.
    let refilled = ready(&d, 2);
    assert!(!refilled.contains(&a_id));

    // The next one taken (unnamed) is named after its own id and holds nothing of the first.
    let b = create(&d, json!({}));
    let b_id = b["id"].as_str().unwrap().to_string();
    assert!(refilled.contains(&b_id), "{b_id} was not one of the pool's {refilled:?}");
    assert_eq!(b["name"], format!("berth-{b_id}"));
    assert_eq!(sh(&d, &b_id, "hostname").trim(), format!("berth-{b_id}"));
    let b_map = sh(&d, &b_id, "cat /proc/self/uid_map");
    assert_ne!(a_map, b_map, "two taken sandboxes share a host id block");
    let left = sh(&d, &b_id, "ls /tmp /workspace; ls /etc/left 2>&1; ps -e -o comm= | grep -c sleep || true");
    assert!(!left.contains("left\n") && left.contains("No such file"), "{left}");
    assert_eq!(left.lines().last(), Some("0"), "{left}");
    assert!(sh(&d, &b_id, "echo $GREETING; echo $BERTH_TOKEN").lines().next() == Some(""));

    // Only the taken ones are listed; their records are theirs.
    let listed: BTreeSet<String> = d.ids().into_iter().collect();
    assert_eq!(listed, BTreeSet::from([a_id.clone(), b_id.clone()]));

    // A create the pool cannot serve (another memory limit) is built cold, and works.
    let served = warm(&d)["served"].as_u64().unwrap();
    let pool_now = ready(&d, 2);
    let c = create(&d, json!({"name": "gamma", "memory_bytes": 256u64 << 20}));
    let c_id = c["id"].as_str().unwrap().to_string();
    assert!(!pool_now.contains(&c_id));
    assert_eq!(c["memory_bytes"], 256u64 << 20);
    assert_eq!(warm(&d)["served"].as_u64().unwrap(), served);
    assert_eq!(sh(&d, &c_id, "hostname").trim(), "gamma");
    assert_eq!(ready(&d, 2), pool_now, "a cold create took from the pool");

    // Removed and stopped: nothing of the sandboxes or the pool is left.
    let out = d.berth(&["rm", "--all"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    d.stop();
    let every: Vec<String> = [a_id, b_id, c_id].into_iter().chain(pool_now).collect();
    let cgroups = common::berth_cgroups();
    for id in &every {
        assert!(!cgroups.iter().any(|c| c.ends_with(id)), "cgroup of {id} left: {cgroups:?}");
        assert!(!std::path::Path::new(&format!("/run/berth/live/{id}.lock")).exists(), "claim of {id} left");
        assert!(!d.root().join("pool/sandboxes").join(id).exists(), "volume of {id} left");
    }
    let sockets: Vec<_> = ["run/pool", "run/shims"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(d.root().join(dir)).into_iter().flatten().flatten())
        .map(|e| e.path())
        .collect();
    assert!(sockets.is_empty(), "shim sockets left: {sockets:?}");
    let root = d.root().display().to_string();
    assert!(common::host_processes_with(&root).is_empty(), "processes of the data root left");
}

#[test]
fn a_killed_daemon_leaves_no_pooled_sandbox_behind() {
    let mut d = Daemon::start_with(&["--warm", "2"]);
    // One taken before the daemon dies is a sandbox like any other: the next daemon takes it over.
    ready(&d, 2);
    let kept = create(&d, json!({"name": "kept", "env": {"KEPT": "yes"}}));
    let kept_id = kept["id"].as_str().unwrap().to_string();
    let pooled = ready(&d, 2);
    d.kill();
    // Each pooled shim sees its daemon go (its stdin closes) and tears its sandbox down.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pooled.iter().any(|id| std::path::Path::new(&format!("/run/berth/live/{id}.lock")).exists()) {
        assert!(Instant::now() < deadline, "pooled sandboxes outlived their daemon");
        std::thread::sleep(Duration::from_millis(50));
    }
    let cgroups = common::berth_cgroups();
    assert!(!pooled.iter().any(|id| cgroups.iter().any(|c| c.ends_with(id))), "{cgroups:?}");
    // The next daemon removes their volumes, and builds a pool of its own.
    d.spawn();
    let next = ready(&d, 2);
    assert!(next.is_disjoint(&pooled));
    for id in &pooled {
        assert!(!d.root().join("pool/sandboxes").join(id).exists(), "volume of {id} left");
    }
    assert_eq!(d.ids(), vec![kept_id.clone()]);
    assert_eq!(sh(&d, &kept_id, "hostname; echo $KEPT"), "kept\nyes\n");
    let out = d.berth(&["rm", "--all"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    d.stop();
    for id in &next {
        assert!(!d.root().join("pool/sandboxes").join(id).exists(), "volume of {id} left");
    }
}

#[test]
fn a_pooled_create_gets_the_quota_it_asks_for_and_a_new_storage_pool_gets_a_new_pool() {
    let mut d = Daemon::start_with(&["--warm", "1", "--storage", "none"]);
    ready(&d, 1);
    // The pool's volumes are under the data root as it is; making a storage pool empties the warm pool
    // first (a pool that holds volumes is refused) and it refills on the new one.
    let out =
        d.cmd(&["--root", &d.root().display().to_string(), "storage", "init", "--size", "300M"]).output().unwrap();
    assert!(out.status.success(), "storage init: {}", common::text(&out.stderr));
    let pooled = ready(&d, 1);
    let (_, storage) = d.http("GET", "/v1/storage", "");
    assert!(storage.contains("btrfs"), "{storage}");
    let a = create(&d, json!({"disk_bytes": 64u64 << 20}));
    let a_id = a["id"].as_str().unwrap().to_string();
    assert!(pooled.contains(&a_id), "{a_id} was not one of the pool's {pooled:?}");
    assert_eq!(a["disk_bytes"], 64u64 << 20);
    let full = d.berth(&["exec", &a_id, "--", "sh", "-c", "head -c 100M /dev/zero > /workspace/big"]);
    assert!(!full.status.success(), "a 100 MiB write passed a 64 MiB quota");
    let out = d.berth(&["rm", "--all"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    ready(&d, 1);
    d.stop();
    let left: Vec<_> =
        std::fs::read_dir(d.root().join("pool/sandboxes")).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "volumes left: {left:?}");
}
