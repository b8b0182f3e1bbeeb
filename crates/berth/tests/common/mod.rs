//! Helpers for tests that drive the real `berth` binary as root.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod containerd;
pub mod daemon;
pub mod dns;
pub mod leaks;
pub mod secrets;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A data root of its own for one test, checked for leftovers when the test ends.
pub struct Berth {
    pub root: tempfile::TempDir,
    /// The `--isolation` its runs use.
    pub isolation: &'static str,
}

impl Berth {
    pub fn new() -> Berth {
        Berth::on("namespaces")
    }

    /// Runs behind `isolation` (`namespaces` or `gvisor`).
    pub fn on(isolation: &'static str) -> Berth {
        assert!(
            rustix::process::geteuid().is_root(),
            "berth's integration tests create real sandboxes and must run as root"
        );
        if isolation == "gvisor" {
            let info = std::process::Command::new(env!("CARGO_BIN_EXE_berth")).arg("info").output().unwrap();
            let info: Value = serde_json::from_slice(&info.stdout).unwrap();
            let gvisor = info["isolation"].as_array().unwrap().iter().find(|i| i["name"] == "gvisor").unwrap().clone();
            assert_eq!(gvisor["available"], true, "the gvisor tests need runsc (scripts/setup installs it): {gvisor}");
        }
        Berth { root: tempfile::Builder::new().prefix("berth-test-").tempdir().unwrap(), isolation }
    }

    pub fn gvisor(&self) -> bool {
        self.isolation == "gvisor"
    }

    /// `berth run --isolation I [opts] -- cmd...`, ready to run.
    pub fn run_cmd(&self, opts: &[&str], cmd: &[&str]) -> Command {
        let mut args = vec!["run", "--isolation", self.isolation];
        args.extend_from_slice(opts);
        args.push("--");
        args.extend_from_slice(cmd);
        self.cmd(&args)
    }

    /// `berth --root ROOT ARGS...`, ready to run.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
        c.arg("--root").arg(self.root.path()).args(args).stdin(Stdio::null());
        c
    }

    /// Run `berth run --isolation I [opts] -- cmd...` and return its output.
    pub fn run(&self, opts: &[&str], cmd: &[&str]) -> Output {
        self.run_cmd(opts, cmd).output().unwrap()
    }

    /// Run `berth probe ARGS` inside a sandbox (the berth binary is mounted read-only at /opt/berth) and
    /// parse its report.
    pub fn probe(&self, opts: &[&str], probe_args: &[&str]) -> Value {
        let mut all = vec!["--mount", self.bin_mount()];
        all.extend_from_slice(opts);
        let mut cmd = vec!["/opt/berth/berth", "probe"];
        cmd.extend_from_slice(probe_args);
        let out = self.run(&all, &cmd);
        assert!(out.status.success(), "probe failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("probe output {e}: {}", text(&out.stdout)))
    }

    /// `HOST_DIR_OF_BERTH:/opt/berth:ro`
    pub fn bin_mount(&self) -> &'static str {
        let dir = Path::new(env!("CARGO_BIN_EXE_berth")).parent().unwrap().display().to_string();
        Box::leak(format!("{dir}:/opt/berth:ro").into_boxed_str())
    }

    /// Sandboxes this root still holds on disk.
    pub fn leftovers(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.root.path().join("sandboxes"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Berth {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let left = self.leftovers();
        assert!(left.is_empty(), "sandboxes left behind: {left:?}");
    }
}

/// A test run against a daemon of each default isolation: `on_each_daemon_isolation! { fn name(d, iso) { ... } }`
/// makes the tests `name::namespaces` and `name::gvisor`, each with a daemon (`d`) started with
/// `--isolation ISO` (`iso`: its name), so its sandboxes are that isolation's unless a test asks otherwise.
#[macro_export]
macro_rules! on_each_daemon_isolation {
    ($(#[$m:meta])* fn $name:ident($d:ident, $iso:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(dead_code)]
            fn body($d: &mut common::daemon::Daemon, $iso: &str) $body

            $(#[$m])*
            #[test]
            fn namespaces() {
                body(&mut common::daemon::Daemon::start_with(&["--isolation", "namespaces"]), "namespaces")
            }

            $(#[$m])*
            #[test]
            fn gvisor() {
                body(&mut common::daemon::Daemon::start_with(&["--isolation", "gvisor"]), "gvisor")
            }
        }
    };
}

/// A test run once behind each isolation: `on_each_isolation! { fn name(b) { ... } }` makes the tests
/// `name::namespaces` and `name::gvisor`, each with a `Berth` (`b`) whose runs use that isolation.
#[macro_export]
macro_rules! on_each_isolation {
    ($(#[$m:meta])* fn $name:ident($b:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(dead_code)]
            fn body($b: &common::Berth) $body

            $(#[$m])*
            #[test]
            fn namespaces() {
                body(&common::Berth::on("namespaces"))
            }

            $(#[$m])*
            #[test]
            fn gvisor() {
                body(&common::Berth::on("gvisor"))
            }
        }
    };
}

/// Fetch URL inside the sandbox through its proxy (as any HTTP client honouring HTTP_PROXY does); prints the
/// status and body, or the proxy's refusal header.
pub const FETCH: &str = r#"
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("X-Berth-Egress"))
except Exception as e:
    print("error", e)
"#;

/// Python that tries to start 200 sleepers (a bounded fork bomb) and prints how many it started and how many
/// processes it then saw: at most a pids limit can exist at once.
pub const FORK_BOMB: &str = "import os, time\nstarted = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n        continue\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    started += 1\nprint(started, len([p for p in os.listdir('/proc') if p.isdigit()]))\n";

/// Python for tests that try calls from inside a sandbox: `sc(nr, *args)` makes a raw syscall (unused
/// arguments are 0) and returns `ok` or the errno's name; `attempt(f)` does the same for a Python call.
pub const PY_SYSCALLS: &str = "import ctypes, errno, fcntl, os, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
def name(e): return errno.errorcode.get(e, str(e))
def sc(nr, *a):
    a = list(a) + [0] * (6 - len(a))
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x if x < 2**63 else x - 2**64) for x in a])
    return 'ok' if r != -1 else name(ctypes.get_errno())
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return name(e.errno)
";

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every cgroup directory berth has on this host, in all hierarchies.
pub fn berth_cgroups() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/cpuacct",
        "/sys/fs/cgroup/freezer",
    ] {
        if let Ok(d) = std::fs::read_dir(Path::new(base).join("berth")) {
            out.extend(d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
        }
    }
    out
}

/// Host processes whose command line contains `needle`, with their real, effective, saved and fs uids.
pub fn host_processes_with(needle: &str) -> Vec<(i32, Vec<u64>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !cmdline.contains(needle) || cmdline.contains("berth") {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let uids = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|v| v.split_whitespace().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        out.push((pid, uids));
    }
    out
}

/// Send SIGTERM to a running `berth` child.
pub fn terminate(child: &mut std::process::Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}

/// A TCP port of 127.0.0.1 free now, below the kernel's ephemeral range (32768 up), so that no connection's
/// or `bind(0)`'s port can take it before the daemon that is given it listens on it.
pub fn free_port() -> u16 {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64;
    let mut x = seed | 1;
    for _ in 0..1000 {
        // xorshift: a different order per process and call.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20000 + (x % 12000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000 on 127.0.0.1");
}

/// An HTTP server on the host's loopback answering every request with `size` bytes. Returns its port.
pub fn upstream(size: usize) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let Ok(_) = conn.read(&mut buf) else { return };
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n");
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&vec![b'a'; size]);
            });
        }
    });
    port
}
