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
mod tests {
    use super::*;

    fn rule(name: &str, nr: libc::c_long, errno: u16, when: Vec<(Arg, ArgTest)>) -> SeccompRule {
        SeccompRule { name: name.to_owned(), nr: nr as u32, errno, when }
    }

    /// Run a classic BPF program over a `seccomp_data`, the way the kernel would.
    fn run(prog: &[libc::sock_filter], data: &[u8; 64]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let ins = prog[pc];
            pc += 1;
            match ins.code {
                LD_W_ABS => a = u32::from_ne_bytes(data[ins.k as usize..][..4].try_into().unwrap()),
                ALU_AND_K => a &= ins.k,
                JMP_JA => pc += ins.k as usize,
                JMP_JEQ_K => pc += usize::from(if a == ins.k { ins.jt } else { ins.jf }),
                JMP_JGE_K => pc += usize::from(if a >= ins.k { ins.jt } else { ins.jf }),
                JMP_JSET_K => pc += usize::from(if a & ins.k != 0 { ins.jt } else { ins.jf }),
                RET_K => return ins.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// How many instructions `prog` runs for `data`.
    fn steps(prog: &[libc::sock_filter], data: &[u8; 64]) -> usize {
        let (mut a, mut pc, mut n) = (0u32, 0usize, 0usize);
        loop {
            let ins = prog[pc];
            pc += 1;
            n += 1;
            match ins.code {
                LD_W_ABS => a = u32::from_ne_bytes(data[ins.k as usize..][..4].try_into().unwrap()),
                ALU_AND_K => a &= ins.k,
                JMP_JA => pc += ins.k as usize,
                JMP_JEQ_K => pc += usize::from(if a == ins.k { ins.jt } else { ins.jf }),
                JMP_JGE_K => pc += usize::from(if a >= ins.k { ins.jt } else { ins.jf }),
                JMP_JSET_K => pc += usize::from(if a & ins.k != 0 { ins.jt } else { ins.jf }),
                _ => return n,
            }
        }
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..][..8].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    fn verdict(prog: &[libc::sock_filter], nr: libc::c_long, args: [u64; 6]) -> u32 {
        run(prog, &data(AUDIT_ARCH_NATIVE, nr as u32, args))
    }

    /// Every jump lands inside the program, and the program cannot fall off its end.
    fn assert_well_formed(prog: &[libc::sock_filter]) {
        assert!(prog.len() <= MAX_INSNS);
        assert_eq!(prog.last().unwrap().code, RET_K);
        for (pc, ins) in prog.iter().enumerate() {
            let targets = match ins.code {
                JMP_JA => vec![ins.k as usize],
                JMP_JEQ_K | JMP_JSET_K | JMP_JGE_K => vec![usize::from(ins.jt), usize::from(ins.jf)],
                _ => vec![],
            };
            for off in targets {
                assert!(pc + 1 + off < prog.len(), "jump at {pc} by {off} leaves a {}-long program", prog.len());
            }
        }
    }

    const EPERM_RET: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn protect_init_refuses_signals_to_pid_1_only() {
        let p = SeccompPolicy::protect_init().compile();
        assert_well_formed(&p);
        let eperm = ret_errno(EPERM);
        let (sigkill, sigstop) = (libc::SIGKILL as u64, libc::SIGSTOP as u64);
        assert_eq!(verdict(&p, libc::SYS_kill, [1, sigkill, 0, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_kill, [1, sigstop, 0, 0, 0, 0]), eperm);
        // The high half of pid is not the kernel's: 1 with high bits set is still pid 1.
        assert_eq!(verdict(&p, libc::SYS_kill, [0xffff_ffff_0000_0001, sigkill, 0, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_tkill, [1, sigstop, 0, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_tgkill, [1, 1, sigstop, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_rt_sigqueueinfo, [1, sigstop, 0, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_rt_tgsigqueueinfo, [1, 1, sigstop, 0, 0, 0]), eperm);
        assert_eq!(verdict(&p, libc::SYS_pidfd_open, [1, 0, 0, 0, 0, 0]), eperm);
        // Other processes, process groups (init's signals to its commands) and everything else pass.
        assert_eq!(verdict(&p, libc::SYS_kill, [2, sigkill, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(verdict(&p, libc::SYS_kill, [(-5i64) as u64, sigkill, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(verdict(&p, libc::SYS_pidfd_open, [7, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(verdict(&p, libc::SYS_getpid, [1, 0, 0, 0, 0, 0]), RET_ALLOW);
    }

    #[test]
    fn verdicts() {
        let p = SeccompPolicy::sandbox_default().compile();
        assert_well_formed(&p);
        let newuser = libc::CLONE_NEWUSER as u64;
        let newns = libc::CLONE_NEWNS as u64;
        let sigchld = libc::SIGCHLD as u64;
        let allowed: &[(libc::c_long, [u64; 6])] = &[
            (libc::SYS_read, [0; 6]),
            (libc::SYS_write, [1, 0, 5, 0, 0, 0]),
            (libc::SYS_openat, [0; 6]),
            (libc::SYS_clone, [libc::CLONE_VM as u64 | libc::CLONE_THREAD as u64 | sigchld, 0, 0, 0, 0, 0]),
            (libc::SYS_ioctl, [0, libc::TCGETS as u64, 0, 0, 0, 0]),
            (libc::SYS_personality, [0xffff_ffff, 0, 0, 0, 0, 0]),
            (libc::SYS_personality, [0, 0, 0, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET6 as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, libc::NETLINK_ROUTE as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_NETLINK as u64, 2, libc::NETLINK_SOCK_DIAG as u64, 0, 0, 0]),
            // Other families' protocol numbers are not netlink's.
            (libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, libc::IPPROTO_UDP as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, libc::IPPROTO_ICMP as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET6 as u64, libc::SOCK_DGRAM as u64, libc::IPPROTO_ICMPV6 as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET6 as u64, libc::SOCK_STREAM as u64, libc::IPPROTO_TCP as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_STREAM as u64, libc::IPPROTO_MPTCP as u64, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, libc::IPPROTO_UDPLITE as u64, 0, 0, 0]),
            // Types with flags, and the unix and netlink types whose number is SOCK_PACKET's plus a flag bit.
            (libc::SYS_socket, [libc::AF_INET as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0, 0, 0, 0]),
            (libc::SYS_socket, [libc::AF_UNIX as u64, (libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK) as u64, 0, 0, 0, 0]),
            (libc::SYS_socketpair, [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0]),
        ];
        for &(nr, args) in allowed {
            assert_eq!(verdict(&p, nr, args), RET_ALLOW, "syscall {nr} {args:x?}");
        }
        let denied: &[(libc::c_long, [u64; 6])] = &[
            (libc::SYS_unshare, [newns, 0, 0, 0, 0, 0]),
            (libc::SYS_unshare, [newuser | newns, 0, 0, 0, 0, 0]),
            (libc::SYS_unshare, [0xffff_ffff_0000_0000 | newuser, 0, 0, 0, 0, 0]),
            (libc::SYS_clone, [newuser | sigchld, 0, 0, 0, 0, 0]),
            (libc::SYS_ioctl, [0, libc::TIOCSTI as u64, 0, 0, 0, 0]),
            (libc::SYS_ioctl, [0, 0xffff_ffff_0000_5412, 0, 0, 0, 0]),
            (libc::SYS_ioctl, [0, libc::TIOCLINUX as u64, 0, 0, 0, 0]),
            (libc::SYS_ioctl, [0, libc::TIOCSETD as u64, 0, 0, 0, 0]),
            (libc::SYS_io_uring_setup, [0; 6]),
            (libc::SYS_personality, [libc::ADDR_NO_RANDOMIZE as u64, 0, 0, 0, 0, 0]),
            (libc::SYS_mount, [0; 6]),
            (libc::SYS_setns, [0; 6]),
        ];
        for &(nr, args) in denied {
            assert_eq!(verdict(&p, nr, args), EPERM_RET, "syscall {nr} {args:x?}");
        }
        assert_eq!(verdict(&p, libc::SYS_clone3, [0; 6]), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        let eafnosupport = libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;
        let eprotonosupport = libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32;
        for family in [libc::AF_VSOCK, libc::AF_ALG, libc::AF_PACKET, libc::AF_KEY, libc::AF_TIPC, 0, 255] {
            let family = family as u64;
            assert_eq!(verdict(&p, libc::SYS_socket, [family, 1, 0, 0, 0, 0]), eafnosupport, "family {family}");
            assert_eq!(verdict(&p, libc::SYS_socketpair, [family, 1, 0, 0, 0, 0]), eafnosupport, "pair {family}");
        }
        for pair in [libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK] {
            let args = [pair as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
            assert_eq!(verdict(&p, libc::SYS_socketpair, args), eafnosupport, "pair {pair}");
        }
        // SOCK_PACKET (10), with or without flags, in any family: the kernel makes AF_INET's a packet socket.
        for (family, kind) in [
            (libc::AF_INET, 10),
            (libc::AF_INET, 10 | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK),
            (libc::AF_INET6, 10),
            (libc::AF_UNIX, 10),
        ] {
            let args = [family as u64, kind as u64, 0x300, 0, 0, 0];
            assert_eq!(verdict(&p, libc::SYS_socket, args), eafnosupport, "family {family} type {kind:#x}");
            let args = [family as u64, kind as u64, 0, 0, 0, 0];
            assert_eq!(verdict(&p, libc::SYS_socket, args), eafnosupport, "family {family} type {kind:#x}, 0");
        }
        // Protocols whose modules the kernel would load: SCTP, DCCP, L2TP over IP, and raw IP's 255.
        for protocol in [132u64, 33, 115, 255, 1 << 32 | 132] {
            for (family, kind) in [(libc::AF_INET, libc::SOCK_STREAM), (libc::AF_INET6, libc::SOCK_SEQPACKET)] {
                let args = [family as u64, kind as u64, protocol, 0, 0, 0];
                assert_eq!(verdict(&p, libc::SYS_socket, args), eprotonosupport, "family {family} protocol {protocol}");
            }
        }
        // High bits of the family are ignored by the kernel, and so by the filter.
        assert_eq!(verdict(&p, libc::SYS_socket, [1 << 32 | libc::AF_VSOCK as u64, 1, 0, 0, 0, 0]), eafnosupport);
        for protocol in [libc::NETLINK_NETFILTER, libc::NETLINK_GENERIC, libc::NETLINK_AUDIT, libc::NETLINK_XFRM] {
            let args = [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, protocol as u64, 0, 0, 0];
            assert_eq!(verdict(&p, libc::SYS_socket, args), eprotonosupport, "netlink {protocol}");
        }
        // 0x40000003 is AUDIT_ARCH_I386 (`int 0x80`), where 5 is open: a foreign arch is killed, whatever the number.
        assert_eq!(run(&p, &data(0x4000_0003, 5, [0; 6])), RET_KILL_PROCESS);
        assert_eq!(run(&p, &data(0, libc::SYS_read as u32, [0; 6])), RET_KILL_PROCESS);
        #[cfg(target_arch = "x86_64")]
        for nr in [X32_SYSCALL_BIT, X32_SYSCALL_BIT | libc::SYS_read as u32, X32_SYSCALL_BIT | 101] {
            assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, nr, [0; 6])), EPERM_RET, "x32 {nr:#x}");
        }
    }

    #[test]
    fn past_the_rules_only_the_allowlist_goes_and_the_rest_is_enosys() {
        let policy = SeccompPolicy::sandbox_default();
        let p = policy.compile();
        assert_well_formed(&p);
        let ruled: std::collections::BTreeSet<u32> = policy.rules.iter().map(|r| r.nr).collect();
        for (name, nr) in &policy.allowed {
            if !ruled.contains(nr) {
                assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, *nr, [0; 6])), RET_ALLOW, "{name}");
            }
        }
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        // Calls no list names: newer than the list (statmount, listmount, uretprobe), numbers no kernel has yet.
        for nr in [457, 458, 470, 500, 1000] {
            assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, nr, [0; 6])), enosys, "{nr}");
        }
        #[cfg(target_arch = "x86_64")]
        assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, 335, [0; 6])), enosys, "uretprobe");
        // Every number is either denied by a rule, allowed, or ENOSYS: the allowlist holds no denied call.
        let denied: Vec<u32> = policy.rules.iter().filter(|r| r.when.is_empty()).map(|r| r.nr).collect();
        assert!(policy.allowed.iter().all(|(_, nr)| !denied.contains(nr)), "an allowed call is also denied");
        // Docker's list for these capabilities (less what berth denies) and twelve newer calls.
        let names = policy.allowed_names();
        assert!(names.contains(&"read") && names.contains(&"inotify_add_watch") && names.contains(&"mseal"));
        assert!(!names.contains(&"io_uring_setup") && !names.contains(&"statmount"));
    }

    #[test]
    fn every_number_gets_the_verdict_the_policy_says() {
        for policy in [SeccompPolicy::sandbox_default(), SeccompPolicy::gvisor_default()] {
            let p = policy.compile();
            assert_well_formed(&p);
            // A few dozen instructions to any verdict: a search tree, not a list of every allowed number.
            let longest = (0..1024u32).map(|nr| steps(&p, &data(AUDIT_ARCH_NATIVE, nr, [0; 6]))).max().unwrap();
            assert!(longest < 250, "{longest} instructions run for one number");
            for nr in 0..1024u32 {
                let outright = policy.rules.iter().find(|r| r.nr == nr && r.when.is_empty());
                let want = match outright {
                    Some(r) => libc::SECCOMP_RET_ERRNO | u32::from(r.errno),
                    None if policy.allowed.iter().any(|(_, a)| *a == nr) => RET_ALLOW,
                    None => libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
                };
                // Arguments no conditional rule refuses (zeros: no flag, family or request they test).
                let args = if policy.rules.iter().any(|r| r.nr == nr && !r.when.is_empty()) {
                    [libc::AF_UNIX as u64, 0, 0, 0, 0, 0]
                } else {
                    [0; 6]
                };
                if policy.rules.iter().any(|r| r.nr == nr && !r.when.is_empty()) && outright.is_none() {
                    // Its conditional rules are tested in `verdicts`; here only that it is not ENOSYS.
                    assert_ne!(run(&p, &data(AUDIT_ARCH_NATIVE, nr, args)) & 0xffff, libc::ENOSYS as u32, "{nr}");
                    continue;
                }
                assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, nr, args)), want, "syscall {nr}");
            }
        }
    }

    #[test]
    fn every_unconditional_rule_denies() {
        let policy = SeccompPolicy::sandbox_default();
        let p = policy.compile();
        for r in policy.rules.iter().filter(|r| r.when.is_empty()) {
            let want = libc::SECCOMP_RET_ERRNO | u32::from(r.errno);
            assert_eq!(run(&p, &data(AUDIT_ARCH_NATIVE, r.nr, [0; 6])), want, "{}", r.name);
        }
        let mut expected: Vec<&str> = "\
            kexec_load kexec_file_load init_module finit_module delete_module bpf perf_event_open \
            userfaultfd io_uring_setup io_uring_enter io_uring_register fanotify_init vmsplice keyctl add_key \
            request_key open_by_handle_at name_to_handle_at swapon swapoff reboot settimeofday clock_settime \
            clock_adjtime adjtimex acct quotactl quotactl_fd mount umount2 pivot_root move_mount open_tree \
            open_tree_attr fsopen fsconfig fsmount fspick mount_setattr lookup_dcookie nfsservctl vhangup \
            syslog setns sethostname setdomainname get_mempolicy set_mempolicy set_mempolicy_home_node mbind migrate_pages move_pages \
            kcmp pidfd_getfd process_madvise lsm_get_self_attr lsm_set_self_attr lsm_list_modules \
            ioctl socket socket socket socket socketpair clone unshare personality clone3 file_getattr file_setattr"
            .split_whitespace()
            .collect();
        if cfg!(target_arch = "x86_64") {
            expected.extend(["iopl", "ioperm", "uselib", "sysfs", "ustat"]);
        }
        let mut names = policy.rule_names();
        names.sort_unstable();
        expected.sort_unstable();
        assert_eq!(names, expected);
    }

    #[test]
    fn long_rules_use_long_jumps() {
        let values: Vec<u32> = (100..500).collect();
        let policy = SeccompPolicy {
            rules: vec![
                rule("personality", libc::SYS_personality, EPERM, vec![(Arg::A0, ArgTest::NoneOf(values.clone()))]),
                rule("ioctl", libc::SYS_ioctl, EPERM, vec![(Arg::A1, ArgTest::OneOf(values.clone()))]),
                // Two tests, the first with a list too long for short jumps.
                rule(
                    "socket",
                    libc::SYS_socket,
                    EPERM,
                    vec![(Arg::A0, ArgTest::OneOf(values)), (Arg::A2, ArgTest::AnyBitSet(1))],
                ),
                rule("bpf", libc::SYS_bpf, EPERM, vec![]),
            ],
            ..SeccompPolicy::default()
        };
        let p = policy.compile();
        assert_well_formed(&p);
        for (v, personality, ioctl) in
            [(99, EPERM_RET, RET_ALLOW), (100, RET_ALLOW, EPERM_RET), (499, RET_ALLOW, EPERM_RET)]
        {
            assert_eq!(verdict(&p, libc::SYS_personality, [v, 0, 0, 0, 0, 0]), personality, "personality {v}");
            assert_eq!(verdict(&p, libc::SYS_ioctl, [0, v, 0, 0, 0, 0]), ioctl, "ioctl {v}");
            assert_eq!(verdict(&p, libc::SYS_socket, [v, 0, 1, 0, 0, 0]), ioctl, "socket {v}");
            assert_eq!(verdict(&p, libc::SYS_socket, [v, 0, 2, 0, 0, 0]), RET_ALLOW, "socket {v}, 2");
        }
        assert_eq!(verdict(&p, libc::SYS_bpf, [0; 6]), EPERM_RET);
        assert_eq!(verdict(&p, libc::SYS_read, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn empty_policy_allows_native_calls_only() {
        let p = SeccompPolicy::default().compile();
        assert_well_formed(&p);
        assert_eq!(verdict(&p, libc::SYS_mount, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, &data(0x4000_0003, 0, [0; 6])), RET_KILL_PROCESS);
    }
}
