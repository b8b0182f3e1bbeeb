//! An OCI config compiled into berth's plan: the bundle's root file system, id-mapped so that the image's
//! root is root inside (and an unprivileged host id outside), the config's mounts in order, the devices
//! berth gives every sandbox, berth's masks joined to the config's, then the pivot.

use std::path::{Path, PathBuf};

use berth_sys::mount::Flags;

use super::OciError;
use super::config::{Config, Mount};
use crate::plan::{
    DEVICES, Fallback, Idmap, PROC_MASKED_DIRS, PROC_MASKED_FILES, PROC_READONLY, Plan, SYS_MASKED_DIRS,
    SYS_MASKED_FILES, Step, Tree,
};

/// Where a berth workspace volume is mounted.
pub const WORKSPACE: &str = "/workspace";

/// What the host gives the compiler besides the config.
pub struct Host<'a> {
    /// The bundle's directory (a relative `root.path` is relative to it).
    pub bundle: &'a Path,
    /// The directory (a mount point only, inside the container's own mount namespace) the root is built on.
    pub scratch: &'a Path,
    /// The host's cgroups are v2 (a cgroup2 tree can be mounted inside; v1 hierarchies cannot).
    pub cgroup_v2: bool,
    /// On v1, the container's own cgroup directories (one per hierarchy, to be made): what its
    /// `/sys/fs/cgroup` shows, read-only, in place of hierarchies it cannot mount.
    pub cgroup_dirs: &'a [PathBuf],
    /// A berth workspace volume to mount at /workspace, read-write, under berth's storage ids.
    pub workspace: Option<&'a Path>,
}

/// Compile `config` into a plan.
pub fn compile(config: &Config, host: &Host<'_>) -> Result<Plan, OciError> {
    let root = host.scratch.join("rootfs");
    let rootfs = config.rootfs(host.bundle);
    if !rootfs.is_dir() {
        return Err(OciError::Config(format!("the root file system {} is not a directory", rootfs.display())));
    }
    // A read-only root is made so once everything is mounted on it: mount points may have to be made first.
    let readonly_root = config.root.as_ref().is_some_and(|r| r.readonly);
    let mut trees = vec![Tree { source: rootfs, idmap: Idmap::Sandbox, readonly: false }];
    let mut steps = vec![
        Step::Mount {
            fstype: "tmpfs",
            target: host.scratch.to_path_buf(),
            flags: Flags::NOSUID | Flags::NODEV,
            data: "mode=755,size=64k".into(),
        },
        Step::Mkdir { path: root.clone(), mode: 0o755 },
        Step::Attach { tree: 0, target: root.clone() },
        Step::NoSymlinks { names: vec!["proc", "sys", "dev"] },
    ];
    let has = |dest: &str| config.mounts.iter().any(|m| clean(&m.destination) == dest);
    let mut mounts: Vec<Mount> = Vec::new();
    // A config without the kernel's file systems still gets them, as every berth sandbox does.
    for (dest, kind, options) in [
        ("/proc", "proc", &["nosuid", "noexec", "nodev"][..]),
        ("/dev", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"][..]),
        ("/dev/pts", "devpts", &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"][..]),
        ("/dev/shm", "tmpfs", &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"][..]),
    ] {
        if !has(dest) {
            mounts.push(Mount {
                destination: dest.into(),
                kind: Some(kind.into()),
                source: Some(kind.into()),
                options: options.iter().map(|o| o.to_string()).collect(),
            });
        }
    }
    mounts.extend(config.mounts.iter().cloned());
    // Kernel file systems before what is mounted below them.
    mounts.sort_by_key(|m| if matches!(clean(&m.destination).as_str(), "/proc" | "/dev" | "/sys") { 0 } else { 1 });
    for m in &mounts {
        mount_step(m, host, &mut trees, &mut steps)?;
    }
    if let Some(ws) = host.workspace {
        let below = |m: &Mount| clean(&m.destination).starts_with(&format!("{WORKSPACE}/"));
        if has(WORKSPACE) || config.mounts.iter().any(below) {
            return Err(OciError::Config(format!(
                "the pod has a berth workspace (annotation berth.dev/workspace) and its config mounts {WORKSPACE} \
                 or a path below it too (the workspace would hide it): drop one of them"
            )));
        }
        trees.push(Tree { source: ws.to_path_buf(), idmap: Idmap::Storage, readonly: false });
        steps.push(Step::AttachInRoot { tree: trees.len() - 1, target: WORKSPACE.into(), file: false });
    }
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for d in DEVICES {
        steps.push(Step::BindFile {
            source: Path::new("/dev").join(d),
            target: at(&format!("/dev/{d}")),
            optional: false,
        });
    }
    for (link, to) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink { link: at(link), to });
    }
    let mut masked: Vec<String> =
        PROC_MASKED_FILES.iter().chain(&PROC_MASKED_DIRS).map(|f| format!("/proc/{f}")).collect();
    masked.extend(SYS_MASKED_DIRS.iter().chain(&SYS_MASKED_FILES).map(|f| format!("/sys/{f}")));
    masked.extend(config.linux.masked_paths.iter().map(|p| clean(p)));
    masked.dedup();
    // Addressed by path: only below a /sys that is the kernel's (mounted here, not a directory of the image's).
    if mounts.iter().any(|m| m.kind.as_deref() == Some("sysfs") && clean(&m.destination) == "/sys") {
        steps.push(Step::MaskEach { parent: at("/sys/devices/system/cpu"), prefix: "cpu", leaf: "thermal_throttle" });
    }
    steps.extend(masked.into_iter().map(|target| Step::MaskInRoot { target }));
    let mut readonly: Vec<String> = PROC_READONLY.iter().map(|d| format!("/proc/{d}")).collect();
    readonly.extend(config.linux.readonly_paths.iter().map(|p| clean(p)));
    readonly.dedup();
    steps.extend(readonly.into_iter().map(|target| Step::ReadOnlyInRoot { target }));
    if readonly_root {
        steps.push(Step::Seal { target: root.clone() });
    }
    steps.push(Step::Pivot { new_root: root.clone() });
    let hostname = config.hostname.clone().unwrap_or_default();
    Ok(Plan { root, trees, steps, hostname })
}

/// A destination as berth compares them: absolute, without a trailing slash.
fn clean(dest: &str) -> String {
    let trimmed = dest.trim_end_matches('/');
    if trimmed.starts_with('/') { trimmed.to_string() } else { format!("/{trimmed}") }
}

/// The step (and, for a bind, the tree) of one config mount.
fn mount_step(m: &Mount, host: &Host<'_>, trees: &mut Vec<Tree>, steps: &mut Vec<Step>) -> Result<(), OciError> {
    let dest = clean(&m.destination);
    if dest == "/" || dest.split('/').any(|c| c == "..") {
        return Err(OciError::Config(format!(
            "the mount destination {:?} is not a path inside the root",
            m.destination
        )));
    }
    let (flags, data, bind, readonly) = options(&m.options);
    let kind = m.kind.as_deref().unwrap_or(if bind { "bind" } else { "" });
    if bind || kind == "bind" {
        let source = PathBuf::from(m.source.as_deref().unwrap_or(""));
        let source = if source.is_absolute() { source } else { host.bundle.join(source) };
        if !source.exists() {
            return Err(OciError::Config(format!("the bind mount source {} does not exist", source.display())));
        }
        let file = !source.is_dir();
        trees.push(Tree { source, idmap: Idmap::Host, readonly });
        steps.push(Step::AttachInRoot { tree: trees.len() - 1, target: dest, file });
        return Ok(());
    }
    let (fstype, fallback) = match kind {
        "proc" | "tmpfs" | "devpts" => (kind, Fallback::None),
        "mqueue" => (kind, Fallback::Skip),
        // sysfs can be mounted only in a network namespace the container owns: on the host's (or a pod's
        // made by the engine), the host's /sys is bound read-only instead, with berth's masks on it.
        "sysfs" => (kind, Fallback::BindHostReadOnly("/sys".into())),
        // On v2, the container's own cgroup2 tree (its cgroup namespace's root), on an empty read-only tmpfs:
        // where /sys is the host's (bound, as above), /sys/fs/cgroup is the root of the host's cgroup2 mount,
        // and the kernel refuses to mount a file system on the root of a mount of the same superblock (EBUSY;
        // cgroup2 has one, whatever the namespace). Where cgroup2 cannot be mounted, the tmpfs stays, empty.
        "cgroup" | "cgroup2" if host.cgroup_v2 => {
            steps.push(Step::MountInRoot {
                fstype: "tmpfs".into(),
                source: "cgroup".into(),
                target: dest.clone(),
                flags: Flags::RDONLY | Flags::NOSUID | Flags::NODEV | Flags::NOEXEC,
                data: "mode=755,size=4k".into(),
                fallback: Fallback::None,
            });
            ("cgroup2", Fallback::Skip)
        }
        // A v1 hierarchy cannot be mounted from a user namespace: the container's own cgroup directories are
        // bound instead, read-only, each under its hierarchy's name (`memory`, `cpu,cpuacct`, ...).
        "cgroup" | "cgroup2" => {
            steps.push(Step::MountInRoot {
                fstype: "tmpfs".into(),
                source: "cgroup".into(),
                target: dest.clone(),
                flags: Flags::NOSUID | Flags::NODEV | Flags::NOEXEC,
                data: "mode=755,size=16k".into(),
                fallback: Fallback::None,
            });
            for dir in host.cgroup_dirs {
                let Some(name) = dir.strip_prefix("/sys/fs/cgroup").ok().and_then(|r| r.iter().next()) else {
                    continue;
                };
                let target = format!("{dest}/{}", name.to_string_lossy());
                trees.push(Tree { source: dir.clone(), idmap: Idmap::Host, readonly: true });
                steps.push(Step::AttachInRoot { tree: trees.len() - 1, target, file: false });
            }
            steps.push(Step::SealInRoot { target: dest });
            return Ok(());
        }
        other => {
            return Err(OciError::Config(format!(
                "the mount at {dest} has type {other:?}, which berth-oci does not mount (it mounts proc, sysfs, tmpfs, \
                 devpts, mqueue, cgroup and binds)"
            )));
        }
    };
    let flags = if readonly { flags | Flags::RDONLY } else { flags };
    // A terminal is a device: devpts alone keeps its nodes usable.
    let flags = if fstype == "devpts" { flags - Flags::NODEV } else { flags | Flags::NODEV };
    let source = m.source.clone().unwrap_or_else(|| fstype.to_string());
    steps.push(Step::MountInRoot { fstype: fstype.to_string(), source, target: dest, flags, data, fallback });
    Ok(())
}

/// Mount options: the flags, the file system's own data, whether it is a bind, and whether read-only.
fn options(options: &[String]) -> (Flags, String, bool, bool) {
    let mut flags = Flags::empty();
    let mut data = Vec::new();
    let mut bind = false;
    let mut readonly = false;
    for o in options {
        match o.as_str() {
            "ro" => readonly = true,
            "rw" => readonly = false,
            "bind" | "rbind" => bind = true,
            "nosuid" => flags |= Flags::NOSUID,
            "nodev" => flags |= Flags::NODEV,
            "noexec" => flags |= Flags::NOEXEC,
            "noatime" => flags |= Flags::NOATIME,
            "nodiratime" => flags |= Flags::NODIRATIME,
            "relatime" => flags |= Flags::RELATIME,
            "strictatime" => flags |= Flags::STRICTATIME,
            "sync" => flags |= Flags::SYNCHRONOUS,
            "dirsync" => flags |= Flags::DIRSYNC,
            // Propagation and the defaults berth has anyway.
            "suid" | "dev" | "exec" | "async" | "atime" | "diratime" | "private" | "rprivate" | "shared"
            | "rshared" | "slave" | "rslave" | "unbindable" | "runbindable" | "norelatime" | "nostrictatime" => {}
            other => data.push(other.to_string()),
        }
    }
    // Nothing a container mounts carries setuid programs (nor, but for devpts, devices: see `mount_step`).
    flags |= Flags::NOSUID;
    (flags, data.join(","), bind, readonly)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config(mounts: serde_json::Value) -> Config {
        serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"]},
            "root": {"path": "rootfs", "readonly": true},
            "mounts": mounts,
            "linux": {"maskedPaths": ["/proc/kcore", "/etc/secret"], "readonlyPaths": ["/proc/sysrq-trigger"]}
        }))
        .unwrap()
    }

    #[test]
    fn a_bundle_becomes_an_idmapped_root_with_its_mounts_and_berths_masks() {
        let bundle = tempfile::tempdir().unwrap();
        std::fs::create_dir(bundle.path().join("rootfs")).unwrap();
        std::fs::write(bundle.path().join("hosts"), "x").unwrap();
        let own =
            [PathBuf::from("/sys/fs/cgroup/memory/k8s.io/c1"), PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/k8s.io/c1")];
        let host = Host {
            bundle: bundle.path(),
            scratch: Path::new("/run/x"),
            cgroup_v2: false,
            cgroup_dirs: &own,
            workspace: None,
        };
        let c = config(serde_json::json!([
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/etc/hosts", "type": "bind", "source": "hosts", "options": ["rbind", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]},
            {"destination": "/run", "type": "tmpfs", "options": ["mode=755", "size=1m"]}
        ]));
        let plan = compile(&c, &host).unwrap();
        assert_eq!(plan.trees[0].source, bundle.path().join("rootfs"));
        assert!(!plan.trees[0].readonly && plan.trees[0].idmap == Idmap::Sandbox);
        let n = plan.steps.len();
        assert!(matches!(&plan.steps[n - 2], Step::Seal { target } if *target == plan.root), "sealed last");
        assert_eq!(plan.trees[1].idmap, Idmap::Host);
        assert!(plan.trees[1].readonly);
        let mounts: Vec<&str> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::MountInRoot { target, .. } => Some(target.as_str()),
                Step::AttachInRoot { target, .. } => Some(target.as_str()),
                _ => None,
            })
            .collect();
        // The kernel's file systems first, the added /dev ones, the config's order after; on v1, the container's
        // own cgroup directories stand for the hierarchies.
        assert_eq!(
            mounts,
            [
                "/dev",
                "/proc",
                "/sys",
                "/dev/pts",
                "/dev/shm",
                "/etc/hosts",
                "/sys/fs/cgroup",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/cpu,cpuacct",
                "/run"
            ]
        );
        assert_eq!(plan.trees[2].source, own[0]);
        assert!(plan.trees[2].readonly);
        let sys =
            plan.steps.iter().find(|s| matches!(s, Step::MountInRoot { target, .. } if target == "/sys")).unwrap();
        assert!(
            matches!(sys, Step::MountInRoot { fallback: Fallback::BindHostReadOnly(_), flags, .. } if flags.contains(Flags::RDONLY))
        );
        let run =
            plan.steps.iter().find(|s| matches!(s, Step::MountInRoot { target, .. } if target == "/run")).unwrap();
        assert!(matches!(run, Step::MountInRoot { data, .. } if data == "mode=755,size=1m"));
        let masks: Vec<&str> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::MaskInRoot { target } => Some(target.as_str()),
                _ => None,
            })
            .collect();
        assert!(masks.contains(&"/proc/kcore") && masks.contains(&"/etc/secret") && masks.contains(&"/sys/firmware"));
        assert!(matches!(plan.steps.last(), Some(Step::Pivot { .. })));
    }

    #[test]
    fn mounts_berth_cannot_make_are_refused() {
        let bundle = tempfile::tempdir().unwrap();
        std::fs::create_dir(bundle.path().join("rootfs")).unwrap();
        let host = Host {
            bundle: bundle.path(),
            scratch: Path::new("/run/x"),
            cgroup_v2: true,
            cgroup_dirs: &[],
            workspace: None,
        };
        for (m, needle) in [
            (serde_json::json!({"destination": "/x", "type": "nfs", "source": "h:/e"}), "does not mount"),
            (
                serde_json::json!({"destination": "/x", "type": "bind", "source": "/nonexistent/berth"}),
                "does not exist",
            ),
            (serde_json::json!({"destination": "/../x", "type": "tmpfs"}), "not a path inside"),
        ] {
            let err = compile(&config(serde_json::json!([m])), &host).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn on_v2_the_containers_cgroup2_tree_is_mounted_on_a_tmpfs_of_its_own() {
        let bundle = tempfile::tempdir().unwrap();
        std::fs::create_dir(bundle.path().join("rootfs")).unwrap();
        let host = Host {
            bundle: bundle.path(),
            scratch: Path::new("/run/x"),
            cgroup_v2: true,
            cgroup_dirs: &[],
            workspace: None,
        };
        let c = config(serde_json::json!([
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "ro"]}
        ]));
        let plan = compile(&c, &host).unwrap();
        let at_cgroup: Vec<(&str, Flags, &Fallback)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::MountInRoot { fstype, target, flags, fallback, .. } if target == "/sys/fs/cgroup" => {
                    Some((fstype.as_str(), *flags, fallback))
                }
                _ => None,
            })
            .collect();
        // Never the cgroup2 tree straight on /sys/fs/cgroup: when /sys is the host's, that is the root of the
        // host's cgroup2 mount.
        assert_eq!(at_cgroup.len(), 2, "{at_cgroup:?}");
        let (fstype, flags, fallback) = at_cgroup[0];
        assert_eq!((fstype, fallback), ("tmpfs", &Fallback::None));
        assert!(flags.contains(Flags::RDONLY | Flags::NOSUID | Flags::NODEV | Flags::NOEXEC));
        let (fstype, flags, fallback) = at_cgroup[1];
        assert_eq!((fstype, fallback), ("cgroup2", &Fallback::Skip));
        assert!(flags.contains(Flags::RDONLY | Flags::NOSUID | Flags::NODEV));
        // Nothing of the v1 layout: no directories bound, no seal.
        assert!(!plan.steps.iter().any(|s| matches!(s, Step::SealInRoot { .. })));
        assert_eq!(plan.trees.len(), 1);
    }

    #[test]
    fn a_workspace_is_mounted_under_storage_ids_unless_the_config_mounts_one() {
        let bundle = tempfile::tempdir().unwrap();
        std::fs::create_dir(bundle.path().join("rootfs")).unwrap();
        let ws = Path::new("/pool/volumes/ws");
        let host = Host {
            bundle: bundle.path(),
            scratch: Path::new("/run/x"),
            cgroup_v2: true,
            cgroup_dirs: &[],
            workspace: Some(ws),
        };
        let plan = compile(&config(serde_json::json!([])), &host).unwrap();
        let i = plan.trees.iter().position(|t| t.source == ws).unwrap();
        assert_eq!((plan.trees[i].idmap, plan.trees[i].readonly), (Idmap::Storage, false));
        assert!(plan.steps.contains(&Step::AttachInRoot { tree: i, target: WORKSPACE.into(), file: false }));
        for dest in ["/workspace/", "/workspace/cache"] {
            let pvc = config(serde_json::json!([{"destination": dest, "type": "tmpfs"}]));
            let err = compile(&pvc, &host).unwrap_err().to_string();
            assert!(err.contains("berth.dev/workspace") && err.contains("drop one"), "{err}");
        }
        let beside = config(serde_json::json!([{"destination": "/workspaces", "type": "tmpfs"}]));
        assert!(compile(&beside, &host).is_ok(), "a path that only starts with the same letters is not below it");
    }
}
