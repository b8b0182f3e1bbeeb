//! The files API and `berth cp`, end to end: a real daemon on a private socket, real sandboxes. Besides the
//! round trips, every way out of a sandbox's root that a path can try (`..`, absolute and climbing symbolic
//! links, /proc magic links, a symlinked parent, a tar with escapes) must stay inside or be refused, and the
//! host must be untouched afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::text;
use serde_json::Value;

/// A name for host files that must never come to exist.
fn marker(what: &str) -> String {
    format!("berth-files-{what}-{}", std::process::id())
}

on_each_daemon_isolation! {
    fn write_read_list_stat_mkdir_and_remove_round_trip(d, iso) {
        let id = d.create(&["--name", "files-rt"]);

        // Any bytes, created (201) then truncated in place (200).
        let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
        let (status, e) = d.json("PUT", &id, "files", "/workspace/a.bin", "", &bytes);
        assert_eq!(status, 201, "{e}");
        assert_eq!((e["name"].as_str(), e["kind"].as_str(), e["size"].as_u64()), (Some("a.bin"), Some("file"), Some(259)));
        assert_eq!(e["mode"], 0o644);
        assert_eq!(d.files("GET", &id, "files", "/workspace/a.bin", "", b""), (200, bytes));
        let (status, _) = d.json("PUT", &id, "files", "/workspace/a.bin", "&mode=0600", b"short");
        assert_eq!(status, 200);
        assert_eq!(d.files("GET", &id, "files", "/workspace/a.bin", "", b""), (200, b"short".to_vec()));
        assert_eq!(d.sh(&id, "cat /workspace/a.bin; stat -c ' %a' /workspace/a.bin"), "short 600\n");

        // Larger than the API's 1 MiB JSON limit.
        let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        assert_eq!(d.files("PUT", &id, "files", "/workspace/big", "", &big).0, 201);
        assert_eq!(d.files("GET", &id, "files", "/workspace/big", "", b""), (200, big));
        // Larger than the files limit.
        let (status, e) = d.json("PUT", &id, "files", "/workspace/huge", "", &vec![0; (64 << 20) + 1]);
        assert_eq!(status, 413, "{e}");
        assert_eq!(e["error"]["code"], "payload_too_large");
        d.sh(&id, "head -c 67108865 /dev/zero > /workspace/huge");
        assert_eq!(d.json("GET", &id, "files", "/workspace/huge", "", b"").0, 413);

        // Parents: missing without parents=true (404), made with it.
        assert_eq!(d.json("PUT", &id, "files", "/workspace/p/q/r.txt", "", b"r").0, 404);
        assert_eq!(d.json("PUT", &id, "files", "/workspace/p/q/r.txt", "&parents=true", b"r").0, 201);
        assert_eq!(d.sh(&id, "cat /workspace/p/q/r.txt"), "r");

        // mkdir: 201, then 409 without parents, 200 with; -p through missing levels.
        assert_eq!(d.json("POST", &id, "mkdir", "/workspace/d", "", b"").0, 201);
        assert_eq!(d.json("POST", &id, "mkdir", "/workspace/d", "", b"").0, 409);
        assert_eq!(d.json("POST", &id, "mkdir", "/workspace/d", "&parents=true", b"").0, 200);
        let (status, e) = d.json("POST", &id, "mkdir", "/workspace/m/n/o", "&parents=true&mode=0750", b"");
        assert_eq!(status, 201, "{e}");
        assert_eq!((e["kind"].as_str(), e["mode"].as_u64()), (Some("directory"), Some(0o750)));
        assert_eq!(d.json("POST", &id, "mkdir", "/workspace/x/y", "", b"").0, 404);

        // A directory lists (links as links), stat follows.
        d.sh(&id, "ln -s a.bin /workspace/link");
        let (status, list) = d.json("GET", &id, "files", "/workspace", "", b"");
        assert_eq!(status, 200);
        let names: Vec<&str> = list.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a.bin", "big", "d", "huge", "link", "m", "p"]);
        let link = list.as_array().unwrap().iter().find(|e| e["name"] == "link").unwrap();
        assert_eq!((link["kind"].as_str(), link["link_target"].as_str()), (Some("symlink"), Some("a.bin")));
        let (_, st) = d.json("GET", &id, "stat", "/workspace/link", "", b"");
        assert_eq!((st["kind"].as_str(), st["size"].as_u64(), st["uid"].as_u64()), (Some("file"), Some(5), Some(0)));
        let (_, st) = d.json("GET", &id, "stat", "/", "", b"");
        assert_eq!((st["name"].as_str(), st["kind"].as_str()), (Some("/"), Some("directory")));

        // Conflicts and misses.
        assert_eq!(d.json("PUT", &id, "files", "/workspace/d", "", b"x").0, 409, "a directory is not a file");
        assert_eq!(d.json("PUT", &id, "files", "/workspace/a.bin/x", "", b"x").0, 409, "a file is not a directory");
        assert_eq!(d.json("GET", &id, "files", "/dev/null", "", b"").0, 409, "a device is not read");
        // A FIFO is never opened (a read or write would hang the daemon's worker). One made under gVisor is its
        // kernel's alone, as its sockets are: to the files API there is nothing there.
        d.sh(&id, "mkfifo /workspace/fifo");
        let fifo = if iso == "gvisor" { 404 } else { 409 };
        assert_eq!(d.json("GET", &id, "files", "/workspace/fifo", "", b"").0, fifo);
        if iso == "namespaces" {
            assert_eq!(d.json("PUT", &id, "files", "/workspace/fifo", "", b"x").0, 409);
            assert_eq!(d.json("DELETE", &id, "files", "/workspace/fifo", "", b"").0, 204);
        } else {
            d.sh(&id, "rm /workspace/fifo");
        }
        assert_eq!(d.json("GET", &id, "files", "/workspace/nope", "", b"").0, 404);
        assert_eq!(d.json("GET", &id, "stat", "/workspace/nope", "", b"").0, 404);
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/nope", "", b"").0, 404);

        // Everything made through the API belongs to root inside.
        let owners = d.sh(&id, "stat -c %u:%g /workspace/a.bin /workspace/p /workspace/p/q/r.txt /workspace/m/n/o");
        assert_eq!(owners, "0:0\n0:0\n0:0\n0:0\n");

        // Remove: a file, a link (not its target), a non-empty directory only with recursive=true.
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/link", "", b"").0, 204);
        assert_eq!(d.json("GET", &id, "stat", "/workspace/a.bin", "", b"").0, 200, "the link's target stays");
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/a.bin", "", b"").0, 204);
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/p", "", b"").0, 409);
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/p", "&recursive=true", b"").0, 204);
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/d", "", b"").0, 204, "an empty directory");
        assert_eq!(d.json("DELETE", &id, "files", "/", "&recursive=true", b"").0, 400);
        assert_eq!(d.sh(&id, "ls /workspace"), "big\nhuge\nm\n");
    }
}

on_each_daemon_isolation! {
    fn bad_requests_are_4xx_error_bodies(d, _iso) {
        let id = d.create(&["--name", "files-bad"]);
        for (method, url, status) in [
            ("GET", format!("/v1/sandboxes/{id}/files"), 400),
            ("GET", format!("/v1/sandboxes/{id}/files?path=/x&nonsense=1"), 400),
            ("GET", format!("/v1/sandboxes/{id}/files?path=workspace/x"), 400),
            ("GET", format!("/v1/sandboxes/{id}/files?path=/work%00space"), 400),
            ("GET", format!("/v1/sandboxes/{id}/files?path="), 400),
            ("PUT", format!("/v1/sandboxes/{id}/files?path=/workspace/f&mode=999"), 400),
            ("PUT", format!("/v1/sandboxes/{id}/files?path=/workspace/f&parents=maybe"), 400),
            ("PUT", format!("/v1/sandboxes/{id}/files?path=/workspace/dir/"), 400),
            ("POST", format!("/v1/sandboxes/{id}/mkdir?path=relative"), 400),
            ("GET", "/v1/sandboxes/nosuchsandbox/files?path=/".to_string(), 404),
            ("PUT", "/v1/sandboxes/nosuchsandbox/files?path=/x".to_string(), 404),
            ("GET", "/v1/sandboxes/nosuchsandbox/stat?path=/".to_string(), 404),
        ] {
            let (got, body) = d.http_bytes(method, &url, b"x");
            assert_eq!(got, status, "{method} {url}: {}", text(&body));
            let v: Value = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{method} {url}: {}", text(&body)));
            assert!(v["error"]["code"].is_string() && v["error"]["message"].is_string(), "{v}");
        }
    }
}

/// Every file below `dir`, as (relative path, what it is: file bytes, link target, or a directory).
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.permissions().mode() & 0o777)
            } else {
                format!("file {:o} {}", m.permissions().mode() & 0o777, text(&std::fs::read(&p).unwrap()))
            };
            out.push((rel, what));
        }
    }
    out.sort();
    out
}

on_each_daemon_isolation! {
    fn cp_copies_files_and_trees_both_ways(d, _iso) {
        let id = d.create(&["--name", "files-cp"]);
        let host = tempfile::tempdir().unwrap();
        let src = host.path().join("proj");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::create_dir(src.join("empty")).unwrap();
        std::fs::write(src.join("a/b/c.txt"), "deep\n").unwrap();
        std::fs::write(src.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(src.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(src.join("blob"), "x".repeat(300_000)).unwrap();
        std::os::unix::fs::symlink("a/b/c.txt", src.join("link")).unwrap();
        let cp = |from: &str, to: &str| {
            let out = d.berth(&["cp", from, to]);
            assert!(out.status.success(), "cp {from} {to}: {}", text(&out.stderr));
        };

        // Host → sandbox: a tree into an existing directory keeps its name; a file likewise.
        cp(src.to_str().unwrap(), &format!("{id}:/workspace"));
        assert_eq!(
            d.sh(&id, "cd /workspace/proj && cat a/b/c.txt && readlink link && ./run.sh && wc -c < blob"),
            "deep\na/b/c.txt\nran\n300000\n"
        );
        assert_eq!(d.sh(&id, "find /workspace/proj -printf '%U:%G\\n' | sort -u"), "0:0\n", "owned by root inside");
        cp(src.join("run.sh").to_str().unwrap(), "files-cp:/workspace/");
        cp(src.join("a/b/c.txt").to_str().unwrap(), "files-cp:/workspace/renamed.txt");
        assert_eq!(d.sh(&id, "stat -c '%a %u' /workspace/run.sh; cat /workspace/renamed.txt"), "755 0\ndeep\n");
        // A tree to a new name.
        cp(src.join("a").to_str().unwrap(), &format!("{id}:/workspace/copy-of-a"));
        assert_eq!(d.sh(&id, "cat /workspace/copy-of-a/b/c.txt"), "deep\n");

        // Sandbox → host: the tree comes back the same; a file into a directory keeps its name.
        d.sh(&id, "echo made-inside > /workspace/proj/inside.txt");
        let back = host.path().join("back");
        std::fs::create_dir(&back).unwrap();
        cp(&format!("{id}:/workspace/proj"), back.to_str().unwrap());
        let mut want = tree(&src);
        want.push(("inside.txt".into(), "file 644 made-inside\n".into()));
        want.sort();
        assert_eq!(tree(&back.join("proj")), want);
        cp(&format!("{id}:/workspace/renamed.txt"), back.to_str().unwrap());
        assert_eq!(std::fs::read_to_string(back.join("renamed.txt")).unwrap(), "deep\n");
        cp(&format!("{id}:proj/blob"), back.join("blob-copy").to_str().unwrap());
        assert_eq!(std::fs::read(back.join("blob-copy")).unwrap().len(), 300_000);

        // Errors: a missing source, both sides on the host.
        let out = d.berth(&["cp", &format!("{id}:/workspace/nope"), back.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(125));
        assert!(text(&out.stderr).contains("does not exist"), "{}", text(&out.stderr));
        assert_eq!(d.berth(&["cp", "/etc/hostname", back.to_str().unwrap()]).status.code(), Some(125));
    }
}

/// A tar, written by hand so that it can hold what no well-behaved archiver writes.
fn raw_tar(entries: &[(&str, u8, &[u8], &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, kind, data, link) in entries {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = *kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0; 1024]);
    out
}

on_each_daemon_isolation! {
    fn escapes_stay_inside_the_sandbox_and_never_touch_the_host(d, _iso) {
        let id = d.create(&["--name", "files-esc"]);
        let host_tmp = |name: &str| Path::new("/tmp").join(name);
        let inside_hostname = "files-esc\n";
        let host_hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        assert_ne!(host_hostname, inside_hostname);
        let get = |path: &str| d.files("GET", &id, "files", path, "", b"");
        let put = |path: &str, extra: &str| d.json("PUT", &id, "files", path, extra, b"owned");

        // `..` in any form, and relative paths: refused.
        for path in ["../../etc/passwd", "/../../etc/passwd", "/workspace/../../../etc/hostname", "etc/passwd"] {
            let (status, body) = get(path);
            assert_eq!(status, 400, "{path}: {}", text(&body));
        }
        let m = marker("dotdot");
        assert_eq!(put(&format!("/workspace/../../../../tmp/{m}"), "").0, 400);
        assert_eq!(put(&format!("../../../tmp/{m}"), "&parents=true").0, 400);
        assert!(!host_tmp(&m).exists());

        // An absolute symlink to /: the sandbox's root, not the host's.
        d.sh(&id, "ln -s / /workspace/hostroot");
        assert_eq!(get("/workspace/hostroot/etc/hostname"), (200, inside_hostname.as_bytes().to_vec()));
        let m = marker("abs");
        assert_eq!(put(&format!("/workspace/hostroot/tmp/{m}"), "").0, 201);
        assert!(!host_tmp(&m).exists(), "a write through a link to / reached the host");
        assert_eq!(d.sh(&id, &format!("cat /tmp/{m}")), "owned");
        assert_eq!(put(&format!("/workspace/hostroot/{m}"), "").0, 201);
        assert!(!Path::new("/").join(&m).exists());
        assert_eq!(
            d.json("POST", &id, "mkdir", &format!("/workspace/hostroot/tmp/{m}-dir/sub"), "&parents=true", b"").0,
            201
        );
        assert!(!host_tmp(&format!("{m}-dir")).exists());

        // A relative symlink that climbs out: clamped at the sandbox's root.
        d.sh(&id, "ln -s ../../../../ /workspace/up");
        assert_eq!(get("/workspace/up/etc/hostname"), (200, inside_hostname.as_bytes().to_vec()));
        assert_eq!(get("/workspace/up/workspace/up/etc/hostname").1, inside_hostname.as_bytes());
        let m = marker("rel");
        assert_eq!(put(&format!("/workspace/up/tmp/{m}"), "").0, 201);
        assert!(!host_tmp(&m).exists());

        // /proc magic links: refused (not followed to any root); /proc itself is not read or written.
        let m = marker("proc");
        for path in [
            "/proc/1/root/etc/hostname".to_string(),
            "/proc/self/root/etc/hostname".to_string(),
            "/proc/1/cwd/hostname".to_string(),
            "/proc/thread-self/root/etc/hostname".to_string(),
            "/workspace/hostroot/proc/1/root/etc/hostname".to_string(),
            "/proc/1/environ".to_string(),
            "/proc/sys/kernel/hostname".to_string(),
            "/proc".to_string(),
            "/proc/1".to_string(),
            "/sys/kernel".to_string(),
        ] {
            let (status, body) = get(&path);
            assert!((400..500).contains(&status), "{path}: {status} {}", text(&body));
            assert_ne!(body, host_hostname.as_bytes(), "{path}");
        }
        for path in [format!("/proc/1/root/tmp/{m}"), format!("/proc/self/root/tmp/{m}"), format!("/proc/1/cwd/{m}")] {
            let (status, body) = put(&path, "&parents=true");
            assert!((400..500).contains(&status), "{path}: {status} {body}");
            let (status, body) = d.json("POST", &id, "mkdir", &path, "&parents=true", b"");
            assert!((400..500).contains(&status), "mkdir {path}: {status} {body}");
        }
        assert!((400..500).contains(&d.files("GET", &id, "archive", "/proc/1/root", "", b"").0));
        assert!((400..500).contains(&put("/proc/sys/kernel/hostname", "").0));
        assert!(!host_tmp(&m).exists());
        assert_eq!(std::fs::read_to_string("/etc/hostname").unwrap_or_default(), host_hostname);

        // A parent that is a symlink to a host-looking place: to a directory that exists on the host (but not
        // inside), nothing is made anywhere; to /etc, the write lands in the sandbox's /etc.
        let host_dir = tempfile::Builder::new().prefix("berth-files-hostdir-").tempdir().unwrap();
        d.sh(&id, &format!("ln -s {} /workspace/hostdir; ln -s /etc /workspace/etc2", host_dir.path().display()));
        let m = marker("parent");
        assert_eq!(put(&format!("/workspace/hostdir/{m}"), "").0, 404);
        let (status, body) = put(&format!("/workspace/hostdir/{m}"), "&parents=true");
        assert!((400..500).contains(&status), "{status} {body}");
        let (status, _) = d.json("POST", &id, "mkdir", &format!("/workspace/hostdir/{m}"), "&parents=true", b"");
        assert!((400..500).contains(&status));
        assert_eq!(std::fs::read_dir(host_dir.path()).unwrap().count(), 0, "a host directory was written to");
        assert_eq!(put(&format!("/workspace/etc2/{m}"), "").0, 201);
        assert!(!Path::new("/etc").join(&m).exists());
        assert_eq!(d.sh(&id, &format!("cat /etc/{m}")), "owned");

        // Removing a link removes the link: never its target, never recursively through it.
        let victim = host_dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        d.sh(&id, &format!("ln -s {} /workspace/victim", victim.display()));
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/victim", "", b"").0, 204);
        assert_eq!(d.json("DELETE", &id, "files", "/workspace/hostroot", "&recursive=true", b"").0, 204);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(d.sh(&id, "cat /etc/hostname; ls /workspace/hostroot 2>&1 >/dev/null | wc -l"), "files-esc\n1\n");

        // Tars: escapes, absolute paths, devices, and a file through a symlink the same tar made, all refused;
        // nothing lands on the host or in the sandbox's /tmp.
        let m = marker("tar");
        let escape = format!("../../../../tmp/{m}");
        let absolute = format!("/tmp/{m}");
        let through = format!("l/{m}");
        let hardlink_out = format!("{m}-hl");
        for (what, tar, status) in [
            ("dotdot", raw_tar(&[("ok", b'0', b"x", ""), (&escape, b'0', b"x", "")]), 400),
            ("absolute", raw_tar(&[(&absolute, b'0', b"x", "")]), 400),
            ("device", raw_tar(&[("null", b'3', b"", "")]), 400),
            ("fifo", raw_tar(&[("fifo", b'6', b"", "")]), 400),
            ("hard link out", raw_tar(&[(&hardlink_out, b'1', b"", "../../../etc/passwd")]), 400),
            ("through a link", raw_tar(&[("l", b'2', b"", "/tmp"), (&through, b'0', b"x", "")]), 409),
            ("garbage", b"not a tar at all".repeat(64), 400),
        ] {
            let (got, body) = d.json("PUT", &id, "archive", "/workspace/t", "&parents=true", &tar);
            assert_eq!(got, status, "{what}: {body}");
        }
        assert!(!host_tmp(&m).exists());
        assert_eq!(d.sh(&id, &format!("ls /tmp/{m} 2>/dev/null | wc -l")), "0\n");
        // The checks run before anything is unpacked: the "ok" entry of the first tar is not there.
        assert_eq!(d.sh(&id, "ls /workspace/t/ok 2>/dev/null | wc -l"), "0\n");
    }
}

on_each_daemon_isolation! {
    fn execs_and_file_calls_run_as_the_user_asked_for(d, iso) {
        let id = d.create(&["--name", "as-user"]);
        // berth exec --user: the user's ids, environment and home; root without it.
        let out = d.berth(&["exec", &id, "--user", "user", "--", "sh", "-c", "id -u; id -g; id -G; echo $HOME $USER $LOGNAME; pwd"]);
        assert!(out.status.success(), "{iso}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1000\n1000\n1000\n/home/user user user\n/home/user\n", "{iso}");
        assert_eq!(text(&d.berth(&["exec", &id, "-u", "4242:100", "--", "sh", "-c", "id -u; id -g; echo $HOME"]).stdout), "4242\n100\n/\n");
        assert_eq!(d.sh(&id, "id -u"), "0\n");
        // The user has no capabilities: root's files are closed to it.
        let denied = d.berth(&["exec", &id, "-u", "user", "--", "sh", "-c", "cat /root/.x 2>&1; touch /etc/x 2>&1; grep CapEff /proc/self/status"]);
        let said = text(&denied.stdout);
        assert!(said.contains("Permission denied") && said.contains("CapEff:\t0000000000000000"), "{iso}: {said}");
        // Refusals, before anything runs.
        for (user, why) in [("ghost", "no user named ghost"), ("65536", "neither a user name"), ("Root", "neither a user name")] {
            let out = d.berth(&["exec", &id, "--user", user, "--", "true"]);
            assert_eq!(out.status.code(), Some(125), "{user}");
            assert!(text(&out.stderr).contains(why), "{user}: {}", text(&out.stderr));
        }
        // The files API as the user: what it makes is the user's, where the user may write; refused elsewhere.
        let (status, e) = d.json("PUT", &id, "files", "/home/user/n/notes.txt", "&parents=true&user=user", b"mine");
        assert_eq!((status, e["uid"].as_u64(), e["gid"].as_u64()), (201, Some(1000), Some(1000)), "{iso}: {e}");
        assert_eq!(d.sh(&id, "stat -c '%u:%g %a' /home/user/n /home/user/n/notes.txt"), "1000:1000 755\n1000:1000 644\n");
        let appended = d.berth(&["exec", &id, "-u", "user", "--", "sh", "-c", "echo more >> n/notes.txt && cat n/notes.txt"]);
        assert_eq!(text(&appended.stdout), "minemore\n", "{iso}");
        let (status, e) = d.json("PUT", &id, "files", "/etc/by-user", "&user=user", b"x");
        assert_eq!(status, 409, "{iso}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("Permission denied"), "{e}");
        assert_eq!(d.json("GET", &id, "files", "/root", "&user=user", b"").0, 409);
        assert_eq!(d.json("DELETE", &id, "files", "/etc/hostname", "&user=1000", b"").0, 409);
        assert_eq!(d.json("POST", &id, "mkdir", "/home/user/d", "&user=1000:1000", b"").1["uid"], 1000);
        let (status, e) = d.json("PUT", &id, "files", "/home/user/x", "&user=ghost", b"x");
        assert_eq!((status, e["error"]["code"].as_str()), (400, Some("invalid_request")), "{e}");
        // As root (no user), the same calls work.
        assert_eq!(d.json("PUT", &id, "files", "/etc/by-root", "", b"x").0, 201);
        assert_eq!(d.sh(&id, "stat -c '%u' /etc/by-root; test -e /etc/by-user || echo none"), "0\nnone\n");
        // The journal says who ran.
        let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        assert!(journal.contains(r#""user":"user""#), "{journal}");
        d.berth(&["rm", &id]);
    }
}

on_each_daemon_isolation! {
    fn move_renames_files_and_trees_inside_the_sandbox(d, iso) {
        let id = d.create(&["--name", "files-mv"]);
        let mv = |body: Value| -> (u16, Value) {
            let (status, answer) = d.http("POST", &format!("/v1/sandboxes/{id}/move"), &body.to_string());
            (status, serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer}")))
        };
        let moved = |from: &str, to: &str| mv(serde_json::json!({"from": from, "to": to}));
        d.sh(&id, "mkdir -p /workspace/d/sub && echo one > /workspace/a.txt && echo deep > /workspace/d/sub/f");

        // A file, answered with its entry at the new path.
        let (status, e) = moved("/workspace/a.txt", "/workspace/b.txt");
        assert_eq!(status, 200, "{iso}: {e}");
        assert_eq!((e["name"].as_str(), e["kind"].as_str(), e["size"].as_u64()), (Some("b.txt"), Some("file"), Some(4)));
        assert_eq!(d.sh(&id, "cat /workspace/b.txt; test -e /workspace/a.txt || echo gone"), "one\ngone\n");
        // A directory tree.
        let (status, e) = moved("/workspace/d", "/workspace/e");
        assert_eq!((status, e["kind"].as_str()), (200, Some("directory")), "{e}");
        assert_eq!(d.sh(&id, "cat /workspace/e/sub/f"), "deep\n");
        // A link moves as a link.
        d.sh(&id, "ln -s b.txt /workspace/l");
        let (status, e) = moved("/workspace/l", "/workspace/l2");
        assert_eq!((status, e["kind"].as_str(), e["link_target"].as_str()), (200, Some("symlink"), Some("b.txt")), "{e}");

        // Overwrite: refused without it (nothing changes), done with it.
        d.sh(&id, "echo two > /workspace/c.txt");
        let (status, e) = moved("/workspace/c.txt", "/workspace/b.txt");
        assert_eq!((status, e["error"]["code"].as_str()), (409, Some("conflict")), "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("overwrite"), "{e}");
        assert_eq!(d.sh(&id, "cat /workspace/b.txt /workspace/c.txt"), "one\ntwo\n");
        let (status, e) = mv(serde_json::json!({"from": "/workspace/c.txt", "to": "/workspace/b.txt", "overwrite": true}));
        assert_eq!(status, 200, "{e}");
        assert_eq!(d.sh(&id, "cat /workspace/b.txt; test -e /workspace/c.txt || echo gone"), "two\ngone\n");
        // A directory replaces only an empty one.
        d.sh(&id, "mkdir -p /workspace/full/x /workspace/empty");
        let over = |from: &str, to: &str| mv(serde_json::json!({"from": from, "to": to, "overwrite": true})).0;
        assert_eq!(over("/workspace/e", "/workspace/full"), 409);
        assert_eq!(over("/workspace/b.txt", "/workspace/full"), 409, "a file onto a directory");
        assert_eq!(over("/workspace/e", "/workspace/empty"), 200);
        assert_eq!(d.sh(&id, "cat /workspace/empty/sub/f"), "deep\n");

        // Misses and refusals.
        let (status, e) = moved("/workspace/nope", "/workspace/x");
        assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
        assert_eq!(moved("/workspace/b.txt", "/workspace/no/such/dir").0, 404, "a missing parent");
        assert_eq!(moved("/workspace/empty", "/workspace/empty/sub/in").0, 400, "into itself");
        d.sh(&id, "ln -s /workspace/empty /workspace/via");
        assert_eq!(moved("/workspace/empty", "/workspace/via/sub/in").0, 400, "into itself through a link");
        for (from, to) in [("/", "/workspace/root"), ("/workspace/b.txt", "/"), ("relative", "/workspace/x")] {
            assert_eq!(moved(from, to).0, 400, "{from} -> {to}");
        }
        assert_eq!(moved("/workspace/../etc/passwd", "/workspace/p").0, 400);
        for (from, to) in [("/proc/1/root/etc/hostname", "/workspace/h"), ("/workspace/b.txt", "/proc/1/root/tmp/b")] {
            let (status, e) = moved(from, to);
            assert!((400..500).contains(&status), "a /proc magic link: {from} -> {to}: {status} {e}");
        }
        let (status, _) = mv(serde_json::json!({"from": "/workspace/b.txt", "to": "/workspace/z", "force": true}));
        assert_eq!(status, 400, "an unknown field");
        assert_eq!(d.http("POST", "/v1/sandboxes/nosuchsandbox/move", r#"{"from": "/a", "to": "/b"}"#).0, 404);
        // Across file systems, where /workspace and /tmp are two: a sentence that says so.
        if d.sh(&id, "stat -c %d /workspace /tmp | uniq | wc -l") == "2\n" {
            let (status, e) = moved("/workspace/b.txt", "/tmp/b.txt");
            assert_eq!(status, 409, "{e}");
            assert!(e["error"]["message"].as_str().unwrap().contains("different file systems"), "{e}");
        }

        // A link to /etc as the destination's parent is the sandbox's /etc, never the host's.
        let m = marker("mv");
        d.sh(&id, &format!("rm -f /tmp/link; ln -s /etc /tmp/link; echo inside > /{m}"));
        let (status, e) = moved(&format!("/{m}"), &format!("/tmp/link/{m}"));
        assert_eq!(status, 200, "{e}");
        assert!(!Path::new("/etc").join(&m).exists(), "a move through a link reached the host's /etc");
        assert_eq!(d.sh(&id, &format!("cat /etc/{m}")), "inside\n");
        // A source through a link to a host directory is looked for inside.
        let host_dir = tempfile::Builder::new().prefix("berth-files-mv-").tempdir().unwrap();
        std::fs::write(host_dir.path().join("secret"), "host").unwrap();
        d.sh(&id, &format!("ln -s {} /workspace/hostdir", host_dir.path().display()));
        assert_eq!(moved("/workspace/hostdir/secret", "/workspace/stolen").0, 404);
        assert_eq!(std::fs::read_to_string(host_dir.path().join("secret")).unwrap(), "host");

        // As a user: its own files move, root's do not.
        d.sh(&id, "mkdir -p /home/user/w && echo u > /home/user/w/a && chown -R 1000:1000 /home/user/w");
        let as_user = |from: &str, to: &str| mv(serde_json::json!({"from": from, "to": to, "user": "user"}));
        let (status, e) = as_user("/home/user/w/a", "/home/user/w/b");
        assert_eq!((status, e["uid"].as_u64()), (200, Some(1000)), "{iso}: {e}");
        let (status, e) = as_user("/etc/hostname", "/home/user/w/hostname");
        assert_eq!(status, 409, "{iso}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("Permission denied"), "{e}");
        assert_eq!(as_user("/home/user/w/b", "/etc/b").0, 409);
        assert_eq!(d.sh(&id, "cat /etc/hostname; test -e /etc/b || echo none"), "files-mv\nnone\n");
        assert_eq!(as_user("/home/user/w/b", "/home/user/w/c").0, 200);
        assert_eq!(mv(serde_json::json!({"from": "/home/user/w/c", "to": "/home/user/w/d", "user": "ghost"})).0, 400);

        // berth mv: the same move from the command line, relative paths in /workspace.
        let out = d.berth(&["mv", &id, "b.txt", "renamed.txt", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["name"], "renamed.txt");
        assert_eq!(d.sh(&id, "cat /workspace/renamed.txt"), "two\n");
        let out = d.berth(&["mv", &id, "renamed.txt", "/workspace/empty"]);
        assert_eq!(out.status.code(), Some(125));
        assert!(text(&out.stderr).contains("overwrite"), "{}", text(&out.stderr));

        // Each move is in the journal, with its paths.
        let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        let journal: Vec<Value> = serde_json::from_str(&journal).unwrap();
        let moves: Vec<&Value> = journal.iter().filter(|r| r["action"] == "move_file").collect();
        assert_eq!(moves[0]["args"], serde_json::json!({"from": "/workspace/a.txt", "to": "/workspace/b.txt", "overwrite": false, "user": null}));
        assert_eq!(moves[0]["result"], serde_json::json!({"ok": true}));
        assert!(moves.iter().any(|r| r["args"]["user"] == "user"), "{moves:?}");
        assert!(!moves.iter().any(|r| r["args"]["from"] == "/workspace/nope"), "a failed move is not recorded");
        d.berth(&["rm", &id]);
    }
}
