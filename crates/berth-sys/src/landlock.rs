//! Landlock: a second, unprivileged layer of file-system access control applied inside the sandbox.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use crate::error::{SysError, SysResult};

/// What the kernel did with a landlock request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Every requested restriction is enforced.
    Enforced,
    /// Some restrictions are enforced; this kernel's landlock ABI lacks the others.
    Partial,
    /// The kernel has no landlock.
    Unavailable,
}

/// The landlock ABI whose rules [`restrict_sandbox`] asks for: a kernel with an older one enforces them only
/// in part.
const SANDBOX_ABI: ABI = ABI::V6;
const SANDBOX_ABI_VERSION: i32 = 6;

impl LandlockStatus {
    /// How a status reads in berth's output: `enforced`, `partial` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            LandlockStatus::Enforced => "enforced",
            LandlockStatus::Partial => "partial",
            LandlockStatus::Unavailable => "unavailable",
        }
    }
}

/// What [`restrict_sandbox`] gets from this kernel, judged from its landlock ABI version alone.
pub fn sandbox_status() -> LandlockStatus {
    match abi_version() {
        v if v >= SANDBOX_ABI_VERSION => LandlockStatus::Enforced,
        v if v > 0 => LandlockStatus::Partial,
        _ => LandlockStatus::Unavailable,
    }
}

/// The rule set berth applies: the whole tree may be read, written and executed (everything visible is the
/// sandbox's own), but device nodes cannot be created, device ioctls are limited to terminals, and signals
/// cannot reach outside the sandbox's landlock domain (unless `scope_signals` is false).
pub fn restrict_sandbox(tty_paths: &[&str], scope_signals: bool) -> SysResult<LandlockStatus> {
    let abi = SANDBOX_ABI;
    let all = AccessFs::from_all(abi);
    let denied = AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev;
    let err =
        |e: landlock::RulesetError| SysError::new(format!("apply landlock rules: {e}"), std::io::ErrorKind::Other);
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(all).map_err(err)?;
    // Abstract unix sockets are not scoped: they belong to a network namespace, and each sandbox has its own,
    // so none outside it can be reached anyway; scoped, a checkpoint's agent inside the sandbox could not
    // reach CRIU.
    if scope_signals {
        ruleset = ruleset.scope(Scope::Signal).map_err(err)?;
    }
    let mut ruleset = ruleset.create().map_err(err)?;
    let root =
        PathFd::new("/").map_err(|e| SysError::new(format!("open / for landlock: {e}"), std::io::ErrorKind::Other))?;
    ruleset = ruleset.add_rule(PathBeneath::new(root, all & !denied)).map_err(err)?;
    for path in tty_paths {
        // A rule on a file (/dev/tty, /dev/ptmx) may only hold the rights of files: one that named those of
        // directories too would be trimmed, and the whole rule set reported as only partly enforced.
        let allowed = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => all & !(AccessFs::MakeChar | AccessFs::MakeBlock),
            Ok(_) => AccessFs::from_file(abi),
            Err(_) => continue,
        };
        if let Ok(fd) = PathFd::new(path) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, allowed)).map_err(err)?;
        }
    }
    let status = ruleset.restrict_self().map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockStatus::Enforced,
        RulesetStatus::PartiallyEnforced => LandlockStatus::Partial,
        RulesetStatus::NotEnforced => LandlockStatus::Unavailable,
    })
}

/// The landlock ABI version this kernel offers (0 when it has none).
pub fn abi_version() -> i32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) reads no memory and only
    // returns the ABI version (or an error).
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if r < 0 { 0 } else { r as i32 }
}
