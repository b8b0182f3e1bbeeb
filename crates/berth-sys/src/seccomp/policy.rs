//! The policy berth installs in every sandbox, as data. docs/security.md compares it, call by call, with
//! Docker's default profile, the containers-common profile crun and podman use, and gVisor.

use super::{Arg, ArgTest, SeccompPolicy, SeccompRule};

const EPERM: u16 = libc::EPERM as u16;
const ENOSYS: u16 = libc::ENOSYS as u16;
const EAFNOSUPPORT: u16 = libc::EAFNOSUPPORT as u16;
const EPROTONOSUPPORT: u16 = libc::EPROTONOSUPPORT as u16;

// Numbers the libc crate does not name yet. Both supported arches share the numbering above 423.
const SYS_LSM_GET_SELF_ATTR: libc::c_long = 459;
const SYS_LSM_SET_SELF_ATTR: libc::c_long = 460;
const SYS_LSM_LIST_MODULES: libc::c_long = 461;
const SYS_OPEN_TREE_ATTR: libc::c_long = 467;
const SYS_FILE_GETATTR: libc::c_long = 468;
const SYS_FILE_SETATTR: libc::c_long = 469;

/// Syscalls denied outright with `EPERM`. (`stime` exists on neither supported arch, so it is not here.)
const DENIED: &[(&str, libc::c_long)] = &[
    // Loading code into the kernel, or replacing it.
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("bpf", libc::SYS_bpf),
    // Large kernel interfaces that are a frequent source of privilege escalations and that an agent's tools
    // do without: perf counters, userfaultfd (used to win races in kernel exploits), io_uring (refused by
    // Docker since 25.0 and by containers-common, off by default in gVisor), fanotify.
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("vmsplice", libc::SYS_vmsplice),
    // The kernel keyring is not namespaced.
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    // File handles bypass path-based checks (the "shocker" escape).
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    // The clocks are not namespaced (there is no time namespace either).
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
    // The mount API, old and new.
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("open_tree_attr", SYS_OPEN_TREE_ATTR),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("nfsservctl", libc::SYS_nfsservctl),
    ("vhangup", libc::SYS_vhangup),
    ("syslog", libc::SYS_syslog),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
    // Obsolete calls that report on every file system of the host.
    #[cfg(target_arch = "x86_64")]
    ("sysfs", libc::SYS_sysfs),
    #[cfg(target_arch = "x86_64")]
    ("ustat", libc::SYS_ustat),
    // Sandboxed processes must not join namespaces they were not put in, nor make new ones, nor rename
    // theirs (Docker allows these only with CAP_SYS_ADMIN, which a sandbox lacks: the kernel would refuse
    // them too).
    ("setns", libc::SYS_setns),
    ("unshare", libc::SYS_unshare),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    // NUMA placement: memory policy and moving pages between nodes act on the host's physical memory
    // layout. Docker refuses these without CAP_SYS_NICE; libnuma reads a refusal as "no NUMA".
    ("get_mempolicy", libc::SYS_get_mempolicy),
    ("set_mempolicy", libc::SYS_set_mempolicy),
    ("set_mempolicy_home_node", libc::SYS_set_mempolicy_home_node),
    ("mbind", libc::SYS_mbind),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("move_pages", libc::SYS_move_pages),
    // Reaching into another process beyond ptrace (which stays allowed, for debuggers): comparing kernel
    // objects, stealing descriptors, advising on another's memory. Docker refuses these without
    // CAP_SYS_PTRACE.
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("process_madvise", libc::SYS_process_madvise),
    // Linux security module attributes (Docker refuses these without CAP_SYS_ADMIN).
    ("lsm_get_self_attr", SYS_LSM_GET_SELF_ATTR),
    ("lsm_set_self_attr", SYS_LSM_SET_SELF_ATTR),
    ("lsm_list_modules", SYS_LSM_LIST_MODULES),
];

/// `personality` values still allowed: `PER_LINUX`, `PER_LINUX32` and the query `0xffffffff`. The rest
/// (e.g. `ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC`) weaken the process's own hardening.
const PERSONALITY_ALLOWED: [u32; 3] = [0, 8, 0xffff_ffff];

/// The address families `socket` may create. Everything else (`AF_VSOCK`, which reaches the hypervisor;
/// `AF_ALG`; `AF_PACKET`; and the rarely used families whose modules the kernel would load on demand) fails
/// with `EAFNOSUPPORT`, as on a kernel built without them. `socketpair` takes `AF_UNIX` only: no other of
/// these families makes pairs, and creating the socket is enough to load a protocol's module.
pub const SOCKET_FAMILIES: [u32; 4] =
    [libc::AF_UNIX as u32, libc::AF_INET as u32, libc::AF_INET6 as u32, libc::AF_NETLINK as u32];

/// The protocols an `AF_INET` or `AF_INET6` socket may name: the type's default (0), TCP, UDP, ICMP and
/// ICMPv6 (unprivileged ping sockets), UDP-Lite and MPTCP. The rest fail with `EPROTONOSUPPORT`: the kernel
/// loads the module of an unknown protocol on demand (SCTP, DCCP, L2TP over IP, ...), for anyone.
/// Raw sockets of any protocol need `CAP_NET_RAW`, which a sandbox does not have.
pub const INET_PROTOCOLS: [u32; 7] = [
    0,
    libc::IPPROTO_TCP as u32,
    libc::IPPROTO_UDP as u32,
    libc::IPPROTO_ICMP as u32,
    libc::IPPROTO_ICMPV6 as u32,
    libc::IPPROTO_UDPLITE as u32,
    libc::IPPROTO_MPTCP as u32,
];

/// `SOCK_PACKET`, the obsolete packet socket type: `socket(AF_INET, SOCK_PACKET, ...)` is turned into an
/// `AF_PACKET` socket by the kernel after the family was checked.
const SOCK_PACKET: u32 = 10;

/// The bits of `socket`'s type argument that hold the type (`SOCK_TYPE_MASK`); the others are flags.
const SOCK_TYPE_MASK: u32 = 0xf;

/// The netlink protocols a sandbox may open: routing (`ip`, `getifaddrs`) and socket diagnostics (`ss`).
/// The rest (netfilter, generic netlink, xfrm, audit, uevents, the connector, crypto, rdma, ...) fail with
/// `EPROTONOSUPPORT`, as for a protocol the kernel lacks. A socket diagnostics request can still make the
/// kernel load the `*_diag` module of a family or IP protocol (only of one already registered, so no
/// protocol itself is loaded that way).
pub const NETLINK_PROTOCOLS: [u32; 2] = [libc::NETLINK_ROUTE as u32, libc::NETLINK_SOCK_DIAG as u32];

/// `ioctl` requests refused on every descriptor.
pub const IOCTLS_DENIED: [u32; 3] = [libc::TIOCSTI as u32, libc::TIOCLINUX as u32, libc::TIOCSETD as u32];

fn rule(name: &str, nr: libc::c_long, errno: u16, when: Vec<(Arg, ArgTest)>) -> SeccompRule {
    SeccompRule { name: name.to_owned(), nr: nr as u32, errno, when }
}

impl SeccompPolicy {
    /// What berth's init installs on itself (and so on every command it starts) when the kernel it runs on
    /// does not keep PID 1's signals from the processes of its own pid namespace, as Linux does: gVisor's
    /// lets them stop it, or kill it. Every way to signal one process by pid is refused for pid 1, and a
    /// pidfd for it cannot be had; init signals its commands' process groups (negative pids), never pid 1.
    pub fn protect_init() -> SeccompPolicy {
        let pid_1 = || vec![(Arg::A0, ArgTest::OneOf(vec![1]))];
        let rules = vec![
            rule("kill", libc::SYS_kill, EPERM, pid_1()),
            rule("tkill", libc::SYS_tkill, EPERM, pid_1()),
            rule("tgkill", libc::SYS_tgkill, EPERM, pid_1()),
            rule("rt_sigqueueinfo", libc::SYS_rt_sigqueueinfo, EPERM, pid_1()),
            rule("rt_tgsigqueueinfo", libc::SYS_rt_tgsigqueueinfo, EPERM, pid_1()),
            rule("pidfd_open", libc::SYS_pidfd_open, EPERM, pid_1()),
        ];
        SeccompPolicy { rules, ..SeccompPolicy::default() }
    }

    /// What berth's init installs on itself under gVisor (and so on every command it starts): the sandbox's
    /// policy, as under namespaces, and [`SeccompPolicy::protect_init`]'s rules on top. gVisor's kernel runs
    /// the filter itself: one bug in it is then not the whole game, as Docker and Kubernetes keep their
    /// profile inside `runsc` too.
    pub fn gvisor_default() -> SeccompPolicy {
        let mut policy = SeccompPolicy::sandbox_default();
        policy.rules.extend(SeccompPolicy::protect_init().rules);
        policy
    }

    /// The policy berth installs in every sandbox.
    ///
    /// The rules with argument tests come first: the kernel caches an "allowed" verdict per syscall
    /// number when the filter never reads an argument for it, so only the calls named by those rules
    /// (`ioctl`, `socket`, `clone`, ...) run the filter at all, and they find their rule in a few
    /// instructions.
    pub fn sandbox_default() -> SeccompPolicy {
        let newuser = libc::CLONE_NEWUSER as u32;
        let mut rules = vec![
            // TIOCSTI pushes bytes into a terminal's input queue, so a sandboxed process sharing the
            // terminal could type commands into the shell outside (CVE-2017-5226, bubblewrap). TIOCLINUX
            // can do the same through the console's selection buffer. TIOCSETD changes a terminal's line
            // discipline, which reaches rarely used kernel code (n_gsm, n_hdlc) from any pty.
            rule("ioctl", libc::SYS_ioctl, EPERM, vec![(Arg::A1, ArgTest::OneOf(IOCTLS_DENIED.to_vec()))]),
            rule("socket", libc::SYS_socket, EAFNOSUPPORT, vec![(Arg::A0, ArgTest::NoneOf(SOCKET_FAMILIES.to_vec()))]),
            rule(
                "socket",
                libc::SYS_socket,
                EPROTONOSUPPORT,
                vec![
                    (Arg::A0, ArgTest::OneOf(vec![libc::AF_NETLINK as u32])),
                    (Arg::A2, ArgTest::NoneOf(NETLINK_PROTOCOLS.to_vec())),
                ],
            ),
            rule(
                "socket",
                libc::SYS_socket,
                EAFNOSUPPORT,
                vec![(Arg::A1, ArgTest::MaskedEq { mask: SOCK_TYPE_MASK, value: SOCK_PACKET })],
            ),
            rule(
                "socket",
                libc::SYS_socket,
                EPROTONOSUPPORT,
                vec![
                    (Arg::A0, ArgTest::OneOf(vec![libc::AF_INET as u32, libc::AF_INET6 as u32])),
                    (Arg::A2, ArgTest::NoneOf(INET_PROTOCOLS.to_vec())),
                ],
            ),
            rule(
                "socketpair",
                libc::SYS_socketpair,
                EAFNOSUPPORT,
                vec![(Arg::A0, ArgTest::NoneOf(vec![libc::AF_UNIX as u32]))],
            ),
            // New user namespaces hand out a full set of capabilities over fresh kernel objects, which is
            // where much of the kernel's privilege-escalation surface lives. clone's flags are arg0 on both
            // x86_64 and aarch64.
            rule("clone", libc::SYS_clone, EPERM, vec![(Arg::A0, ArgTest::AnyBitSet(newuser))]),
            rule(
                "personality",
                libc::SYS_personality,
                EPERM,
                vec![(Arg::A0, ArgTest::NoneOf(PERSONALITY_ALLOWED.to_vec()))],
            ),
            // clone3 passes its flags in memory, which BPF cannot read. ENOSYS makes libc fall back to clone,
            // which the rule above filters.
            rule("clone3", libc::SYS_clone3, ENOSYS, vec![]),
        ];
        rules.extend(DENIED.iter().map(|&(name, nr)| rule(name, nr, EPERM, vec![])));
        // Path-based forms (Linux 6.17) of the FS_IOC_FSGETXATTR and FS_IOC_FSSETXATTR ioctls, which Docker's,
        // containers-common's and gVisor's defaults do not know. ENOSYS, as from an older kernel, makes
        // callers fall back to the ioctls.
        rules.extend([
            rule("file_getattr", SYS_FILE_GETATTR, ENOSYS, vec![]),
            rule("file_setattr", SYS_FILE_SETATTR, ENOSYS, vec![]),
        ]);
        // Past the rules, an allowlist: what Docker's default profile allows for a sandbox's capabilities,
        // less what the rules refuse, and the newer forms of its calls (see `allowed`). Anything else fails
        // with ENOSYS, as on a kernel that lacks it.
        let denied: std::collections::BTreeSet<u32> =
            rules.iter().filter(|r| r.when.is_empty()).map(|r| r.nr).collect();
        let allowed = super::allowed::all()
            .into_iter()
            .filter(|(_, nr)| !denied.contains(nr))
            .map(|(name, nr)| (name.to_string(), nr))
            .collect();
        SeccompPolicy { rules, allowed, otherwise: Some(ENOSYS) }
    }
}
