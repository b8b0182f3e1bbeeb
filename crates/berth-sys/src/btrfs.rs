//! btrfs subvolumes, snapshots and quota groups, and reflinks, through their ioctls.
//!
//! The storage pool creates, clones and removes a volume for every sandbox, snapshot and fork. An ioctl does
//! that in well under a millisecond of our own time, where the `btrfs` command costs a process start and,
//! for some of its verbs, a transaction commit of its own. Layouts and request numbers are those of
//! <linux/btrfs.h> and <linux/fs.h>; the sizes are checked at compile time.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use crate::error::{Context, SysError, SysResult};

/// `f_type` of a btrfs file system in statfs(2).
pub const SUPER_MAGIC: u32 = 0x9123_683e;
/// The inode number of the root directory of every subvolume, which is how a subvolume is told from a
/// plain directory.
pub const SUBVOLUME_ROOT_INO: u64 = 256;

const IOCTL_MAGIC: u32 = 0x94;
const SUBVOL_NAME_MAX: usize = 4039;
const PATH_NAME_MAX: usize = 4087;
const INO_LOOKUP_PATH_MAX: usize = 4080;

/// `BTRFS_SUBVOL_RDONLY`: in the flags of a new snapshot, and of an existing subvolume.
const SUBVOL_RDONLY: u64 = 1 << 1;
/// `BTRFS_QGROUP_LIMIT_MAX_RFER`.
const QGROUP_LIMIT_MAX_RFER: u64 = 1 << 0;
/// The value that lifts a qgroup limit (`CLEAR_VALUE` in the kernel).
const QGROUP_LIMIT_CLEAR: u64 = u64::MAX;
const QUOTA_CTL_ENABLE: u64 = 1;
const QUOTA_CTL_ENABLE_SIMPLE: u64 = 4;

/// `_IOC(dir, 0x94, nr, size)`.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (IOCTL_MAGIC << 8) | nr
}
const WRITE: u32 = 1;
const READ: u32 = 2;

const SYNC: u32 = ioc(0, 8, 0);
const SNAP_DESTROY: u32 = ioc(WRITE, 15, size_of::<VolArgs>());
const INO_LOOKUP: u32 = ioc(READ | WRITE, 18, size_of::<InoLookupArgs>());
const SNAP_CREATE_V2: u32 = ioc(WRITE, 23, size_of::<VolArgsV2>());
const SUBVOL_CREATE_V2: u32 = ioc(WRITE, 24, size_of::<VolArgsV2>());
const SUBVOL_GETFLAGS: u32 = ioc(READ, 25, size_of::<u64>());
const SUBVOL_SETFLAGS: u32 = ioc(WRITE, 26, size_of::<u64>());
const FS_INFO: u32 = ioc(READ, 31, size_of::<FsInfoArgs>());
const QUOTA_CTL: u32 = ioc(READ | WRITE, 40, size_of::<QuotaCtlArgs>());
const QGROUP_CREATE: u32 = ioc(WRITE, 42, size_of::<QgroupCreateArgs>());
const QGROUP_LIMIT: u32 = ioc(READ, 43, size_of::<QgroupLimitArgs>());

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; PATH_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_vol_args_v2`, without the qgroup-inherit pointer (never used here).
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; SUBVOL_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_ino_lookup_args`.
#[repr(C)]
struct InoLookupArgs {
    treeid: u64,
    objectid: u64,
    name: [u8; INO_LOOKUP_PATH_MAX],
}

/// `struct btrfs_ioctl_fs_info_args`.
#[repr(C)]
struct FsInfoArgs {
    max_id: u64,
    num_devices: u64,
    fsid: [u8; 16],
    nodesize: u32,
    sectorsize: u32,
    clone_alignment: u32,
    csum_type: u16,
    csum_size: u16,
    flags: u64,
    generation: u64,
    metadata_uuid: [u8; 16],
    reserved: [u8; 944],
}

/// `struct btrfs_ioctl_quota_ctl_args`.
#[repr(C)]
struct QuotaCtlArgs {
    cmd: u64,
    status: u64,
}

/// `struct btrfs_ioctl_qgroup_create_args`.
#[repr(C)]
struct QgroupCreateArgs {
    create: u64,
    qgroupid: u64,
}

/// `struct btrfs_ioctl_qgroup_limit_args` with its `struct btrfs_qgroup_limit` inlined.
#[repr(C)]
struct QgroupLimitArgs {
    qgroupid: u64,
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

const _: () = assert!(size_of::<VolArgs>() == 4096);
const _: () = assert!(size_of::<VolArgsV2>() == 4096);
const _: () = assert!(size_of::<InoLookupArgs>() == 4096);
const _: () = assert!(size_of::<FsInfoArgs>() == 1024);
const _: () = assert!(size_of::<QgroupLimitArgs>() == 48);

/// ioctl(2) with a pointer argument.
///
/// # Safety
/// `request` must be a request whose argument is a pointer to a `T` (with the layout the kernel expects for
/// it), which the kernel may read and write for the duration of the call.
unsafe fn ioctl_ptr<T>(fd: BorrowedFd<'_>, request: u32, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed `T`, which the caller guarantees is what `request`
    // reads and writes; `fd` is an open descriptor for the duration of the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::Ioctl, arg as *mut T) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A subvolume name as the kernel wants it: one path component, NUL-terminated in a fixed buffer.
fn name_buf<const N: usize>(name: &OsStr) -> SysResult<[u8; N]> {
    let bytes = name.as_bytes();
    let bad = bytes.is_empty()
        || bytes == b"."
        || bytes == b".."
        || bytes.len() > 255
        || bytes.len() >= N
        || bytes.iter().any(|&b| b == b'/' || b == 0);
    if bad {
        return Err(SysError::new(format!("use {name:?} as a subvolume name"), io::ErrorKind::InvalidInput));
    }
    let mut buf = [0u8; N];
    buf[..bytes.len()].copy_from_slice(bytes);
    Ok(buf)
}

/// Whether the file system of `fd` is btrfs.
pub fn is_btrfs(fd: BorrowedFd<'_>) -> SysResult<bool> {
    let st = rustix::fs::fstatfs(fd).ctx(|| "read the file system type")?;
    // f_type is signed on some architectures; the magic is a 32-bit value.
    Ok((st.f_type as u64 & 0xffff_ffff) == u64::from(SUPER_MAGIC))
}

/// Create the empty subvolume `name` in the directory `parent`.
pub fn create_subvolume(parent: BorrowedFd<'_>, name: &OsStr) -> SysResult<()> {
    let mut args = VolArgsV2 { fd: 0, transid: 0, flags: 0, unused: [0; 4], name: name_buf(name)? };
    // SAFETY: BTRFS_IOC_SUBVOL_CREATE_V2 takes a `struct btrfs_ioctl_vol_args_v2`, which VolArgsV2 is.
    unsafe { ioctl_ptr(parent, SUBVOL_CREATE_V2, &mut args) }.ctx(|| format!("create the subvolume {name:?}"))
}

/// Snapshot the subvolume open at `source` as `name` in the directory `parent`, read-only if asked.
///
/// The snapshot is taken in the next transaction commit, which the call waits for; calls made at the same
/// time from several threads can share one commit.
pub fn snapshot(source: BorrowedFd<'_>, parent: BorrowedFd<'_>, name: &OsStr, readonly: bool) -> SysResult<()> {
    let flags = if readonly { SUBVOL_RDONLY } else { 0 };
    let fd = i64::from(source.as_raw_fd());
    let mut args = VolArgsV2 { fd, transid: 0, flags, unused: [0; 4], name: name_buf(name)? };
    // SAFETY: BTRFS_IOC_SNAP_CREATE_V2 takes a `struct btrfs_ioctl_vol_args_v2`; without
    // BTRFS_SUBVOL_QGROUP_INHERIT in the flags the kernel does not read the inherit pointer (zero here).
    unsafe { ioctl_ptr(parent, SNAP_CREATE_V2, &mut args) }.ctx(|| format!("snapshot a subvolume as {name:?}"))
}

/// Delete the subvolume `name` in the directory `parent`, read-only or not.
///
/// The call returns once the subvolume is unlinked; the kernel frees its blocks in the background.
/// ENOTEMPTY means it contains other subvolumes, which must go first.
pub fn destroy_subvolume(parent: BorrowedFd<'_>, name: &OsStr) -> SysResult<()> {
    let mut args = VolArgs { fd: 0, name: name_buf(name)? };
    // SAFETY: BTRFS_IOC_SNAP_DESTROY takes a `struct btrfs_ioctl_vol_args`, which VolArgs is.
    unsafe { ioctl_ptr(parent, SNAP_DESTROY, &mut args) }.ctx(|| format!("delete the subvolume {name:?}"))
}

/// Whether the subvolume open at `subvol` is read-only.
pub fn is_readonly(subvol: BorrowedFd<'_>) -> SysResult<bool> {
    let mut flags = 0u64;
    // SAFETY: BTRFS_IOC_SUBVOL_GETFLAGS writes one u64.
    unsafe { ioctl_ptr(subvol, SUBVOL_GETFLAGS, &mut flags) }.ctx(|| "read the flags of a subvolume")?;
    Ok(flags & SUBVOL_RDONLY != 0)
}

/// Make the subvolume open at `subvol` read-only or writable.
pub fn set_readonly(subvol: BorrowedFd<'_>, readonly: bool) -> SysResult<()> {
    let mut flags = 0u64;
    // SAFETY: BTRFS_IOC_SUBVOL_GETFLAGS writes one u64.
    unsafe { ioctl_ptr(subvol, SUBVOL_GETFLAGS, &mut flags) }.ctx(|| "read the flags of a subvolume")?;
    flags = if readonly { flags | SUBVOL_RDONLY } else { flags & !SUBVOL_RDONLY };
    // SAFETY: BTRFS_IOC_SUBVOL_SETFLAGS reads one u64.
    unsafe { ioctl_ptr(subvol, SUBVOL_SETFLAGS, &mut flags) }.ctx(|| "change the flags of a subvolume")
}

/// The id of the subvolume that holds the file open at `fd` (its quota group is `0/<id>`).
pub fn subvolume_id(fd: BorrowedFd<'_>) -> SysResult<u64> {
    // treeid 0 asks about the subvolume of `fd`; objectid SUBVOLUME_ROOT_INO is its root directory, whose
    // path (empty) is cheap to resolve.
    let mut args = InoLookupArgs { treeid: 0, objectid: SUBVOLUME_ROOT_INO, name: [0; INO_LOOKUP_PATH_MAX] };
    // SAFETY: BTRFS_IOC_INO_LOOKUP reads and writes a `struct btrfs_ioctl_ino_lookup_args`.
    unsafe { ioctl_ptr(fd, INO_LOOKUP, &mut args) }.ctx(|| "look up the id of a subvolume")?;
    Ok(args.treeid)
}

/// Whether the subvolume with id `id` still exists on the file system of `fd` (one being deleted whose
/// root the cleaner has not dropped yet counts as existing).
pub fn subvolume_exists(fd: BorrowedFd<'_>, id: u64) -> SysResult<bool> {
    // Looking up a subvolume's root directory in the tree `id` fails with ENOENT once that tree is gone.
    let mut args = InoLookupArgs { treeid: id, objectid: SUBVOLUME_ROOT_INO, name: [0; INO_LOOKUP_PATH_MAX] };
    // SAFETY: BTRFS_IOC_INO_LOOKUP reads and writes a `struct btrfs_ioctl_ino_lookup_args`.
    match unsafe { ioctl_ptr(fd, INO_LOOKUP, &mut args) } {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(SysError::new(format!("look up subvolume {id}"), e)),
    }
}

/// The file system's UUID, which names its directory in /sys/fs/btrfs.
pub fn fsid(fd: BorrowedFd<'_>) -> SysResult<[u8; 16]> {
    // SAFETY: all-zero bytes are a valid FsInfoArgs (integers and byte arrays only).
    let mut args: FsInfoArgs = unsafe { std::mem::zeroed() };
    // SAFETY: BTRFS_IOC_FS_INFO fills a `struct btrfs_ioctl_fs_info_args`; zeroed flags ask for the base
    // fields only.
    unsafe { ioctl_ptr(fd, FS_INFO, &mut args) }.ctx(|| "read the file system's information")?;
    Ok(args.fsid)
}

/// Turn on quota groups for the file system of `fd` (full accounting, or simple quotas).
///
/// Full accounting tracks what each subvolume references, shared extents included; simple quotas only
/// charge each extent to the subvolume that wrote it, which is cheaper but counts nothing a snapshot
/// shares with its source.
pub fn enable_quotas(fd: BorrowedFd<'_>, simple: bool) -> SysResult<()> {
    let cmd = if simple { QUOTA_CTL_ENABLE_SIMPLE } else { QUOTA_CTL_ENABLE };
    let mut args = QuotaCtlArgs { cmd, status: 0 };
    // SAFETY: BTRFS_IOC_QUOTA_CTL reads and writes a `struct btrfs_ioctl_quota_ctl_args`.
    unsafe { ioctl_ptr(fd, QUOTA_CTL, &mut args) }.ctx(|| "enable quotas")
}

/// Limit what the subvolume `subvol_id` references to `max_referenced` bytes, or lift the limit (`None`).
///
/// `fd` is any file on the file system. Fails with ENOTCONN when quotas are off.
pub fn limit_qgroup(fd: BorrowedFd<'_>, subvol_id: u64, max_referenced: Option<u64>) -> SysResult<()> {
    let mut args = QgroupLimitArgs {
        qgroupid: subvol_id,
        flags: QGROUP_LIMIT_MAX_RFER,
        max_rfer: max_referenced.unwrap_or(QGROUP_LIMIT_CLEAR),
        max_excl: 0,
        rsv_rfer: 0,
        rsv_excl: 0,
    };
    // SAFETY: BTRFS_IOC_QGROUP_LIMIT reads a `struct btrfs_ioctl_qgroup_limit_args`, which QgroupLimitArgs
    // is with its nested struct laid out inline (all u64, no padding).
    unsafe { ioctl_ptr(fd, QGROUP_LIMIT, &mut args) }.ctx(|| format!("set the limit of quota group 0/{subvol_id}"))
}

/// Remove the quota group of the deleted subvolume `subvol_id`.
///
/// Fails with EBUSY while the kernel still frees the subvolume's blocks (newer kernels then remove the group
/// themselves when done) and ENOENT when it is already gone.
pub fn remove_qgroup(fd: BorrowedFd<'_>, subvol_id: u64) -> SysResult<()> {
    let mut args = QgroupCreateArgs { create: 0, qgroupid: subvol_id };
    // SAFETY: BTRFS_IOC_QGROUP_CREATE reads a `struct btrfs_ioctl_qgroup_create_args`.
    unsafe { ioctl_ptr(fd, QGROUP_CREATE, &mut args) }.ctx(|| format!("remove quota group 0/{subvol_id}"))
}

/// Commit the file system of `fd` and wake its cleaner, which frees the blocks of deleted subvolumes.
pub fn sync(fd: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: BTRFS_IOC_SYNC takes no argument; the zero passed is ignored.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SYNC as libc::Ioctl, 0) };
    if r < 0 { Err(SysError::new("commit the file system", io::Error::last_os_error())) } else { Ok(()) }
}

/// Make the regular file `dst` share the data of `src` (FICLONE): a copy that costs no data blocks.
pub fn reflink(dst: BorrowedFd<'_>, src: BorrowedFd<'_>) -> SysResult<()> {
    rustix::fs::ioctl_ficlone(dst, src).ctx(|| "share a file's data (reflink)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_kernel_headers() {
        // Values from <linux/btrfs.h> as compiled on x86_64.
        assert_eq!(SYNC, 0x9408);
        assert_eq!(SNAP_DESTROY, 0x5000_940f);
        assert_eq!(INO_LOOKUP, 0xd000_9412);
        assert_eq!(SNAP_CREATE_V2, 0x5000_9417);
        assert_eq!(SUBVOL_CREATE_V2, 0x5000_9418);
        assert_eq!(SUBVOL_GETFLAGS, 0x8008_9419);
        assert_eq!(SUBVOL_SETFLAGS, 0x4008_941a);
        assert_eq!(FS_INFO, 0x8400_941f);
        assert_eq!(QUOTA_CTL, 0xc010_9428);
        assert_eq!(QGROUP_CREATE, 0x4010_942a);
        assert_eq!(QGROUP_LIMIT, 0x8030_942b);
    }

    #[test]
    fn names_are_single_components() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(name_buf::<16>(OsStr::new(bad)).is_err(), "{bad:?}");
        }
        assert!(name_buf::<16>(OsStr::new("snap")).is_ok());
        assert!(name_buf::<256>(OsStr::new(&"x".repeat(256))).is_err());
    }
}
