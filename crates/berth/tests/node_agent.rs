//! berth's daemon as a Kubernetes node's agent: a pod on the berth handler whose annotations ask for it
//! (`berth.dev/workspace`) is registered by berth-oci with a real daemon, gets its workspace volume from the
//! daemon's btrfs pool at /workspace in its containers, has its containers and execs journaled, can have its
//! workspace forked with the pod frozen, and leaves a receipt; the workspace outlives the pod and a new pod
//! naming it (or its fork) carries on from it. The CRI calls are the kubelet's, through containerd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
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
    // Through the command line, as an operator on the node does it.
    let forked = d.berth(&["pod", "fork", &pod, "--workspace", "ws-b"]);
    assert!(forked.status.success(), "{}", text(&forked.stderr));
    assert_eq!(text(&forked.stdout), "ws-b\n");
    sh(&c, &app, "echo three >> /workspace/notes");
    let (status, body) = d.http("POST", &format!("/v1/pods/{pod}/fork"), r#"{"workspace": "ws-b"}"#);
    assert_eq!(status, 409, "a taken name is refused: {body}");
    assert_eq!(sh(&c, &app, "cat /workspace/notes"), "one\ntwo\nthree\n", "the pod ran on after the fork");
    let listed = text(&d.berth(&["pod", "ls"]).stdout);
    let row = listed.lines().find(|l| l.starts_with(&pod[..12])).unwrap_or_default().to_string();
    for word in ["agents/agent-a", "live", " 2 ", "ws-a"] {
        assert!(row.contains(word), "{word:?} in {listed}");
    }

    // Bad input to the node's calls: a sentence, nothing changed. A pod names only its own namespace's
    // workspaces (not another's, not a sandbox's volume), and its policy reaches no special address unless
    // the node's operator lets it (--pod-egress-special).
    let (status, body) = d.http("POST", "/v1/volumes", r#"{"name": "plain-vol"}"#);
    assert_eq!(status, 201, "{body}");
    for (path, body, code, needle) in [
        (
            "/v1/pods",
            r#"{"id": "p2", "namespace": "agents", "workspace": "plain-vol"}"#,
            409,
            "not a workspace of the pods of namespace",
        ),
        ("/v1/pods", r#"{"id": "p3", "namespace": "others", "workspace": "ws-a"}"#, 409, "only its own namespace's"),
        (
            "/v1/pods",
            r#"{"id": "p4", "egress": {"allow": ["x.test"], "add_hosts": {"x.test": "127.0.0.1"}}, "netns": "/x"}"#,
            400,
            "--pod-egress-special",
        ),
        (
            "/v1/pods",
            r#"{"id": "p5", "egress": {"allow": ["169.254.169.254:80"]}, "netns": "/x"}"#,
            400,
            "--pod-egress-special",
        ),
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
    let receipt: Value = serde_json::from_slice(&d.berth(&["pod", "receipt", &pod]).stdout).unwrap();
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
    for ws in ["ws-a", "ws-b", "plain-vol"] {
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

/// Two network namespaces of the test's own: the pod's, as CNI would make one (`lo`, and an `eth0` with an
/// address and a default route), and the network beyond it (the other end of the veth pair), where a
/// listener counts what reaches it.
struct Netns {
    pod: String,
    outside: String,
}

impl Netns {
    fn new() -> Netns {
        let (pod, outside) =
            (format!("berthtest-{}", std::process::id()), format!("berthtest-out-{}", std::process::id()));
        let ip = |args: &str| {
            let out = Command::new("ip").args(args.split_whitespace()).output().unwrap();
            assert!(out.status.success(), "ip {args}: {}", text(&out.stderr));
        };
        for n in [&pod, &outside] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
        ip(&format!("netns add {pod}"));
        ip(&format!("netns add {outside}"));
        let ns = Netns { pod: pod.clone(), outside: outside.clone() };
        ip(&format!("-n {pod} link set lo up"));
        ip(&format!("-n {pod} link add eth0 type veth peer name eth1 netns {outside}"));
        ip(&format!("-n {pod} addr add 10.213.0.2/24 dev eth0"));
        ip(&format!("-n {outside} addr add 10.213.0.1/24 dev eth1"));
        ip(&format!("-n {pod} link set eth0 up"));
        ip(&format!("-n {outside} link set eth1 up"));
        ip(&format!("-n {pod} route add default via 10.213.0.1"));
        ns
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.pod)
    }

    /// Run `f` on a thread of its own in namespace `name`.
    fn within<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
        let file = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
        std::thread::spawn(move || {
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            f()
        })
    }

    /// A listener at 10.213.0.1:8080 beyond the pod's network; the count of connections it took.
    fn listen_outside(&self) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&count);
        let (tx, rx) = std::sync::mpsc::channel();
        Netns::within(&self.outside, move || {
            let listener = std::net::TcpListener::bind("10.213.0.1:8080").unwrap();
            tx.send(()).unwrap();
            for _ in listener.incoming().flatten() {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        rx.recv().unwrap();
        count
    }

    /// Whether a connection from the pod's namespace reaches the listener beyond it.
    fn reaches_outside(&self) -> bool {
        Netns::within(&self.pod, || {
            std::net::TcpStream::connect_timeout(&"10.213.0.1:8080".parse().unwrap(), Duration::from_secs(2)).is_ok()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in [&self.pod, &self.outside] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// A server on the host's loopback answering every request with one line.
fn serve_once_each() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 20\r\n\r\nhello from the host\n");
        }
    });
    port
}

#[test]
fn a_pods_egress_goes_through_the_node_agents_proxy_and_no_other_way() {
    let mut d = Daemon::start_with(&["--pod-egress-special"]);
    let port = serve_once_each();
    let ns = Netns::new();
    let tmp = tempfile::Builder::new().prefix("bn-").tempdir_in("/tmp").unwrap();
    let root = tmp.path().join("state");
    let (id, other) = (format!("eg1-{}", std::process::id()), format!("eg2-{}", std::process::id()));
    // Whatever fails below, no container is left running.
    struct Removed(std::path::PathBuf, String);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = Command::new(env!("CARGO_BIN_EXE_berth"))
                .arg("oci")
                .arg("--root")
                .arg(&self.0)
                .args(["delete", "--force", &self.1])
                .output();
        }
    }
    let _removed = Removed(root.clone(), id.clone());
    let oci = |d: &Daemon, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .env("BERTH_SOCKET", d.socket())
            .arg("oci")
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    // Before berth has the pod: its namespace reaches the network beyond it.
    let reached = ns.listen_outside();
    assert!(ns.reaches_outside(), "the test's network works");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while reached.load(std::sync::atomic::Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 1, "the listener took the connection");
    // A request through the proxy the variables name (busybox's wget cannot be used: it crashes at start).
    let fetch = format!(
        "req() {{ printf 'GET http://%s:{port}/ HTTP/1.0\\r\\nHost: %s:{port}\\r\\n\\r\\n' $1 $1 | nc -w 5 127.0.0.1 1023; }}; \
         echo proxy=$HTTP_PROXY; req allowed.test; req denied.test; \
         nc -w 2 10.213.0.1 8080 </dev/null 2>&1; echo direct=$?"
    );
    let annotations = serde_json::json!({
        "berth.dev/egress": "allowed.test",
        "berth.dev/egress-hosts": "allowed.test=127.0.0.1, denied.test=127.0.0.1",
    });
    let namespaces = serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "uts"},
        {"type": "network", "path": ns.path()}]);
    let b = common::containerd::bundle(
        tmp.path(),
        &format!("{fetch}; echo done; sleep 60"),
        serde_json::json!({"annotations": annotations, "linux": {"namespaces": namespaces}}),
    );
    let out_path = tmp.path().join("out");
    let created = Command::new(env!("CARGO_BIN_EXE_berth"))
        .env("BERTH_SOCKET", d.socket())
        .arg("oci")
        .arg("--root")
        .arg(&root)
        .args(["create", "--bundle", b.to_str().unwrap(), &id])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(tmp.path().join("err")).unwrap())
        .status()
        .unwrap();
    assert!(created.success(), "{}", std::fs::read_to_string(tmp.path().join("err")).unwrap());
    let started = oci(&d, &["start", &id]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&out_path).unwrap().contains("done") {
        assert!(std::time::Instant::now() < deadline, "{}", std::fs::read_to_string(&out_path).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = std::fs::read_to_string(&out_path).unwrap();
    // The container has the proxy's variables; the allowed name is reached through it (from the host's
    // network, where the server is); the other is refused by the proxy; a connection around it is dropped.
    assert!(out.contains("proxy=http://127.0.0.1:1023\n"), "{out}");
    assert!(out.contains("hello from the host\n"), "{out}");
    assert!(out.contains("HTTP/1.1 403"), "{out}");
    assert!(out.contains("direct=1\n"), "{out}");
    assert!(!ns.reaches_outside(), "the pod's namespace no longer reaches beyond it but through the proxy");
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 1, "nothing from the pod got past the rules");
    let rules = Command::new("ip")
        .args(["netns", "exec", &ns.pod, "nft", "list", "table", "inet", "berth_egress"])
        .output()
        .unwrap();
    assert!(text(&rules.stdout).contains("policy drop"), "{}", text(&rules.stderr));

    // Each attempt is in the pod's journal, with the policy's verdict.
    let egress = |d: &Daemon| -> Vec<(String, String)> {
        get(d, &format!("/v1/pods/{id}/journal"))
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "egress")
            .map(|r| {
                (
                    r["result"]["host"].as_str().unwrap().to_string(),
                    r["result"]["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while egress(&d).len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        egress(&d),
        [("allowed.test".to_string(), "allowed".to_string()), ("denied.test".to_string(), "denied".to_string())]
    );
    let pod = get(&d, &format!("/v1/pods/{id}"));
    assert_eq!(pod["egress"]["allow"], serde_json::json!(["allowed.test"]), "{pod}");
    assert_eq!(pod["netns"], ns.path());

    // A restarted daemon takes the proxy up again: an exec gets out through it as the first process did.
    d.stop();
    d.spawn();
    let process = tmp.path().join("process.json");
    let script = format!(
        "printf 'GET http://allowed.test:{port}/ HTTP/1.0\\r\\nHost: allowed.test:{port}\\r\\n\\r\\n' | nc -w 5 127.0.0.1 1023"
    );
    std::fs::write(
        &process,
        serde_json::json!({"args": ["sh", "-c", script], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}})
            .to_string(),
    )
    .unwrap();
    let exec = oci(&d, &["exec", "--process", process.to_str().unwrap(), &id]);
    assert_eq!(exec.status.code(), Some(0), "{}{}", text(&exec.stdout), text(&exec.stderr));
    assert!(text(&exec.stdout).ends_with("\r\n\r\nhello from the host\n"), "{}", text(&exec.stdout));
    assert!(egress(&d).len() >= 3);

    let deleted = oci(&d, &["delete", "--force", &id]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let receipt = get(&d, &format!("/v1/pods/{id}/receipt"));
    assert_eq!(receipt["journal_verified"], true, "{receipt}");

    // What cannot have the policy is refused with a sentence, and nothing is left: a pod on the host's
    // network (no namespace of its own, or the host's by path), and rules berth cannot use.
    for (namespaces, annotations, needle) in [
        (
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}]),
            serde_json::json!({"berth.dev/egress": "allowed.test"}),
            "hostNetwork",
        ),
        (
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "network", "path": format!("/proc/{}/ns/net", std::process::id())}]),
            serde_json::json!({"berth.dev/egress": "allowed.test"}),
            "the host's network namespace",
        ),
        (
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "network", "path": ns.path()}]),
            serde_json::json!({"berth.dev/egress": "bad rule!"}),
            "\"rule!\" is not a valid host name",
        ),
        (
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "network", "path": ns.path()}]),
            serde_json::json!({"berth.dev/egress": "a.test", "berth.dev/egress-hosts": "a.test"}),
            "is not NAME=IP",
        ),
    ] {
        let dir = tempfile::tempdir_in(tmp.path()).unwrap();
        let b = common::containerd::bundle(
            dir.path(),
            "true",
            serde_json::json!({"annotations": annotations, "linux": {"namespaces": namespaces}}),
        );
        let out = oci(&d, &["create", "--bundle", b.to_str().unwrap(), &other]);
        assert_eq!(out.status.code(), Some(1), "{annotations}");
        assert!(text(&out.stderr).contains(needle), "wanted {needle:?}: {}", text(&out.stderr));
        assert_eq!(oci(&d, &["state", &other]).status.code(), Some(1), "nothing is left of it");
    }
    let (status, body) = d.http("GET", &format!("/v1/pods/{other}"), "");
    assert_eq!(status, 404, "a refused pod is not recorded: {body}");
}

#[test]
fn a_cri_pod_on_a_network_of_its_own_gets_out_through_the_proxy_only() {
    let d = Daemon::start_with(&["--pod-egress-special"]);
    let port = serve_once_each();
    // The network beyond the pod, a namespace of the test's; the pod's own is containerd's, made by a CNI
    // plugin of the test's (tests/kubernetes/test_cni.py) that links the two.
    let outside = format!("berthtest-cni-{}", std::process::id());
    let _ = Command::new("ip").args(["netns", "del", &outside]).output();
    assert!(Command::new("ip").args(["netns", "add", &outside]).status().unwrap().success());
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
        }
    }
    let _gone = Gone(outside.clone());
    let conflist = serde_json::json!({
        "cniVersion": "0.4.0", "name": "berthtest", "plugins": [{"type": "berth-test", "outside": outside}]
    });
    let c = Containerd::start_full(&[("BERTH_SOCKET", d.socket().as_os_str())], |dir| {
        std::fs::create_dir_all(dir.join("cni-bin")).unwrap();
        std::fs::create_dir_all(dir.join("cni-conf")).unwrap();
        for name in ["berth-test", "loopback"] {
            let plugin = repo().join("crates/berth/tests/kubernetes/test_cni.py");
            std::os::unix::fs::symlink(plugin, dir.join("cni-bin").join(name)).unwrap();
        }
        std::fs::write(dir.join("cni-conf/10-berthtest.conflist"), conflist.to_string()).unwrap();
    });
    let annotations = serde_json::json!({
        "berth.dev/egress": "allowed.test",
        "berth.dev/egress-hosts": "allowed.test=127.0.0.1",
    });
    let up = step(&c, &["up-net", "agent-net", &annotations.to_string()]);
    assert!(up["error"].is_null(), "{up}");
    let (pod, app) = (up["pod"].as_str().unwrap().to_string(), up["app"].as_str().unwrap().to_string());
    let record = get(&d, &format!("/v1/pods/{pod}"));
    let netns = record["netns"].as_str().unwrap_or_default();
    assert!(netns.contains("/netns/cni-"), "containerd's namespace for the pod: {record}");

    // An exec the kubelet makes (ExecSync) gets the proxy's variables, and out through the proxy only.
    let env = sh(&c, &app, "echo $HTTPS_PROXY $no_proxy");
    assert_eq!(env, "http://127.0.0.1:1023 localhost,127.0.0.1,::1\n");
    let through = sh(
        &c,
        &app,
        &format!(
            "printf 'GET http://allowed.test:{port}/ HTTP/1.0\\r\\nHost: allowed.test:{port}\\r\\n\\r\\n' | nc -w 5 127.0.0.1 1023"
        ),
    );
    assert!(through.ends_with("hello from the host\n"), "{through}");
    let denied = sh(
        &c,
        &app,
        &format!(
            "printf 'GET http://example.com:{port}/ HTTP/1.0\\r\\nHost: example.com:{port}\\r\\n\\r\\n' | nc -w 5 127.0.0.1 1023"
        ),
    );
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    let direct = step(&c, &["sh", &app, "nc -w 2 10.213.0.1 8080 </dev/null; echo direct=$?"]);
    assert!(direct["stdout"].as_str().unwrap().ends_with("direct=1\n"), "{direct}");
    let journal = get(&d, &format!("/v1/pods/{pod}/journal"));
    let verdicts: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "egress")
        .map(|r| r["result"]["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["allowed", "denied"]);
    let netns = netns.to_string();
    assert_eq!(step(&c, &["down", &pod])["pods_left"], 0);
    assert_eq!(get(&d, &format!("/v1/pods/{pod}/receipt"))["journal_verified"], true);
    assert!(!Path::new(&netns).exists(), "containerd removed the pod's namespace {netns}:\n{}", c.log());
}

#[test]
fn past_keep_removed_the_oldest_removed_pods_are_forgotten() {
    let d = Daemon::start_with(&["--keep-removed", "1"]);
    for id in ["old-pod", "new-pod"] {
        let (status, body) = d.http("POST", "/v1/pods", &format!(r#"{{"id": "{id}"}}"#));
        assert_eq!(status, 201, "{body}");
        let (status, body) = d.http("DELETE", &format!("/v1/pods/{id}"), "");
        assert_eq!(status, 200, "{body}");
    }
    // The newest removed pod is kept whole; the one before it is gone: record, journal and receipt.
    assert_eq!(get(&d, "/v1/pods/new-pod/receipt")["journal_verified"], true);
    for path in ["/v1/pods/old-pod", "/v1/pods/old-pod/receipt", "/v1/pods/old-pod/journal"] {
        let (status, body) = d.http("GET", path, "");
        assert_eq!(status, 404, "{path}: {body}");
    }
    let files: Vec<String> = std::fs::read_dir(d.root().join("pods"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.iter().all(|f| !f.starts_with("old-pod")), "{files:?}");
    assert!(files.iter().any(|f| f == "new-pod.jsonl"), "{files:?}");
}
