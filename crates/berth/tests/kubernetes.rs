//! berth as a Kubernetes RuntimeClass on a node: Debian's containerd (installed by scripts/setup) started by
//! hand with a private root, state and socket, driving `berth-oci` through its stock runc shim, as it does
//! for a `berth` runtime handler. `ctr` runs, execs, pauses, kills and deletes tasks; the CRI calls a kubelet
//! makes for a pod are made with the CRI v1 stubs from PyPI (`tests/kubernetes/cri_pod.py`); the isolation
//! berth promises is checked from inside; and nothing is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::containerd::{Containerd, IMAGE, NS, OCI_ROOT, bundle, cgroups_left, leftovers, repo};
use common::text;
use serde_json::Value;

#[test]
fn ctr_runs_containers_through_berth_oci() {
    let c = Containerd::start();
    // Exit codes and both streams come back; root inside is an unprivileged host id block; the image's
    // files are root's inside, and what root writes is its own.
    let out = c.run(
        &["--rm"],
        "one",
        &["sh", "-c", "echo out; echo err >&2; id -u; cat /proc/self/uid_map; stat -c %u /bin/busybox; touch /etc/made && stat -c %u /etc/made; exit 7"],
    );
    assert_eq!(out.status.code(), Some(7), "{}\n{}\n{}", text(&out.stdout), text(&out.stderr), c.log());
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "out");
    assert_eq!(lines[1], "0", "root inside");
    let map: Vec<u64> = lines[2].split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(map[0], 0);
    assert!(map[1] >= 0x7000_0000, "root inside is a host id of berth's blocks, not host root: {map:?}");
    assert_eq!(map[2], 65536);
    assert_eq!(&lines[3..5], ["0", "0"], "image files and new files are root's inside");
    assert!(text(&out.stderr).contains("err"));

    // A process that cannot be found fails the create with the runtime's sentence.
    let out = c.run(&["--rm"], "missing", &["no-such-program"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("executable file not found"), "{}", text(&out.stderr));

    // A terminal: the process's streams are a pseudo-terminal of the container's own devpts (`ctr -t` wants
    // one of its own, which `script` gives it).
    let line = format!(
        "ctr --address {} --namespace {NS} run --rm -t --runc-binary {} --runc-root {} {IMAGE} tty sh -c 'tty; exit 3'",
        c.socket().display(),
        c.path().join("berth-oci").display(),
        c.path().join("oci").display()
    );
    let out = Command::new("script").args(["-qec", &line, "/dev/null"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("/dev/pts/0"), "{}", text(&out.stdout));
    assert_eq!(leftovers(&c, OCI_ROOT), Vec::<String>::new());
    assert_eq!(cgroups_left(NS, &["one", "missing", "tty"]), Vec::<String>::new());
}

#[test]
fn a_detached_task_execs_pauses_resumes_and_reaches_stopped() {
    let c = Containerd::start();
    let out = c.run(&["-d"], "long", &["sleep", "3600"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stderr), c.log());
    assert_eq!(c.wait_status("long", "RUNNING"), "RUNNING");
    let state: Value = serde_json::from_slice(&c.oci(OCI_ROOT, &["state", "long"]).stdout).unwrap();
    assert_eq!(state["status"], "running");
    assert!(state["pid"].as_i64().unwrap() > 0);

    let exec =
        c.ctr(&["task", "exec", "--exec-id", "e1", "long", "sh", "-c", "ps -o pid,comm; echo $((6 * 7)); exit 4"]);
    assert_eq!(exec.status.code(), Some(4), "{}", text(&exec.stderr));
    let shown = text(&exec.stdout);
    assert!(shown.contains("1 sleep") && shown.contains("42"), "the exec runs beside the first process: {shown}");
    // An exec is hardened as the first process is.
    let exec = c.ctr(&[
        "task",
        "exec",
        "--exec-id",
        "e2",
        "long",
        "grep",
        "-E",
        "^(Seccomp|NoNewPrivs):",
        "/proc/self/status",
    ]);
    assert_eq!(text(&exec.stdout).split_whitespace().collect::<Vec<_>>(), ["NoNewPrivs:", "1", "Seccomp:", "2"]);

    assert!(c.ctr(&["task", "pause", "long"]).status.success());
    assert_eq!(c.task_status("long"), "PAUSED");
    let state: Value = serde_json::from_slice(&c.oci(OCI_ROOT, &["state", "long"]).stdout).unwrap();
    assert_eq!(state["status"], "paused");
    assert!(c.ctr(&["task", "resume", "long"]).status.success());
    assert_eq!(c.task_status("long"), "RUNNING");
    let ps = text(&c.ctr(&["task", "ps", "long"]).stdout);
    assert_eq!(ps.lines().count(), 2, "the first process alone: {ps}");

    // Killed, the task must be reported stopped (its process is the shim's child, which reaps it).
    assert!(c.ctr(&["task", "kill", "-s", "KILL", "long"]).status.success());
    assert_eq!(c.wait_status("long", "STOPPED"), "STOPPED");
    let state: Value = serde_json::from_slice(&c.oci(OCI_ROOT, &["state", "long"]).stdout).unwrap();
    assert_eq!(state["status"], "stopped");
    assert!(c.ctr(&["task", "rm", "long"]).status.success());
    assert!(c.ctr(&["container", "rm", "long"]).status.success());

    // The limits of the config are the container's cgroup's, and the memory one holds: the kernel kills the
    // process at it, and the shim reports the kill (137).
    let out = c.run(&["-d", "--memory-limit", "67108864", "--cpus", "0.5"], "limited", &["sleep", "3600"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let state: Value = serde_json::from_slice(&c.oci(OCI_ROOT, &["state", "limited"]).stdout).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let memory = cgroups.lines().find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()));
    let (limit, quota) = match memory {
        Some(path) => {
            let cpu = cgroups
                .lines()
                .find_map(|l| l.split_once(":cpu,cpuacct:").or(l.split_once(":cpu:")).map(|(_, p)| p.to_string()))
                .unwrap();
            let cpu_root = if Path::new("/sys/fs/cgroup/cpu,cpuacct").exists() { "cpu,cpuacct" } else { "cpu" };
            (
                std::fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")).unwrap(),
                std::fs::read_to_string(format!("/sys/fs/cgroup/{cpu_root}{cpu}/cpu.cfs_quota_us")).unwrap(),
            )
        }
        None => {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
            (
                std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max")).unwrap(),
                std::fs::read_to_string(format!("/sys/fs/cgroup{path}/cpu.max"))
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string(),
            )
        }
    };
    assert_eq!((limit.trim(), quota.trim()), ("67108864", "50000"), "{cgroups}");
    assert!(cgroups.contains("/berthtest/limited"), "the cgroup is where the config's cgroupsPath says: {cgroups}");
    assert!(c.ctr(&["task", "kill", "-s", "KILL", "limited"]).status.success());
    assert_eq!(c.wait_status("limited", "STOPPED"), "STOPPED");
    assert!(c.ctr(&["task", "rm", "limited"]).status.success());
    assert!(c.ctr(&["container", "rm", "limited"]).status.success());
    let out = c.run(&["--rm", "--memory-limit", "33554432"], "hog", &["sh", "-c", "x=a; while true; do x=$x$x; done"]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));

    // A process that ends by itself stops the task too, with its code.
    let out = c.run(&["-d"], "brief", &["sh", "-c", "sleep 0.2; exit 9"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(c.wait_status("brief", "STOPPED"), "STOPPED");
    let rm = c.ctr(&["task", "rm", "brief"]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    assert!(c.ctr(&["container", "rm", "brief"]).status.success());
    assert_eq!(leftovers(&c, OCI_ROOT), Vec::<String>::new());
    assert_eq!(cgroups_left(NS, &["long", "limited", "hog", "brief"]), Vec::<String>::new());
    let listed: Value = serde_json::from_slice(&c.oci(OCI_ROOT, &["list", "--format", "json"]).stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]));
}

#[test]
fn the_cri_calls_of_a_kubelet_run_a_pod_on_the_berth_handler() {
    let c = Containerd::start();
    let python = repo().join("target/venv/bin/python");
    let check = Command::new(&python).args(["-c", "import cri_api.v1"]).output();
    assert!(
        check.as_ref().is_ok_and(|o| o.status.success()),
        "the CRI stubs are not installed in {}: run scripts/setup",
        python.display()
    );
    let logs = c.path().join("pod-logs");
    let child = Command::new(&python)
        .arg(repo().join("crates/berth/tests/kubernetes/cri_pod.py"))
        .arg(c.socket())
        .args([IMAGE, "berth"])
        .arg(&logs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::daemon::wait_output(child, Duration::from_secs(180));
    assert!(out.status.success(), "{}\n{}\n{}", text(&out.stdout), text(&out.stderr), c.log());
    let seen: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(seen["pod_state"], "SANDBOX_READY");
    assert_eq!(seen["pod_handler"], "berth");
    assert_eq!(seen["app_state"], "CONTAINER_RUNNING");
    assert_eq!(seen["hello"]["code"], 3, "ExecSync gives the command's exit code: {}", seen["hello"]);
    assert!(seen["hello"]["stdout"].as_str().unwrap().starts_with("hello from "));
    // The isolation berth promises, seen from inside a pod's container.
    let ids = seen["ids"]["stdout"].as_str().unwrap();
    let map: Vec<&str> = ids.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(map[0], "0");
    assert!(map[1].parse::<u64>().unwrap() >= 0x7000_0000, "root inside is not host root: {ids}");
    assert!(ids.contains("NoNewPrivs:\t1") && ids.contains("Seccomp:\t2"), "{ids}");
    let bound = ids.lines().find_map(|l| l.strip_prefix("CapBnd:\t")).unwrap();
    let bound = u64::from_str_radix(bound, 16).unwrap();
    for (cap, name) in [(21, "SYS_ADMIN"), (13, "NET_RAW"), (27, "MKNOD"), (19, "SYS_PTRACE"), (12, "NET_ADMIN")] {
        assert_eq!(bound & (1 << cap), 0, "CAP_{name} is out of the bound: {ids}");
    }
    let host_files = seen["host_files"]["stdout"].as_str().unwrap();
    let root_entries: Vec<&str> = host_files.lines().take_while(|l| *l != "--").collect();
    assert!(host_files.contains("--\nkcore: empty or absent\n"), "/proc/kcore is masked: {host_files}");
    for entry in &root_entries {
        assert!(
            ["bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "run", "var", "dev/termination-log"]
                .contains(entry),
            "/ holds the image's files only, not the host's: {root_entries:?}"
        );
    }
    assert!(seen["write"]["stdout"].as_str().unwrap().starts_with("kept\n"));
    assert_eq!(seen["cgroup_limit"]["stdout"], "268435456\n", "the pod's limit, seen inside: {}", seen["cgroup_limit"]);
    assert_eq!(seen["cgroup_updated"]["stdout"], "536870912\n", "UpdateContainerResources: {}", seen["cgroup_updated"]);
    // The pod's containers share its id block; each has its own pid namespace unless the pod shares one.
    assert_eq!(seen["peer_ids"]["stdout"].as_str().unwrap().lines().next(), ids.lines().nth(1));
    assert_eq!(seen["peer_sees_app"]["stdout"], "1\n");
    let shared = seen["shared_ps"]["stdout"].as_str().unwrap();
    assert!(
        shared.lines().filter(|l| l.ends_with("sleep")).count() >= 2,
        "shareProcessNamespace shows the pod's processes: {shared}"
    );
    assert!(shared.contains(map[1]), "{shared}");
    assert_eq!(seen["done"], serde_json::json!({"state": "CONTAINER_EXITED", "exit_code": 5}));
    assert_eq!(seen["listed"], serde_json::json!(["app", "done", "peer", "shared"]));
    assert_eq!(seen["stopped"], serde_json::json!(["CONTAINER_EXITED", "CONTAINER_EXITED", "CONTAINER_EXITED"]));
    assert_eq!(seen["pods_left"], 0);
    assert_eq!(leftovers(&c, "oci-cri/k8s.io"), Vec::<String>::new());
    let made: Vec<&str> = seen["made"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(made.len(), 5, "the pod and its four containers: {made:?}");
    assert_eq!(cgroups_left("k8s.io", &made), Vec::<String>::new());
}

/// A bundle on a plain directory (no containerd): busybox, and a config running `script`.
#[test]
fn berth_oci_runs_a_bundle_and_refuses_what_it_cannot_do() {
    assert!(rustix::process::geteuid().is_root(), "berth-oci needs root");
    let tmp = tempfile::Builder::new().prefix("bo-").tempdir_in("/tmp").unwrap();
    let root = tmp.path().join("state");
    let log = tmp.path().join("log.json");
    let oci = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.arg("oci").arg("--root").arg(&root).arg("--log").arg(&log).args(["--log-format", "json"]).args(args);
        cmd.output().unwrap()
    };
    let failed = |out: &Output, needle: &str| {
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
        assert!(text(&out.stderr).contains(needle), "wanted {needle:?} in: {}", text(&out.stderr));
    };
    // Whatever fails below, no container is left waiting.
    struct Removed<'a>(&'a Path);
    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            let _ = Command::new(env!("CARGO_BIN_EXE_berth"))
                .arg("oci")
                .arg("--root")
                .arg(self.0)
                .args(["delete", "--force", "c1"])
                .output();
        }
    }
    let _removed = Removed(&root);
    let b = bundle(tmp.path(), "echo started on $(hostname); id -u; sleep 30", serde_json::json!({}));
    let bs = b.to_str().unwrap();

    // The whole life, as the shim drives it: created (waiting), running after start, stopped when killed.
    // The container's process keeps the streams create was given: files, so that nothing waits for their end.
    let out_file = std::fs::File::create(tmp.path().join("out")).unwrap();
    let err_file = std::fs::File::create(tmp.path().join("err")).unwrap();
    let created = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("oci")
        .arg("--root")
        .arg(&root)
        .args(["create", "--bundle", bs, "--pid-file"])
        .arg(tmp.path().join("pid"))
        .arg("c1")
        .stdout(out_file)
        .stderr(err_file)
        .status()
        .unwrap();
    assert!(created.success(), "{}", std::fs::read_to_string(tmp.path().join("err")).unwrap());
    let pid: i32 = std::fs::read_to_string(tmp.path().join("pid")).unwrap().parse().unwrap();
    let state: Value = serde_json::from_slice(&oci(&["state", "c1"]).stdout).unwrap();
    assert_eq!((state["status"].as_str(), state["pid"].as_i64()), (Some("created"), Some(i64::from(pid))));
    assert_eq!(state["bundle"], bs);
    failed(&oci(&["create", "--bundle", bs, "c1"]), "container c1 already exists");
    failed(&oci(&["resume", "c1"]), "not paused");
    assert!(oci(&["start", "c1"]).status.success());
    failed(&oci(&["start", "c1"]), "not created");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(tmp.path().join("out")).unwrap().lines().count() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(tmp.path().join("out")).unwrap(), "started on bundled\n0\n");
    let state: Value = serde_json::from_slice(&oci(&["state", "c1"]).stdout).unwrap();
    assert_eq!(state["status"], "running");
    let ps: Vec<i32> = serde_json::from_slice(&oci(&["ps", "--format", "json", "c1"]).stdout).unwrap();
    assert!(ps.contains(&pid), "{ps:?}");
    // Limits change on a running container (the CRI's UpdateContainerResources), by flag or as JSON on stdin.
    assert!(oci(&["update", "--memory", "100663296", "c1"]).status.success());
    let mut update = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("oci")
        .arg("--root")
        .arg(&root)
        .args(["update", "--resources", "-", "c1"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    update.stdin.take().unwrap().write_all(br#"{"pids": {"limit": 77}}"#).unwrap();
    assert!(update.wait().unwrap().success());
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let limit_of = |controller: &str, v1: &str, v2: &str| -> String {
        let file =
            match cgroups.lines().find_map(|l| l.split_once(&format!(":{controller}:")).map(|(_, p)| p.to_string())) {
                Some(path) => format!("/sys/fs/cgroup/{controller}{path}/{v1}"),
                None => format!("/sys/fs/cgroup{}/{v2}", cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap()),
            };
        std::fs::read_to_string(file).unwrap().trim().to_string()
    };
    assert_eq!(limit_of("memory", "memory.limit_in_bytes", "memory.max"), "100663296");
    assert_eq!(limit_of("pids", "pids.max", "pids.max"), "77");
    failed(&oci(&["update", "--memory", "lots", "c1"]), "is not a number");
    // No container's cgroup goes inside another's (a delete of the outer one would kill it).
    let nest = tempfile::tempdir_in(tmp.path()).unwrap();
    let inner = bundle(
        nest.path(),
        "true",
        serde_json::json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}], "cgroupsPath": "/berth-oci/c1/inner"}}),
    );
    failed(&oci(&["create", "--bundle", inner.to_str().unwrap(), "c9"]), "inside, container c1's");
    failed(&oci(&["delete", "c1"]), "not stopped: running");
    failed(&oci(&["kill", "c1", "NOPE"]), "NOPE is not a signal");
    assert!(oci(&["kill", "c1", "KILL"]).status.success());
    // Not this process's child: it stays a zombie until whoever is its parent (here, nobody: init) reaps it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while serde_json::from_slice::<Value>(&oci(&["state", "c1"]).stdout).unwrap()["status"] != "stopped" {
        assert!(Instant::now() < deadline, "a killed container must be stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    failed(&oci(&["kill", "c1", "TERM"]), "container not running");
    failed(&oci(&["update", "--pids-limit", "5", "c1"]), "container c1 is stopped");
    let exec_process = tmp.path().join("process.json");
    std::fs::write(&exec_process, r#"{"args": ["true"], "cwd": "/"}"#).unwrap();
    failed(&oci(&["exec", "--process", exec_process.to_str().unwrap(), "c1"]), "it is stopped");
    assert!(oci(&["delete", "c1"]).status.success());
    failed(&oci(&["state", "c1"]), "container c1 does not exist");
    // The errors went to the log too, as the shim reads them.
    let last = std::fs::read_to_string(&log).unwrap().lines().last().unwrap().to_string();
    let last: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["level"], "error");
    assert!(last["msg"].as_str().unwrap().contains("does not exist"), "{last}");

    // The pids limit holds: forks past it fail inside.
    let dir = tempfile::tempdir_in(tmp.path()).unwrap();
    let limited = serde_json::json!({"linux": {
        "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}],
        "resources": {"pids": {"limit": 6}}
    }});
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done";
    let b = bundle(dir.path(), script, limited);
    let err = tmp.path().join("pids-err");
    let created = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("oci")
        .arg("--root")
        .arg(&root)
        .args(["create", "--bundle", b.to_str().unwrap(), "p1"])
        .stdout(std::fs::File::create(tmp.path().join("pids-out")).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    assert!(created.success(), "{}", std::fs::read_to_string(&err).unwrap());
    assert!(oci(&["start", "p1"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&err).unwrap().contains("fork") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ps: Vec<i32> = serde_json::from_slice(&oci(&["ps", "--format", "json", "p1"]).stdout).unwrap();
    assert!(ps.len() <= 6, "at most 6 tasks: {ps:?}");
    assert!(std::fs::read_to_string(&err).unwrap().contains("fork"), "{}", std::fs::read_to_string(&err).unwrap());
    assert!(oci(&["delete", "--force", "p1"]).status.success());

    // What berth will not do, each refused with a sentence and nothing left.
    failed(&oci(&["create", "--bundle", "/nonexistent/bundle", "c2"]), "cannot read /nonexistent/bundle/config.json");
    failed(&oci(&["create", "--bundle", bs, "../x"]), "is not a container id");
    for (extra, needle) in [
        (serde_json::json!({"hooks": {"prestart": [{"path": "/bin/true"}]}}), "runs no hook programs"),
        (serde_json::json!({"linux": {"namespaces": [{"type": "ipc"}, {"type": "mount"}]}}), "host's pid namespace"),
        (serde_json::json!({"mounts": [{"destination": "/mnt", "type": "nfs", "source": "h:/x"}]}), "does not mount"),
        (
            serde_json::json!({"process": {"args": ["nothere"], "cwd": "/", "env": ["PATH=/bin"]}}),
            "executable file not found",
        ),
        (
            serde_json::json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}], "cgroupsPath": "system.slice:x:y"}}),
            "systemd",
        ),
    ] {
        let dir = tempfile::tempdir_in(tmp.path()).unwrap();
        let b = bundle(dir.path(), "true", extra.clone());
        failed(&oci(&["create", "--bundle", b.to_str().unwrap(), "bad"]), needle);
        failed(&oci(&["state", "bad"]), "does not exist");
    }
    failed(&oci(&["--systemd-cgroup", "state", "x"]), "SystemdCgroup = false");
    failed(&oci(&["checkpoint", "x"]), "berth's own API");
    // The link containerd's BinaryName names, and the personality it selects.
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    assert!(oci(&["link", bin.to_str().unwrap()]).status.success());
    let version = Command::new(bin.join("berth-oci")).arg("--version").output().unwrap();
    assert!(text(&version.stdout).starts_with("berth-oci version "), "{}", text(&version.stdout));
    let features: Value = serde_json::from_slice(&oci(&["features"]).stdout).unwrap();
    assert_eq!(features["ociVersionMax"], "1.1.0");
    assert!(features["linux"]["namespaces"].as_array().unwrap().contains(&serde_json::json!("user")));
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !matches!(n.as_str(), ".pods" | ".pods.lock"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
    assert_eq!(std::fs::read_dir(root.join(".pods")).unwrap().count(), 0, "every pod's id block is given back");
    assert_eq!(cgroups_left("berth-oci", &["c1", "p1", "bad", "c9"]), Vec::<String>::new());
}
