//! Images: the read-only trees a sandbox's root is layered over.
//!
//! Today there is one, `host`: the host's `/usr`, seen read-only and id-mapped, over a small skeleton that
//! berth generates once per data root (directories, the usual `/bin` and `/lib*` links, and an `/etc` with a
//! curated copy of the host's configuration and berth's own users). Nothing secret is copied: no shadow
//! files, no private keys, no machine id, no package-manager credentials.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use crate::RuntimeError;

/// Bumped whenever the skeleton's contents change, so old skeletons are rebuilt.
const SKELETON_VERSION: &str = "6";

/// Host `/etc` entries copied into the skeleton: what programs from the host's `/usr` expect to find.
const HOST_ETC: &[&str] = &[
    "alternatives",
    "apt",
    "bash.bashrc",
    "bindresvport.blacklist",
    "ca-certificates",
    "ca-certificates.conf",
    // A desktop's programs: chromium's wrapper reads its flags, X clients their resources and keymaps,
    // every GUI program its fonts and the XDG defaults (xfwm4's among them).
    "chromium.d",
    "debian_version",
    "dpkg",
    "environment",
    "ethertypes",
    "fonts",
    "gai.conf",
    "gtk-3.0",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "login.defs",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "os-release",
    "perl",
    "profile",
    "profile.d",
    "protocols",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "rpc",
    "services",
    "shells",
    "skel",
    "ssl/certs",
    "ssl/openssl.cnf",
    "timezone",
    "X11",
    "xdg",
];

const CHROMIUM_FLAGS: &str = "export CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox --test-type --no-first-run \
--disable-dev-shm-usage --disable-gpu --password-store=basic\"\n";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
user:x:1000:1000:user:/home/user:/bin/bash\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\ntty:x:5:\nusers:x:100:user\nuser:x:1000:\nnogroup:x:65534:\n";
const SHADOW: &str = "root:*:19000:0:99999:7:::\nuser:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n";
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n\
protocols: files\nservices: files\nethers: files\nrpc: files\n";
const RESOLV: &str =
    "# This sandbox has no network beyond its own loopback.\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

/// The prepared images of one data root.
#[derive(Debug, Clone)]
pub struct Images {
    dir: PathBuf,
}

/// What a sandbox's root is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLayers {
    /// The root of the tree: the host image's skeleton, or an imported image's whole root file system.
    pub skeleton: PathBuf,
    /// The tree seen at `/usr`, when it is a layer of its own (the host image).
    pub usr: Option<PathBuf>,
    /// Whether the image's files are stored under berth's storage ids (imported images), rather than host
    /// ids that are the sandbox's own (the host's `/usr`, owned by root).
    pub storage_ids: bool,
}

/// Where an imported image keeps its root file system, and its description.
pub const IMPORTED_ROOTFS: &str = "rootfs";
pub const IMPORTED_META: &str = "image.json";

impl Images {
    pub fn new(dir: PathBuf) -> Images {
        Images { dir }
    }

    /// The layers of image `name`, preparing them on first use.
    pub fn layers(&self, name: &str) -> Result<ImageLayers, RuntimeError> {
        if name != "host" {
            let dir = self.dir.join(name);
            let valid = crate::spec::check_name(name).is_ok() && dir.join(IMPORTED_META).is_file();
            if !valid {
                return Err(RuntimeError::UnknownImage { name: name.to_string() });
            }
            return Ok(ImageLayers { skeleton: dir.join(IMPORTED_ROOTFS), usr: None, storage_ids: true });
        }
        let skeleton = self.dir.join("host").join(format!("rootfs-v{SKELETON_VERSION}"));
        if !skeleton.join("etc/passwd").exists() {
            self.build_skeleton(&skeleton)
                .map_err(|source| RuntimeError::PrepareImage { name: name.to_string(), source })?;
        }
        Ok(ImageLayers { skeleton, usr: Some(PathBuf::from("/usr")), storage_ids: false })
    }

    fn build_skeleton(&self, dest: &Path) -> std::io::Result<()> {
        let parent = dest.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent)?;
        let tmp = parent.join(format!(".building-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir(&tmp)?;
        write_skeleton(&tmp)?;
        match fs::rename(&tmp, dest) {
            Ok(()) => Ok(()),
            // Another process built it first: theirs is as good as ours.
            Err(_) if dest.join("etc/passwd").exists() => fs::remove_dir_all(&tmp),
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                Err(e)
            }
        }
    }
}

fn dir(path: &Path, mode: u32) -> std::io::Result<()> {
    fs::create_dir_all(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

fn write_skeleton(root: &Path) -> std::io::Result<()> {
    for (d, mode) in [
        ("usr", 0o755),
        ("etc", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("tmp", 0o1777),
        ("workspace", 0o755),
        ("root", 0o700),
        ("home", 0o755),
        ("home/user", 0o755),
        ("var", 0o755),
        ("var/tmp", 0o1777),
        ("var/lib", 0o755),
        ("var/cache", 0o755),
        ("var/log", 0o755),
        ("var/spool", 0o755),
        ("run", 0o755),
        ("run/lock", 0o1777),
        ("run/egress", 0o755),
        ("opt", 0o755),
        ("srv", 0o755),
        ("mnt", 0o755),
        ("media", 0o755),
    ] {
        dir(&root.join(d), mode)?;
    }
    rustix::fs::chown(
        root.join("home/user"),
        Some(rustix::fs::Uid::from_raw(1000)),
        Some(rustix::fs::Gid::from_raw(1000)),
    )?;
    for link in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        if Path::new("/usr").join(link).exists() {
            symlink(format!("usr/{link}"), root.join(link))?;
        }
    }
    symlink("../run", root.join("var/run"))?;
    symlink("../run/lock", root.join("var/lock"))?;
    let etc = root.join("etc");
    for entry in HOST_ETC {
        let src = Path::new("/etc").join(entry);
        if fs::symlink_metadata(&src).is_ok() {
            copy_tree(&src, &etc.join(entry))?;
        }
    }
    for (name, text, mode) in [
        ("passwd", PASSWD, 0o644),
        ("group", GROUP, 0o644),
        ("shadow", SHADOW, 0o640),
        ("nsswitch.conf", NSSWITCH, 0o644),
        ("resolv.conf", RESOLV, 0o644),
        // Mount points: each sandbox binds its own over them.
        ("hostname", "", 0o644),
        ("hosts", "", 0o644),
    ] {
        fs::write(etc.join(name), text)?;
        fs::set_permissions(etc.join(name), fs::Permissions::from_mode(mode))?;
    }
    // Debian's chromium wrapper reads its flags from here: inside a sandbox its own sandbox cannot be made
    // (it needs namespaces berth does not give), so it runs without, as under any container runtime.
    if etc.join("chromium.d").is_dir() {
        fs::write(etc.join("chromium.d/no-sandbox"), CHROMIUM_FLAGS)?;
    }
    Ok(())
}

/// Names never copied from the host's /etc, at any depth: they can hold credentials.
const SECRET_NAMES: [&str; 4] = ["auth.conf", "auth.conf.d", "private", "netrc"];

/// Copy a file, symlink or directory tree, keeping modes and links (ownership becomes root's).
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    if src.file_name().and_then(|n| n.to_str()).is_some_and(|n| SECRET_NAMES.contains(&n)) {
        return Ok(());
    }
    let meta = fs::symlink_metadata(src)?;
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent)?;
    }
    let ft = meta.file_type();
    if ft.is_symlink() {
        symlink(fs::read_link(src)?, dst)
    } else if ft.is_dir() {
        fs::create_dir_all(dst)?;
        fs::set_permissions(dst, meta.permissions())?;
        for entry in fs::read_dir(src)? {
            let entry = entry?;
            copy_tree(&entry.path(), &dst.join(entry.file_name()))?;
        }
        Ok(())
    } else if ft.is_file() {
        fs::copy(src, dst)?;
        // Never carry setuid/setgid bits into an image.
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.permissions().mode() & 0o1777))
    } else {
        Ok(())
    }
}
