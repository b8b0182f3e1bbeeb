//! A daemon of its own for one test: `berth daemon` on a private socket and data root in a tempdir, the CLI
//! and raw HTTP against it, and everything removed when it is dropped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::text;

/// A daemon of its own for one test.
pub struct Daemon {
    /// Holds the data root (`root`) and the socket (`berth.sock`).
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    /// Environment variables for the daemon.
    env: Vec<(String, String)>,
    /// For a daemon that resolves names through a test's DNS server: the resolv.conf bound over
    /// /etc/resolv.conf in a mount namespace of the daemon's own, and the server's releaser.
    resolver: Option<(PathBuf, super::dns::Release)>,
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// A daemon started with extra `berth daemon` options.
    pub fn start_with(extra: &[&str]) -> Daemon {
        let mut d = Daemon::new(extra);
        d.spawn();
        d
    }

    fn new(extra: &[&str]) -> Daemon {
        // Named after the test target: berth-daemon-…, berth-files-…, berth-shell-….
        let prefix = format!("berth-{}-", env!("CARGO_CRATE_NAME"));
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir().unwrap();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        Daemon { dir, child: None, extra, env: Vec::new(), resolver: None }
    }

    /// A daemon whose host-name lookups (glibc's, as in production) go to `dns` alone: it runs in a mount
    /// namespace of its own, with a resolv.conf naming only that server bound over /etc/resolv.conf. Its files
    /// are not on a storage pool (`--storage none`): a pool mounted in that namespace would be out of the
    /// harness's sight. Lookups `dns` holds are released before the daemon is stopped.
    pub fn start_with_resolver(dns: &super::dns::Dns, extra: &[&str]) -> Daemon {
        let mut args = vec!["--storage", "none"];
        args.extend_from_slice(extra);
        let mut d = Daemon::new(&args);
        let conf = d.dir.path().join("resolv.conf");
        // One try per question, as long as glibc allows: a server that does not answer is not asked again.
        std::fs::write(&conf, format!("nameserver {}\noptions timeout:30 attempts:1\n", dns.addr())).unwrap();
        d.resolver = Some((conf, dns.releaser()));
        d.spawn();
        d
    }

    /// A daemon that also serves the API on a free TCP port of 127.0.0.1 (`--listen`), started with extra
    /// options, once that port answers. Returns the daemon and `ADDR:PORT`.
    pub fn start_with_tcp(extra: &[&str]) -> (Daemon, String) {
        let port = super::free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["--listen", addr.as_str()];
        args.extend_from_slice(extra);
        let d = Daemon::start_with(&args);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "the TCP listener did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        (d, addr)
    }

    /// A daemon started with extra environment variables.
    pub fn start_with_env(env: &[(&str, &str)]) -> Daemon {
        let mut d = Daemon::new(&[]);
        d.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        d.spawn();
        d
    }

    /// A daemon whose data root has a btrfs storage pool of `size` (`berth storage init`), unmounted when the
    /// daemon is dropped.
    pub fn start_with_pool(size: &str) -> Daemon {
        let mut d = Daemon::new(&[]);
        let out = Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("--root")
            .arg(d.root())
            .args(["storage", "init", "--size", size])
            .output()
            .unwrap();
        assert!(out.status.success(), "storage init: {}", text(&out.stderr));
        d.spawn();
        d
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("berth.sock")
    }

    /// Start the daemon (again, after `kill`) and wait until it answers.
    pub fn spawn(&mut self) {
        let mut command = match &self.resolver {
            None => Command::new(env!("CARGO_BIN_EXE_berth")),
            Some((conf, _)) => {
                // unshare and sh exec in turn, so the child is the daemon itself.
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
                    .arg(conf)
                    .arg(env!("CARGO_BIN_EXE_berth"));
                c
            }
        };
        let child = command
            .arg("--root")
            .arg(self.root())
            .arg("--socket")
            .arg(self.socket())
            .arg("daemon")
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.http("GET", "/healthz", "").0 != 200 {
            assert!(Instant::now() < deadline, "the daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the daemon (its sandboxes' shims live on).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM the daemon and wait (at most 30 s) for it to exit: it stops serving and tears its warm pool
    /// down (its sandboxes' shims live on).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            super::terminate(&mut c);
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().unwrap().is_none() {
                assert!(Instant::now() < deadline, "the daemon did not exit after SIGTERM");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// `berth --socket SOCKET ARGS...`, ready to run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
        c.arg("--socket").arg(self.socket()).args(args).stdin(Stdio::null());
        c
    }

    /// Run `berth --socket SOCKET ARGS...` and return its output.
    pub fn berth(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `berth create ARGS...`, which must succeed; the new sandbox's id.
    pub fn create(&self, args: &[&str]) -> String {
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let out = self.berth(&all);
        assert!(out.status.success(), "create: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// The ids of the sandboxes `berth ls` lists.
    pub fn ids(&self) -> Vec<String> {
        let out = self.berth(&["ls", "--json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
    }

    /// The execs `berth ps ID` lists.
    pub fn execs(&self, id: &str) -> Vec<Value> {
        let out = self.berth(&["ps", id, "--json"]);
        serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
    }

    /// `berth exec ID -- sh -c SCRIPT`, which must succeed; its stdout.
    pub fn sh(&self, id: &str, script: &str) -> String {
        let out = self.berth(&["exec", id, "--", "sh", "-c", script]);
        assert!(out.status.success(), "{script}: {} {}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    /// Sandbox `id`, made with `--disk 64M`, cannot write 100 MiB (the write fails inside with the quota's or a
    /// full disk's error, and what it wrote stays within the quota); once it frees the space it works again.
    /// The host and the rest of the pool are untouched.
    pub fn assert_quota_holds(&self, id: &str) {
        let out = self.berth(&["exec", id, "--", "sh", "-c", "head -c 100M /dev/zero > /workspace/big; echo rc=$?"]);
        let err = text(&out.stderr);
        assert!(text(&out.stdout).contains("rc=1"), "{} {err}", text(&out.stdout));
        assert!(err.contains("quota") || err.contains("No space"), "{err}");
        let written = self.sh(id, "stat -c %s /workspace/big");
        assert!(written.trim().parse::<u64>().unwrap() <= 64 << 20, "{written}");
        self.sh(id, "rm /workspace/big && echo fine > /workspace/ok");
        assert_eq!(self.sh(id, "cat /workspace/ok"), "fine\n");
    }

    /// `berth shell ARGS...` with `input` as its (piped) stdin.
    pub fn shell(&self, args: &[&str], input: &str) -> Output {
        let mut all = vec!["shell"];
        all.extend_from_slice(args);
        let mut child =
            self.cmd(&all).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        wait_output(child, Duration::from_secs(30))
    }

    /// A WebSocket to the shell route.
    pub fn ws(&self, id: &str, query: &str) -> tungstenite::WebSocket<UnixStream> {
        let stream = UnixStream::connect(self.socket()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let url = format!("ws://berth/v1/sandboxes/{id}/shell?{query}");
        tungstenite::client::client(url, stream).unwrap().0
    }

    /// One HTTP/1.1 request with a JSON body over the socket: (status, body).
    pub fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let (status, body) = self.request(method, path, "Content-Type: application/json\r\n", body.as_bytes());
        (status, text(&body))
    }

    /// One HTTP/1.1 request with a byte body (and no content type) over the socket: (status, body).
    pub fn http_bytes(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        self.request(method, path, "", body)
    }

    /// One HTTP/1.1 request over the socket, with `headers` (whole `Name: value\r\n` lines) after `Host`:
    /// (status, body), chunked bodies put back together. Status 0 if there is no daemon to connect to.
    pub fn request(&self, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let Ok(mut s) = UnixStream::connect(self.socket()) else { return (0, Vec::new()) };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: berth\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        // A server that refuses a body (413) may close before all of it is written: read its answer anyway.
        let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body));
        let mut resp = Vec::new();
        let _ = s.read_to_end(&mut resp);
        let split = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(resp.len());
        let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let mut body = resp.get(split + 4..).unwrap_or_default().to_vec();
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        (status, body)
    }

    /// One raw HTTP/1.1 request over the socket, sent as it is: (status, head and body). The answer is read to
    /// the end of its `Content-Length` body, since a request to upgrade keeps the connection open.
    pub fn raw(&self, request: &str) -> (u16, String) {
        let Ok(mut s) = UnixStream::connect(self.socket()) else { return (0, String::new()) };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(request.as_bytes());
        let mut resp = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&resp).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok());
                if length.is_some_and(|n| body.len() >= n) {
                    break;
                }
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => resp.extend_from_slice(&buf[..n]),
            }
        }
        let resp = String::from_utf8_lossy(&resp).into_owned();
        (resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), resp)
    }

    /// A request to a files route, `/v1/sandboxes/ID/ROUTE?path=PATH` and `extra` (`&name=value...`).
    pub fn files(&self, method: &str, id: &str, route: &str, path: &str, extra: &str, body: &[u8]) -> (u16, Vec<u8>) {
        self.http_bytes(method, &format!("/v1/sandboxes/{id}/{route}?path={}{extra}", encode(path)), body)
    }

    /// `files`, its answer parsed as JSON (null if empty).
    pub fn json(&self, method: &str, id: &str, route: &str, path: &str, extra: &str, body: &[u8]) -> (u16, Value) {
        let (status, body) = self.files(method, id, route, path, extra, body);
        let v = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or_else(|_| panic!("not JSON: {}", text(&body)))
        };
        (status, v)
    }
}

impl Daemon {
    /// The snapshots and volumes the daemon lists (empty if it does not answer).
    fn kept_storage(&self) -> super::leaks::Kept {
        let list = |path: &str| -> Vec<Value> {
            let (status, body) = self.http("GET", path, "");
            if status != 200 {
                return Vec::new();
            }
            serde_json::from_str(&body).unwrap_or_default()
        };
        let mut kept = super::leaks::Kept::default();
        for s in list("/v1/snapshots") {
            let id = s["id"].as_str().unwrap_or_default().to_string();
            if s["origin"] == "fork" {
                kept.fork_snapshots.push(id.clone());
            }
            kept.snapshots.push(id);
        }
        kept.volumes = list("/v1/volumes").iter().filter_map(|v| v["name"].as_str().map(String::from)).collect();
        kept
    }
}

impl Drop for Daemon {
    /// Remove every sandbox, stop the daemon, then check that nothing of it is left on the host (unless the
    /// test has failed already).
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        let mut left = Vec::new();
        let mut kept = super::leaks::Kept::default();
        if let Some(mut c) = self.child.take() {
            let rm = self.cmd(&["rm", "--all"]).output();
            if let Ok(rm) = &rm
                && !rm.status.success()
            {
                left.push(format!("berth rm --all failed: {}", text(&rm.stderr)));
            }
            // What the daemon still keeps on purpose: snapshots someone asked for and named volumes. A fork's
            // snapshot goes with its last child, so none may be left once every sandbox is removed.
            kept = self.kept_storage();
            left.extend(kept.fork_snapshots.iter().map(|id| format!("the fork snapshot {id}")));
            if let Some((_, release)) = &self.resolver {
                // Its mounts are in its own namespace, seen only while it runs.
                let table = format!("/proc/{}/mountinfo", c.id());
                left.extend(
                    super::leaks::mounts_in(&table, &self.root()).into_iter().map(|m| format!("the mount {m}")),
                );
                // Lookups still waiting on the server end now, so that the daemon's exit does not wait for them.
                release.release();
            }
            super::terminate(&mut c);
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    left.push("the daemon did not exit after SIGTERM".into());
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        left.extend(super::leaks::daemon_leftovers(&self.root()));
        left.extend(super::leaks::storage_leftovers(&self.root(), &kept));
        if self.root().join("pool.img").exists() {
            // The last processes of a sandbox (gVisor's gofer among them) may be on their way out for a moment
            // after the daemon, holding the pool busy; a mount that stays is a leak.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let _ = berth_storage::Pool::unmount(&self.root());
                let mounts = super::leaks::mounts_under(&self.root());
                if mounts.is_empty() || Instant::now() > deadline {
                    left.extend(mounts.into_iter().map(|m| format!("the mount {m}")));
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if !panicking {
            assert!(left.is_empty(), "the daemon left behind: {left:#?}");
        }
    }
}

/// One raw HTTP/1.1 request to a daemon's TCP listener (`--listen`), with a bearer token if given:
/// (status, body).
pub fn tcp_http(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: berth\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// Wait for a child's output, killing it after `limit` (a test must not hang on a shell that never ends).
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}; output so far: {}", text(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Put a chunked body back together.
pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// Percent-encode a query value (slashes kept, for readable failures).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
