//! Durable projects, end to end through the CLI and the API: persistent sandboxes across stop, start, rebuild
//! and lost supervisors; snapshots, restore and reset; forks; diffs, patches and exports; volumes; quotas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn json(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{} {}", text(&out.stdout), text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn state_of(d: &Daemon, id: &str) -> String {
    json(&d.berth(&["inspect", id, "--json"]))["state"].as_str().unwrap().to_string()
}

/// The sandboxes' files in the pool, by directory name.
fn pool_sandboxes(d: &Daemon) -> Vec<String> {
    std::fs::read_dir(d.root().join("pool/sandboxes"))
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// SIGKILL every shim of this daemon's data root: what a host crash does to sandboxes' supervisors.
fn kill_shims(d: &Daemon) {
    let root = d.root().display().to_string();
    let mut killed = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.contains(&root) && args.last().is_some_and(|a| a == "shim") {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).unwrap(),
                rustix::process::Signal::KILL,
            );
            killed.push(pid);
        }
    }
    assert!(!killed.is_empty(), "no shim of this daemon was found to kill");
    // Dead once gone from /proc or a zombie waiting for its parent.
    let dead = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !killed.iter().all(dead) {
        assert!(Instant::now() < deadline, "killed shims still running: {killed:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

on_each_daemon_isolation! {
    fn persistent_sandbox_keeps_its_files_through_stop_start_rebuild_and_lost_supervisors(d, _iso) {
        let id = d.create(&["--persistent", "--name", "keeper"]);
        d.sh(&id, "echo kept > /workspace/a && echo added > /etc/added && rm /etc/shells");
        let check = "cat /workspace/a /etc/added; test -e /etc/shells || echo deleted";
        let expected = "kept\nadded\ndeleted\n";

        let stopped = json(&d.berth(&["stop", &id, "--json"]));
        assert_eq!(stopped["state"], "stopped");
        assert_eq!(stopped["pid"], Value::Null);
        let listed = json(&d.berth(&["ls", "--json"]));
        assert_eq!(listed[0]["state"], "stopped", "a stopped sandbox is still listed");
        let refused = d.berth(&["exec", &id, "--", "true"]);
        assert_ne!(refused.status.code(), Some(0));
        assert!(text(&refused.stderr).contains("stopped"), "{}", text(&refused.stderr));
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/execs"), r#"{"argv":["true"]}"#);
        assert_eq!(status, 409, "{body}");
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{id}/stop"), "{}").0, 409, "stopping twice");

        assert!(d.berth(&["start", "keeper"]).status.success());
        assert_eq!(d.sh(&id, check), expected);
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{id}/start"), "{}").0, 409, "starting twice");

        let before = json(&d.berth(&["inspect", &id, "--json"]))["pid"].clone();
        let rebuilt = json(&d.berth(&["rebuild", &id, "--json"]));
        assert_ne!(rebuilt["pid"], before, "a rebuild is a new runtime");
        assert_eq!(d.sh(&id, check), expected);

        // A SIGKILLed daemon: the shim lives on and the next daemon adopts the sandbox.
        d.kill();
        d.spawn();
        assert_eq!(d.sh(&id, check), expected);

        // Daemon and supervisor both gone (a host crash): the sandbox comes back stopped, its files intact.
        d.kill();
        kill_shims(d);
        d.spawn();
        assert_eq!(state_of(d, &id), "stopped");
        assert!(d.berth(&["start", &id]).status.success());
        assert_eq!(d.sh(&id, check), expected);
        // Every one of those steps is in the journal, and its hash chain holds (by name, running or stopped).
        assert!(d.berth(&["snapshot", &id]).status.success());
        d.sh(&id, "true");
        assert!(d.berth(&["stop", &id]).status.success());
        let verify = d.berth(&["journal", "keeper", "--verify"]);
        assert!(verify.status.success(), "{} {}", text(&verify.stdout), text(&verify.stderr));
        assert!(d.berth(&["rm", &id]).status.success());
        assert!(pool_sandboxes(d).is_empty(), "rm removes a persistent sandbox's files: {:?}", pool_sandboxes(d));
    }
}

on_each_daemon_isolation! {
    fn an_idle_persistent_sandbox_is_stopped_not_removed(d, _iso) {
        let id = d.create(&["--persistent", "--idle-timeout", "1s"]);
        d.sh(&id, "echo still-here > /workspace/f");
        let deadline = Instant::now() + Duration::from_secs(15);
        while state_of(d, &id) != "stopped" {
            assert!(Instant::now() < deadline, "an idle persistent sandbox was not stopped");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(d.berth(&["start", &id]).status.success());
        assert_eq!(d.sh(&id, "cat /workspace/f"), "still-here\n");
    }
}

on_each_daemon_isolation! {
    fn ephemeral_sandboxes_leave_nothing(d, _iso) {
        let id = d.create(&[]);
        d.sh(&id, "head -c 1M /dev/zero > /workspace/blob");
        assert_eq!(pool_sandboxes(d), std::slice::from_ref(&id));
        assert!(d.berth(&["rm", &id]).status.success());
        assert!(pool_sandboxes(d).is_empty());

        // Lost with its supervisor: gone, files and all, when the daemon next starts.
        let lost = d.create(&[]);
        d.sh(&lost, "echo x > /workspace/x");
        d.kill();
        kill_shims(d);
        d.spawn();
        assert!(d.ids().is_empty(), "{:?}", d.ids());
        assert!(pool_sandboxes(d).is_empty(), "{:?}", pool_sandboxes(d));
        assert_eq!(d.http("GET", &format!("/v1/sandboxes/{lost}"), "").0, 404);
    }
}

on_each_daemon_isolation! {
    fn restore_brings_back_deleted_and_overwritten_files_and_reset_returns_to_the_image(d, _iso) {
        let id = d.create(&["--persistent"]);
        d.sh(&id, "echo one > /workspace/a && echo two > /workspace/b && echo cfg > /etc/app.conf");
        let snap = text(&d.berth(&["snapshot", &id, "--name", "good"]).stdout).trim().to_string();
        assert_eq!(snap.len(), 12, "{snap:?}");
        d.sh(&id, "echo changed > /workspace/a && rm /workspace/b /etc/app.conf && echo new > /workspace/c");

        let journal = json(&d.berth(&["journal", &id, "--json"]));
        let entry = journal.as_array().unwrap().iter().find(|e| e["action"] == "snapshot").unwrap().clone();
        assert_eq!(entry["result"]["frozen"], true, "a running sandbox is frozen for the copy: {entry}");
        assert_eq!(d.sh(&id, "echo thawed"), "thawed\n", "and thawed after it");
        let listed = json(&d.berth(&["snapshot", "ls", "--json"]));
        assert_eq!(listed[0]["name"], "good");
        assert_eq!(listed[0]["sandbox_id"], id.as_str());
        let taken = d.berth(&["snapshot", &id, "--name", "good"]);
        assert!(text(&taken.stderr).contains("already exists"), "{}", text(&taken.stderr));

        assert!(d.berth(&["restore", &id, "good"]).status.success());
        assert_eq!(d.sh(&id, "cat /workspace/a /workspace/b /etc/app.conf; ls /workspace"), "one\ntwo\ncfg\na\nb\n");

        // A restore of a stopped sandbox leaves it stopped.
        d.sh(&id, "rm /workspace/a");
        assert!(d.berth(&["stop", &id]).status.success());
        assert!(d.berth(&["restore", &id, &snap]).status.success());
        assert_eq!(state_of(d, &id), "stopped");
        assert!(d.berth(&["start", &id]).status.success());
        assert_eq!(d.sh(&id, "cat /workspace/a"), "one\n");

        assert!(d.berth(&["reset", &id, "--keep-workspace"]).status.success());
        assert_eq!(d.sh(&id, "ls /workspace; test -e /etc/app.conf || echo clean"), "a\nb\nclean\n");
        assert!(d.berth(&["reset", &id]).status.success());
        assert_eq!(d.sh(&id, "ls -A /workspace; test -e /etc/app.conf || echo clean"), "clean\n");

        // Bad input changes nothing.
        let unknown = d.berth(&["restore", &id, "no-such-snapshot"]);
        assert_ne!(unknown.status.code(), Some(0));
        assert!(text(&unknown.stderr).contains("no snapshot"), "{}", text(&unknown.stderr));
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{id}/restore"), r#"{"snapshot":"nope"}"#).0, 404);
        assert_eq!(d.http("POST", "/v1/sandboxes/nope/restore", &format!(r#"{{"snapshot":"{snap}"}}"#)).0, 404);
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{id}/reset"), r#"{"keep":true}"#).0, 400);
        assert_eq!(state_of(d, &id), "running");

        // One prepared state, many sandboxes.
        let other_image = d.http("POST", &format!("/v1/sandboxes/{id}/restore"), &format!(r#"{{"snapshot":"{snap}"}}"#));
        assert_eq!(other_image.0, 200, "same image: {}", other_image.1);
        let from = d.create(&["--from", "good"]);
        assert_eq!(d.sh(&from, "cat /workspace/a /etc/app.conf"), "one\ncfg\n");
        assert_eq!(json(&d.berth(&["inspect", &from, "--json"]))["parent"], snap.as_str());
        let bad_from = d.berth(&["create", "--from", "missing"]);
        assert!(text(&bad_from.stderr).contains("no snapshot"), "{}", text(&bad_from.stderr));

        // A snapshot that is a sandbox's parent stays while that sandbox does.
        let in_use = d.berth(&["snapshot", "rm", "good"]);
        assert!(text(&in_use.stderr).contains("is the parent of"), "{}", text(&in_use.stderr));
        assert!(d.berth(&["rm", &from]).status.success());
        assert!(d.berth(&["snapshot", "rm", "good"]).status.success());
        assert_eq!(json(&d.berth(&["snapshot", "ls", "--json"])).as_array().unwrap().len(), 0);
        assert_eq!(d.http("DELETE", &format!("/v1/snapshots/{snap}"), "").0, 404);
    }
}

on_each_daemon_isolation! {
    fn fork_children_are_independent_of_each_other_and_of_the_parent(d, _iso) {
        let parent = d.create(&["--name", "theory", "--memory", "256M"]);
        d.sh(&parent, "mkdir -p /workspace/src && echo base > /workspace/src/main.txt && echo p > /etc/marker");
        let out = d.berth(&["fork", &parent, "--count", "3"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let kids: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
        assert_eq!(kids.len(), 3, "{kids:?}");
        for (i, k) in kids.iter().enumerate() {
            assert_eq!(d.sh(k, "cat /workspace/src/main.txt /etc/marker"), "base\np\n");
            d.sh(k, &format!("echo kid{i} > /workspace/src/main.txt"));
            let rec = json(&d.berth(&["inspect", k, "--json"]));
            assert_eq!(rec["memory_bytes"], 256 << 20, "a fork keeps the parent's limits");
            assert!(rec["parent"].is_string());
        }
        d.sh(&parent, "echo moved-on > /workspace/src/main.txt");
        for (i, k) in kids.iter().enumerate() {
            assert_eq!(d.sh(k, "cat /workspace/src/main.txt"), format!("kid{i}\n"));
        }
        assert_eq!(d.sh(&parent, "cat /workspace/src/main.txt"), "moved-on\n");

        // Each child has its own lifecycle.
        assert!(d.berth(&["rm", &kids[0]]).status.success());
        assert_eq!(d.sh(&kids[1], "cat /workspace/src/main.txt"), "kid1\n");

        let changes = json(&d.berth(&["diff", &kids[1], "--json"]));
        let paths: Vec<(&str, &str)> = changes["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["path"].as_str().unwrap(), c["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(paths, [("/workspace/src/main.txt", "modified")], "a fork is compared with the instant it was made");

        // The snapshot of the fork's instant goes with the last child that has it as its parent.
        assert_eq!(json(&d.berth(&["snapshot", "ls", "--json"])).as_array().unwrap().len(), 1);
        assert!(d.berth(&["rm", &kids[1], &kids[2]]).status.success());
        assert_eq!(json(&d.berth(&["snapshot", "ls", "--json"])).as_array().unwrap().len(), 0);

        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{parent}/fork"), r#"{"count":0}"#).0, 400);
        assert_eq!(d.http("POST", &format!("/v1/sandboxes/{parent}/fork"), r#"{"count":65}"#).0, 400);
        assert_eq!(d.http("POST", "/v1/sandboxes/nope/fork", "{}").0, 404);
    }
}

on_each_daemon_isolation! {
    fn diff_lists_adds_modifications_deletions_links_and_modes_and_export_commits_the_same_patch(d, _iso) {
        let id = d.create(&["--persistent"]);
        // The repository holds what the workspace starts from (as when an agent is given a checkout).
        let repo = d.dir.path().join("repo");
        std::fs::create_dir_all(repo.join("app")).unwrap();
        std::fs::write(repo.join("app/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(repo.join("gone"), "old\n").unwrap();
        std::fs::write(repo.join("run.sh"), "keep\n").unwrap();
        std::os::unix::fs::symlink("main.rs", repo.join("app/link")).unwrap();
        d.sh(&id, "mkdir /workspace/app && echo 'fn main() {}' > /workspace/app/main.rs && echo old > /workspace/gone && echo keep > /workspace/run.sh && ln -s main.rs /workspace/app/link");
        let snap = text(&d.berth(&["snapshot", &id]).stdout).trim().to_string();
        d.sh(&id, "printf 'fn main() {\\n    println!(\"hi\");\\n}\\n' > /workspace/app/main.rs && rm /workspace/gone && chmod 755 /workspace/run.sh && ln -sfn other.rs /workspace/app/link && echo new > /workspace/app/new.txt && rm /etc/shells");

        let listed = text(&d.berth(&["diff", &id, "--against", &snap]).stdout);
        let expected = [
            "M /etc/shells",
            "A /workspace/app/new.txt",
            "M /workspace/app/link  (-> other.rs)",
            "M /workspace/app/main.rs",
            "D /workspace/gone",
            "M /workspace/run.sh  (mode 644 -> 755)",
        ];
        let mut lines: Vec<&str> = listed.lines().collect();
        lines.sort();
        let mut want: Vec<&str> = expected.to_vec();
        want[0] = "D /etc/shells";
        want.sort();
        assert_eq!(lines, want, "{listed}");

        // The patch applies to the snapshot's workspace and yields the sandbox's.
        let patch = d.berth(&["diff", &id, "--against", &snap, "--patch"]);
        assert!(patch.status.success(), "{}", text(&patch.stderr));
        let patch = text(&patch.stdout);
        assert!(patch.contains("+    println!(\"hi\");"), "{patch}");
        assert!(patch.contains("deleted file mode 100644"), "{patch}");
        assert!(patch.contains("old mode 100644\nnew mode 100755"), "{patch}");

        // Export: a new branch whose diff from its base is the workspace's changes.
        git(&repo, &["init", "-q", "-b", "main", repo.to_str().unwrap()]);
        std::fs::write(repo.join("README"), "project\n").unwrap();
        git(&repo, &["-C", repo.to_str().unwrap(), "add", "."]);
        git(&repo, &["-C", repo.to_str().unwrap(), "commit", "-qm", "base"]);
        let out = d.berth(&[
            "export",
            &id,
            "--repo",
            repo.to_str().unwrap(),
            "--branch",
            "agent/work",
            "--against",
            &snap,
            "--author",
            "Agent <agent@example.com>",
            "-m",
            "the agent's work",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let names = git(&repo, &["-C", repo.to_str().unwrap(), "diff", "--name-status", "main", "agent/work"]);
        let mut names: Vec<&str> = names.lines().collect();
        names.sort();
        assert_eq!(names, ["A\tapp/new.txt", "D\tgone", "M\tapp/link", "M\tapp/main.rs", "M\trun.sh"]);
        let content = git(&repo, &["-C", repo.to_str().unwrap(), "show", "agent/work:app/main.rs"]);
        assert_eq!(content, "fn main() {\n    println!(\"hi\");\n}\n");
        let log = git(&repo, &["-C", repo.to_str().unwrap(), "log", "-1", "--format=%an <%ae> %s", "agent/work"]);
        assert_eq!(log.trim(), "Agent <agent@example.com> the agent's work");
        assert_eq!(git(&repo, &["-C", repo.to_str().unwrap(), "status", "--porcelain"]), "", "the work tree is untouched");

        let again = d.berth(&["export", &id, "--repo", repo.to_str().unwrap(), "--branch", "agent/work"]);
        assert!(text(&again.stderr).contains("already exists"), "{}", text(&again.stderr));
        let not_repo = d.berth(&["export", &id, "--repo", d.dir.path().to_str().unwrap(), "--branch", "x"]);
        assert!(text(&not_repo.stderr).contains("not a git repository"), "{}", text(&not_repo.stderr));
        assert_eq!(d.http("GET", &format!("/v1/sandboxes/{id}/diff?against=nope"), "").0, 404);
        assert_eq!(d.http("GET", &format!("/v1/sandboxes/{id}/diff?against=parent"), "").0, 400);
        assert_eq!(d.http("GET", &format!("/v1/sandboxes/{id}/diff?format=svg"), "").0, 400);
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let _ = dir;
    let out = std::process::Command::new("git")
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

on_each_daemon_isolation! {
    fn named_volumes_are_shared_and_outlive_their_sandboxes(d, _iso) {
        assert!(d.berth(&["volume", "create", "cache"]).status.success());
        let taken = d.berth(&["volume", "create", "cache"]);
        assert!(text(&taken.stderr).contains("already exists"), "{}", text(&taken.stderr));
        let a = d.create(&["--volume", "cache:/cache"]);
        let b = d.create(&["--volume", "cache:/mnt/c:ro"]);
        d.sh(&a, "echo shared > /cache/f && id -u > /cache/owner && stat -c %u /cache/f >> /cache/owner");
        assert_eq!(d.sh(&b, "cat /mnt/c/f /mnt/c/owner"), "shared\n0\n0\n");
        let ro = d.berth(&["exec", &b, "--", "sh", "-c", "echo x > /mnt/c/g"]);
        assert_eq!(ro.status.code(), Some(2), "a read-only volume mount cannot be written");
        assert!(text(&ro.stderr).contains("Read-only file system"), "{}", text(&ro.stderr));

        let ls = json(&d.berth(&["volume", "ls", "--json"]));
        let mut users: Vec<String> =
            ls[0]["used_by"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
        users.sort();
        let mut want = vec![a.clone(), b.clone()];
        want.sort();
        assert_eq!(users, want);
        // A volume cannot be mounted over a path berth reserves.
        let reserved = d.berth(&["create", "--volume", "cache:/proc"]);
        assert_eq!(reserved.status.code(), Some(125), "{}", text(&reserved.stderr));
        assert!(text(&reserved.stderr).contains("\"/proc\" is reserved by berth"), "{}", text(&reserved.stderr));
        let busy = d.berth(&["volume", "rm", "cache"]);
        assert!(text(&busy.stderr).contains("used by"), "{}", text(&busy.stderr));

        assert!(d.berth(&["rm", &a, &b]).status.success());
        let c = d.create(&["-v", "cache:/cache"]);
        assert_eq!(d.sh(&c, "cat /cache/f"), "shared\n");
        assert!(d.berth(&["rm", &c]).status.success());
        assert!(d.berth(&["volume", "rm", "cache"]).status.success());

        let missing = d.berth(&["create", "--volume", "nope:/x"]);
        assert_eq!(missing.status.code(), Some(125), "{}", text(&missing.stderr));
        assert!(text(&missing.stderr).contains("there is no volume \"nope\""), "{}", text(&missing.stderr));
    }
}
