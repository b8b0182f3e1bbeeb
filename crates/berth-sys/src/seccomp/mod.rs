//! A seccomp-BPF policy, written as data and compiled by hand into a classic BPF program.
//!
//! What it is for: narrowing the kernel's attack surface inside the sandbox. It is an allowlist: the
//! syscalls Docker's default profile allows for the capabilities a sandbox keeps, less those berth refuses
//! outright, and a dozen newer forms of those calls (see [`allowed`]); anything else fails with `ENOSYS`, as
//! on a kernel that lacks it, so a syscall nobody thought of is not reachable. Before the allowlist, rules
//! refuse with `EPERM` what an agent's tools have no business making (loading kernel modules, `bpf`,
//! `perf_event_open`, `userfaultfd`, `io_uring`, the keyring, mount and namespace manipulation, setting the
//! clock, rebooting, injecting terminal input), and narrow calls by their arguments: sockets of families
//! other than unix, IPv4, IPv6 and netlink (routing and socket diagnostics only), IPv4 and IPv6 sockets of
//! protocols other than TCP, UDP, UDP-Lite, ICMP and MPTCP, and `SOCK_PACKET` sockets cannot be created;
//! socket pairs are unix only. The policy itself is in [`policy`].
//!
//! What it is not: the sandbox boundary. The boundary is the namespaces, mounts, Landlock rules and
//! dropped privileges set up elsewhere (or gVisor's kernel, which runs this same filter). The filter only
//! makes the kernel code reachable from inside smaller.
//!
//! The program it compiles:
//! 1. `seccomp_data.arch` must be the native audit arch, or the process is killed (on x86_64 this catches
//!    i386 syscalls made through `int 0x80`, whose numbers mean different calls).
//! 2. On x86_64, any number with the x32 bit set gets `EPERM` (x32 numbers would bypass the rules below).
//! 3. One block per rule: compare the number, then (optionally) the low 32 bits of one or more arguments,
//!    whole or under a mask.
//! 4. With an allowlist, one comparison per allowed number (those the rules look at first), then the
//!    default errno; without one, allow. The kernel (5.11 and later) caches the verdict of every number
//!    whose answer does not depend on its arguments, so an allowed call that no rule looks at never runs
//!    the filter after its first time.
//!
//! Conditional jumps in classic BPF have 8-bit offsets. Every conditional jump this compiler emits goes at
//! most a rule body ahead, and bodies longer than 255 instructions are skipped with `BPF_JA`, whose offset
//! is 32 bits, so no policy can overflow an offset.
//!
//! Why not `seccompiler` or libseccomp: the policy is small and fixed, and this compiler is 150 lines
//! checked by an interpreter in its tests (every rule, every allowed number, the default); libseccomp would
//! add a C library to the static binary, and `seccompiler` a JSON or Rust-struct front end for the same
//! program. Neither would make the filter faster: the kernel's verdict cache makes the allowed calls free.

use std::io;

use crate::error::{Context, SysError, SysResult};

mod allowed;
mod policy;

pub use policy::{INET_PROTOCOLS, IOCTLS_DENIED, NETLINK_PROTOCOLS, SOCKET_FAMILIES};

#[cfg(not(any(target_arch = "x86_64", all(target_arch = "aarch64", target_endian = "little"))))]
compile_error!("berth's seccomp filter supports x86_64 and little-endian aarch64 only");

/// `AUDIT_ARCH_X86_64`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64`: `EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xC000_00B7;

/// Syscall numbers with this bit set belong to the x32 ABI (x86_64 only).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = libc::BPF_MAXINSNS as usize;

// The opcodes emitted (and the only ones the unit tests' interpreter understands).
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JMP_JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JMP_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JMP_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

// Offsets into `struct seccomp_data` (native endian; both supported arches are little-endian, so the low
// half of a 64-bit argument comes first).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARGS: u32 = 16;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn ret_errno(errno: u16) -> u32 {
    libc::SECCOMP_RET_ERRNO | (u32::from(errno) & libc::SECCOMP_RET_DATA)
}

/// One of the six syscall arguments in `seccomp_data.args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    A0 = 0,
    A1 = 1,
    A2 = 2,
    A3 = 3,
    A4 = 4,
    A5 = 5,
}

/// A test on the low 32 bits of one argument. Only the low half is read: for every argument this policy
/// looks at (`clone`/`unshare` flags, the `ioctl` request, the `personality` value, the socket family and
/// protocol) that is what the kernel uses, so a caller setting high bits cannot slip past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgTest {
    /// Matches when any of these bits is set.
    AnyBitSet(u32),
    /// Matches when the value is one of these.
    OneOf(Vec<u32>),
    /// Matches when the value is none of these.
    NoneOf(Vec<u32>),
    /// Matches when the value's bits under `mask` equal `value` (e.g. the socket type without its
    /// `SOCK_NONBLOCK` and `SOCK_CLOEXEC` flags).
    MaskedEq { mask: u32, value: u32 },
}

/// A denied syscall: when `nr` is called (and every test in `when` matches) it fails with `errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompRule {
    /// The syscall's name, for people reading the policy.
    pub name: String,
    /// The native syscall number.
    pub nr: u32,
    /// Returned to the caller; the kernel caps it at 4095.
    pub errno: u16,
    /// Deny only when all of these argument tests match; an empty list denies every call.
    pub when: Vec<(Arg, ArgTest)>,
}

/// A seccomp policy as data: rules that deny (each one syscall, a syscall may have several, each with its
/// own errno), then what is allowed. With `otherwise` set, only the syscalls in `allowed` are (an allowlist)
/// and every other fails with that errno; without it, everything the rules leave is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeccompPolicy {
    pub rules: Vec<SeccompRule>,
    /// The syscalls allowed, by name and native number (read only when `otherwise` is set).
    pub allowed: Vec<(String, u32)>,
    /// The errno of a syscall neither denied by a rule nor allowed; `None`: allow it.
    pub otherwise: Option<u16>,
}

const EPERM: u16 = libc::EPERM as u16;

impl SeccompPolicy {
    /// The syscall names this policy has rules for, in rule order.
    pub fn rule_names(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.name.as_str()).collect()
    }

    /// Compile to a classic BPF program for `SECCOMP_SET_MODE_FILTER`. Never fails; a policy too large for
    /// the kernel (more than [`MAX_INSNS`] instructions) is refused by [`install`](Self::install).
    pub fn compile(&self) -> Vec<libc::sock_filter> {
        let mut p = vec![
            stmt(LD_W_ABS, OFF_ARCH),
            jump(JMP_JEQ_K, AUDIT_ARCH_NATIVE, 1, 0),
            stmt(RET_K, RET_KILL_PROCESS),
            stmt(LD_W_ABS, OFF_NR),
        ];
        #[cfg(target_arch = "x86_64")]
        p.extend([jump(JMP_JSET_K, X32_SYSCALL_BIT, 0, 1), stmt(RET_K, ret_errno(EPERM))]);
        // Invariant between blocks: the accumulator holds the syscall number.
        let rule = |p: &mut Vec<libc::sock_filter>, r: &SeccompRule| {
            let body = rule_body(r);
            skip_unless_equal(p, r.nr, body.len());
            p.extend(body);
        };
        let Some(errno) = self.otherwise else {
            self.rules.iter().for_each(|r| rule(&mut p, r));
            p.push(stmt(RET_K, RET_ALLOW));
            return p;
        };
        // An allowlist: the rules that look at arguments first, then a search tree over the allowed numbers
        // (a few comparisons, where a list would be hundreds: the kernel runs the filter once per number when
        // it is installed, to cache the verdicts that do not depend on arguments), then the rules that deny
        // a number outright, then the default.
        let (conditional, outright): (Vec<&SeccompRule>, Vec<&SeccompRule>) =
            self.rules.iter().partition(|r| !r.when.is_empty());
        conditional.into_iter().for_each(|r| rule(&mut p, r));
        let mut allowed: Vec<u32> = self.allowed.iter().map(|(_, nr)| *nr).collect();
        allowed.sort_unstable();
        allowed.dedup();
        p.extend(allow_tree(&allowed));
        outright.into_iter().for_each(|r| rule(&mut p, r));
        p.push(stmt(RET_K, ret_errno(errno)));
        p
    }

    /// The names of the syscalls an allowlist allows.
    pub fn allowed_names(&self) -> Vec<&str> {
        self.allowed.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Install the filter on every thread of the calling process (`SECCOMP_FILTER_FLAG_TSYNC`). It stays
    /// for the life of the process and is inherited by its children and across `execve`.
    ///
    /// The caller must set no_new_privs first (see [`set_no_new_privs`]); without it this returns an error
    /// rather than relying on `CAP_SYS_ADMIN`. After this, `clone3` fails with `ENOSYS` in this process.
    pub fn install(&self) -> SysResult<()> {
        let nnp = rustix::thread::no_new_privs().ctx(|| "read no_new_privs")?;
        if !nnp {
            return Err(SysError::new(
                "install the seccomp filter: no_new_privs is not set (call set_no_new_privs first)",
                io::ErrorKind::PermissionDenied,
            ));
        }
        let filter = self.compile();
        if filter.len() > MAX_INSNS {
            return Err(SysError::new(
                format!("install the seccomp filter: {} instructions, the kernel takes {MAX_INSNS}", filter.len()),
                io::ErrorKind::InvalidInput,
            ));
        }
        let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
        // SAFETY: `prog` points at `filter`, `prog.len` valid instructions that outlive the call; the kernel
        // only reads them (copying the program) and keeps no pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &prog as *const libc::sock_fprog,
            )
        };
        match r {
            0 => Ok(()),
            -1 => Err(SysError::new("install the seccomp filter", io::Error::last_os_error())),
            tid => Err(SysError::new(
                format!("install the seccomp filter: thread {tid} could not be synchronised"),
                io::ErrorKind::ResourceBusy,
            )),
        }
    }
}

/// Set no_new_privs on the calling thread (inherited by its children and kept across `execve`): setuid
/// binaries stop granting privileges, and an unprivileged process may install a seccomp filter.
pub fn set_no_new_privs() -> SysResult<()> {
    rustix::thread::set_no_new_privs(true).ctx(|| "set no_new_privs")
}

/// Allow the numbers in `nrs` (sorted): a binary search, falling through at its end for any other number.
/// A node is `jge mid`, a long jump over its upper half to its lower one, the upper half, and a long jump
/// over the lower half to the end; four numbers or fewer are compared one by one.
fn allow_tree(nrs: &[u32]) -> Vec<libc::sock_filter> {
    if nrs.len() <= 4 {
        return nrs.iter().flat_map(|nr| [jump(JMP_JEQ_K, *nr, 0, 1), stmt(RET_K, RET_ALLOW)]).collect();
    }
    let mid = nrs.len() / 2;
    let (lower, upper) = (allow_tree(&nrs[..mid]), allow_tree(&nrs[mid..]));
    let mut p = vec![jump(JMP_JGE_K, nrs[mid], 1, 0), stmt(JMP_JA, (upper.len() + 1) as u32)];
    p.extend(upper);
    p.push(stmt(JMP_JA, lower.len() as u32));
    p.extend(lower);
    p
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Emit "if A != k, skip the next `len` instructions", with a short jump when the offset fits in 8 bits.
fn skip_unless_equal(p: &mut Vec<libc::sock_filter>, k: u32, len: usize) {
    match u8::try_from(len) {
        Ok(short) => p.push(jump(JMP_JEQ_K, k, 0, short)),
        Err(_) => p.extend([jump(JMP_JEQ_K, k, 1, 0), stmt(JMP_JA, len as u32)]),
    }
}

/// The instructions run once a rule's syscall number matched. They end with the accumulator holding the
/// syscall number again (or with a return), and jump no further than their own end.
///
/// Each argument test falls through when it matches and otherwise jumps (with a 32-bit `BPF_JA`) to the
/// reload of the number at the end; when all match, the body returns the rule's errno.
fn rule_body(r: &SeccompRule) -> Vec<libc::sock_filter> {
    let deny = stmt(RET_K, ret_errno(r.errno));
    if r.when.is_empty() {
        return vec![deny];
    }
    let mut b = Vec::new();
    // Indices of `BPF_JA` instructions to point at the end (test failed) or past the current test (matched).
    let (mut to_end, mut to_next) = (Vec::new(), Vec::new());
    for (arg, test) in &r.when {
        b.push(stmt(LD_W_ABS, OFF_ARGS + 8 * (*arg as u32)));
        match test {
            ArgTest::AnyBitSet(bits) => {
                b.push(jump(JMP_JSET_K, *bits, 1, 0));
                to_end.push(b.len());
                b.push(stmt(JMP_JA, 0));
            }
            ArgTest::OneOf(values) => match u8::try_from(values.len()) {
                // Each equal value jumps over the rest of the list and the final JA.
                Ok(n) => {
                    for i in 0..n {
                        b.push(jump(JMP_JEQ_K, values[usize::from(i)], n - i, 0));
                    }
                    to_end.push(b.len());
                    b.push(stmt(JMP_JA, 0));
                }
                Err(_) => {
                    for &v in values {
                        b.push(jump(JMP_JEQ_K, v, 0, 1));
                        to_next.push(b.len());
                        b.push(stmt(JMP_JA, 0));
                    }
                    to_end.push(b.len());
                    b.push(stmt(JMP_JA, 0));
                }
            },
            ArgTest::MaskedEq { mask, value } => {
                b.push(stmt(ALU_AND_K, *mask));
                b.push(jump(JMP_JEQ_K, *value, 1, 0));
                to_end.push(b.len());
                b.push(stmt(JMP_JA, 0));
            }
            ArgTest::NoneOf(values) => {
                for &v in values {
                    b.push(jump(JMP_JEQ_K, v, 0, 1));
                    to_end.push(b.len());
                    b.push(stmt(JMP_JA, 0));
                }
            }
        }
        let next = b.len();
        for i in to_next.drain(..) {
            b[i].k = (next - i - 1) as u32;
        }
    }
    b.push(deny);
    let end = b.len();
    for i in to_end {
        b[i].k = (end - i - 1) as u32;
    }
    b.push(stmt(LD_W_ABS, OFF_NR));
    b
}

#[cfg(test)]
// `libc::Ioctl` is `c_ulong` on glibc and `c_int` on musl, so casting it is needless on one of them.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::unnecessary_cast)]
mod tests;
