//! Mounts: the classic calls for file systems, the new mount API for detached, idmapped trees.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::CWD;
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags};

use crate::error::{Context, SysError, SysResult};

pub use rustix::mount::MountFlags as Flags;

/// Stop mount events from travelling between this mount namespace and the one it was copied from.
pub fn make_private_recursive() -> SysResult<()> {
    rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)
        .ctx(|| "make the mount tree private")
}

/// Mount a file system: `mount -t fstype -o data source target`.
pub fn mount_fs(source: &str, target: &Path, fstype: &str, flags: MountFlags, data: &str) -> SysResult<()> {
    let data =
        std::ffi::CString::new(data).map_err(|_| SysError::new("mount options", std::io::ErrorKind::InvalidInput))?;
    rustix::mount::mount(source, target, fstype, flags, Some(data.as_c_str()))
        .ctx(|| format!("mount {fstype} on {}", target.display()))
}

/// Bind-mount `source` (a path or `/proc/self/fd/N`) onto `target`.
pub fn bind(source: &Path, target: &Path) -> SysResult<()> {
    rustix::mount::mount_bind(source, target).ctx(|| format!("bind {} onto {}", source.display(), target.display()))
}

/// Attributes for [`set_attr`]: read-only, nosuid, nodev, noexec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attrs {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl Attrs {
    fn bits(self) -> u64 {
        let mut b = 0;
        for (on, bit) in [
            (self.readonly, rustix::mount::MountAttrFlags::MOUNT_ATTR_RDONLY),
            (self.nosuid, rustix::mount::MountAttrFlags::MOUNT_ATTR_NOSUID),
            (self.nodev, rustix::mount::MountAttrFlags::MOUNT_ATTR_NODEV),
            (self.noexec, rustix::mount::MountAttrFlags::MOUNT_ATTR_NOEXEC),
        ] {
            if on {
                b |= u64::from(bit.bits());
            }
        }
        b
    }
}

/// `struct mount_attr` from <linux/mount.h>.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const AT_RECURSIVE: u32 = 0x8000;

fn mount_setattr(dir: BorrowedFd<'_>, path: &str, recursive: bool, attr: &MountAttr) -> std::io::Result<()> {
    let path = std::ffi::CString::new(path).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `path` and `attr` are valid for the duration of the call and the size passed matches the
    // struct layout the kernel expects (MOUNT_ATTR_SIZE_VER0 = 32 bytes).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir.as_raw_fd(),
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    if r != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Set attributes on the mount at `target` (and, with `recursive`, every mount below it), keeping the
/// attributes it already has.
pub fn set_attr(target: &Path, attrs: Attrs, recursive: bool) -> SysResult<()> {
    let dir =
        rustix::fs::open(target, rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
            .ctx(|| format!("open {}", target.display()))?;
    let attr = MountAttr { attr_set: attrs.bits(), attr_clr: 0, propagation: 0, userns_fd: 0 };
    mount_setattr(dir.as_fd(), "", recursive, &attr).ctx(|| format!("set mount attributes on {}", target.display()))
}

/// Clone the mount tree at `source` into a detached mount whose file ownership is seen through the id
/// mapping of the user namespace `userns`, optionally read-only. Attach it with [`attach`].
pub fn clone_idmapped(source: &Path, userns: BorrowedFd<'_>, attrs: Attrs, recursive: bool) -> SysResult<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    let tree =
        rustix::mount::open_tree(CWD, source, flags).ctx(|| format!("clone the mount at {}", source.display()))?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | attrs.bits(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    mount_setattr(tree.as_fd(), "", recursive, &attr)
        .ctx(|| format!("idmap the mount of {} (does its file system support idmapped mounts?)", source.display()))?;
    Ok(tree)
}

/// Clone the mount tree at `source` into a detached bind mount (no id mapping).
pub fn clone_tree(source: &Path, attrs: Attrs, recursive: bool) -> SysResult<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    let tree =
        rustix::mount::open_tree(CWD, source, flags).ctx(|| format!("clone the mount at {}", source.display()))?;
    if attrs != Attrs::default() {
        let attr = MountAttr { attr_set: attrs.bits(), attr_clr: 0, propagation: 0, userns_fd: 0 };
        mount_setattr(tree.as_fd(), "", recursive, &attr)
            .ctx(|| format!("set mount attributes on {}", source.display()))?;
    }
    Ok(tree)
}

/// Attach a detached mount (from [`clone_idmapped`] or [`clone_tree`]) at `target`.
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> SysResult<()> {
    rustix::mount::move_mount(tree, "", CWD, target, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
        .ctx(|| format!("attach a mount at {}", target.display()))
}

/// Attach a detached mount onto an already opened target directory or file (an `O_PATH` descriptor).
pub fn attach_at(tree: BorrowedFd<'_>, target: BorrowedFd<'_>, shown_as: &Path) -> SysResult<()> {
    rustix::mount::move_mount(
        tree,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .ctx(|| format!("attach a mount at {}", shown_as.display()))
}

/// An overlay made as root of the user namespace `userns` makes it (its superblock owned by that namespace,
/// its upper layer written with that root's ids, as when the sandbox's own first process mounts it), but
/// for a caller outside that namespace: a detached mount, to attach with [`attach`]. `flags` are overlay's
/// flag options (`userxattr`, `volatile`). The caller must be single-threaded (a child is forked for it).
pub fn overlay_as(
    userns: BorrowedFd<'_>,
    lower: &Path,
    upper: &Path,
    work: &Path,
    flags: &[&str],
) -> SysResult<OwnedFd> {
    let (ours, theirs) = crate::fd::seqpacket_pair()?;
    let none = crate::clone::Namespaces { user: false, mount: false, pid: false, net: false, ipc: false, uts: false };
    match crate::clone::spawn(none, None)? {
        crate::clone::Forked::Child => {
            drop(ours);
            let made = (|| -> SysResult<OwnedFd> {
                rustix::thread::move_into_link_name_space(userns, Some(rustix::thread::LinkNameSpaceType::User))
                    .ctx(|| "enter the sandbox's user namespace")?;
                crate::process::become_id(0)?;
                // SAFETY: unshare(CLONE_NEWMOUNT) only gives this process a mount namespace of its own; it is a
                // freshly forked, single-threaded child that shares nothing with another thread.
                unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
                    .ctx(|| "create a mount namespace in the sandbox's user namespace")?;
                let fs = rustix::mount::fsopen("overlay", rustix::mount::FsOpenFlags::FSOPEN_CLOEXEC)
                    .ctx(|| "open an overlay file system")?;
                rustix::mount::fsconfig_set_string(&fs, "source", "overlay").ctx(|| "name the overlay")?;
                for (key, path) in [("lowerdir", lower), ("upperdir", upper), ("workdir", work)] {
                    rustix::mount::fsconfig_set_string(&fs, key, path)
                        .ctx(|| format!("set the overlay's {key} to {}", path.display()))?;
                }
                for flag in flags {
                    rustix::mount::fsconfig_set_flag(&fs, *flag).ctx(|| format!("set the overlay's {flag}"))?;
                }
                rustix::mount::fsconfig_create(&fs).ctx(|| format!("create the overlay of {}", upper.display()))?;
                let attrs =
                    rustix::mount::MountAttrFlags::MOUNT_ATTR_NOSUID | rustix::mount::MountAttrFlags::MOUNT_ATTR_NODEV;
                rustix::mount::fsmount(&fs, rustix::mount::FsMountFlags::FSMOUNT_CLOEXEC, attrs)
                    .ctx(|| "mount the overlay")
            })();
            let sent = match made {
                Ok(mnt) => crate::fd::send(theirs.as_fd(), b"", &[mnt.as_fd()]),
                Err(e) => crate::fd::send(theirs.as_fd(), e.to_string().as_bytes(), &[]),
            };
            crate::clone::exit_now(i32::from(sent.is_err()))
        }
        crate::clone::Forked::Parent { pidfd, .. } => {
            drop(theirs);
            let mut buf = [0u8; 1024];
            let got = crate::fd::recv(ours.as_fd(), &mut buf);
            crate::process::pidfd_wait(pidfd.as_fd())?;
            match got {
                Ok((_, mut fds)) if fds.len() == 1 => {
                    fds.pop().ok_or_else(|| SysError::new("mount the overlay", std::io::ErrorKind::Other))
                }
                Ok((n, _)) => Err(SysError::new(
                    "mount the overlay as the sandbox's root",
                    std::io::Error::other(String::from_utf8_lossy(&buf[..n]).into_owned()),
                )),
                Err(e) => Err(e),
            }
        }
    }
}

/// The layers of an overlay to rebuild with [`overlay_idmapped`]: what an existing overlay mount was made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayLayers {
    /// Top first, as in `lowerdir=`.
    pub lower: Vec<std::path::PathBuf>,
    pub upper: Option<std::path::PathBuf>,
    pub work: Option<std::path::PathBuf>,
    /// The other options (`index=off`, `redirect_dir=on`, ...), as `key` or `key=value`.
    pub options: Vec<String>,
}

/// An overlay like the one `layers` describes, made in the host's user namespace (so the layers' `trusted.`
/// overlay attributes keep their meaning), but with every layer an id-mapped mount seen through `userns`:
/// files the image stores as root are root of that namespace, and what its root writes is stored as root,
/// as it would be without a user namespace (an overlay mount itself cannot be id-mapped).
/// `root_id` is the host id that is root in `userns`. The upper and
/// work directories must share a parent. Returns a detached mount; the caller must be single-threaded (a
/// child with a mount namespace of its own is forked to stage the layers).
pub fn overlay_idmapped(
    userns: BorrowedFd<'_>,
    layers: &OverlayLayers,
    staging: &Path,
    root_id: u32,
) -> SysResult<OwnedFd> {
    let (ours, theirs) = crate::fd::seqpacket_pair()?;
    match crate::clone::spawn(crate::clone::Namespaces::NONE, None)? {
        crate::clone::Forked::Child => {
            drop(ours);
            let made = (|| -> SysResult<OwnedFd> {
                // SAFETY: unshare(CLONE_NEWNS) only gives this process a mount namespace of its own; it is a
                // freshly forked, single-threaded child that shares nothing with another thread.
                unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
                    .ctx(|| "create a mount namespace to stage an overlay's layers in")?;
                make_private_recursive()?;
                mount_fs("tmpfs", staging, "tmpfs", MountFlags::NOSUID | MountFlags::NODEV, "mode=700,size=64k")?;
                let read_only = Attrs { readonly: true, nosuid: true, nodev: true, noexec: false };
                let mut lower = Vec::new();
                for (i, layer) in layers.lower.iter().enumerate() {
                    let at = staging.join(format!("l{i}"));
                    std::fs::create_dir(&at).ctx(|| format!("create {}", at.display()))?;
                    attach(clone_idmapped(layer, userns, read_only, false)?.as_fd(), &at)?;
                    lower.push(at.display().to_string());
                }
                let fs = rustix::mount::fsopen("overlay", rustix::mount::FsOpenFlags::FSOPEN_CLOEXEC)
                    .ctx(|| "open an overlay file system")?;
                rustix::mount::fsconfig_set_string(&fs, "source", "overlay").ctx(|| "name the overlay")?;
                rustix::mount::fsconfig_set_string(&fs, "lowerdir", lower.join(":"))
                    .ctx(|| "set the overlay's lower layers")?;
                if let (Some(upper), Some(work)) = (&layers.upper, &layers.work) {
                    let parent = upper.parent().filter(|p| Some(*p) == work.parent()).ok_or_else(|| {
                        SysError::new(
                            "rebuild the overlay (its upper and work directories have different parents)",
                            std::io::ErrorKind::InvalidInput,
                        )
                    })?;
                    let at = staging.join("upper");
                    std::fs::create_dir(&at).ctx(|| format!("create {}", at.display()))?;
                    let writable = Attrs { readonly: false, nosuid: true, nodev: true, noexec: false };
                    attach(clone_idmapped(parent, userns, writable, false)?.as_fd(), &at)?;
                    for (key, dir) in [("upperdir", upper), ("workdir", work)] {
                        let name = dir.file_name().unwrap_or_default();
                        rustix::mount::fsconfig_set_string(&fs, key, at.join(name))
                            .ctx(|| format!("set the overlay's {key}"))?;
                    }
                }
                for option in &layers.options {
                    match option.split_once('=') {
                        Some((k, v)) => rustix::mount::fsconfig_set_string(&fs, k, v),
                        None => rustix::mount::fsconfig_set_flag(&fs, option.as_str()),
                    }
                    .ctx(|| format!("set the overlay's {option}"))?;
                }
                // The overlay does its own work on the layers (its work directory, copy-ups) with its mounter's
                // credentials, through the layers' id mappings: as the namespace's root (`root_id` on the host),
                // whose ids they map, with host root's capabilities kept.
                let _as_root = crate::fsids::act_as(root_id, root_id)?;
                rustix::mount::fsconfig_create(&fs).ctx(|| "create the overlay on id-mapped layers")?;
                let attrs =
                    rustix::mount::MountAttrFlags::MOUNT_ATTR_NOSUID | rustix::mount::MountAttrFlags::MOUNT_ATTR_NODEV;
                rustix::mount::fsmount(&fs, rustix::mount::FsMountFlags::FSMOUNT_CLOEXEC, attrs)
                    .ctx(|| "mount the overlay")
            })();
            let sent = match made {
                Ok(mnt) => crate::fd::send(theirs.as_fd(), b"", &[mnt.as_fd()]),
                Err(e) => crate::fd::send(theirs.as_fd(), e.to_string().as_bytes(), &[]),
            };
            crate::clone::exit_now(i32::from(sent.is_err()))
        }
        crate::clone::Forked::Parent { pidfd, .. } => {
            drop(theirs);
            let mut buf = [0u8; 1024];
            let got = crate::fd::recv(ours.as_fd(), &mut buf);
            crate::process::pidfd_wait(pidfd.as_fd())?;
            match got {
                Ok((_, mut fds)) if fds.len() == 1 => {
                    fds.pop().ok_or_else(|| SysError::new("mount the overlay", std::io::ErrorKind::Other))
                }
                Ok((n, _)) => Err(SysError::new(
                    "rebuild the container's root overlay on id-mapped layers",
                    std::io::Error::other(String::from_utf8_lossy(&buf[..n]).into_owned()),
                )),
                Err(e) => Err(e),
            }
        }
    }
}

/// Make `new_root` the root of this mount namespace and detach the old root entirely.
pub fn pivot_into(new_root: &Path) -> SysResult<()> {
    rustix::process::chdir(new_root).ctx(|| format!("enter {}", new_root.display()))?;
    // pivot_root(".", ".") stacks the old root on top of the new one; unmounting "." then drops the old root
    // without needing a put_old directory inside the sandbox's file system.
    rustix::process::pivot_root(".", ".").ctx(|| "pivot into the sandbox root")?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).ctx(|| "detach the host's root")?;
    rustix::process::chdir("/").ctx(|| "enter /")
}

/// Unmount lazily.
pub fn unmount_detach(target: &Path) -> SysResult<()> {
    rustix::mount::unmount(target, UnmountFlags::DETACH).ctx(|| format!("unmount {}", target.display()))
}

/// Whether an errno means "this kernel or file system does not do that".
pub fn is_unsupported(err: &SysError) -> bool {
    matches!(err.errno(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM))
}
