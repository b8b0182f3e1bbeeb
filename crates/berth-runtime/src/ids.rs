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
            let file = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("{slot}.lock")))
                .map_err(io)?;
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(IdBlock { slot, _claim: file }),
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => return Err(io(e.into())),
            }
        }
        Err(RuntimeError::TooManySandboxes { max: MAX_SLOTS })
    }

    /// The host id that root inside the sandbox is.
    pub fn base(&self) -> u32 {
        HOST_ID_BASE + self.slot * IDS_PER_SANDBOX
    }

    pub fn slot(&self) -> u32 {
        self.slot
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
}
