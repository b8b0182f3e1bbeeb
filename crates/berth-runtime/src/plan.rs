//! A spec compiled into a plan: the detached trees the supervisor prepares, and the ordered steps the
//! sandbox's first process carries out to build its root. Nothing here touches the kernel, so plans are
//! unit-tested by equality; `child` executes them.

use std::path::{Path, PathBuf};

use berth_sys::mount::Flags;

use crate::image::ImageLayers;
use crate::spec::Spec;

/// Where one sandbox's state lives while its root is built.
///
/// `dir` is a host directory that every sandbox shares as a mount point only: each sandbox mounts its own
/// private tmpfs on it inside its own mount namespace and assembles its root there. The host never sees
/// those files, and they vanish with the sandbox's last process: an ephemeral sandbox leaves nothing on disk
/// by construction. (Its writes count against its memory limit.)
///
/// With `state`, the writable layers and the workspace live instead in a host directory (a storage volume)
/// attached at `<dir>/state`, so they outlive the sandbox's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub dir: PathBuf,
    pub state: bool,
}

impl Layout {
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
    /// Where the writable state is: the scratch tmpfs itself, or the attached storage volume.
    pub fn state_dir(&self) -> PathBuf {
        if self.state { self.dir.join("state") } else { self.dir.clone() }
    }
    pub fn upper(&self, layer: &str) -> PathBuf {
        self.state_dir().join("upper").join(layer)
    }
    pub fn work(&self, layer: &str) -> PathBuf {
        self.state_dir().join("overlay-work").join(layer)
    }
    pub fn lower(&self, layer: &str) -> PathBuf {
        self.dir.join("lower").join(layer)
    }
    pub fn workspace(&self) -> PathBuf {
        self.state_dir().join("workspace")
    }
    /// The directories made on the scratch tmpfs before anything is attached to it.
    pub fn scratch_directories(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.rootfs()];
        dirs.extend(LAYERS.iter().map(|l| self.lower(l)));
        if self.state {
            dirs.push(self.state_dir());
        }
        dirs
    }
    /// The directories of the writable state (already there when a persistent sandbox runs again).
    pub fn state_directories(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.workspace()];
        for layer in LAYERS {
            dirs.extend([self.upper(layer), self.work(layer)]);
        }
        dirs
    }
}

/// Where the files berth hands a sandbox appear inside it (a small read-only tmpfs of its own).
pub const BERTH_FILES: &str = "/run/egress";

/// The overlay layers of a sandbox root: the skeleton at `/` and the image's `/usr`.
pub const LAYERS: [&str; 2] = ["root", "usr"];

/// How a detached tree's file ownership is translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idmap {
    /// Through the sandbox's own user namespace: host id N is sandbox id N (image files owned by host root
    /// are owned by root inside).
    Sandbox,
    /// Host `uid`/`gid` (a mounted directory's owner) is root inside; other ids are nobody.
    Owner { uid: u32, gid: u32 },
    /// berth's storage: host id `STORAGE_BASE + N` is sandbox id N.
    Storage,
    /// None: a plain bind, ownership as on the host (an OCI config's bind mount).
    Host,
}

/// A tree the supervisor clones and id-maps before the sandbox builds its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub source: PathBuf,
    pub idmap: Idmap,
    pub readonly: bool,
}

/// One step of building the root, run in order inside the new mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Attach detached tree number `tree` at a host path.
    Attach {
        tree: usize,
        target: PathBuf,
    },
    /// Attach detached tree `tree` at a path inside the sandbox root, resolved within it and created if
    /// missing (as a directory, or as an empty file when `file`).
    AttachInRoot {
        tree: usize,
        target: String,
        file: bool,
    },
    /// An overlay; `volatile` (see [`crate::Spec::volatile`]) when its upper layer need not outlive it.
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        target: PathBuf,
        volatile: bool,
    },
    Mount {
        fstype: &'static str,
        target: PathBuf,
        flags: Flags,
        data: String,
    },
    /// Bind a host path (looked up before the pivot) onto a target, creating an empty file target.
    /// Missing targets are skipped when `optional`.
    BindFile {
        source: PathBuf,
        target: PathBuf,
        optional: bool,
    },
    /// Bind a path onto itself and make that bind read-only. Skipped if missing and `optional`.
    ReadOnly {
        target: PathBuf,
        optional: bool,
    },
    /// Make the mount at `target` (already a mount point) read-only, leaving the mounts below it as they are.
    Seal {
        target: PathBuf,
    },
    /// Cover a directory with an empty read-only tmpfs. Skipped if missing.
    Mask {
        target: PathBuf,
    },
    /// [`Mask`](Step::Mask) `parent/NAME/leaf` for every entry NAME of `parent` that starts with `prefix`.
    /// Nothing to do if `parent` is missing.
    MaskEach {
        parent: PathBuf,
        prefix: &'static str,
        leaf: &'static str,
    },
    /// [`Mask`](Step::Mask) the directory holding each entry that a symlink in `links` points to, when that
    /// directory lies strictly inside `within`: a bus's device list links into the device tree, where the
    /// devices stay readable after the list itself is masked. Resolved when the sandbox starts; nothing to
    /// do if `links` is missing.
    MaskLinkParents {
        links: PathBuf,
        within: PathBuf,
    },
    Mkdir {
        path: PathBuf,
        mode: u32,
    },
    /// Make a directory (0755) if nothing is there; leave what is there as it is.
    EnsureDir {
        path: PathBuf,
    },
    WriteFile {
        path: PathBuf,
        contents: String,
    },
    Symlink {
        link: PathBuf,
        to: &'static str,
    },
    /// Make `new_root` the root and drop the host's.
    Pivot {
        new_root: PathBuf,
    },
    /// Mount a file system at a path inside the root, resolved within it and created if missing (an OCI
    /// config's mount). When the kernel refuses it (EPERM: a namespace the sandbox does not own), `fallback`
    /// says what to do instead.
    MountInRoot {
        fstype: String,
        source: String,
        target: String,
        flags: Flags,
        data: String,
        fallback: Fallback,
    },
    /// Cover a path inside the root: a directory with an empty read-only tmpfs, anything else with
    /// /dev/null. Nothing to do if it is missing.
    MaskInRoot {
        target: String,
    },
    /// Make a path inside the root read-only (a bind onto itself). Nothing to do if it is missing.
    ReadOnlyInRoot {
        target: String,
    },
    /// [`Seal`](Step::Seal) the mount at a path inside the root, resolved within it.
    SealInRoot {
        target: String,
    },
    /// Refuse to go on if any of these entries of the root is a symbolic link (berth mounts the kernel's
    /// file systems there and addresses what is below them by path).
    NoSymlinks {
        names: Vec<&'static str>,
    },
}

/// What [`Step::MountInRoot`] does when the kernel refuses the mount with EPERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// Fail.
    None,
    /// Leave the target as it is.
    Skip,
    /// Bind the host's tree at this path, read-only, instead (sysfs in a network namespace the sandbox does
    /// not own).
    BindHostReadOnly(PathBuf),
}

/// Everything needed to build one sandbox's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Where the new root is assembled on the host (seen only from inside the new mount namespace).
    pub root: PathBuf,
    pub trees: Vec<Tree>,
    pub steps: Vec<Step>,
    pub hostname: String,
}

/// Files in /proc that reveal or change host state, covered with /dev/null. `interrupts` and `softirqs`
/// count the host's interrupts per CPU and source, a side channel on other tenants (the total is still in
/// the `intr` and `softirq` lines of `/proc/stat`, which `ps` and `top` need); `config.gz` names every
/// piece of code built into the host's kernel.
pub(crate) const PROC_MASKED_FILES: [&str; 10] = [
    "kcore",
    "keys",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "sysrq-trigger",
    "interrupts",
    "softirqs",
    "config.gz",
];
/// Directories in /proc that reveal host hardware, covered with an empty tmpfs: `irq` holds each
/// interrupt's affinity, its handlers' device names and (`spurious`) its counts.
pub(crate) const PROC_MASKED_DIRS: [&str; 4] = ["acpi", "scsi", "asound", "irq"];
/// Directories in /sys covered with an empty tmpfs: firmware tables (ACPI, DMI, EFI variables, the memory
/// map), the machine's identity as its hypervisor set it (DMI serials and UUID, Xen's `/sys/hypervisor`,
/// Hyper-V's VMBus channel list, whose entries link to devices masked by [`Step::MaskLinkParents`]),
/// power-capping counters (energy readings are a side channel), and SELinux's interface.
pub(crate) const SYS_MASKED_DIRS: [&str; 6] =
    ["firmware", "devices/virtual/powercap", "devices/virtual/dmi", "hypervisor", "bus/vmbus", "fs/selinux"];
/// Files in /sys covered with /dev/null: the physical address of the host's crash-dump notes.
pub(crate) const SYS_MASKED_FILES: [&str; 1] = ["kernel/vmcoreinfo"];
/// Directories in /proc that would change the host if written, made read-only (`irq` is masked).
pub(crate) const PROC_READONLY: [&str; 3] = ["sys", "bus", "fs"];
/// The device nodes a sandbox gets, bound from the host.
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The files that name a sandbox's host (`/etc/hostname`, `/etc/hosts`), by their names on the scratch tmpfs.
pub fn host_files(hostname: &str) -> [(&'static str, String); 2] {
    [
        ("hostname", format!("{hostname}\n")),
        ("hosts", format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n")),
    ]
}

/// Compile a spec into a plan.
pub fn compile(spec: &Spec, layers: &ImageLayers, layout: &Layout, owners: &[(u32, u32)]) -> Plan {
    let root = layout.rootfs();
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    let nosuid_nodev_noexec = Flags::NOSUID | Flags::NODEV | Flags::NOEXEC;
    let image_ids = if layers.storage_ids { Idmap::Storage } else { Idmap::Sandbox };
    let mut trees = vec![Tree { source: layers.skeleton.clone(), idmap: image_ids, readonly: true }];
    if let Some(usr) = &layers.usr {
        trees.push(Tree { source: usr.clone(), idmap: Idmap::Sandbox, readonly: true });
    }
    // The scratch file system is as large as the memory limit: its pages are charged to the sandbox anyway.
    let size = spec.limits.memory_bytes.map(|b| format!(",size={b}")).unwrap_or_default();
    let mut steps = vec![Step::Mount {
        fstype: "tmpfs",
        target: layout.dir.clone(),
        flags: Flags::NOSUID | Flags::NODEV,
        data: format!("mode=755{size}"),
    }];
    steps.extend(layout.scratch_directories().into_iter().map(|path| Step::Mkdir { path, mode: 0o755 }));
    if let Some(state) = &spec.state {
        trees.push(Tree { source: state.clone(), idmap: Idmap::Storage, readonly: false });
        steps.push(Step::Attach { tree: trees.len() - 1, target: layout.state_dir() });
    }
    steps.extend(layout.state_directories().into_iter().map(|path| Step::Mkdir { path, mode: 0o755 }));
    // The sandbox's own names live on the scratch tmpfs and are bound over /etc's (as container runtimes
    // do): they are not the project's files, so a persistent sandbox's or a fork's changes never include them.
    let names = host_files(&spec.name);
    for (file, contents) in &names {
        steps.push(Step::WriteFile { path: layout.dir.join(file), contents: contents.clone() });
    }
    steps.push(Step::Attach { tree: 0, target: layout.lower("root") });
    if layers.usr.is_some() {
        steps.push(Step::Attach { tree: 1, target: layout.lower("usr") });
    }
    // On the scratch tmpfs there is nothing to sync anyway.
    let volatile = spec.volatile && spec.state.is_some();
    steps.push(Step::Overlay {
        lower: layout.lower("root"),
        upper: layout.upper("root"),
        work: layout.work("root"),
        target: root.clone(),
        volatile,
    });
    if layers.usr.is_some() {
        steps.push(Step::Overlay {
            lower: layout.lower("usr"),
            upper: layout.upper("usr"),
            work: layout.work("usr"),
            target: at("/usr"),
            volatile,
        });
    }
    // An imported image may lack the directories berth mounts on: made where missing, as they are.
    for dir in ["/etc", "/proc", "/sys", "/dev", "/tmp", "/workspace"] {
        steps.push(Step::EnsureDir { path: at(dir) });
    }
    for (file, _) in &names {
        steps.push(Step::BindFile {
            source: layout.dir.join(file),
            target: at(&format!("/etc/{file}")),
            optional: false,
        });
    }
    steps.push(Step::Mount { fstype: "proc", target: at("/proc"), flags: nosuid_nodev_noexec, data: String::new() });
    for f in PROC_MASKED_FILES {
        steps.push(Step::BindFile { source: "/dev/null".into(), target: at(&format!("/proc/{f}")), optional: true });
    }
    for d in PROC_MASKED_DIRS {
        steps.push(Step::Mask { target: at(&format!("/proc/{d}")) });
    }
    for d in PROC_READONLY {
        steps.push(Step::ReadOnly { target: at(&format!("/proc/{d}")), optional: true });
    }
    steps.push(Step::Mount {
        fstype: "sysfs",
        target: at("/sys"),
        flags: nosuid_nodev_noexec | Flags::RDONLY,
        data: String::new(),
    });
    // The VMBus channels' device directories (named by the channels' instance GUIDs) and the VMBus device
    // holding them, found through the bus's links before the bus directory is masked.
    steps.push(Step::MaskLinkParents { links: at("/sys/bus/vmbus/devices"), within: at("/sys/devices") });
    for d in SYS_MASKED_DIRS {
        steps.push(Step::Mask { target: at(&format!("/sys/{d}")) });
    }
    for f in SYS_MASKED_FILES {
        steps.push(Step::BindFile { source: "/dev/null".into(), target: at(&format!("/sys/{f}")), optional: true });
    }
    // Per-CPU thermal throttling counters, a side channel on other tenants' load (as Docker masks them).
    steps.push(Step::MaskEach { parent: at("/sys/devices/system/cpu"), prefix: "cpu", leaf: "thermal_throttle" });
    steps.push(Step::Mount {
        fstype: "tmpfs",
        target: at("/dev"),
        flags: Flags::NOSUID | Flags::NOEXEC,
        data: "mode=755,size=64k,nr_inodes=64".into(),
    });
    for d in DEVICES {
        steps.push(Step::BindFile {
            source: Path::new("/dev").join(d),
            target: at(&format!("/dev/{d}")),
            optional: false,
        });
    }
    steps.push(Step::Mkdir { path: at("/dev/pts"), mode: 0o755 });
    steps.push(Step::Mount {
        fstype: "devpts",
        target: at("/dev/pts"),
        flags: Flags::NOSUID | Flags::NOEXEC,
        data: "newinstance,ptmxmode=0666,mode=620,gid=5".into(),
    });
    steps.push(Step::Mkdir { path: at("/dev/shm"), mode: 0o1777 });
    steps.push(Step::Mount {
        fstype: "tmpfs",
        target: at("/dev/shm"),
        flags: Flags::NOSUID | Flags::NODEV,
        data: "mode=1777".into(),
    });
    for (link, to) in [
        ("/dev/ptmx", "pts/ptmx"),
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink { link: at(link), to });
    }
    steps.push(Step::Seal { target: at("/dev") });
    steps.push(Step::Mount {
        fstype: "tmpfs",
        target: at("/tmp"),
        flags: Flags::NOSUID | Flags::NODEV,
        data: "mode=1777".into(),
    });
    steps.push(Step::BindFile { source: layout.workspace(), target: at("/workspace"), optional: false });
    if !spec.files.is_empty() {
        steps.push(Step::EnsureDir { path: at(BERTH_FILES) });
        steps.push(Step::Mount {
            fstype: "tmpfs",
            target: at(BERTH_FILES),
            flags: Flags::NOSUID | Flags::NODEV | Flags::NOEXEC,
            data: "mode=755,size=4m".into(),
        });
        for (name, contents) in &spec.files {
            steps.push(Step::WriteFile { path: at(&format!("{BERTH_FILES}/{name}")), contents: contents.clone() });
        }
        steps.push(Step::Seal { target: at(BERTH_FILES) });
    }

    // Shallower targets first, so that a mount inside another mounted directory lands on top of it.
    let mut mounts: Vec<(usize, &crate::spec::BindMount)> = spec.mounts.iter().enumerate().collect();
    mounts.sort_by_key(|(_, m)| m.target.matches('/').count());
    for (i, m) in mounts {
        let (uid, gid) = owners.get(i).copied().unwrap_or((0, 0));
        trees.push(Tree { source: m.host.clone(), idmap: Idmap::Owner { uid, gid }, readonly: m.readonly });
        steps.push(Step::AttachInRoot { tree: trees.len() - 1, target: m.target.clone(), file: !m.host.is_dir() });
    }
    let mut volumes: Vec<&crate::spec::VolumeMount> = spec.volumes.iter().collect();
    volumes.sort_by_key(|v| v.target.matches('/').count());
    for v in volumes {
        trees.push(Tree { source: v.source.clone(), idmap: Idmap::Storage, readonly: v.readonly });
        steps.push(Step::AttachInRoot { tree: trees.len() - 1, target: v.target.clone(), file: false });
    }
    steps.push(Step::Pivot { new_root: root.clone() });
    Plan { root, trees, steps, hostname: spec.name.clone() }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cgroup::Limits;
    use crate::spec::{BindMount, Spec};

    fn spec(mounts: Vec<BindMount>) -> Spec {
        Spec { name: "t1".into(), image: "host".into(), limits: Limits::default(), mounts, ..Spec::default() }
    }

    fn layers() -> ImageLayers {
        ImageLayers { skeleton: "/data/images/host/rootfs".into(), usr: Some("/usr".into()), storage_ids: false }
    }

    #[test]
    fn root_is_overlays_over_idmapped_read_only_trees_then_pivot() {
        let layout = Layout { dir: "/data/sandboxes/abc".into(), state: false };
        let plan = compile(&spec(vec![]), &layers(), &layout, &[]);
        assert_eq!(plan.trees.len(), 2);
        assert!(plan.trees.iter().all(|t| t.readonly && t.idmap == Idmap::Sandbox));
        assert!(matches!(&plan.steps[0], Step::Mount { fstype: "tmpfs", target, .. } if target.ends_with("abc")));
        let first_attach = plan.steps.iter().position(|s| matches!(s, Step::Attach { .. })).unwrap();
        assert!(
            plan.steps[..first_attach]
                .iter()
                .all(|s| matches!(s, Step::Mount { .. } | Step::Mkdir { .. } | Step::WriteFile { .. }))
        );
        assert_eq!(plan.steps[first_attach], Step::Attach { tree: 0, target: "/data/sandboxes/abc/lower/root".into() });
        assert_eq!(
            plan.steps[first_attach + 2],
            Step::Overlay {
                lower: "/data/sandboxes/abc/lower/root".into(),
                upper: "/data/sandboxes/abc/upper/root".into(),
                work: "/data/sandboxes/abc/overlay-work/root".into(),
                target: "/data/sandboxes/abc/rootfs".into(),
                volatile: false,
            }
        );
        assert_eq!(plan.steps.last(), Some(&Step::Pivot { new_root: "/data/sandboxes/abc/rootfs".into() }));
        assert_eq!(plan.hostname, "t1");
    }

    #[test]
    fn persistent_state_is_attached_before_its_directories_are_made() {
        let layout = Layout { dir: "/s".into(), state: true };
        let mut sp = spec(vec![]);
        sp.state = Some("/pool/sandboxes/abc".into());
        sp.volumes = vec![crate::spec::VolumeMount {
            source: "/pool/volumes/v".into(),
            target: "/data".into(),
            readonly: false,
        }];
        let plan = compile(&sp, &layers(), &layout, &[]);
        assert_eq!(
            plan.trees[2],
            Tree { source: "/pool/sandboxes/abc".into(), idmap: Idmap::Storage, readonly: false }
        );
        assert_eq!(plan.trees[3], Tree { source: "/pool/volumes/v".into(), idmap: Idmap::Storage, readonly: false });
        let attach = plan.steps.iter().position(|s| *s == Step::Attach { tree: 2, target: "/s/state".into() }).unwrap();
        let upper = plan
            .steps
            .iter()
            .position(|s| matches!(s, Step::Mkdir { path, .. } if path.as_path() == Path::new("/s/state/upper/root")))
            .unwrap();
        assert!(attach < upper);
        assert!(plan.steps.contains(&Step::Overlay {
            lower: "/s/lower/root".into(),
            upper: "/s/state/upper/root".into(),
            work: "/s/state/overlay-work/root".into(),
            target: "/s/rootfs".into(),
            volatile: false,
        }));
        assert!(plan.steps.contains(&Step::BindFile {
            source: "/s/state/workspace".into(),
            target: "/s/rootfs/workspace".into(),
            optional: false
        }));
        assert!(plan.steps.contains(&Step::AttachInRoot { tree: 3, target: "/data".into(), file: false }));
    }

    #[test]
    fn an_imported_image_is_one_storage_mapped_layer_with_its_mount_points_ensured() {
        let layout = Layout { dir: "/s".into(), state: false };
        let image = ImageLayers { skeleton: "/data/images/alpine/rootfs".into(), usr: None, storage_ids: true };
        let plan = compile(&spec(vec![]), &image, &layout, &[]);
        assert_eq!(plan.trees.len(), 1);
        assert_eq!(plan.trees[0].idmap, Idmap::Storage);
        assert!(!plan.steps.iter().any(|s| matches!(s, Step::Overlay { target, .. } if target.ends_with("usr"))));
        let proc_dir = plan.steps.iter().position(|s| *s == Step::EnsureDir { path: "/s/rootfs/proc".into() }).unwrap();
        let proc_mount = plan.steps.iter().position(|s| matches!(s, Step::Mount { fstype: "proc", .. })).unwrap();
        assert!(proc_dir < proc_mount);
    }

    #[test]
    fn proc_is_masked_and_sys_is_read_only() {
        let layout = Layout { dir: "/s".into(), state: false };
        let plan = compile(&spec(vec![]), &layers(), &layout, &[]);
        let kcore =
            Step::BindFile { source: "/dev/null".into(), target: "/s/rootfs/proc/kcore".into(), optional: true };
        assert!(plan.steps.contains(&kcore));
        assert!(plan.steps.contains(&Step::ReadOnly { target: "/s/rootfs/proc/sys".into(), optional: true }));
        let proc_at = plan.steps.iter().position(|s| matches!(s, Step::Mount { fstype: "proc", .. })).unwrap();
        let kcore_at = plan.steps.iter().position(|s| *s == kcore).unwrap();
        assert!(proc_at < kcore_at, "masks must come after /proc is mounted");
        let sys_at = plan
            .steps
            .iter()
            .position(|s| matches!(s, Step::Mount { fstype: "sysfs", flags, .. } if flags.contains(Flags::RDONLY)))
            .unwrap();
        let firmware = plan.steps.iter().position(|s| *s == Step::Mask { target: "/s/rootfs/sys/firmware".into() });
        assert!(sys_at < firmware.unwrap(), "masks must come after /sys is mounted");
        let vmbus_devices = plan.steps.iter().position(|s| {
            *s == Step::MaskLinkParents {
                links: "/s/rootfs/sys/bus/vmbus/devices".into(),
                within: "/s/rootfs/sys/devices".into(),
            }
        });
        let vmbus = plan.steps.iter().position(|s| *s == Step::Mask { target: "/s/rootfs/sys/bus/vmbus".into() });
        assert!(sys_at < vmbus_devices.unwrap(), "masks must come after /sys is mounted");
        assert!(vmbus_devices < vmbus, "the bus's links must be followed before the bus is masked");
        for f in ["/s/rootfs/proc/interrupts", "/s/rootfs/proc/softirqs"] {
            assert!(plan.steps.contains(&Step::BindFile {
                source: "/dev/null".into(),
                target: f.into(),
                optional: true
            }));
        }
        assert!(plan.steps.contains(&Step::Mask { target: "/s/rootfs/proc/irq".into() }));
        assert!(plan.steps.contains(&Step::MaskEach {
            parent: "/s/rootfs/sys/devices/system/cpu".into(),
            prefix: "cpu",
            leaf: "thermal_throttle"
        }));
    }

    #[test]
    fn user_mounts_are_owner_mapped_and_ordered_shallow_first() {
        let layout = Layout { dir: "/s".into(), state: false };
        let mounts = vec![
            BindMount { host: "/nonexistent-a".into(), target: "/workspace/a/b".into(), readonly: true },
            BindMount { host: "/nonexistent-b".into(), target: "/workspace/a".into(), readonly: false },
        ];
        let plan = compile(&spec(mounts), &layers(), &layout, &[(1000, 1001), (0, 0)]);
        assert_eq!(
            plan.trees[2],
            Tree { source: "/nonexistent-b".into(), idmap: Idmap::Owner { uid: 0, gid: 0 }, readonly: false }
        );
        assert_eq!(
            plan.trees[3],
            Tree { source: "/nonexistent-a".into(), idmap: Idmap::Owner { uid: 1000, gid: 1001 }, readonly: true }
        );
        let targets: Vec<&str> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::AttachInRoot { target, .. } => Some(target.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(targets, ["/workspace/a", "/workspace/a/b"]);
        let ws = plan
            .steps
            .iter()
            .position(|s| matches!(s, Step::BindFile { target, .. } if target.ends_with("rootfs/workspace")))
            .unwrap();
        let first_user = plan.steps.iter().position(|s| matches!(s, Step::AttachInRoot { .. })).unwrap();
        assert!(ws < first_user, "user mounts under /workspace must land on top of the workspace");
    }
}
