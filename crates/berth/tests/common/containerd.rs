//! A containerd of a test's own (Debian's, installed by scripts/setup), started by hand with a private root,
//! state and socket, with a `berth` runtime whose BinaryName is a `berth-oci` link to the binary under test.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::text;

pub const IMAGE: &str = "docker.io/library/berthtest:1";
/// The containerd namespace `ctr` works in (CRI's is `k8s.io`).
pub const NS: &str = "berthtest";
/// Where berth-oci keeps the state of `ctr`'s containers, under the containerd's directory: the shim adds
/// the namespace to the root it is given.
pub const OCI_ROOT: &str = "oci/berthtest";

/// A containerd of a test's own, with a `berth` runtime whose BinaryName is a `berth-oci` link.
pub struct Containerd {
    dir: tempfile::TempDir,
    child: Child,
}

impl Containerd {
    pub fn start() -> Containerd {
        Containerd::start_with(&[])
    }

    /// Started with `env` in its environment (which its shims and runtimes inherit).
    pub fn start_with(env: &[(&str, &std::ffi::OsStr)]) -> Containerd {
        Containerd::start_full(env, |_| {})
    }

    /// Started with `env`, once `prepare` has been given its directory (where `cni-bin` and `cni-conf` are
    /// the CNI plugins' and configurations' directories).
    pub fn start_full(env: &[(&str, &std::ffi::OsStr)], prepare: impl FnOnce(&Path)) -> Containerd {
        assert!(rustix::process::geteuid().is_root(), "the Kubernetes node tests run containerd and must run as root");
        for tool in ["containerd", "ctr", "containerd-shim-runc-v2"] {
            assert!(
                Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success(),
                "{tool} is missing: run scripts/setup, which installs Debian's containerd"
            );
        }
        // Short: the socket's path must fit a unix address.
        let dir = tempfile::Builder::new().prefix("bk-").tempdir_in("/tmp").unwrap();
        let d = dir.path().to_path_buf();
        let d = d.as_path();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_berth"), d.join("berth-oci")).unwrap();
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "registry.k8s.io/pause:3.6"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.berth]
      runtime_type = "io.containerd.runc.v2"
      # The pod's berth.dev/* annotations reach berth-oci (its node agent features).
      pod_annotations = ["berth.dev/*"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.berth.options]
        BinaryName = "{d}/berth-oci"
        Root = "{d}/oci-cri"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
"#,
            d = d.display()
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        prepare(d);
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .envs(env.iter().copied())
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd { dir, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !c.ctr(&["version"]).status.success() {
            assert!(Instant::now() < deadline, "containerd did not come up:\n{}", c.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        // One image under both names the CRI needs: the pod's pause image and the workload.
        let tar = d.join("image.tar");
        let made = Command::new("python3")
            .arg(repo().join("crates/berth/tests/kubernetes/image.py"))
            .arg(&tar)
            .args(["registry.k8s.io/pause:3.6", IMAGE])
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", text(&made.stderr));
        for ns in [NS, "k8s.io"] {
            let out = c.ctr_in(ns, &["images", "import", tar.to_str().unwrap()]);
            assert!(out.status.success(), "import: {}", text(&out.stderr));
        }
        c
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.path().join("containerd.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path().join("containerd.log")).unwrap_or_default()
    }

    pub fn ctr_in(&self, ns: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address").arg(self.socket()).args(["--namespace", ns]).args(args);
        super::daemon::wait_output(
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
            Duration::from_secs(60),
        )
    }

    pub fn ctr(&self, args: &[&str]) -> Output {
        self.ctr_in(NS, args)
    }

    /// `ctr run` through berth-oci, with its state under this containerd's directory.
    pub fn run(&self, flags: &[&str], id: &str, command: &[&str]) -> Output {
        let binary = self.path().join("berth-oci");
        let root = self.path().join("oci");
        let mut args = vec!["run", "--runc-binary", binary.to_str().unwrap(), "--runc-root", root.to_str().unwrap()];
        args.extend(flags);
        args.extend([IMAGE, id]);
        args.extend(command);
        self.ctr(&args)
    }

    /// The status column of `ctr task ls` for `id`.
    pub fn task_status(&self, id: &str) -> String {
        let out = text(&self.ctr(&["task", "ls"]).stdout);
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(id))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap_or("")
            .to_string()
    }

    pub fn wait_status(&self, id: &str, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = self.task_status(id);
            if got == want || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What berth-oci keeps of containers, from its own command line.
    pub fn oci(&self, root: &str, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("oci")
            .arg("--root")
            .arg(self.path().join(root))
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Tasks first: their shims outlive containerd.
        for ns in [NS, "k8s.io"] {
            for line in text(&self.ctr_in(ns, &["task", "ls", "-q"]).stdout).lines() {
                let _ = self.ctr_in(ns, &["task", "kill", "-a", "-s", "KILL", line]);
                let _ = self.ctr_in(ns, &["task", "rm", "-f", line]);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for m in super::leaks::mounts_under(self.path()).iter().rev() {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
    }
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a removed container may not leave: berth-oci state, pod id reservations, cgroups.
pub fn leftovers(c: &Containerd, root: &str) -> Vec<String> {
    let mut left = Vec::new();
    let dir = c.path().join(root);
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !matches!(name.as_str(), ".pods" | ".pods.lock") {
            left.push(format!("{root}/{name}"));
        }
    }
    for e in std::fs::read_dir(dir.join(".pods")).into_iter().flatten().flatten() {
        left.push(format!("pod {}", e.file_name().to_string_lossy()));
    }
    for e in std::fs::read_dir("/run/berth/ids").into_iter().flatten().flatten() {
        if std::fs::read_to_string(e.path()).is_ok_and(|o| o.contains(dir.to_str().unwrap())) {
            left.push(format!("id reservation {}", e.file_name().to_string_lossy()));
        }
    }
    left
}

/// The cgroups of containers `ids` still under `parent` (on any v1 hierarchy, or in the v2 tree).
pub fn cgroups_left(parent: &str, ids: &[&str]) -> Vec<String> {
    let mut left = Vec::new();
    let roots: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .chain([PathBuf::from("/sys/fs/cgroup")])
        .collect();
    for root in roots {
        for id in ids {
            let dir = root.join(parent).join(id);
            if dir.is_dir() {
                left.push(dir.display().to_string());
            }
        }
    }
    left
}

/// A bundle in `dir` whose root is busybox-static and whose program is `sh -c script`; `extra` replaces
/// top-level keys of its config.
pub fn bundle(dir: &Path, script: &str, extra: Value) -> PathBuf {
    let b = dir.join("bundle");
    std::fs::create_dir_all(b.join("rootfs/bin")).unwrap();
    std::fs::copy("/bin/busybox", b.join("rootfs/bin/busybox")).unwrap();
    for applet in ["sh", "echo", "cat", "id", "sleep", "wget", "nc", "grep"] {
        let _ = std::os::unix::fs::symlink("busybox", b.join("rootfs/bin").join(applet));
    }
    let mut config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["sh", "-c", script], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "hostname": "bundled",
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "uts"}, {"type": "network"}]}
    });
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    std::fs::write(b.join("config.json"), config.to_string()).unwrap();
    b
}
