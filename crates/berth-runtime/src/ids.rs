//! Host id ranges: each live sandbox gets its own block of host uids and gids, so no two sandboxes share an
//! id and nothing inside is any id the host uses.
//!
//! Blocks start at [`HOST_ID_BASE`] (above the ranges systemd hands to containers and dynamic users) and are
//! [`IDS_PER_SANDBOX`] wide. A block is claimed with an `flock` on a small file: the kernel releases the claim
//! when its holder dies, so a crashed supervisor never leaks a block.

use std::fs::File;
use std::path::Path;

use rustix::fs::FlockOperation;

use crate::RuntimeError;

/// Where claims live. Id ranges are a resource of the host, not of one data directory, so claims are
/// host-wide; a tmpfs (`/run`) forgets them at boot, when no sandbox can be alive anyway.
pub const CLAIMS_DIR: &str = "/run/berth/ids";

/// First host id handed to sandboxes.
pub const HOST_ID_BASE: u32 = 0x7000_0000;
/// The host ids berth's storage keeps sandbox files under: inside id N is stored as `STORAGE_BASE + N`
/// whatever block the sandbox runs under, so a persistent sandbox, a fork or a restored snapshot finds its
/// files its own on every run, and no file on the host disk belongs to a host user (a setuid file a sandbox
/// leaves behind is setuid to an id nobody has). The block lies just above the last sandbox block and above
/// the range systemd hands to containers (up to 0x6fffffff), so no container manager gives it out.
pub const STORAGE_BASE: u32 = 0xb000_0000;
/// Ids per sandbox: inside ids 0..65536 (root, `user` = 1000, nobody = 65534).
pub const IDS_PER_SANDBOX: u32 = 65536;
/// How many sandboxes may be alive at once on one host.
pub const MAX_SLOTS: u32 = 16384;

/// A claimed block of host ids; released on drop.
#[derive(Debug)]
pub struct IdBlock {
    slot: u32,
    _claim: File,
}

impl IdBlock {
    /// Claim the lowest free block.
    pub fn claim(dir: &Path) -> Result<IdBlock, RuntimeError> {
        let io = |e: std::io::Error| RuntimeError::ClaimIds { source: e };
        std::fs::create_dir_all(dir).map_err(io)?;
        for slot in 0..MAX_SLOTS {
            // Kept for a hibernated sandbox: not even locked for a look (its owner may be claiming it).
            if reserved_by(dir, slot).is_some() {
                continue;
            }
            let file = lock_file(dir, slot).map_err(io)?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                // Kept for a hibernated sandbox: not given out again until it wakes or is removed.
                Ok(()) if reserved_by(dir, slot).is_some() => continue,
                Ok(()) => return Ok(IdBlock { slot, _claim: file }),
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => return Err(io(e.into())),
            }
        }
        Err(RuntimeError::TooManySandboxes { max: MAX_SLOTS })
    }

    /// Claim block `slot`, which `reserve` kept for `owner`, and end the reservation.
    pub fn claim_reserved(dir: &Path, slot: u32, owner: &str) -> Result<IdBlock, RuntimeError> {
        let io = |e: std::io::Error| RuntimeError::ClaimIds { source: e };
        let busy = || RuntimeError::Checkpoint {
            message: format!(
                "its host id block ({slot}) is in use by another sandbox, which it needs to be restored; wake it \
                 again once that one ends"
            ),
        };
        if slot >= MAX_SLOTS {
            return Err(busy());
        }
        match reserved_by(dir, slot) {
            Some(o) if o != owner => return Err(busy()),
            _ => {}
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = lock_file(dir, slot).map_err(io)?;
        // A claim that looked at the block before its reservation was written lets go of it at once.
        let mut tries = 0;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => return Err(busy()),
                Err(e) => return Err(io(e.into())),
            }
        }
        let _ = std::fs::remove_file(reservation(dir, slot));
        Ok(IdBlock { slot, _claim: file })
    }

    /// Keep this block for `owner` (a hibernated sandbox) after it is released: `claim` skips it until
    /// `claim_reserved` or `unreserve`. Reservations live with the claims, on a tmpfs: after a reboot
    /// whoever keeps hibernated sandboxes reserves their blocks again (see `reserve`).
    pub fn reserve_for(&self, dir: &Path, owner: &str) -> Result<(), RuntimeError> {
        reserve(dir, self.slot, owner)
    }

    /// The host id that root inside the sandbox is.
    pub fn base(&self) -> u32 {
        HOST_ID_BASE + self.slot * IDS_PER_SANDBOX
    }

    pub fn slot(&self) -> u32 {
        self.slot
    }
}

/// The file whose lock is block `slot`'s claim.
fn lock_file(dir: &Path, slot: u32) -> std::io::Result<File> {
    File::options().create(true).truncate(false).write(true).open(dir.join(format!("{slot}.lock")))
}

fn reservation(dir: &Path, slot: u32) -> std::path::PathBuf {
    dir.join(format!("{slot}.reserved"))
}

/// Who block `slot` is reserved for, if anyone.
pub fn reserved_by(dir: &Path, slot: u32) -> Option<String> {
    std::fs::read_to_string(reservation(dir, slot)).ok().map(|s| s.trim().to_string())
}

/// Reserve block `slot` for `owner` unless it is reserved for someone else (see [`IdBlock::reserve_for`]).
/// A block held by a running sandbox may be reserved too: it is kept once that sandbox releases it.
pub fn reserve(dir: &Path, slot: u32, owner: &str) -> Result<(), RuntimeError> {
    let io = |e: std::io::Error| RuntimeError::ClaimIds { source: e };
    match reserved_by(dir, slot) {
        Some(o) if o == owner => return Ok(()),
        Some(o) => {
            return Err(RuntimeError::Checkpoint {
                message: format!("host id block {slot} is already reserved for {o}"),
            });
        }
        None => {}
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let fresh = dir.join(format!("{slot}.reserved.new"));
    std::fs::write(&fresh, format!("{owner}\n"))
        .and_then(|()| std::fs::rename(&fresh, reservation(dir, slot)))
        .map_err(io)
}

/// End `owner`'s reservation of block `slot` (a hibernated sandbox removed); another's is left alone.
pub fn unreserve(dir: &Path, slot: u32, owner: &str) {
    if reserved_by(dir, slot).as_deref() == Some(owner) {
        let _ = std::fs::remove_file(reservation(dir, slot));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_distinct_while_held_and_reused_after() {
        let dir = tempfile::tempdir().unwrap();
        let a = IdBlock::claim(dir.path()).unwrap();
        let b = IdBlock::claim(dir.path()).unwrap();
        assert_ne!(a.base(), b.base());
        assert_eq!(b.base() - a.base(), IDS_PER_SANDBOX);
        let freed = a.slot();
        drop(a);
        assert_eq!(IdBlock::claim(dir.path()).unwrap().slot(), freed);
        let top = u64::from(HOST_ID_BASE) + u64::from(MAX_SLOTS) * u64::from(IDS_PER_SANDBOX);
        assert!(top < u64::from(u32::MAX - 1), "every block must stay below the invalid id (u32::MAX)");
    }

    #[test]
    fn a_reserved_block_is_skipped_by_claims_and_given_to_its_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let held = IdBlock::claim(dir).unwrap();
        let slot = held.slot();
        held.reserve_for(dir, "root/abc").unwrap();
        drop(held);
        assert_ne!(IdBlock::claim(dir).unwrap().slot(), slot, "a reserved block is not given out");
        assert!(IdBlock::claim_reserved(dir, slot, "root/other").is_err());
        let back = IdBlock::claim_reserved(dir, slot, "root/abc").unwrap();
        assert_eq!(back.slot(), slot);
        assert_eq!(reserved_by(dir, slot), None);
        back.reserve_for(dir, "root/abc").unwrap();
        unreserve(dir, slot, "root/abc");
        drop(back);
        assert_eq!(IdBlock::claim(dir).unwrap().slot(), slot);
    }
}
