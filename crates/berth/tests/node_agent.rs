//! berth's daemon as a Kubernetes node's agent: a pod on the berth handler whose annotations ask for it
//! (`berth.dev/workspace`) is registered by berth-oci with a real daemon, gets its workspace volume from the
//! daemon's btrfs pool at /workspace in its containers, has its containers and execs journaled, can have its
//! workspace forked with the pod frozen, and leaves a receipt; the workspace outlives the pod and a new pod
//! naming it (or its fork) carries on from it. The CRI calls are the kubelet's, through containerd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::containerd::{Containerd, IMAGE, repo};
use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// One step of `tests/kubernetes/cri_workspace.py`, its JSON answer.
fn step(c: &Containerd, args: &[&str]) -> Value {
    let python = repo().join("target/venv/bin/python");
    let child = Command::new(&python)
        .arg(repo().join("crates/berth/tests/kubernetes/cri_workspace.py"))
        .arg(c.socket())
        .args([IMAGE, "berth"])
        .arg(c.path().join("pod-logs"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::daemon::wait_output(child, Duration::from_secs(120));
    assert!(out.status.success(), "{args:?}: {}\n{}\n{}", text(&out.stdout), text(&out.stderr), c.log());
    serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap()
}

fn sh(c: &Containerd, container: &str, script: &str) -> String {
    let r = step(c, &["sh", container, script]);
    assert_eq!(r["code"], 0, "{script}: {r}");
    r["stdout"].as_str().unwrap().to_string()
}

fn get(d: &Daemon, path: &str) -> Value {
    let (status, body) = d.http("GET", path, "");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_pod_gets_a_workspace_a_journal_a_fork_and_a_receipt_from_the_node_agent() {
    let mut d = Daemon::start();
    let c = Containerd::start_with(&[("BERTH_SOCKET", d.socket().as_os_str())]);

    let up = step(&c, &["up", "agent-a", "ws-a"]);
    let (pod, app) = (up["pod"].as_str().unwrap().to_string(), up["app"].as_str().unwrap().to_string());
    // The workspace is the pool's volume, root's inside, and what root writes there is stored under berth's
    // storage ids on the host (as a sandbox's volume is), not as the pod's host ids.
    let seen =
        sh(&c, &app, "echo one > /workspace/notes && ls -ln /workspace/notes && grep ' /workspace ' /proc/mounts");
    let owner: Vec<&str> = seen.split_whitespace().skip(2).take(2).collect();
    assert_eq!(owner, ["0", "0"], "{seen}");
    assert!(seen.contains(" /workspace "), "mounted: {seen}");
    let record = get(&d, &format!("/v1/pods/{pod}"));
    assert_eq!(
        (record["workspace"].as_str(), record["namespace"].as_str()),
        (Some("ws-a"), Some("agents")),
        "{record}"
    );
    assert_eq!(record["name"], "agent-a");
    let host = std::path::PathBuf::from(record["workspace_path"].as_str().unwrap()).join("notes");
    assert!(host.starts_with(d.root()), "{}", host.display());
    let meta = std::fs::metadata(&host).unwrap();
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "one\n");
    assert_eq!((meta.uid(), meta.gid()), (0xb000_0000, 0xb000_0000), "stored under berth's storage ids");
    let containers = record["containers"].as_array().unwrap();
    let names: Vec<(&str, &str)> =
        containers.iter().map(|c| (c["name"].as_str().unwrap(), c["state"].as_str().unwrap())).collect();
    assert_eq!(names, [("", "running"), ("app", "running")], "{record}");
    assert_eq!(containers[1]["execs"], 1);

    // While the pod lives its volume is in use: not removable.
    let vols = get(&d, "/v1/volumes");
    let ws = vols.as_array().unwrap().iter().find(|v| v["name"] == "ws-a").unwrap();
    assert_eq!(ws["used_by"], serde_json::json!([format!("pod:{pod}")]));
    let (status, body) = d.http("DELETE", "/v1/volumes/ws-a", "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(&format!("pod:{pod}")), "{body}");

    // A fork of the workspace at this instant: a later write is not in it.
    sh(&c, &app, "echo two >> /workspace/notes");
    let (status, body) = d.http("POST", &format!("/v1/pods/{pod}/fork"), r#"{"workspace": "ws-b"}"#);
    assert_eq!(status, 201, "{body}");
    sh(&c, &app, "echo three >> /workspace/notes");
    let (status, body) = d.http("POST", &format!("/v1/pods/{pod}/fork"), r#"{"workspace": "ws-b"}"#);
    assert_eq!(status, 409, "a taken name is refused: {body}");
    assert_eq!(sh(&c, &app, "cat /workspace/notes"), "one\ntwo\nthree\n", "the pod ran on after the fork");

    // Bad input to the node's calls: a sentence, nothing changed.
    for (path, body, code, needle) in [
        ("/v1/pods", r#"{"id": "../x"}"#, 400, "is not a container id"),
        ("/v1/pods", r#"{"id": "p1", "workspace": "a/b"}"#, 400, "workspace"),
        (&format!("/v1/pods/{pod}/events") as &str, r#"{"kind": "reboot", "container": "x"}"#, 400, "not a pod event"),
        (&format!("/v1/pods/{pod}/events"), r#"{"kind": "exec", "container": "nobody"}"#, 409, "has no container"),
        (
            &format!("/v1/pods/{pod}/events"),
            r#"{"kind": "container_created", "container": "c9", "cgroup": "berth/x"}"#,
            400,
            "not a container's cgroup",
        ),
        ("/v1/pods/nosuchpod/fork", r#"{"workspace": "ws-c"}"#, 404, "no pod"),
    ] {
        let (status, answer) = d.http("POST", path, body);
        assert_eq!(status, code, "{path} {body}: {answer}");
        assert!(answer.contains(needle), "{path} {body}: {answer}");
    }
    let (status, _) = d.http("GET", &format!("/v1/pods/{pod}/receipt"), "");
    assert_eq!(status, 409, "a live pod has no receipt yet");

    // The pod ends: the receipt closes a journal whose chain holds, the workspace stays.
    assert_eq!(step(&c, &["down", &pod])["pods_left"], 0);
    let receipt = get(&d, &format!("/v1/pods/{pod}/receipt"));
    assert_eq!(receipt["journal_verified"], true, "{receipt}");
    assert_eq!(receipt["workspace_kept"], "ws-a");
    assert!(receipt["pod"]["removed_at_ms"].as_u64().is_some());
    assert!(receipt["pod"]["containers"].as_array().unwrap().iter().all(|c| c["state"] == "deleted"), "{receipt}");
    let journal = get(&d, &format!("/v1/pods/{pod}/journal"));
    let actions: Vec<&str> = journal.as_array().unwrap().iter().map(|r| r["action"].as_str().unwrap()).collect();
    let count = |a: &str| actions.iter().filter(|x| **x == a).count();
    assert_eq!(actions.first(), Some(&"pod_created"), "{actions:?}");
    assert_eq!(actions.last(), Some(&"pod_removed"), "{actions:?}");
    assert_eq!(
        (
            count("container_created"),
            count("container_started"),
            count("exec"),
            count("fork"),
            count("container_deleted")
        ),
        (2, 2, 4, 1, 2),
        "{actions:?}"
    );
    assert_eq!(receipt["journal_records"], actions.len());
    assert_eq!(receipt["journal_head"], journal.as_array().unwrap().last().unwrap()["hash"]);
    let exec = journal.as_array().unwrap().iter().find(|r| r["action"] == "exec").unwrap();
    assert_eq!(exec["args"]["args"][0], "sh", "{exec}");
    // Removing it again gives the same receipt; a removed pod takes no events.
    let (status, again) = d.http("DELETE", &format!("/v1/pods/{pod}"), "");
    assert_eq!((status, serde_json::from_str::<Value>(&again).unwrap()), (200, receipt.clone()));
    let (status, body) =
        d.http("POST", &format!("/v1/pods/{pod}/events"), &format!(r#"{{"kind": "exec", "container": "{app}"}}"#));
    assert_eq!(status, 409, "{body}");

    // New pods carry on: from the workspace as it was left, and from the fork's instant.
    for (name, ws, want) in [("agent-b", "ws-a", "one\ntwo\nthree\n"), ("agent-c", "ws-b", "one\ntwo\n")] {
        let up = step(&c, &["up", name, ws]);
        assert_eq!(sh(&c, up["app"].as_str().unwrap(), "cat /workspace/notes"), want, "{name} on {ws}");
        assert_eq!(step(&c, &["down", up["pod"].as_str().unwrap()])["pods_left"], 0);
    }
    for ws in ["ws-a", "ws-b"] {
        let (status, body) = d.http("DELETE", &format!("/v1/volumes/{ws}"), "");
        assert_eq!(status, 200, "a gone pod's workspace is removable: {body}");
    }

    // Without its node agent, a pod that asks for one is not started, with a sentence saying why.
    d.stop();
    let failed = step(&c, &["up", "agent-d", "ws-d"]);
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("berth daemon") && error.contains("berth.dev/"), "{failed}");
    let list = Command::new("ctr")
        .arg("--address")
        .arg(c.socket())
        .args(["--namespace", "k8s.io", "task", "ls", "-q"])
        .output()
        .unwrap();
    assert_eq!(text(&list.stdout).trim(), "", "no task is left of the refused pod");
}
