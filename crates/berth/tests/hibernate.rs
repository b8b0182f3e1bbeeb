//! Hibernation on a real daemon, behind both isolations (the real CRIU for namespaces, gVisor's own
//! checkpoint for gVisor): a sandbox's processes written to disk and their memory released, then woken (by
//! `berth wake` or by any activity) with the same process tree, memory, listening socket and /tmp; through a
//! daemon restart; with a detached exec that goes on in its log and a code context that keeps its variables
//! (CRIU); refused, with the sandbox running on, when it holds what cannot go to disk; after an idle time;
//! and removed leaving nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::server::{ask, serving};
use common::text;
use serde_json::Value;

fn record(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Make a character device node in /tmp; prints the errno it failed with (or `made`).
const MKNOD: &str = "import os, stat\ntry:\n    os.mknod('/tmp/null', stat.S_IFCHR | 0o600, os.makedev(1, 3)); print('made')\n\
                     except OSError as e:\n    print(e.errno)";

/// Host processes in sandbox `id`'s cgroups.
fn processes_of(id: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| std::fs::read_to_string(e.path().join("cgroup")).is_ok_and(|c| c.contains(&format!("/berth/{id}"))))
        .count()
}

on_each_daemon_isolation! {
fn a_hibernated_sandbox_holds_no_memory_and_wakes_where_it_was(d, iso) {
    let gvisor = iso == "gvisor";
    let id = serving(d, &[], 32, "/tmp/served");
    // A process left in the background by an exec, holding that exec's output (under gVisor, a pipe of the
    // sandbox's own, which its checkpoint keeps).
    assert_eq!(d.sh(&id, "sleep 600 & echo started"), "started\n");
    let (n, digest, now, pid) = ask(d, &id).unwrap();
    assert_eq!(digest, now);
    assert!(processes_of(&id) >= 2, "init and the server run in the sandbox's cgroup");

    let out = d.berth(&["hibernate", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["state"], "hibernated");
    assert!(h["pid"].is_null() && h["hibernated_at_ms"].as_u64().is_some(), "{h}");
    assert!(h["landlock"].is_null(), "no init runs, so none reports landlock: {h}");
    assert_eq!(processes_of(&id), 0, "a hibernated sandbox has no process left, so no memory");
    assert!(d.root().join("hibernate").join(&id).join("manifest.json").exists(), "its image is on disk");
    let listed = text(&d.berth(&["ls"]).stdout);
    assert!(listed.lines().any(|l| l.contains(&id) && l.contains("hibernated")), "{listed}");
    // Looking at it does not wake it; hibernating again changes nothing.
    let _ = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
    assert!(d.berth(&["hibernate", &id]).status.success());
    assert_eq!(record(d, &id)["state"], "hibernated");

    // Through a daemon restart it stays hibernated.
    d.kill();
    d.spawn();
    assert_eq!(record(d, &id)["state"], "hibernated", "a restarted daemon keeps it hibernated");

    // An exec wakes it: the same server process, its memory and its count, its listening socket, its /tmp.
    let (n2, digest2, now2, pid2) = ask(d, &id).expect("the woken server answers");
    assert_eq!((n2, &digest2, &now2, &pid2), (n + 1, &digest, &digest, &pid), "it goes on where it was");
    let served = text(&d.berth(&["exec", &id, "--", "cat", "/tmp/served"]).stdout);
    assert_eq!(served.lines().count() as u64, n2, "its open file in /tmp was kept: {served}");
    let r = record(d, &id);
    assert_eq!((r["state"].as_str(), r["last_activity"].as_str()), (Some("running"), Some("exec")), "{r}");
    assert!(r["hibernated_at_ms"].is_null());
    // What the woken init reported once it had executed itself again, its landlock rules back.
    assert_eq!(r["landlock"], if gvisor { "unavailable" } else { "enforced" }, "{r}");
    // The sleeper left in the background is there still, and the kernel is the one it was.
    let ps = d.sh(&id, "ps -eo args");
    assert!(ps.lines().any(|l| l == "sleep 600"), "{ps}");
    let kernel = d.sh(&id, "uname -r");
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(kernel.trim() == host.trim(), !gvisor, "{iso} sandbox saw kernel {kernel}");
    let journal = text(&d.berth(&["journal", &id]).stdout);
    assert!(journal.contains("hibernate") && journal.contains("wake"), "{journal}");
    // Its time asleep is metered as such.
    let usage: Value = serde_json::from_slice(&d.berth(&["usage", &id, "--json"]).stdout).unwrap();
    assert!(usage["hibernated_seconds"].as_f64().unwrap() > 0.0, "{usage}");

    // Its root and /usr are as writable as before (the woken overlays write as the sandbox's root).
    let wrote = d.berth(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo w > /etc/woken && echo u > /usr/local/woken && cat /etc/woken /usr/local/woken",
    ]);
    assert_eq!(text(&wrote.stdout), "w\nu\n", "{}", text(&wrote.stderr));

    // What berth masks is masked still: an empty directory that cannot be written.
    let masked = d.berth(&["exec", &id, "--", "sh", "-c", "ls -A /proc/acpi /sys/firmware; touch /proc/acpi/x"]);
    assert!(
        !masked.status.success() && text(&masked.stdout).trim_end().lines().all(|l| l.ends_with(':') || l.is_empty())
    );

    // Commands started after the wake are under init's landlock rules again (init executed itself anew):
    // making a device node is refused by landlock (EACCES), not only by the user namespace (EPERM). gVisor's
    // kernel refuses it for want of the capability (EPERM).
    let mknod = d.berth(&["exec", &id, "--", "python3", "-c", MKNOD]);
    assert_eq!(text(&mknod.stdout).trim(), if gvisor { "1" } else { "13" }, "{}", text(&mknod.stderr));

    // A woken sandbox hibernates again, and wakes again where it was, as often as asked.
    for round in 1..=2 {
        let out = d.berth(&["hibernate", &id]);
        assert!(out.status.success(), "hibernation {} after a wake: {}", round, text(&out.stderr));
        assert_eq!(processes_of(&id), 0);
        assert!(d.berth(&["wake", &id]).status.success());
        let (n3, digest3, now3, pid3) = ask(d, &id).expect("the server answers after another wake");
        assert_eq!((n3, &digest3, &now3, &pid3), (n2 + round, &digest, &digest, &pid), "round {round}");
    }
    assert!(d.berth(&["wake", &id]).status.success(), "waking an awake sandbox changes nothing");
}
}

#[test]
fn what_a_gvisor_checkpoint_cannot_keep_is_named_and_the_sandbox_runs_on() {
    let d = Daemon::start_with(&["--isolation", "gvisor"]);
    let id = d.create(&[]);
    // A detached exec: its streams are the host's pipes, which gVisor cannot write to disk.
    let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", "echo before; sleep 60"]);
    let detached = text(&out.stdout).trim().to_string();
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot hibernate while execs or shells are running"), "{body}");
    assert!(body.contains(&format!("{detached} (sh -c echo before; sleep 60)")), "{body}");
    assert_eq!(record(&d, &id)["state"], "running");
    assert_eq!(d.sh(&id, "echo fine"), "fine\n", "it runs on");
    // Once it is done, the sandbox hibernates and wakes.
    assert!(d.berth(&["kill", &id, &detached]).status.success());
    wait_for("the detached exec's end", Duration::from_secs(20), || exec_info(&d, &id, &detached)["running"] == false);
    assert_eq!(log_file(&d, &id, &detached), "before\n");
    let out = d.berth(&["hibernate", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A code context: its interpreter is a running exec whose streams are the host's.
    let out = d.berth(&["context", "create", &id, "--language", "python"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ctx = text(&out.stdout).trim().to_string();
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("cannot hibernate while it has code contexts"), "{body}");
    assert!(body.contains(&ctx), "{body}");
    assert_eq!(record(&d, &id)["state"], "running");
}

#[test]
fn what_cannot_go_to_disk_is_named_and_the_sandbox_runs_on() {
    let d = Daemon::start();
    let id = d.create(&[]);
    // A detached exec, held for the hibernation and let go again when it is refused: its timeout still fires.
    let out = d.berth(&["exec", &id, "--detach", "--timeout", "3s", "--", "sh", "-c", "echo before; sleep 60"]);
    let detached = text(&out.stdout).trim().to_string();
    // An exec whose output streams to its client.
    let mut attached = d.cmd(&["exec", &id, "--", "sleep", "60"]).stdout(Stdio::piped()).spawn().unwrap();
    wait_for("the attached exec", Duration::from_secs(20), || {
        d.execs(&id).iter().any(|e| e["running"] == true && e["argv"][0] == "sleep")
    });
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("execs or shells are running") && body.contains("sleep 60"), "{body}");
    assert!(body.contains("its output streams to a client"), "{body}");
    assert!(!body.contains(&format!("{detached} (")), "a detached exec does not refuse it: {body}");
    assert_eq!(record(&d, &id)["state"], "running");
    assert!(d.berth(&["exec", &id, "--", "true"]).status.success());
    common::terminate(&mut attached);
    wait_for("the detached exec's timeout", Duration::from_secs(20), || {
        exec_info(&d, &id, &detached)["running"] == false
    });
    assert_eq!(exec_info(&d, &id, &detached)["result"]["timed_out"], true);
    assert_eq!(log_file(&d, &id, &detached), "before\n");
    // `berth wake` brings one back explicitly.
    let other = d.create(&[]);
    assert!(d.berth(&["exec", &other, "--", "sh", "-c", "echo 41 > /tmp/n"]).status.success());
    assert!(d.berth(&["hibernate", &other]).status.success());
    let out = d.berth(&["wake", &other, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let w: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((w["state"].as_str(), w["last_activity"].as_str()), (Some("running"), Some("wake")), "{w}");
    assert_eq!(text(&d.berth(&["exec", &other, "--", "cat", "/tmp/n"]).stdout).trim(), "41");
    // A nonsense idle time is refused with a sentence.
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"idle_hibernate_seconds": -1}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("idle_hibernate_seconds must be a positive number of seconds"), "{body}");
    // A missing one is not found.
    let (status, body) = d.http("POST", "/v1/sandboxes/000000000000/wake", "");
    assert_eq!(status, 404, "{body}");
}

on_each_daemon_isolation! {
fn an_idle_sandbox_hibernates_and_a_file_call_wakes_it(d, _iso) {
    let id = d.create(&["--idle-hibernate", "1s"]);
    assert_eq!(record(d, &id)["idle_hibernate_seconds"], 1.0);
    assert!(d.berth(&["exec", &id, "--", "sh", "-c", "echo kept > /tmp/note"]).status.success());
    wait_for("idle hibernation", Duration::from_secs(30), || record(d, &id)["state"] == "hibernated");
    let (status, body) = d.files("GET", &id, "files", "/tmp/note", "", b"");
    assert_eq!((status, body.as_slice()), (200, b"kept\n".as_slice()));
    let r = record(d, &id);
    assert_eq!((r["state"].as_str(), r["last_activity"].as_str()), (Some("running"), Some("files")), "{r}");
}
}

on_each_daemon_isolation! {
fn a_hibernated_sandbox_removed_leaves_nothing(d, iso) {
    let id = d.create(&[]);
    assert!(d.berth(&["hibernate", &id]).status.success());
    let image = d.root().join("hibernate").join(&id);
    assert!(image.join("manifest.json").exists());
    let manifest: Value = serde_json::from_slice(&std::fs::read(image.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["isolation"], iso, "{manifest}");
    // A namespaces sandbox's host id block is kept for it; gVisor's kernel maps its ids itself, and its image
    // names the runsc that wrote it instead.
    let reservation = format!("/run/berth/ids/{}.reserved", manifest["slot"]);
    match iso {
        "namespaces" => assert!(std::path::Path::new(&reservation).exists(), "{reservation}"),
        _ => assert!(manifest["runsc_version"].as_str().is_some_and(|v| !v.is_empty()), "{manifest}"),
    }
    let out = d.berth(&["rm", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!image.exists(), "its image goes");
    if iso == "namespaces" {
        assert!(!std::path::Path::new(&reservation).exists(), "its id block is free again");
    }
    let kept = std::fs::read_dir(d.root().join("hibernate/.init")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(kept, 0, "the copy of init's binary no image needs goes too");
    assert!(!d.root().join("pool/sandboxes").join(&id).exists(), "its files go");
    let (status, _) = d.http("GET", &format!("/v1/sandboxes/{id}"), "");
    assert_eq!(status, 404);
}
}

on_each_daemon_isolation! {
fn an_ephemeral_sandbox_does_not_wake_after_its_host_restarted_and_a_persistent_one_does(d, _iso) {
    let ephemeral = d.create(&[]);
    let persistent = d.create(&["--persistent"]);
    for id in [&ephemeral, &persistent] {
        assert!(d.berth(&["exec", id, "--", "sh", "-c", "echo kept > /workspace/note"]).status.success());
        assert!(d.berth(&["hibernate", id]).status.success());
    }
    // A host restart, as the daemon finds it: the kernel's boot id differs from the one in the images.
    d.kill();
    for id in [&ephemeral, &persistent] {
        let path = d.root().join("hibernate").join(id).join("manifest.json");
        let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(m["boot_id"].as_str().is_some_and(|b| !b.is_empty()), "{m}");
        m["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    }
    d.spawn();
    // The ephemeral one's files were never synced to disk (its overlay is volatile): it is gone, and says why.
    let (status, _) = d.http("GET", &format!("/v1/sandboxes/{ephemeral}"), "");
    assert_eq!(status, 404);
    assert!(!d.root().join("hibernate").join(&ephemeral).exists(), "its image went with it");
    let journal = text(&d.berth(&["journal", &ephemeral]).stdout);
    assert!(journal.contains("host restarted while it hibernated"), "{journal}");
    // The persistent one wakes with its processes and files.
    assert_eq!(record(d, &persistent)["state"], "hibernated");
    let note = d.berth(&["exec", &persistent, "--", "cat", "/workspace/note"]);
    assert_eq!(text(&note.stdout), "kept\n", "{}", text(&note.stderr));
}
}

/// The exec `exec_id` of sandbox `id` as `berth ps` lists it.
fn exec_info(d: &Daemon, id: &str, exec_id: &str) -> Value {
    d.execs(id).into_iter().find(|e| e["exec_id"] == exec_id).unwrap_or(Value::Null)
}

fn log_file(d: &Daemon, id: &str, exec_id: &str) -> String {
    std::fs::read_to_string(d.root().join("logs").join(id).join(format!("{exec_id}.log"))).unwrap_or_default()
}

#[test]
fn a_detached_exec_sleeps_with_its_sandbox_and_goes_on_in_its_log() {
    let d = Daemon::start();
    let id = d.create(&[]);
    // Counts to 40 every 100 ms (4 s running), then exits 7. Its timeout, 8 s, counts only time running: the
    // 5 s it sleeps do not count.
    let script = "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo $i; sleep 0.1; done; echo done >&2; exit 7";
    let out = d.berth(&["exec", &id, "--detach", "--timeout", "8s", "--", "sh", "-c", script]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let x = text(&out.stdout).trim().to_string();
    // One that has read a line of its stdin reads the rest after the wake, then end of file; one to kill.
    let fed = r#"{"argv": ["sh", "-c", "read a; sleep 2; read b; read c || echo \"$a $b eof\""], "stdin": "one\ntwo\n", "detach": true}"#;
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/execs"), fed);
    assert_eq!(status, 201, "{body}");
    let reader = serde_json::from_str::<Value>(&body).unwrap()["exec_id"].as_str().unwrap().to_string();
    // (It starts a session of its own too: only the exec's own cgroup, where CRIU puts it back, reaches it.)
    let out = d.berth(&["exec", &id, "--detach", "--", "sh", "-c", "setsid sleep 300 & sleep 300"]);
    let sleeper = text(&out.stdout).trim().to_string();
    // A follower of its log from before the hibernation reads on to its end.
    let follower = d.cmd(&["logs", &id, &x, "--follow"]).stdout(Stdio::piped()).spawn().unwrap();
    wait_for("some counting", Duration::from_secs(20), || log_file(&d, &id, &x).lines().count() >= 5);

    let out = d.berth(&["hibernate", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(processes_of(&id), 0, "the exec is on disk with the rest");
    let asleep = log_file(&d, &id, &x);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(log_file(&d, &id, &x), asleep, "nothing counts while it sleeps");
    let counted = asleep.lines().count();
    assert!(counted < 40, "it was still counting when it hibernated: {asleep}");

    let out = d.berth(&["wake", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(exec_info(&d, &id, &x)["running"], true, "the same exec runs on: {:?}", d.execs(&id));
    wait_for("the exec's end", Duration::from_secs(30), || exec_info(&d, &id, &x)["running"] == false);
    let info = exec_info(&d, &id, &x);
    let result = &info["result"];
    assert_eq!((result["exit_code"].as_i64(), result["timed_out"].as_bool()), (Some(7), Some(false)), "{info}");
    assert!(result["duration_ms"].as_u64().unwrap() >= 9000, "its duration is the wall time it took: {info}");
    let log = log_file(&d, &id, &x);
    let expected: String = (1..=40).map(|i| format!("{i}\n")).chain(["done\n".to_string()]).collect();
    assert_eq!(log, expected, "its log goes on from where it was, nothing lost or repeated");
    assert_eq!(result["output_bytes"].as_u64(), Some(expected.len() as u64), "{info}");
    let out = d.berth(&["logs", &id, &x]);
    assert_eq!(text(&out.stdout), expected);
    let followed = common::daemon::wait_output(follower, Duration::from_secs(20));
    assert_eq!(text(&followed.stdout), expected, "the follower saw it all, and ended with it");
    wait_for("the reader's end", Duration::from_secs(20), || exec_info(&d, &id, &reader)["running"] == false);
    assert_eq!(log_file(&d, &id, &reader), "one two eof\n", "its unread stdin was kept, then it ended");
    let out = d.berth(&["kill", &id, &sleeper, "--json"]);
    let killed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (killed["running"].as_bool(), killed["result"]["killed"].as_bool()),
        (Some(false), Some(true)),
        "{killed}"
    );
    wait_for("the killed tree's end", Duration::from_secs(10), || processes_of(&id) == 1);
    let journal: Value = serde_json::from_slice(&d.berth(&["journal", &id, "--json"]).stdout).unwrap();
    let records = journal.as_array().unwrap();
    let of = |action: &str| records.iter().find(|r| r["action"] == action).unwrap()["result"].clone();
    let listed = |v: Value| v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect::<Vec<_>>();
    let mut asleep = listed(of("hibernate")["execs_asleep"].clone());
    asleep.sort();
    let mut three = vec![x.clone(), reader.clone(), sleeper.clone()];
    three.sort();
    assert_eq!(asleep, three, "the hibernation names the execs that slept");
    assert_eq!(listed(of("wake")["execs_woken"].clone()).len(), 3);
    let finished = records.iter().filter(|r| r["action"] == "exec_finished").count();
    assert_eq!(finished, 3, "each exec's end is recorded once");
    assert!(d.berth(&["journal", &id, "--verify"]).status.success(), "one journal chain through it all");
}

#[test]
fn a_code_context_keeps_its_variables_through_hibernation_and_a_daemon_restart() {
    let mut d = Daemon::start();
    let id = d.create(&[]);
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts"), r#"{"language": "python"}"#);
    assert_eq!(status, 201, "{body}");
    let ctx = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let run = |d: &Daemon, code: &str| {
        let body = serde_json::json!({"code": code}).to_string();
        let (status, got) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"), &body);
        assert_eq!(status, 200, "{got}");
        got
    };
    run(&d, "import os\nkept = 41\npid = os.getpid()");
    // A JavaScript one too, whose interpreter writes to the exec's own pipes.
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts"), r#"{"language": "javascript"}"#);
    assert_eq!(status, 201, "{body}");
    let js = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    let run_js = |d: &Daemon, code: &str| {
        let body = serde_json::json!({"code": code}).to_string();
        let (status, got) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{js}/run"), &body);
        assert_eq!(status, 200, "{got}");
        got
    };
    run_js(&d, "globalThis.kept = 'js kept'");

    // Running code holds a connection from berth: refused, and the run goes on.
    let runner = d
        .cmd(&["context", "run", &id, &ctx, "--json", "import time\ntime.sleep(3)\nkept"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("a busy context", Duration::from_secs(10), || {
        d.http("GET", &format!("/v1/sandboxes/{id}/contexts/{ctx}"), "").1.contains("\"busy\"")
    });
    let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/hibernate"), "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("run code") && body.contains(&ctx), "{body}");
    let out = common::daemon::wait_output(runner, Duration::from_secs(20));
    assert!(text(&out.stdout).contains("41"), "{}", text(&out.stdout));

    // Idle, it sleeps with the sandbox; a restarted daemon wakes it with its interpreter's state.
    let out = d.berth(&["hibernate", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(record(&d, &id)["state"], "hibernated");
    d.kill();
    d.spawn();
    let got = run(&d, "kept + 1, os.getpid() == pid");
    assert!(got.contains("(42, True)"), "the same interpreter, its variables kept: {got}");
    let (status, list) = d.http("GET", &format!("/v1/sandboxes/{id}/contexts"), "");
    assert_eq!(status, 200);
    assert!(list.contains(&ctx), "{list}");
    let got = run(&d, "kept = kept + 1\nkept");
    assert!(got.contains("42"), "{got}");
    let got = run_js(&d, "console.log('said'); kept");
    assert!(got.contains("js kept") && got.contains("said"), "{got}");
}

#[test]
fn a_hibernated_sandbox_rebuilt_or_reset_gives_up_its_image_and_runs_afresh() {
    let d = Daemon::start();
    let id = d.create(&[]);
    for op in ["rebuild", "reset"] {
        d.sh(&id, "echo kept > /workspace/f");
        assert!(d.berth(&["hibernate", &id]).status.success());
        let image = d.root().join("hibernate").join(&id);
        let manifest: Value = serde_json::from_slice(&std::fs::read(image.join("manifest.json")).unwrap()).unwrap();
        let reservation = format!("/run/berth/ids/{}.reserved", manifest["slot"]);
        assert!(std::path::Path::new(&reservation).exists(), "{reservation}");
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/{op}"), if op == "reset" { "{}" } else { "" });
        assert_eq!(status, 200, "{op}: {body}");
        assert_eq!(record(&d, &id)["state"], "running", "{op}");
        // Its processes' image and its id block's reservation go with them.
        assert!(!image.exists(), "{op} left the hibernation image");
        assert!(!std::path::Path::new(&reservation).exists(), "{op} left the id block reserved");
        let kept = d.sh(&id, "cat /workspace/f 2>/dev/null || echo gone");
        assert_eq!(kept, if op == "reset" { "gone\n" } else { "kept\n" }, "{op}");
    }
}

on_each_daemon_isolation! {
fn the_end_of_a_ttl_can_put_a_sandbox_to_sleep_instead_of_removing_it(d, iso) {
    let id = d.create(&["--ttl", "2s", "--ttl-action", "hibernate"]);
    assert_eq!(record(d, &id)["ttl_action"], "hibernate");
    d.sh(&id, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done) >/dev/null 2>&1 &");
    let paused = d.create(&["--ttl", "2s", "--ttl-action", "pause"]);
    // One whose exec's stdin is open cannot be hibernated: it is paused instead.
    let busy = d.create(&["--ttl", "2s", "--ttl-action", "hibernate"]);
    let exec = r#"{"argv": ["sleep", "600"], "detach": true, "stdin_open": true}"#;
    assert_eq!(d.http("POST", &format!("/v1/sandboxes/{busy}/execs"), exec).0, 201);
    let removed = d.create(&["--ttl", "2s"]);
    wait_for("the TTLs' ends", Duration::from_secs(60), || {
        record(d, &id)["state"] == "hibernated"
            && record(d, &paused)["state"] == "paused"
            && record(d, &busy)["state"] == "paused"
            && d.http("GET", &format!("/v1/sandboxes/{removed}"), "").0 == 404
    });
    for (sb, slept) in [(&id, "hibernated"), (&paused, "paused"), (&busy, "paused (it could not be hibernated)")] {
        assert!(record(d, sb)["expires_at_ms"].is_null(), "{iso}: {sb} keeps no deadline");
        let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{sb}/journal"), "");
        assert!(journal.contains(&format!(r#""slept":"{slept}""#)), "{iso}: {journal}");
    }
    // Woken by activity, where it was, with its TTL again: it sleeps again when that runs out.
    let before: u64 = d.sh(&id, "cat /tmp/count").trim().parse().unwrap();
    assert!(record(d, &id)["expires_at_ms"].is_u64(), "{iso}: the wake gives it its TTL again");
    std::thread::sleep(Duration::from_millis(300));
    let after: u64 = d.sh(&id, "cat /tmp/count").trim().parse().unwrap();
    assert!(after > before, "{iso}: the counter goes on after the wake ({before} -> {after})");
    wait_for("the second sleep", Duration::from_secs(30), || record(d, &id)["state"] == "hibernated");
    // Without a TTL (berth ttl ID none), a wake leaves it awake.
    d.sh(&id, "true");
    assert!(d.berth(&["ttl", &id, "none"]).status.success());
    assert!(d.berth(&["pause", &id]).status.success() && d.berth(&["resume", &id]).status.success());
    assert!(record(d, &id)["expires_at_ms"].is_null(), "{iso}");
    // Bad input.
    let out = d.berth(&["create", "--ttl-action", "nap"]);
    assert!(!out.status.success() && text(&out.stderr).contains("not remove, hibernate or pause"), "{}", text(&out.stderr));
    let (status, body) = d.http("POST", "/v1/sandboxes", r#"{"ttl_action": "nap"}"#);
    assert_eq!(status, 400, "{body}");
    for sb in [&id, &paused, &busy] {
        assert!(d.berth(&["rm", sb]).status.success());
    }
}
}
