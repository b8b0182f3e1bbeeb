//! Hibernation: a running sandbox's processes, their memory and their kernel state written to disk with CRIU
//! (the process tree ends, its memory is released), and brought back later by [`crate::restore`].
//!
//! What CRIU cannot rebuild from its own image is named at dump time as *external*, and provided again at
//! restore from a freshly staged copy of the sandbox's mounts:
//! - every mount that is not a whole `proc`, `sysfs`, `devpts`, `mqueue` or `tmpfs` (tmpfs contents are
//!   dumped): the `/usr` overlay, the `/etc/hostname` and `/etc/hosts` binds, the device and masking binds,
//!   `/workspace` and the user's mounts and volumes;
//! - init's own binary, which lives outside the sandbox's tree (a copy is kept beside the image, so that a
//!   berth upgraded in between still wakes the sandbox with the very program it hibernated);
//! - init's control socket, whose other end is the supervisor's: a new pair is made at restore.
//!
//! The paths the sandbox's unix sockets are bound to are kept too: the socket files stay on the sandbox's
//! kept file systems, and the restore clears them before CRIU binds the sockets there again.
//!
//! The root of the tree is the overlay the restore stages at `--root`.

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::{RuntimeError, Sandbox};

/// The file beside the image that describes it.
pub const MANIFEST: &str = "manifest.json";
/// The copy of the binary init ran from.
pub const INIT_COPY: &str = "init";
/// The oldest CRIU release whose restore works for berth's sandboxes (4.1 cannot restore a network namespace
/// inside a user namespace on recent kernels; 3.x cannot read their vDSO).
pub const MIN_CRIU: (u32, u32) = (4, 2);

/// What a hibernated sandbox's image needs to be restored, besides CRIU's own files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub id: String,
    /// The host id block it ran under; it is reserved until the sandbox wakes or is removed.
    pub slot: u32,
    /// The inode of init's control socket (descriptor 3), an external unix socket.
    pub control_ino: u64,
    /// CRIU's name for init's binary: `file[MNT:INO]`, in hexadecimal.
    pub exe_key: String,
    pub externals: Vec<External>,
    pub criu_version: String,
    /// The paths inside the sandbox its unix sockets were bound to.
    #[serde(default)]
    pub bound_sockets: Vec<String>,
    /// Bytes of the image, the copy of init included.
    pub bytes: u64,
    /// The kernel's boot id when it was written ([`boot_id`]): an image whose sandbox's files were not
    /// synced (an ephemeral one's) is not restored after the host restarted.
    #[serde(default)]
    pub boot_id: String,
    /// The backend that wrote it: CRIU's image of a namespaces sandbox, or gVisor's checkpoint (which has no
    /// host id block, mounts or control socket of CRIU's to name).
    #[serde(default)]
    pub isolation: crate::spec::Isolation,
    /// The runsc that wrote a gVisor checkpoint (`runsc --version`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runsc_version: String,
}

/// This boot of the host's kernel, as the kernel names it.
pub fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A mount of the sandbox CRIU leaves to whoever restores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct External {
    /// Where it is mounted inside the sandbox.
    pub mount_point: String,
    /// The name CRIU's image gives it.
    pub key: String,
    pub fstype: String,
    /// The directory of its file system that is mounted (a device's name for the device binds).
    pub root: String,
}

/// A usable CRIU binary.
#[derive(Debug, Clone)]
pub struct Criu {
    pub path: PathBuf,
    pub version: String,
}

impl Criu {
    /// Find CRIU: `explicit` if given, else `criu` on the PATH or in the usual system directories; it must be
    /// release [`MIN_CRIU`] or newer. The error is a sentence saying what is missing and how to get it.
    pub fn find(explicit: Option<&Path>) -> Result<Criu, String> {
        let candidates: Vec<PathBuf> = match explicit {
            Some(p) => vec![p.to_path_buf()],
            None => {
                let mut c: Vec<PathBuf> = std::env::var_os("PATH")
                    .map(|p| std::env::split_paths(&p).map(|d| d.join("criu")).collect())
                    .unwrap_or_default();
                c.extend(["/usr/local/sbin/criu", "/usr/sbin/criu", "/sbin/criu"].map(PathBuf::from));
                c
            }
        };
        let Some(path) = candidates.into_iter().find(|p| p.is_file()) else {
            return Err(format!(
                "CRIU is not installed, so sandboxes cannot hibernate: install CRIU {}.{} or newer (scripts/setup-criu \
                 builds it from Debian's source package)",
                MIN_CRIU.0, MIN_CRIU.1
            ));
        };
        let out = Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{} could not be run: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .lines()
            .find_map(|l| l.strip_prefix("Version:"))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("{} did not say which CRIU it is", path.display()))?;
        if parse_version(&version) < MIN_CRIU {
            return Err(format!(
                "{} is CRIU {version}, too old to hibernate sandboxes on this kernel: {}.{} or newer is needed \
                 (scripts/setup-criu builds it)",
                path.display(),
                MIN_CRIU.0,
                MIN_CRIU.1
            ));
        }
        Ok(Criu { path, version })
    }
}

fn parse_version(v: &str) -> (u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// CRIU's name for the external mount at `mount_point`: a stable spelling of the path that needs no quoting.
pub fn mount_key(mount_point: &str) -> String {
    let hex: String = mount_point.bytes().map(|b| format!("{b:02x}")).collect();
    format!("m{hex}")
}

/// The mounts of a sandbox's table that CRIU must treat as external: everything but the root and whole
/// proc, sysfs, devpts, mqueue and tmpfs mounts (a bind of a tmpfs's file, as `/etc/hostname`, is external).
/// The empty read-only tmpfs mounts that mask parts of `/proc` and `/sys` are external too: the restore
/// binds one such mask over each of them, instead of CRIU archiving and unpacking each (see [`is_mask`]).
pub fn externals(table: &[berth_sys::mountinfo::MountInfo]) -> Vec<External> {
    let mut out: Vec<External> = Vec::new();
    for m in table {
        let point = m.mount_point.to_string_lossy().into_owned();
        let whole = m.root == Path::new("/");
        let recreated = matches!(m.fstype.as_str(), "proc" | "sysfs" | "devpts" | "mqueue")
            || (m.fstype == "tmpfs" && whole && !masks(m));
        if point == "/" || recreated || out.iter().any(|e| e.mount_point == point) {
            continue;
        }
        out.push(External {
            key: mount_key(&point),
            mount_point: point,
            fstype: m.fstype.clone(),
            root: m.root.to_string_lossy().into_owned(),
        });
    }
    out
}

/// Whether a mount is one of berth's masks: a whole, empty, read-only tmpfs of no size.
fn masks(m: &berth_sys::mountinfo::MountInfo) -> bool {
    let has = |o: &str| m.super_options.iter().any(|s| s == o);
    m.fstype == "tmpfs" && has("ro") && has("size=0k")
}

/// Whether an external mount of an image is one of berth's masks (see [`externals`]).
pub fn is_mask(e: &External) -> bool {
    e.fstype == "tmpfs" && e.root == "/"
}

/// Options both a dump and a restore pass.
pub(crate) fn common_args(dir: &Path) -> Vec<String> {
    vec![
        "-D".into(),
        dir.display().to_string(),
        // The sandbox has no network interface but its loopback: there is no traffic from outside to hold.
        "--network-lock".into(),
        "skip".into(),
        "--tcp-established".into(),
        "--file-locks".into(),
        "-v2".into(),
    ]
}

/// Dump the process tree of init `pid` into `dir` (which must be empty or missing); the tree ends unless
/// `extra` (more options for CRIU) says otherwise. Writes the manifest and the copy of init's binary beside
/// the image.
pub(crate) fn dump(
    criu: &Criu,
    id: &str,
    slot: u32,
    pid: i32,
    dir: &Path,
    extra: &[String],
) -> Result<Manifest, RuntimeError> {
    let fail = |message: String| RuntimeError::Checkpoint { message };
    fs::create_dir_all(dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
    let table = fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .map_err(|e| fail(format!("read the sandbox's mount table: {e}")))?;
    let externals = externals(&berth_sys::mountinfo::parse(&table));
    let control_ino =
        fs::metadata(format!("/proc/{pid}/fd/3")).map_err(|e| fail(format!("find init's control socket: {e}")))?.ino();
    let exe = format!("/proc/{pid}/exe");
    let exe_file = fs::File::open(&exe).map_err(|e| fail(format!("open init's binary: {e}")))?;
    let stx = rustix::fs::statx(
        exe_file.as_fd(),
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::INO | rustix::fs::StatxFlags::MNT_ID,
    )
    .map_err(|e| fail(format!("look at init's binary: {e}")))?;
    let exe_key = format!("file[{:x}:{:x}]", stx.stx_mnt_id, stx.stx_ino);
    keep_init(&exe, dir).map_err(|e| fail(format!("keep a copy of init's binary: {e}")))?;
    drop(exe_file);
    crate::trace::mark("find externals, keep init");
    let bound_sockets = bound_paths(&fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default());

    let mut args: Vec<String> = vec!["dump".into(), "-t".into(), pid.to_string()];
    args.extend(common_args(dir));
    args.extend(["-o".into(), "dump.log".into()]);
    for e in &externals {
        args.push("--external".into());
        args.push(format!("mnt[{}]:{}", e.mount_point, e.key));
    }
    args.push("--external".into());
    args.push(exe_key.clone());
    args.push(format!("--ext-unix-sk={control_ino}"));
    args.extend_from_slice(extra);
    let out = Command::new(&criu.path)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| fail(format!("run {}: {e}", criu.path.display())))?;
    crate::trace::mark("criu dump");
    if !out.status.success() {
        return Err(fail(explain(&dir.join("dump.log"), "dump")));
    }
    let manifest = Manifest {
        id: id.to_string(),
        slot,
        control_ino,
        exe_key,
        externals,
        criu_version: criu.version.clone(),
        bound_sockets,
        bytes: dir_bytes(dir),
        boot_id: boot_id(),
        isolation: crate::spec::Isolation::Namespaces,
        runsc_version: String::new(),
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| fail(e.to_string()))?;
    fs::write(dir.join(MANIFEST), text).map_err(|e| fail(format!("write the manifest: {e}")))?;
    Ok(manifest)
}

/// The absolute paths in a `/proc/<pid>/net/unix` table (abstract and unbound sockets have none).
fn bound_paths(table: &str) -> Vec<String> {
    let mut out: Vec<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().skip(7).collect::<Vec<_>>().join(" "))
        .filter(|p| p.starts_with('/'))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Put a copy of the binary at `exe` (init's) in `dir`: a link to the one copy kept beside the images for
/// that binary (`../.init/`), made on its first hibernation, so that each image does not copy it again.
pub(crate) fn keep_init(exe: &str, dir: &Path) -> std::io::Result<()> {
    let meta = fs::metadata(exe)?;
    let key = format!("{:x}-{:x}-{:x}-{:x}", meta.dev(), meta.ino(), meta.len(), meta.mtime_nsec() ^ meta.mtime());
    let target = dir.join(INIT_COPY);
    if let Some(shared) = dir.parent().map(|p| p.join(".init")) {
        let kept = shared.join(&key);
        if !kept.exists() {
            fs::create_dir_all(&shared)?;
            let fresh = shared.join(format!("{key}.new-{}", std::process::id()));
            fs::copy(exe, &fresh)?;
            fs::rename(&fresh, &kept)?;
        }
        if fs::hard_link(&kept, &target).is_ok() {
            return Ok(());
        }
    }
    fs::copy(exe, &target).map(|_| ())
}

/// Write the image in `dir` (its files, then the directory) to disk.
pub fn sync_image(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type()?.is_file() {
            fs::File::open(entry.path())?.sync_all()?;
        }
    }
    fs::File::open(dir)?.sync_all()
}

/// Read the manifest of the image in `dir`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, RuntimeError> {
    let text = fs::read(dir.join(MANIFEST))
        .map_err(|e| RuntimeError::Checkpoint { message: format!("read {}: {e}", dir.join(MANIFEST).display()) })?;
    serde_json::from_slice(&text).map_err(|e| RuntimeError::Checkpoint { message: format!("the manifest: {e}") })
}

/// The bytes of the regular files under `dir` (CRIU's image is flat; a gVisor one keeps `/tmp` in a
/// directory beside it).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok().map(|m| (e.path(), m)))
        .map(|(p, m)| {
            if m.is_dir() {
                dir_bytes(&p)
            } else if m.is_file() {
                m.len()
            } else {
                0
            }
        })
        .sum()
}

/// CRIU's errors from its log, as one sentence: the lines it marked `Error`, without the ones it prints
/// for tools it merely probes (iptables) or limits root lacks here (RLIMIT_NOFILE), which are not fatal.
pub(crate) fn explain(log: &Path, what: &str) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error"))
        // `ip` says `Error: ... already assigned` of the loopback addresses a new namespace has anyway.
        .filter(|l| !l.starts_with("Error: "))
        .filter(|l| !l.contains("tables") && !l.contains("RLIMIT_NOFILE") && !l.contains("cgroupd"))
        .map(|l| l.split_once("): ").map(|(_, m)| m).unwrap_or(l).trim())
        .collect();
    let named = errors.iter().find(|l| !l.contains("FAILED")).copied().unwrap_or("see its log");
    format!("CRIU could not {what} the sandbox: {named} (log: {})", log.display())
}

/// What a restored sandbox is made of (see [`Sandbox::assemble`]).
pub(crate) struct Parts {
    pub id: String,
    pub claim_path: std::path::PathBuf,
    pub claim: fs::File,
    pub live_path: std::path::PathBuf,
    pub live: fs::File,
    pub ids: crate::ids::IdBlock,
    pub cgroup: crate::cgroup::Cgroup,
    pub pid: i32,
    pub pidfd: std::os::fd::OwnedFd,
    pub control: std::os::fd::OwnedFd,
    /// Init executed itself again after the restore (see [`crate::restore`]).
    pub renewed: bool,
    /// What the renewed init's ready said of its landlock rules (`none` when it was not renewed).
    pub landlock: String,
}

impl Sandbox {
    pub(crate) fn assemble(p: Parts) -> Sandbox {
        Sandbox {
            id: p.id,
            claim_path: p.claim_path,
            _claim: p.claim,
            live_path: p.live_path,
            _live: p.live,
            _ids: Some(p.ids),
            backend: &crate::backend::namespaces::NamespacesBackend,
            copiers: Default::default(),
            cgroup: p.cgroup,
            pid: p.pid,
            pidfd: p.pidfd,
            control: p.control,
            checkpointable: p.renewed,
            landlock: p.landlock,
            destroyed: false,
        }
    }

    /// Hibernate with CRIU: write the sandbox's processes to `dir` and end them, keep its host id block
    /// reserved for `owner` (see [`crate::Runtime::reservation_owner`]), and tear the rest down. On error the
    /// sandbox keeps running as it was (CRIU lets a tree it could not dump go on) and nothing is reserved.
    pub(crate) fn criu_hibernate(
        &mut self,
        dir: &Path,
        criu: &Criu,
        owner: &str,
    ) -> Result<(Manifest, crate::Teardown), RuntimeError> {
        let claims = Path::new(crate::ids::CLAIMS_DIR);
        let ids = self.host_ids("hibernate with CRIU")?;
        ids.reserve_for(claims, owner)?;
        let slot = ids.slot();
        match dump(criu, &self.id, slot, self.pid, dir, &[]) {
            Ok(manifest) => Ok((manifest, self.teardown())),
            Err(e) => {
                crate::ids::unreserve(claims, slot, owner);
                Err(e)
            }
        }
    }

    /// Its host id block: a sandbox of the namespaces backend has one; CRIU's checkpoints work on those only.
    fn host_ids(&self, what: &'static str) -> Result<&crate::ids::IdBlock, RuntimeError> {
        self._ids.as_ref().ok_or(RuntimeError::IsolationCannot { isolation: self.isolation(), what })
    }
}

impl Sandbox {
    /// Checkpoint with CRIU: write the sandbox's processes to `dir` as [`Sandbox::criu_hibernate`] does, and
    /// leave them running (a fork with its processes restores the image as new sandboxes). A cgroup the
    /// caller froze is frozen again once the image is written, so that what else is copied of the sandbox in
    /// that instant (its files) matches its memory.
    pub(crate) fn criu_checkpoint(&self, dir: &Path, criu: &Criu) -> Result<Manifest, RuntimeError> {
        let leave =
            ["--leave-running".to_string(), "--freeze-cgroup".into(), self.cgroup.control_dir().display().to_string()];
        dump(criu, &self.id, self.host_ids("checkpoint its processes with CRIU")?.slot(), self.pid, dir, &leave)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_what_criu_cannot_rebuild_is_external() {
        let table = berth_sys::mountinfo::parse(
            "73 45 0:42 / / rw - overlay overlay rw,lowerdir=/x\n\
             76 73 0:44 / /usr rw - overlay overlay rw\n\
             77 73 0:41 /hostname /etc/hostname rw - tmpfs tmpfs rw\n\
             79 73 0:46 / /proc rw - proc proc rw\n\
             80 79 0:6 /null /proc/keys rw - devtmpfs devtmpfs rw\n\
             87 79 0:46 /sys /proc/sys ro - proc proc rw\n\
             88 79 0:47 / /proc/acpi ro - tmpfs tmpfs ro,size=0k,mode=555\n\
             93 73 0:51 / /dev ro - tmpfs tmpfs rw\n\
             100 93 0:52 / /dev/pts rw - devpts devpts rw\n\
             103 73 254:0 /pool/sandboxes/a/workspace /workspace rw,idmapped - ext4 /dev/vda rw\n",
        );
        let points: Vec<String> = externals(&table).into_iter().map(|e| e.mount_point).collect();
        assert_eq!(points, ["/usr", "/etc/hostname", "/proc/keys", "/proc/acpi", "/workspace"]);
        let acpi = externals(&table).into_iter().find(|e| e.mount_point == "/proc/acpi").unwrap();
        assert!(is_mask(&acpi));
    }

    #[test]
    fn only_bound_paths_are_kept_of_the_unix_socket_table() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 712298 /run/berth/contexts/c1.sock\n\
             0000000000000000: 00000002 00000000 00000000 0001 03 712300\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 712301 @abstract\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 712299 /run/berth/contexts/c1.sock\n";
        assert_eq!(bound_paths(table), ["/run/berth/contexts/c1.sock"]);
    }

    #[test]
    fn keys_are_distinct_for_distinct_paths() {
        assert_ne!(mount_key("/a_b"), mount_key("/a/b"));
        assert!(mount_key("/etc/hosts").chars().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(parse_version("4.2.1") >= MIN_CRIU);
        assert!(parse_version("4.10") >= MIN_CRIU);
        assert!(parse_version("3.17.1") < MIN_CRIU);
        assert!(parse_version("4.1.1") < MIN_CRIU);
    }
}
