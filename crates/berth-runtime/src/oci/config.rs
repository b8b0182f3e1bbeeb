//! The parts of an OCI bundle's `config.json` (runtime-spec 1.x) that berth honours, read with serde, and
//! the checks that refuse what it will not do rather than ignore it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::OciError;
use crate::cgroup::Limits;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub oci_version: String,
    pub process: Option<Process>,
    pub root: Option<Root>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub linux: Linux,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub hooks: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    #[serde(default)]
    pub rlimits: Vec<Rlimit>,
    #[serde(default)]
    pub no_new_privileges: bool,
    #[serde(default)]
    pub oom_score_adj: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    #[serde(default)]
    pub umask: Option<u32>,
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Capabilities {
    #[serde(default)]
    pub bounding: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub kind: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Root {
    pub path: PathBuf,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Mount {
    pub destination: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub resources: Option<Resources>,
    #[serde(default)]
    pub cgroups_path: Option<String>,
    #[serde(default)]
    pub masked_paths: Vec<String>,
    #[serde(default)]
    pub readonly_paths: Vec<String>,
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    /// Device nodes to make: berth gives every container the same few, bound from the host, and no others.
    #[serde(default)]
    pub devices: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub cpu: Option<Cpu>,
    #[serde(default)]
    pub pids: Option<Pids>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Memory {
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Cpu {
    pub quota: Option<i64>,
    pub period: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Pids {
    pub limit: i64,
}

/// What a namespace of the config asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// A new one, of the container's own.
    New,
    /// An existing one (another container's, such as a pod's), by its namespace file.
    Join(PathBuf),
    /// Not listed: the host's.
    Host,
}

/// The namespaces berth builds a container with, from the config's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaces {
    pub pid: Want,
    pub net: Want,
    pub ipc: Want,
    pub uts: Want,
}

impl Config {
    /// Read and check `bundle/config.json`.
    pub fn load(bundle: &Path) -> Result<Config, OciError> {
        let path = bundle.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| OciError::Config(format!("cannot read {}: {e}", path.display())))?;
        let config: Config = serde_json::from_str(&text)
            .map_err(|e| OciError::Config(format!("{} is not an OCI runtime config: {e}", path.display())))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), OciError> {
        if !self.oci_version.starts_with("1.") {
            return Err(OciError::Config(format!(
                "ociVersion {:?} is not one berth knows (it reads runtime-spec 1.x)",
                self.oci_version
            )));
        }
        if self.process.as_ref().is_none_or(|p| p.args.is_empty()) {
            return Err(OciError::Config("the config has no process to run (process.args is empty)".into()));
        }
        if self.root.is_none() {
            return Err(OciError::Config("the config has no root file system (root.path)".into()));
        }
        if self.hooks.as_ref().is_some_and(|h| {
            h.as_object().is_some_and(|o| {
                o.values().any(|v| v != &serde_json::Value::Null && v.as_array().is_none_or(|a| !a.is_empty()))
            })
        }) {
            return Err(OciError::Config(
                "the config has hooks: berth-oci runs no hook programs on the host (they would run as host root)"
                    .into(),
            ));
        }
        if let Some(process) = &self.process {
            check_process(process)?;
        }
        if let Some(path) = &self.linux.cgroups_path
            && path.contains(':')
        {
            return Err(OciError::Config(format!(
                "cgroupsPath {path:?} is a systemd unit: berth-oci manages cgroups itself (set SystemdCgroup = false)"
            )));
        }
        if let Some(path) = &self.linux.cgroups_path
            && path.trim_start_matches('/').split('/').next() == Some(crate::cgroup::PARENT_DIR)
        {
            return Err(OciError::Config(format!(
                "cgroupsPath {path:?} is under /{}/, where berth keeps its own sandboxes' cgroups",
                crate::cgroup::PARENT_DIR
            )));
        }
        if let Some(device) = self.linux.devices.first() {
            return Err(OciError::Config(format!(
                "the config asks for the device {}: berth-oci gives containers only null, zero, full, random, \
                 urandom, tty and their own pseudo-terminals",
                device.get("path").and_then(|p| p.as_str()).unwrap_or("?")
            )));
        }
        if let Some(sysctl) = self.linux.sysctl.keys().next() {
            return Err(OciError::Config(format!(
                "the config sets the sysctl {sysctl}: berth-oci does not change kernel settings for a container"
            )));
        }
        self.namespaces()?;
        self.limits()?;
        Ok(())
    }

    /// The namespaces asked for. berth always gives a container user, mount and cgroup namespaces of its
    /// own, and refuses to share the host's pid or ipc namespace.
    pub fn namespaces(&self) -> Result<Namespaces, OciError> {
        let mut ns = Namespaces { pid: Want::Host, net: Want::Host, ipc: Want::Host, uts: Want::Host };
        for n in &self.linux.namespaces {
            let want = match &n.path {
                Some(p) if !p.as_os_str().is_empty() => Want::Join(p.clone()),
                _ => Want::New,
            };
            match n.kind.as_str() {
                "pid" => ns.pid = want,
                "network" => ns.net = want,
                "ipc" => ns.ipc = want,
                "uts" => ns.uts = want,
                "user" | "mount" | "cgroup" if want == Want::New => {}
                "user" | "mount" | "cgroup" => {
                    return Err(OciError::Config(format!(
                        "the config joins an existing {} namespace: berth makes each container's own",
                        n.kind
                    )));
                }
                "time" => return Err(OciError::Config("berth-oci does not make time namespaces".into())),
                other => return Err(OciError::Config(format!("unknown namespace type {other:?}"))),
            }
        }
        for (name, want) in [("pid", &ns.pid), ("ipc", &ns.ipc)] {
            if *want == Want::Host {
                return Err(OciError::Config(format!(
                    "the config shares the host's {name} namespace (hostPID/hostIPC): berth-oci refuses it"
                )));
            }
        }
        Ok(ns)
    }

    /// The cgroup limits of `linux.resources`.
    pub fn limits(&self) -> Result<Limits, OciError> {
        Ok(self.linux.resources.as_ref().map(Resources::limits).unwrap_or_default())
    }

    /// The root file system's directory (a relative `root.path` is relative to the bundle).
    pub fn rootfs(&self, bundle: &Path) -> PathBuf {
        let path = self.root.as_ref().map(|r| r.path.clone()).unwrap_or_default();
        if path.is_absolute() { path } else { bundle.join(path) }
    }
}

impl Resources {
    /// The cgroup limits these set (unset and non-positive values set none).
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        let r = self;
        if let Some(limit) = r.memory.as_ref().and_then(|m| m.limit).filter(|l| *l > 0) {
            limits.memory_bytes = Some(limit as u64);
        }
        if let Some(cpu) = &r.cpu
            && let Some(quota) = cpu.quota.filter(|q| *q > 0)
        {
            let period = cpu.period.filter(|p| *p > 0).unwrap_or(crate::cgroup::CPU_PERIOD_US);
            limits.cpu_millis = Some(((quota as u64).saturating_mul(1000) / period).max(10));
        }
        if let Some(pids) = r.pids.as_ref().filter(|p| p.limit > 0) {
            limits.pids = Some(pids.limit as u64);
        }
        limits
    }
}

/// Refuse a process berth cannot run as given.
pub fn check_process(process: &Process) -> Result<(), OciError> {
    if process.args.is_empty() {
        return Err(OciError::Config("the process has no args".into()));
    }
    if !process.cwd.is_empty() && !process.cwd.starts_with('/') {
        return Err(OciError::Config(format!("the process's cwd {:?} is not an absolute path", process.cwd)));
    }
    for r in &process.rlimits {
        rlimit_resource(&r.kind)?;
    }
    for name in process.capabilities.iter().flat_map(|c| &c.bounding) {
        capability_number(name)?;
    }
    Ok(())
}

/// Capability names without `CAP_`, by number (<linux/capability.h>).
const CAPABILITY_NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// A capability's name without `CAP_`.
pub fn capability_name(n: u32) -> Option<&'static str> {
    CAPABILITY_NAMES.get(n as usize).copied()
}

/// A capability's number from its OCI name (`CAP_CHOWN`).
pub fn capability_number(name: &str) -> Result<u32, OciError> {
    let bare = name.strip_prefix("CAP_").unwrap_or(name);
    CAPABILITY_NAMES
        .iter()
        .position(|n| *n == bare)
        .map(|i| i as u32)
        .ok_or_else(|| OciError::Config(format!("unknown capability {name:?}")))
}

/// The resource of an OCI rlimit name (`RLIMIT_NOFILE`).
pub fn rlimit_resource(name: &str) -> Result<rustix::process::Resource, OciError> {
    use rustix::process::Resource as R;
    Ok(match name {
        "RLIMIT_CPU" => R::Cpu,
        "RLIMIT_FSIZE" => R::Fsize,
        "RLIMIT_DATA" => R::Data,
        "RLIMIT_STACK" => R::Stack,
        "RLIMIT_CORE" => R::Core,
        "RLIMIT_RSS" => R::Rss,
        "RLIMIT_NPROC" => R::Nproc,
        "RLIMIT_NOFILE" => R::Nofile,
        "RLIMIT_MEMLOCK" => R::Memlock,
        "RLIMIT_AS" => R::As,
        "RLIMIT_LOCKS" => R::Locks,
        "RLIMIT_SIGPENDING" => R::Sigpending,
        "RLIMIT_MSGQUEUE" => R::Msgqueue,
        "RLIMIT_NICE" => R::Nice,
        "RLIMIT_RTPRIO" => R::Rtprio,
        "RLIMIT_RTTIME" => R::Rttime,
        other => return Err(OciError::Config(format!("unknown rlimit {other:?}"))),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> Result<Config, OciError> {
        let mut base = serde_json::json!({
            "ociVersion": "1.0.2-dev",
            "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "network"}]}
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        let c: Config = serde_json::from_value(base).unwrap();
        c.check().map(|()| c)
    }

    #[test]
    fn a_plain_config_is_taken_with_its_namespaces_and_limits() {
        let c = config(serde_json::json!({})).unwrap();
        let ns = c.namespaces().unwrap();
        assert_eq!((ns.pid, ns.net, ns.uts), (Want::New, Want::New, Want::Host));
        assert_eq!(c.rootfs(Path::new("/b")), Path::new("/b/rootfs"));
        let c = config(serde_json::json!({"linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "network", "path": "/proc/7/ns/net"}],
            "resources": {"memory": {"limit": 268435456}, "cpu": {"quota": 50000, "period": 100000}, "pids": {"limit": 64}}
        }}))
        .unwrap();
        assert_eq!(c.namespaces().unwrap().net, Want::Join("/proc/7/ns/net".into()));
        let l = c.limits().unwrap();
        assert_eq!((l.memory_bytes, l.cpu_millis, l.pids), (Some(268435456), Some(500), Some(64)));
    }

    #[test]
    fn what_berth_will_not_do_is_refused_with_a_reason() {
        for (extra, needle) in [
            (serde_json::json!({"ociVersion": "0.9"}), "ociVersion"),
            (serde_json::json!({"process": {"args": []}}), "no process"),
            (serde_json::json!({"linux": {"namespaces": [{"type": "ipc"}]}}), "host's pid"),
            (serde_json::json!({"linux": {"namespaces": [{"type": "pid"}]}}), "host's ipc"),
            (
                serde_json::json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "user", "path": "/x"}]}}),
                "existing user",
            ),
            (serde_json::json!({"hooks": {"prestart": [{"path": "/bin/true"}]}}), "hooks"),
            (
                serde_json::json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}], "devices": [{"path": "/dev/sda", "type": "b", "major": 8, "minor": 0}]}}),
                "/dev/sda",
            ),
            (serde_json::json!({"process": {"args": ["sh"], "cwd": "rel"}}), "absolute"),
            (
                serde_json::json!({"process": {"args": ["sh"], "rlimits": [{"type": "RLIMIT_X", "hard": 1, "soft": 1}]}}),
                "rlimit",
            ),
            (
                serde_json::json!({"process": {"args": ["sh"], "capabilities": {"bounding": ["CAP_NOPE"]}}}),
                "capability",
            ),
        ] {
            let err = config(extra.clone()).unwrap_err().to_string();
            assert!(err.contains(needle), "{extra}: {err}");
        }
        let mut c = config(serde_json::json!({})).unwrap();
        c.linux.cgroups_path = Some("system.slice:cri:abc".into());
        assert!(c.check().unwrap_err().to_string().contains("systemd"));
        c.linux.cgroups_path = Some("/berth/abc".into());
        assert!(c.check().unwrap_err().to_string().contains("its own sandboxes"));
        c.linux.cgroups_path = Some("/berthtest/abc".into());
        assert!(c.check().is_ok());
        // Empty hook lists are no hooks.
        assert!(config(serde_json::json!({"hooks": {"prestart": []}})).is_ok());
    }

    #[test]
    fn capability_and_rlimit_names() {
        assert_eq!(capability_number("CAP_CHOWN").unwrap(), 0);
        assert_eq!(capability_number("CAP_NET_BIND_SERVICE").unwrap(), 10);
        assert_eq!(capability_number("CAP_CHECKPOINT_RESTORE").unwrap(), 40);
        assert!(rlimit_resource("RLIMIT_NOFILE").is_ok());
    }
}
