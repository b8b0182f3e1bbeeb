use super::*;

fn rule(name: &str, nr: libc::c_long, errno: u16, when: Vec<(Arg, ArgTest)>) -> SeccompRule {
    SeccompRule { name: name.to_owned(), nr: nr as u32, errno, when }
}

/// Run a classic BPF program over a `seccomp_data`, the way the kernel would.
fn run(prog: &[libc::sock_filter], data: &[u8; 64]) -> u32 {
    walk(prog, data).0
}

/// How many instructions `prog` runs for `data`.
fn steps(prog: &[libc::sock_filter], data: &[u8; 64]) -> usize {
    walk(prog, data).1
}

/// Run `prog` on `data` as the kernel would: its verdict, and the instructions it took.
fn walk(prog: &[libc::sock_filter], data: &[u8; 64]) -> (u32, usize) {
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
            RET_K => return (ins.k, n),
            other => panic!("unexpected opcode {other:#x}"),
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
