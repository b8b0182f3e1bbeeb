//! The kernel surface a sandbox reaches, held against what Docker's default profile, the containers-common
//! profile (crun, podman) and gVisor refuse: each test runs a table of probes in one real sandbox through
//! the `berth` binary and asserts the precise outcome. docs/security.md ("Kernel surface compared with
//! Docker, crun and gVisor") is the table these tests check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Output;

use common::{Berth, PY_SYSCALLS, text};

/// Python prelude, after [`PY_SYSCALLS`]: `state(path)` says `absent`, `empty` or `data` (a file that reads
/// some bytes, a directory with entries) or the errno of a failed read; `write(path)` tries to write `1`.
const PY: &str = "def state(p):
    if not os.path.lexists(p):
        return 'absent'
    try:
        if os.path.isdir(p):
            return 'data' if os.listdir(p) else 'empty'
        with open(p, 'rb') as f:
            return 'data' if f.read(1) else 'empty'
    except OSError as e:
        return name(e.errno)
def write(p):
    if not os.path.lexists(p):
        return 'absent'
    try:
        with open(p, 'w') as f:
            f.write('1')
        return 'ok'
    except OSError as e:
        return name(e.errno)
";

/// Run `python3 -c PY+code` in a sandbox and return its `key=value` lines.
fn probe(b: &Berth, code: &str) -> BTreeMap<String, String> {
    let out = b.run(&[], &["python3", "-c", &format!("{PY_SYSCALLS}{PY}{code}")]);
    results(&out)
}

fn results(out: &Output) -> BTreeMap<String, String> {
    assert!(out.status.success(), "exit {:?}: {}", out.status.code(), text(&out.stderr));
    text(&out.stdout).lines().filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

/// Assert every case's outcome, reporting all mismatches at once.
fn check(got: &BTreeMap<String, String>, want: &[(&str, &str)]) {
    let wrong: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(*k).map(String::as_str) != Some(*v))
        .map(|(k, v)| format!("{k}: want {v}, got {:?}", got.get(*k)))
        .collect();
    assert!(wrong.is_empty(), "{}\nall: {got:?}", wrong.join("\n"));
}

/// Syscalls Docker's default profile refuses (outright or for want of a capability berth does not grant)
/// that the earlier escape suite does not already try. The arguments are chosen so that without berth's
/// filter the kernel would answer something other than the refusal (noted beside each), wherever the
/// capabilities berth drops do not refuse the call anyway.
#[test]
#[cfg(target_arch = "x86_64")]
fn sandbox_blocks_syscalls_docker_refuses() {
    let b = Berth::new();
    let pid = "os.getpid()";
    let max = u64::MAX.to_string();
    let fd_100 = (u64::MAX - 99).to_string(); // AT_FDCWD
    let cases: &[(&str, u64, &[&str], &str)] = &[
        // Without the filter: EFAULT (no parameters), EOPNOTSUPP (not a ring), EOPNOTSUPP.
        ("io_uring_setup", 425, &["1"], "EPERM"),
        ("io_uring_enter", 426, &[], "EPERM"),
        ("io_uring_register", 427, &[], "EPERM"),
        // FAN_REPORT_FID: allowed to unprivileged users since Linux 5.13.
        ("fanotify_init", 300, &["0x200"], "EPERM"),
        ("vmsplice", 278, &[], "EPERM"),
        ("get_mempolicy", 239, &[], "EPERM"),
        ("set_mempolicy", 238, &[], "EPERM"),
        ("set_mempolicy_home_node", 450, &[], "EPERM"),
        ("mbind", 237, &[], "EPERM"),
        ("migrate_pages", 256, &[], "EPERM"),
        ("move_pages", 279, &[], "EPERM"),
        ("kcmp", 312, &[pid, pid, "0"], "EPERM"),
        ("pidfd_getfd", 438, &[&max], "EPERM"),
        ("process_madvise", 440, &[&max], "EPERM"),
        ("sysfs", 139, &["3"], "EPERM"),
        ("ustat", 136, &[], "EPERM"),
        ("lsm_get_self_attr", 459, &[], "EPERM"),
        ("lsm_set_self_attr", 460, &[], "EPERM"),
        ("lsm_list_modules", 461, &[], "EPERM"),
        ("open_tree_attr", 467, &[&fd_100], "EPERM"),
        // New in Linux 6.17 (without the filter: EINVAL here), unknown to the other profiles.
        ("file_getattr", 468, &[], "ENOSYS"),
        ("file_setattr", 469, &[], "ENOSYS"),
        // Refused by the filter and, for want of a capability, by the kernel too.
        ("clock_adjtime", 305, &[], "EPERM"),
        ("adjtimex", 159, &[], "EPERM"),
        ("settimeofday", 164, &[], "EPERM"),
        ("quotactl", 179, &[], "EPERM"),
        ("quotactl_fd", 443, &[], "EPERM"),
        ("lookup_dcookie", 212, &[], "EPERM"),
        ("nfsservctl", 180, &[], "EPERM"),
        ("vhangup", 153, &[], "EPERM"),
        ("uselib", 134, &[], "EPERM"),
        ("swapoff", 168, &[], "EPERM"),
        ("fsconfig", 431, &[], "EPERM"),
        ("fspick", 433, &[], "EPERM"),
        // Refused by the filter, as Docker's refuses them without CAP_SYS_ADMIN (which is not in the bounding
        // set: the kernel would refuse them too).
        ("sethostname", 170, &[], "EPERM"),
        ("setdomainname", 171, &[], "EPERM"),
        ("unshare_ipc", 272, &["0x08000000"], "EPERM"),
        ("unshare_uts", 272, &["0x04000000"], "EPERM"),
        ("unshare_pid", 272, &["0x20000000"], "EPERM"),
        ("unshare_cgroup", 272, &["0x02000000"], "EPERM"),
        ("unshare_time", 272, &["0x80"], "EPERM"),
        // Gone from the kernel: ENOSYS whatever the filter says.
        ("_sysctl", 156, &[], "ENOSYS"),
        ("create_module", 174, &[], "ENOSYS"),
        ("get_kernel_syms", 177, &[], "ENOSYS"),
        ("query_module", 178, &[], "ENOSYS"),
        ("getpmsg", 181, &[], "ENOSYS"),
        ("putpmsg", 182, &[], "ENOSYS"),
        ("afs_syscall", 183, &[], "ENOSYS"),
        ("tuxcall", 184, &[], "ENOSYS"),
        ("security", 185, &[], "ENOSYS"),
        ("vserver", 236, &[], "ENOSYS"),
        // Controls: calls Docker allows and berth keeps.
        ("process_vm_readv_self", 310, &[pid], "ok"),
        ("modify_ldt_read", 154, &[], "ok"),
        ("mseal_nothing", 462, &[], "ok"),
    ];
    let mut code = String::new();
    for (name, nr, args, _) in cases {
        code += &format!("print('{name}=' + sc({nr}, {}))\n", args.join(", "));
    }
    let want: Vec<(&str, &str)> = cases.iter().map(|(n, _, _, w)| (*n, *w)).collect();
    check(&probe(&b, &code), &want);
}

/// Address families other than unix, IPv4, IPv6 and netlink cannot be created by `socket`, nor anything
/// but unix by `socketpair`: `AF_VSOCK` (the hypervisor), `AF_ALG`, `AF_PACKET`, `AF_XDP` and every family
/// whose module the kernel would otherwise load on demand. Without the filter this host answers `ok` for
/// `AF_VSOCK`, `EPERM` (no `CAP_NET_RAW`) for `AF_PACKET` and `AF_XDP`, and `EOPNOTSUPP` for pairs of IPv4,
/// IPv6 or netlink sockets.
#[test]
fn sandbox_blocks_socket_families_outside_unix_inet_and_netlink() {
    let b = Berth::new();
    let code = "
allowed = {1: 'unix', 2: 'inet', 10: 'inet6', 16: 'netlink'}
for fam in range(0, 64):
    key = allowed.get(fam, str(fam))
    print('socket_' + key + '=' + attempt(lambda: socket.socket(fam, socket.SOCK_DGRAM, 0).close()))
print('socketpair_unix=' + attempt(lambda: [s.close() for s in socket.socketpair(1, socket.SOCK_STREAM)]))
for fam in (40, 30, 38, 2, 10, 16):
    print('socketpair_%d=' % fam + attempt(lambda: [s.close() for s in socket.socketpair(fam, socket.SOCK_STREAM)]))
for fam, kind in ((40, socket.SOCK_STREAM), (40, socket.SOCK_SEQPACKET), (17, socket.SOCK_RAW), (44, socket.SOCK_RAW)):
    print('socket_%d_%d=' % (fam, kind) + attempt(lambda: socket.socket(fam, kind, 0).close()))
# The family is the low 32 bits of the argument; higher bits change nothing.
print('socket_vsock_high_bits=' + sc(41, (1 << 32) | 40, 1, 0))
";
    let got = probe(&b, code);
    let mut want: Vec<(String, &str)> =
        (0..64).filter(|f| ![1, 2, 10, 16].contains(f)).map(|f| (format!("socket_{f}"), "EAFNOSUPPORT")).collect();
    for k in ["socket_unix", "socket_inet", "socket_inet6", "socket_netlink", "socketpair_unix"] {
        want.push((k.into(), "ok"));
    }
    for k in ["socketpair_40", "socketpair_30", "socketpair_38", "socketpair_2", "socketpair_10", "socketpair_16"] {
        want.push((k.into(), "EAFNOSUPPORT"));
    }
    for k in ["socket_40_1", "socket_40_5", "socket_17_3"] {
        want.push((k.into(), "EAFNOSUPPORT"));
    }
    want.push(("socket_44_3".into(), "EAFNOSUPPORT"));
    want.push(("socket_vsock_high_bits".into(), "EAFNOSUPPORT"));
    let want: Vec<(&str, &str)> = want.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    check(&got, &want);
}

/// IPv4 and IPv6 sockets: TCP, UDP, UDP-Lite, ICMP (ping sockets) and MPTCP only, as the kernel loads the
/// module of any other protocol on demand (SCTP 132, DCCP 33, L2TP over IP 115, ...); and no `SOCK_PACKET`,
/// which the kernel turns into an `AF_PACKET` socket after the family was checked. This host's kernel
/// loads no modules, so the refusals are seen where it would answer otherwise without the filter: a raw
/// socket (`EPERM` for want of `CAP_NET_RAW`, whatever the protocol) and `SOCK_PACKET` (`EPERM` likewise).
#[test]
fn sandbox_blocks_inet_protocols_outside_tcp_udp_icmp_and_sock_packet() {
    let b = Berth::new();
    let code = "
for fam in (2, 10):
    for proto in list(range(0, 256)) + [262]:
        print('raw_%d_%d=' % (fam, proto) + attempt(lambda: socket.socket(fam, socket.SOCK_RAW, proto).close()))
    for kind, proto in ((1, 0), (1, 6), (2, 0), (2, 17), (2, 136), (1, 262), (1, 132), (5, 132), (1, 33), (2, 115)):
        print('socket_%d_%d_%d=' % (fam, kind, proto) + attempt(lambda: socket.socket(fam, kind, proto).close()))
print('ping_2=' + sc(41, 2, 2, 1))
print('ping_10=' + sc(41, 10, 2, 58))
for fam in (2, 10, 1, 16):
    for kind in (10, 10 | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK):
        print('packet_%d_%#x=' % (fam, kind) + sc(41, fam, kind, 0))
";
    let got = probe(&b, code);
    let mut want: Vec<(String, &str)> = Vec::new();
    for fam in [2, 10] {
        for proto in (0..256).chain([262]) {
            // The kernel's own answer to a raw socket of protocol 0 is EPROTONOSUPPORT.
            let allowed = [6, 17, 1, 58, 136, 262].contains(&proto);
            want.push((format!("raw_{fam}_{proto}"), if allowed { "EPERM" } else { "EPROTONOSUPPORT" }));
        }
        for (kind, proto) in [(1, 0), (1, 6), (2, 0), (2, 17), (2, 136), (1, 262)] {
            want.push((format!("socket_{fam}_{kind}_{proto}"), "ok"));
        }
        for (kind, proto) in [(1, 132), (5, 132), (1, 33), (2, 115)] {
            want.push((format!("socket_{fam}_{kind}_{proto}"), "EPROTONOSUPPORT"));
        }
        for kind in ["0xa", "0x8080a"] {
            want.push((format!("packet_{fam}_{kind}"), "EAFNOSUPPORT"));
        }
    }
    for fam in [1, 16] {
        for kind in ["0xa", "0x8080a"] {
            want.push((format!("packet_{fam}_{kind}"), "EAFNOSUPPORT"));
        }
    }
    let mut want: Vec<(&str, &str)> = want.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    // Ping sockets pass the filter; this kernel refuses them while no group is in net.ipv4.ping_group_range.
    want.extend([("ping_2", "EACCES"), ("ping_10", "EACCES")]);
    check(&got, &want);
}

/// Netlink: routing (`ip`, `getifaddrs`) and socket diagnostics (`ss`) only. Without the filter this
/// kernel opens usersock, xfrm, selinux, audit, fib_lookup, connector, netfilter, uevents and generic
/// netlink for the sandbox.
#[test]
fn sandbox_blocks_netlink_protocols_but_route_and_sock_diag() {
    let b = Berth::new();
    let code = "
for proto in range(0, 32):
    print('netlink_%d=' % proto + attempt(lambda: socket.socket(16, socket.SOCK_RAW, proto).close()))
print('netlink_dgram_netfilter=' + attempt(lambda: socket.socket(16, socket.SOCK_DGRAM, 12).close()))
";
    let got = probe(&b, code);
    let mut want: Vec<(String, &str)> = (0..32).map(|p| (format!("netlink_{p}"), "EPROTONOSUPPORT")).collect();
    want[0].1 = "ok"; // NETLINK_ROUTE
    want[4].1 = "ok"; // NETLINK_SOCK_DIAG
    want.push(("netlink_dgram_netfilter".into(), "EPROTONOSUPPORT"));
    let want: Vec<(&str, &str)> = want.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    check(&got, &want);
}

/// TIOCSETD switches a terminal's line discipline, reaching n_gsm, n_hdlc and the like from any pty. On the
/// sandbox's own pty, without the filter, setting N_TTY (0) succeeds.
#[test]
fn sandbox_blocks_line_discipline_changes() {
    let b = Berth::new();
    let code = "import termios
m, s = os.openpty()
print('tiocgetd=' + attempt(lambda: fcntl.ioctl(s, 0x5424, struct.pack('i', 0))))
print('tiocsetd=' + attempt(lambda: fcntl.ioctl(s, termios.TIOCSETD, struct.pack('i', 0))))
print('tiocsetd_master=' + attempt(lambda: fcntl.ioctl(m, termios.TIOCSETD, struct.pack('i', 0))))
print('tiocsetd_high_bits=' + sc(16, s, 0xffffffff00005423, ctypes.addressof(ctypes.c_int(0))))
";
    let got = probe(&b, code);
    check(
        &got,
        &[("tiocgetd", "ok"), ("tiocsetd", "EPERM"), ("tiocsetd_master", "EPERM"), ("tiocsetd_high_bits", "EPERM")],
    );
}

/// /proc and /sys entries Docker and podman mask, and the interfaces that are not namespaced at all
/// (tracing, debugfs, bpffs, securityfs, fuse's connections, cgroups): each is absent, empty, or unreadable.
/// On this host /proc/interrupts, /proc/softirqs, /proc/irq, /proc/config.gz, /sys/firmware and
/// /sys/kernel/vmcoreinfo would have data without berth's masks.
#[test]
fn sandbox_blocks_host_state_in_proc_and_sys() {
    let b = Berth::new();
    let hidden = [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/proc/latency_stats",
        "/proc/interrupts",
        "/proc/softirqs",
        "/proc/irq",
        "/proc/config.gz",
        "/proc/acpi",
        "/proc/scsi",
        "/proc/asound",
        "/sys/firmware",
        "/sys/devices/virtual/powercap",
        "/sys/devices/virtual/dmi",
        "/sys/class/dmi/id",
        "/sys/hypervisor",
        "/sys/bus/vmbus/devices",
        "/sys/fs/selinux",
        "/sys/kernel/vmcoreinfo",
        "/sys/kernel/debug",
        "/sys/kernel/tracing",
        "/sys/kernel/security",
        "/sys/kernel/config",
        "/sys/fs/bpf",
        "/sys/fs/fuse/connections",
        "/sys/fs/pstore",
        "/sys/fs/cgroup",
    ];
    let mut code = String::new();
    for p in hidden {
        code += &format!("s = state('{p}'); print('{p}=' + ('hidden' if s in ('absent', 'empty') else s))\n");
    }
    // Kernel logs: the syslog syscall is refused, /proc/kmsg needs CAP_SYSLOG, /dev/kmsg is not there.
    code += "print('/proc/kmsg=' + state('/proc/kmsg'))\n";
    code += "print('/dev/kmsg=' + state('/dev/kmsg'))\n";
    // Kernel addresses read as zeros (kptr_restrict, no CAP_SYSLOG in the host's user namespace).
    code += "print('kallsyms_addresses=' + str(sorted({l.split()[0] for l in open('/proc/kallsyms')})))\n";
    code += "print('thermal_throttle=' + str(sorted(p for p in os.listdir('/sys/devices/system/cpu') \
             if state('/sys/devices/system/cpu/%s/thermal_throttle' % p) == 'data')))\n";
    let got = probe(&b, &code);
    let mut want: Vec<(&str, &str)> = hidden.iter().map(|p| (*p, "hidden")).collect();
    want.extend([
        ("/proc/kmsg", "EACCES"),
        ("/dev/kmsg", "absent"),
        ("kallsyms_addresses", "['0000000000000000']"),
        ("thermal_throttle", "[]"),
    ]);
    check(&got, &want);
}

/// Kernel settings are read-only, including the ones that are not namespaced (/proc/sys/kernel, /proc/sys/vm,
/// /sys/kernel/mm) and the ones that act on hardware (/proc/bus; /proc/irq is masked).
#[test]
fn sandbox_blocks_writes_to_proc_sys_irq_and_sysfs() {
    let b = Berth::new();
    let files = [
        "/proc/sys/kernel/hostname",
        "/proc/sys/kernel/randomize_va_space",
        "/proc/sys/vm/drop_caches",
        "/proc/sys/vm/overcommit_memory",
        "/proc/sys/net/ipv4/ip_forward",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/kernel/mm/ksm/run",
        "/sys/module/kernel/parameters/panic",
        "/sys/class/net/lo/mtu",
    ];
    let mut code = String::new();
    for f in files {
        code += &format!("print('{f}=' + write('{f}'))\n");
    }
    code += "print('sysrq=' + write('/proc/sysrq-trigger'))\n";
    let got = probe(&b, &code);
    let mut want: Vec<(&str, &str)> = files.iter().map(|f| (*f, "EROFS")).collect();
    // Absent when the kernel has no magic SysRq key; covered with a read-only /dev/null otherwise.
    let sysrq = if std::path::Path::new("/proc/sysrq-trigger").exists() { "EROFS" } else { "absent" };
    want.push(("sysrq", sysrq));
    check(&got, &want);
}

/// This host is itself a virtual machine: its hypervisor's services must stay out of reach. vsock (the
/// host answers at CID 2) cannot be created; no hypervisor, KVM, vhost or raw memory device is in /dev;
/// the machine's identity in /sys is masked; and the metadata addresses have no route (the sandbox's only
/// interface is loopback, so these connects send nothing; the egress proxy refuses them by address too).
#[test]
fn sandbox_blocks_reaching_the_hypervisor() {
    let b = Berth::new();
    let devices = [
        "/dev/vsock",
        "/dev/vhost-vsock",
        "/dev/vhost-net",
        "/dev/kvm",
        "/dev/mem",
        "/dev/kmem",
        "/dev/port",
        "/dev/fuse",
        "/dev/net/tun",
        "/dev/userfaultfd",
        "/dev/vfio",
        "/dev/hpet",
        "/dev/console",
        "/dev/cpu",
        "/dev/sda",
        "/dev/vda",
    ];
    let mut code = String::new();
    for d in devices {
        code += &format!("print('{d}=' + state('{d}'))\n");
    }
    code += "
print('vsock_stream=' + attempt(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()))
print('vsock_dgram=' + attempt(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_DGRAM).close()))
for host, port in (('169.254.169.254', 80), ('168.63.129.16', 80), ('fd00:ec2::254', 80), ('100.100.100.200', 80)):
    fam = socket.AF_INET6 if ':' in host else socket.AF_INET
    def go():
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect((host, port))
    print('connect_' + host + '=' + attempt(go))
print('interfaces=' + ','.join(sorted(os.listdir('/sys/class/net'))))
";
    let got = probe(&b, &code);
    let mut want: Vec<(&str, &str)> = devices.iter().map(|d| (*d, "absent")).collect();
    want.extend([
        ("vsock_stream", "EAFNOSUPPORT"),
        ("vsock_dgram", "EAFNOSUPPORT"),
        ("connect_169.254.169.254", "ENETUNREACH"),
        ("connect_168.63.129.16", "ENETUNREACH"),
        ("connect_fd00:ec2::254", "ENETUNREACH"),
        ("connect_100.100.100.200", "ENETUNREACH"),
        ("interfaces", "lo"),
    ]);
    check(&got, &want);
}

/// What the refusals and masks must not break: netlink route queries, socket diagnostics, package-manager
/// style user creation (which opens an audit socket and copes with its refusal), git, Python's sockets,
/// and the tools that count CPUs and list processes (which read /proc/stat, not the masked interrupt files).
#[test]
fn ordinary_tools_still_work_under_the_narrowed_kernel_surface() {
    let b = Berth::new();
    let script = "set -e
ip -br addr show lo | cut -d' ' -f1
ip route show table local | grep -c 127.0.0.1 >/dev/null && echo route
ss -ltn | grep -c 3128
useradd -m agent && id -u agent
cd /tmp && git init -q r && cd r && echo x > f && git add f && git -c user.name=a -c user.email=a@b commit -qm m && git log --format=%s
python3 -c '
import socket
s = socket.socket(socket.AF_INET6); s.bind((\"::1\", 0)); s.listen()
c = socket.create_connection(s.getsockname()[:2]); a, _ = s.accept(); c.sendall(b\"hi\"); print(a.recv(2).decode())
u, v = socket.socketpair(); u.sendall(b\"ok\"); print(v.recv(2).decode())
print(len(socket.if_nameindex()))
'
test \"$(nproc)\" = \"$(python3 -c 'import os; print(os.cpu_count())')\" && echo cpus
ps -e -o comm= | grep -c '^ps$'
top -b -n 1 | grep -c '^%Cpu'
";
    let out = b.run(&[], &["sh", "-c", script]);
    assert_eq!(text(&out.stdout), "lo\nroute\n1\n1001\nm\nhi\nok\n1\ncpus\n1\n1\n", "{}", text(&out.stderr));
}

/// Every x86_64 syscall number, 0 to 470, made inside a sandbox (each in a child of its own, every argument
/// -1): what reaches the kernel (any answer but `ENOSYS`, or a call that ran on and did not answer) is
/// within berth's allowlist, every call a rule denies outright is refused with its errno, and what is left
/// (unknown, newer or refused by default) is `ENOSYS`. fork and vfork are not walked (they would run the
/// walk twice); both are allowed. Behind both isolations: gVisor's kernel runs the same filter.
#[cfg(target_arch = "x86_64")]
fn walk(b: &Berth) -> BTreeMap<u32, String> {
    let code = "import ctypes, os, select
libc = ctypes.CDLL(None, use_errno=True)
m = ctypes.c_long(-1)
out = []
for nr in range(0, 471):
    if nr in (57, 58):
        continue
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ctypes.set_errno(0)
        ret = libc.syscall(ctypes.c_long(nr), m, m, m, m, m, m)
        os.write(w, str(ctypes.get_errno() if ret == -1 else 0).encode())
        os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 2)
    got = os.read(r, 16).decode() if ready else ''
    if not got:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    os.waitpid(pid, 0)
    os.close(r)
    out.append(f'{nr}={got or \"ran\"}')
print(' '.join(out))
";
    let out = b.run(&[], &["python3", "-c", code]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.parse().unwrap(), v.to_string())))
        .collect()
}

#[cfg(target_arch = "x86_64")]
fn reachable_calls_are_within_the_allowlist(b: &Berth) {
    let policy = berth_sys::seccomp::SeccompPolicy::sandbox_default();
    let allowed: std::collections::BTreeSet<u32> = policy.allowed.iter().map(|(_, nr)| *nr).collect();
    let denied: BTreeMap<u32, u16> =
        policy.rules.iter().filter(|r| r.when.is_empty()).map(|r| (r.nr, r.errno)).collect();
    let got = walk(b);
    assert_eq!(got.len(), 469, "every number but fork and vfork was walked: {got:?}");
    let enosys = "38".to_string(); // ENOSYS
    let mut outside = Vec::new();
    let (mut reached, mut refused, mut nosys) = (0, 0, 0);
    for (nr, answer) in &got {
        // uretprobe and uprobe: the kernel runs them before any seccomp filter (Linux 6.14 and 6.18), as they
        // do nothing but from the trampoline it maps itself; called from anywhere else they kill the caller
        // (uretprobe) or fail with ENXIO (uprobe). No profile can refuse them, Docker's neither.
        if [335, 336].contains(nr) {
            continue;
        }
        if let Some(errno) = denied.get(nr) {
            assert_eq!(answer, &errno.to_string(), "syscall {nr}, denied by a rule");
            refused += 1;
        } else if answer == &enosys {
            nosys += 1;
        } else {
            reached += 1;
            if !allowed.contains(nr) {
                outside.push(format!("{nr}={answer}"));
            }
        }
    }
    assert!(outside.is_empty(), "reached the kernel outside the allowlist: {outside:?}");
    eprintln!(
        "{} of 469 numbers reach the kernel ({} allowed), {} are refused by a rule, {} are ENOSYS",
        reached,
        allowed.len(),
        refused,
        nosys
    );
    // The allowlist is not empty in practice: the calls every program makes reach the kernel.
    for nr in [0u32, 1, 2, 3, 9, 257, 262] {
        assert_ne!(got[&nr], enosys, "syscall {nr}");
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn every_syscall_number_walked_reaches_only_the_allowlist() {
    reachable_calls_are_within_the_allowlist(&Berth::new());
}

#[test]
#[cfg(target_arch = "x86_64")]
fn every_syscall_number_walked_behind_gvisor_reaches_only_the_allowlist() {
    reachable_calls_are_within_the_allowlist(&Berth::on("gvisor"));
}

/// Real work under the allowlist: a C program built with make and gcc (threads), node with a worker thread
/// and a file watch, npm, pip, Python's multiprocessing and a venv, git.
#[test]
fn real_work_runs_under_the_allowlist() {
    let b = Berth::new();
    let script = "set -e
cd /tmp
printf '#include <pthread.h>\\n#include <stdio.h>\\nvoid *f(void *a) { return a; }\\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0); puts(\"c\"); return 0; }\\n' > a.c
printf 'a: a.c\\n\\tgcc -O2 -pthread -o a a.c\\n' > Makefile
make -s && ./a
node -e '
const { Worker } = require(\"worker_threads\"); const fs = require(\"fs\");
const w = fs.watch(\"/tmp\", () => { w.close(); new Worker(\"require(`worker_threads`).parentPort.postMessage(1)\", { eval: true }).on(\"message\", () => console.log(\"node\")); });
fs.writeFileSync(\"/tmp/touched\", \"x\");
'
npm --version >/dev/null && echo npm
python3 -m pip --version >/dev/null && echo pip
python3 -c 'import multiprocessing as m; print(\"mp\" if m.Pool(2).map(abs, [-1, -2]) == [1, 2] else \"no\")'
python3 -m venv /tmp/v && /tmp/v/bin/python -c 'print(\"venv\")'
git init -q /tmp/g && echo git
";
    let out = b.run(&[], &["sh", "-c", script]);
    assert_eq!(text(&out.stdout), "c\nnode\nnpm\npip\nmp\nvenv\ngit\n", "{}", text(&out.stderr));
}
