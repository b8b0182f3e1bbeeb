//! Escape attempts against `berth run`, as root: each test mounts a real attack from inside a sandbox and
//! asserts it fails, with a control case wherever one shows the attack could have worked. Tests marked
//! `#[ignore = "known gap: ..."]` document attacks that succeed today; they assert the safe behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Berth, PY_SYSCALLS, text};

/// Run `python3 -c PY+code args...` in a sandbox.
fn py(b: &Berth, opts: &[&str], code: &str, args: &[&str]) -> Output {
    let code = format!("{PY_SYSCALLS}{code}");
    let mut cmd = vec!["python3", "-c", &code];
    cmd.extend_from_slice(args);
    b.run(opts, &cmd)
}

/// `key=value` lines of a run's stdout.
fn results(out: &Output) -> BTreeMap<String, String> {
    assert!(out.status.success(), "exit {:?}: {}", out.status.code(), text(&out.stderr));
    text(&out.stdout).lines().filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

fn sh(b: &Berth, opts: &[&str], script: &str) -> Output {
    b.run(opts, &["sh", "-c", script])
}

/// `security.capability` of a host file: (revision, rootid for v3).
fn file_caps(path: &Path) -> Option<(u32, Option<u32>)> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::getxattr(path, "security.capability", &mut buf[..]).ok()?;
    let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
    Some((word(0) >> 24, (n >= 24).then(|| word(20))))
}

/// Calls gVisor's kernel implements itself, for the sandbox only: a keyring, its own log, namespaces of its
/// own. They run no code of the host's kernel (`the_kernel_a_gvisor_sandbox_sees_is_gvisors` shows whose log).
const SERVED_BY_GVISOR: [&str; 5] = ["keyctl", "syslog", "unshare_user", "unshare_mount", "unshare_net"];

on_each_isolation! {
    #[cfg(target_arch = "x86_64")]
    fn sandbox_blocks_kernel_attack_surface_syscalls(b) {
    let cases: &[(&str, u64, &[u64], &str)] = &[
        ("getpid", 39, &[], "ok"),
        ("keyctl", 250, &[0, u64::MAX - 2, 0], "EPERM"),
        ("add_key", 248, &[0, 0, 0, 0, 0], "EPERM"),
        ("request_key", 249, &[0, 0, 0, 0], "EPERM"),
        ("bpf", 321, &[0, 0, 0], "EPERM"),
        ("perf_event_open", 298, &[0, 0, u64::MAX, u64::MAX, 0], "EPERM"),
        ("userfaultfd", 323, &[1], "EPERM"),
        ("kexec_load", 246, &[0, 0, 0, 0], "EPERM"),
        ("kexec_file_load", 320, &[0, 0, 0, 0, 0], "EPERM"),
        ("init_module", 175, &[0, 0, 0], "EPERM"),
        ("finit_module", 313, &[0, 0, 0], "EPERM"),
        ("delete_module", 176, &[0, 0], "EPERM"),
        ("open_by_handle_at", 304, &[0, 0, 0], "EPERM"),
        ("name_to_handle_at", 303, &[0, 0, 0, 0, 0], "EPERM"),
        ("mount", 165, &[0, 0, 0, 0, 0], "EPERM"),
        ("umount2", 166, &[0, 0], "EPERM"),
        ("pivot_root", 155, &[0, 0], "EPERM"),
        ("fsopen", 430, &[0, 0], "EPERM"),
        ("fsmount", 432, &[0, 0, 0], "EPERM"),
        ("open_tree", 428, &[0, 0, 0], "EPERM"),
        ("move_mount", 429, &[0, 0, 0, 0, 0], "EPERM"),
        ("mount_setattr", 442, &[0, 0, 0, 0, 0], "EPERM"),
        ("setns", 308, &[0, 0], "EPERM"),
        ("unshare_user", 272, &[0x1000_0000], "EPERM"),
        ("unshare_mount", 272, &[0x0002_0000], "EPERM"),
        ("unshare_net", 272, &[0x4000_0000], "EPERM"),
        // CLONE_NEWUSER | CLONE_THREAD: EINVAL from the kernel, so EPERM can only come from the filter.
        ("clone_newuser", 56, &[0x1001_0000, 0, 0, 0, 0], "EPERM"),
        ("clone3", 435, &[0, 0], "ENOSYS"),
        ("personality_no_aslr", 135, &[0x0004_0000], "EPERM"),
        ("syslog", 103, &[3, 0, 0], "EPERM"),
        ("reboot", 169, &[0, 0, 0, 0], "EPERM"),
        ("swapon", 167, &[0, 0], "EPERM"),
        ("acct", 163, &[0], "EPERM"),
        ("clock_settime", 227, &[0, 0], "EPERM"),
        ("iopl", 172, &[3], "EPERM"),
        ("ioperm", 173, &[0, 1, 1], "EPERM"),
        ("x32_read", 0x4000_0000, &[0, 0, 0], "EPERM"),
    ];
    let mut code = String::new();
    for (name, nr, args, _) in cases {
        let args: Vec<String> = args.iter().map(u64::to_string).collect();
        let comma = if args.is_empty() { "" } else { ", " };
        code += &format!("print('{name}=' + sc({nr}{comma}{}))\n", args.join(", "));
    }
    let got = results(&py(b, &[], &code, &[]));
    for (name, _, _, want) in cases {
        let answer = got.get(*name).map(String::as_str);
        if !b.gvisor() || *name == "getpid" {
            assert_eq!(answer, Some(*want), "{name}: {got:?}");
        } else if !SERVED_BY_GVISOR.contains(name) {
            // gVisor's kernel refuses it in its own words; none of these reaches the host's kernel.
            assert!(answer.is_some_and(|a| a != "ok"), "{name}: {got:?}");
        }
    }
    }
}

on_each_isolation! {
    #[cfg(target_arch = "x86_64")]
    fn sandbox_blocks_i386_syscalls_through_int_0x80(b) {
    // Run machine code: getpid through `syscall` (native), then through `int 0x80` (i386, where it is 20).
    let code = "import mmap
def run(code):
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))()
print('native', run(b'\\xb8\\x27\\x00\\x00\\x00\\x0f\\x05\\xc3') == os.getpid(), flush=True)
print('i386', run(b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3'), flush=True)
";
    let out = py(b, &[], code, &[]);
    if b.gvisor() {
        // gVisor's kernel has no i386 entry: the call fails (-ENOSYS) and reaches nothing.
        assert_eq!(text(&out.stdout), "native True\ni386 -38\n", "{}", text(&out.stderr));
        return;
    }
    assert_eq!(text(&out.stdout), "native True\n", "{}", text(&out.stderr));
    // A foreign architecture's syscall kills the process (SIGSYS, 31): 128 + 31.
    assert_eq!(out.status.code(), Some(159), "{}", text(&out.stderr));
    }
}

on_each_isolation! {
    fn sandbox_blocks_terminal_injection_ioctls(b) {
    // Stdin is /dev/null: the kernel itself says ENOTTY to any terminal ioctl, so EPERM is the filter's.
    let code = "import fcntl, termios
buf = ctypes.create_string_buffer(64)
p = ctypes.addressof(buf)
print('tcgets=' + sc(16, 0, 0x5401, p))
print('tiocsti=' + sc(16, 0, 0x5412, p))
print('tiocsti_high_bits=' + sc(16, 0, 0xffffffff00005412, p))
print('tioclinux=' + sc(16, 0, 0x541c, p))
print('python_tiocsti=' + attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b'x')))
";
    let got = results(&py(b, &[], code, &[]));
    assert_eq!(got["tcgets"], "ENOTTY", "{got:?}");
    // Behind gVisor too the filter refuses them first (its kernel runs berth's filter before its own ioctl).
    for k in ["tiocsti", "tiocsti_high_bits", "tioclinux", "python_tiocsti"] {
        assert_eq!(got[k], "EPERM", "{k}: {got:?}");
    }
    }
}

on_each_isolation! {
    fn sandbox_blocks_ptrace_of_init(b) {
    let code = "import time
def attach(pid):
    ctypes.set_errno(0)
    return 'ok' if libc.ptrace(16, pid, 0, 0) == 0 else name(ctypes.get_errno())
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
print('sibling=' + attach(child))
os.kill(child, 9)
os.waitpid(child, 0)
print('init=' + attach(1))
";
    let got = results(&py(b, &[], code, &[]));
    assert_eq!(got["sibling"], "ok", "ptrace works on the command's own children: {got:?}");
    assert_eq!(got["init"], "EPERM", "{got:?}");
    }
}

on_each_isolation! {
    fn sandbox_blocks_reaching_init_through_proc(b) {
    let code = "def probe(p):
    def f():
        if p.endswith('/'):
            os.listdir(p)
        else:
            os.close(os.open(p, os.O_RDONLY))
    return attempt(f)
for p in ['/proc/1/root/', '/proc/1/cwd/', '/proc/1/exe', '/proc/1/environ', '/proc/1/mem', '/proc/1/fd/3',
          '/proc/1/map_files/', '/proc/1/cmdline', '/proc/self/root/']:
    print(p + '=' + probe(p))
print('dotdot=' + str(sorted(os.listdir('/proc/self/root/..')) == sorted(os.listdir('/'))))
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
remote = (ctypes.c_void_p * 2)(0x400000, 16)
print('process_vm_readv=' + sc(310, 1, ctypes.addressof(iov), 1, ctypes.addressof(remote), 1, 0))
pidfd = libc.syscall(434, 1, 0)
print('pidfd_getfd=' + sc(438, pidfd, 3, 0))
";
    let got = results(&py(b, &[], code, &[]));
    if b.gvisor() {
        // gVisor's kernel answers in its own words, and lets init's environment be read: it holds only PATH.
        for p in ["root/", "cwd/", "exe", "mem", "fd/3", "map_files/"] {
            assert_ne!(got[&format!("/proc/1/{p}")], "ok", "/proc/1/{p}: {got:?}");
        }
        for k in ["process_vm_readv", "pidfd_getfd"] {
            assert_ne!(got[k], "ok", "{k}: {got:?}");
        }
        let environ = b.run(&[], &["cat", "/proc/1/environ"]);
        assert_eq!(text(&environ.stdout), format!("PATH={}\0HOME=/root\0", berth_runtime::spec::BASE_ENV[0].1));
    } else {
        for p in ["root/", "cwd/", "exe", "environ", "mem", "fd/3", "map_files/"] {
            assert_eq!(got[&format!("/proc/1/{p}")], "EACCES", "/proc/1/{p}: {got:?}");
        }
        assert_eq!(got["process_vm_readv"], "EPERM", "{got:?}");
        assert_eq!(got["pidfd_getfd"], "EPERM", "{got:?}");
    }
    assert_eq!(got["/proc/1/cmdline"], "ok", "{got:?}");
    assert_eq!(got["/proc/self/root/"], "ok", "{got:?}");
    assert_eq!(got["dotdot"], "True", "/proc/self/root/.. must be the sandbox's own /");
    }
}

on_each_isolation! {
    fn sandbox_blocks_writes_to_kernel_settings(b) {
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let ip_forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let script = "for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname /proc/sys/vm/drop_caches \
                  /proc/sys/kernel/sysrq /proc/sysrq-trigger /proc/sys/net/ipv4/ip_forward /sys/kernel/uevent_helper \
                  /sys/kernel/mm/transparent_hugepage/enabled /sys/class/net/lo/mtu; do \
                    [ -e $f ] || continue; (echo 1 > $f) 2>/dev/null && echo wrote $f; done; \
                  cat /proc/sys/kernel/ostype /sys/class/net/lo/mtu";
    let out = sh(b, &[], script);
    // gVisor's kernel has neither file: what it shows of /proc and /sys is its own. Its network stack is the
    // sandbox's own too, so the sandbox may turn forwarding on there; the host's stays as it was.
    let shown = if b.gvisor() { "wrote /proc/sys/net/ipv4/ip_forward\n" } else { "Linux\n65536\n" };
    assert_eq!(text(&out.stdout), shown, "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(), core_pattern);
    assert_eq!(std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(), ip_forward);
    }
}

on_each_isolation! {
    fn sandbox_blocks_setuid_and_file_capabilities_inside(b) {
    let as_user = "setpriv --reuid 1000 --regid 1000 --clear-groups";
    let script = format!(
        "set -e; cp /usr/bin/id /opt/id; chmod 4755 /opt/id; stat -c %A /opt/id; cp /usr/bin/python3 /opt/py; \
         {SETCAP} /opt/py 2>/dev/null || echo setcap-denied; {as_user} id -u; {as_user} /opt/id -u; \
         {as_user} /opt/py -c 'import os; os.setuid(0)' 2>/dev/null || echo py-setuid-denied; \
         {as_user} python3 -c 'import os; os.setuid(0)' 2>/dev/null || echo setuid-denied; \
         {as_user} cat /etc/shadow 2>/dev/null || echo shadow-denied"
    );
    let out = sh(b, &[], &script);
    assert_eq!(
        text(&out.stdout),
        "-rwsr-xr-x\nsetcap-denied\n1000\n1000\npy-setuid-denied\nsetuid-denied\nshadow-denied\n",
        "{}",
        text(&out.stderr)
    );
    }
}

on_each_isolation! {
    fn sandbox_blocks_device_nodes(b) {
    let dir = unprivileged_dir();
    // A device node left in a mounted host directory (1:5 is /dev/zero, harmless if this ever fails open).
    let dev = dir.path().join("zero");
    let made = Command::new("mknod").arg(&dev).args(["c", "1", "5"]).status().unwrap();
    assert!(made.success());
    let spec = format!("{}:/workspace/d", dir.path().display());
    let code = "import stat
print('mounted_dev=' + attempt(lambda: open('/workspace/d/zero', 'rb').read(1)))
print('own_dev=' + attempt(lambda: open('/dev/zero', 'rb').read(1)))
print('mknod=' + attempt(lambda: os.mknod('/tmp/mem', stat.S_IFCHR | 0o600, os.makedev(1, 1))))
print('mknod_block=' + attempt(lambda: os.mknod('/workspace/d/sda', stat.S_IFBLK | 0o600, os.makedev(8, 0))))
print('fifo=' + attempt(lambda: os.mkfifo('/tmp/fifo')))
print('open_mem=' + attempt(lambda: open('/tmp/mem', 'rb').read(1)))
";
    let got = results(&py(b, &["--mount", &spec], code, &[]));
    // gVisor's kernel lets root make a node on its own tmpfs, but it has no memory device to open.
    assert_ne!(got["open_mem"], "ok", "{got:?}");
    assert_eq!(got["own_dev"], "ok", "{got:?}");
    assert_eq!(got["fifo"], "ok", "{got:?}");
    assert_eq!(got["mounted_dev"], "EACCES", "{got:?}");
    if !b.gvisor() {
        assert_ne!(got["mknod"], "ok", "{got:?}");
    }
    assert_ne!(got["mknod_block"], "ok", "{got:?}");
    assert!(!dir.path().join("sda").exists());
    }
}

/// A temporary host directory owned by an unprivileged user (4321), which berth mounts read-write.
fn unprivileged_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    rustix::fs::chown(dir.path(), Some(rustix::fs::Uid::from_raw(4321)), Some(rustix::fs::Gid::from_raw(4321)))
        .unwrap();
    dir
}

/// Shell: give the file named by the next word cap_setuid+ep (a v2 `security.capability`, as `setcap` writes).
const SETCAP: &str = "python3 -c 'import os, sys; \
    os.setxattr(sys.argv[1], \"security.capability\", bytes.fromhex(\"0100000280\" + \"00\" * 15))'";

/// Shell, inside the sandbox: plant a setuid and setgid `id`, a `python3` with cap_setuid+ep and a setgid
/// directory in `dir`, and try to give `id` away to an id the sandbox does not map.
fn plant(dir: &str) -> String {
    format!(
        "cp /usr/bin/id {dir}/id; chmod 6755 {dir}/id; cp /usr/bin/python3 {dir}/py; {SETCAP} {dir}/py; \
         mkdir {dir}/sgid; chmod 2777 {dir}/sgid; chown 1234:1234 {dir}/id 2>/dev/null && echo chowned; true"
    )
}

on_each_isolation! {
    fn sandbox_blocks_planting_host_root_files_through_a_user_owned_mount(b) {
    let dir = unprivileged_dir();
    let spec = format!("{}:/workspace/h", dir.path().display());
    let out = sh(b, &["--mount", &spec], &format!("{}; chown 70000 /tmp || echo unmapped", plant("/workspace/h")));
    // Under gVisor every id is its kernel's own: its kernel takes the chowns (of /tmp, and of the planted file,
    // which it then shows as before), and none reaches the host's files, as the owners below show.
    let said = if b.gvisor() { "chowned\n" } else { "unmapped\n" };
    assert_eq!(text(&out.stdout), said, "no chown to ids outside the map: {}", text(&out.stderr));
    let planted = ["id", "py", "sgid"];
    for f in planted {
        let meta = std::fs::metadata(dir.path().join(f)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4321, 4321), "{f} must belong to the directory's owner");
    }
    // File capabilities cannot be written at all (SETFCAP is not in the bounding set).
    assert_eq!(file_caps(&dir.path().join("py")), None);
    }
}

on_each_isolation! {
    /// Root inside owns what it creates in a mount of a root-owned host directory as host root, so it can leave
    /// a setuid-root binary, or one with host-effective file capabilities, for any host user to run.
    fn sandbox_blocks_planting_setuid_root_files_in_a_root_owned_mount(b) {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(std::fs::metadata(dir.path()).unwrap().uid(), 0);
    // Read-write, a root-owned directory would receive root-owned files: berth refuses to mount it so.
    let spec = format!("{}:/workspace/h", dir.path().display());
    let out = sh(b, &["--mount", &spec], &plant("/workspace/h"));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("owned by root"), "{}", text(&out.stderr));
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing may have been written");
    // Read-only it mounts, and nothing can be planted.
    let ro = format!("{}:/workspace/h:ro", dir.path().display());
    let out = sh(b, &["--mount", &ro], &plant("/workspace/h"));
    assert_ne!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing may have been written");
    for f in ["id", "py", "sgid"] {
        assert!(!dir.path().join(f).exists());
    }
    }
}

#[test]
fn sandbox_blocks_host_network_and_abstract_sockets() {
    use std::os::linux::net::SocketAddrExt;
    let b = Berth::new();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let name = format!("berth-escape-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let unix = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    let code = "port, abstract = int(sys.argv[1]), '\\0' + sys.argv[2]
def connect(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(addr)
print('host_tcp=' + attempt(lambda: connect(socket.AF_INET, ('127.0.0.1', port))))
print('host_abstract=' + attempt(lambda: connect(socket.AF_UNIX, abstract)))
print('raw=' + attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))
print('packet=' + attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)))
own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
own.bind(abstract)
own.listen()
print('own_abstract=' + attempt(lambda: connect(socket.AF_UNIX, abstract)))
lo = socket.create_server(('127.0.0.1', port))
print('own_tcp=' + attempt(lambda: connect(socket.AF_INET, ('127.0.0.1', port))))
";
    let got = results(&py(&b, &[], code, &[&port, &name]));
    assert_eq!(got["own_abstract"], "ok", "{got:?}");
    assert_eq!(got["own_tcp"], "ok", "{got:?}");
    assert_eq!(got["host_tcp"], "ECONNREFUSED", "{got:?}");
    assert_eq!(got["host_abstract"], "ECONNREFUSED", "{got:?}");
    assert_eq!(got["raw"], "EPERM", "{got:?}");
    // Refused by the filter's family list (and by the kernel for want of CAP_NET_RAW).
    assert_eq!(got["packet"], "EAFNOSUPPORT", "{got:?}");
    tcp.set_nonblocking(true).unwrap();
    unix.set_nonblocking(true).unwrap();
    assert!(tcp.accept().is_err() && unix.accept().is_err(), "nothing may reach the host's listeners");
}

on_each_isolation! {
    fn sandbox_blocks_signals_to_host_processes(b) {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let host_pid = sleeper.id();
    let script = format!(
        "sleep 100 & kill -9 -1; wait $!; echo own:$?; kill -9 {host_pid} 2>/dev/null && echo hit-host; \
         kill -KILL 1; kill -STOP 1; echo init-alive"
    );
    let out = sh(b, &[], &script);
    let alive = sleeper.try_wait().unwrap().is_none();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert_eq!(text(&out.stdout), "own:137\ninit-alive\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
    assert!(alive, "kill -9 -1 inside the sandbox killed a host process");
    }
}

on_each_isolation! {
    fn sandbox_blocks_host_ipc_objects(b) {
    let made = Command::new("ipcmk").args(["-M", "4096"]).output().unwrap();
    let id: String = text(&made.stdout).chars().filter(char::is_ascii_digit).collect();
    assert!(made.status.success() && !id.is_empty(), "{}", text(&made.stdout));
    let seen = format!("shmid={id}\n");
    let script = format!(
        "ipcs -m -i {id} 2>&1 | grep -q 'shmid={id}$' && echo seen; ipcrm -m {id} 2>/dev/null && echo removed; \
         ipcmk -M 4096 >/dev/null && echo own"
    );
    let out = sh(b, &[], &script);
    let survived = text(&Command::new("ipcs").args(["-m", "-i", &id]).output().unwrap().stdout).contains(&seen);
    let _ = Command::new("ipcrm").args(["-m", &id]).status();
    assert_eq!(text(&out.stdout), "own\n", "{}", text(&out.stderr));
    assert!(survived, "the host's shared memory segment was removed from inside");
    }
}

on_each_isolation! {
    fn sandbox_blocks_symlink_escapes_through_mounts(b) {
    let links = unprivileged_dir();
    let payload = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/", links.path().join("root")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../..", links.path().join("up")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", links.path().join("shadow")).unwrap();
    std::fs::write(payload.path().join("m"), "payload\n").unwrap();
    let (a, c) = (format!("berth-escape-{}-a", std::process::id()), format!("berth-escape-{}-b", std::process::id()));
    let mounts = [
        format!("{}:/workspace/l", links.path().display()),
        // Mount targets that walk through links to / and above must land inside the sandbox's root.
        format!("{}:/workspace/l/root/{a}:ro", payload.path().display()),
        format!("{}:/workspace/l/up/{c}:ro", payload.path().display()),
    ];
    let opts: Vec<&str> = mounts.iter().flat_map(|m| ["--mount", m.as_str()]).collect();
    let out =
        sh(b, &opts, &format!("cat /{a}/m /{c}/m; grep -c '\\$' /workspace/l/shadow; ls /workspace/l/root/workspace"));
    assert_eq!(text(&out.stdout), "payload\npayload\n0\nl\n", "{}", text(&out.stderr));
    assert!(!Path::new("/").join(&a).exists() && !Path::new("/").join(&c).exists(), "a mount escaped onto the host");
    assert_eq!(std::fs::read_dir(links.path()).unwrap().count(), 3);
    }
}

on_each_isolation! {
    fn sandbox_blocks_reopening_host_stdio_through_proc(b) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, "host secret\n").unwrap();
    // World-writable: only the sandbox's own rules can stop a reopen through /proc/self/fd.
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    let stdout = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let code = format!(
        "{PY_SYSCALLS}print('read=' + attempt(lambda: sys.stderr.write(open('/proc/self/fd/1').read())), file=sys.stderr)
print('truncate=' + attempt(lambda: open('/proc/self/fd/1', 'w')), file=sys.stderr)
print('appended')
"
    );
    let out = b.cmd(&["run", "--", "python3", "-c", &code]).stdout(stdout).stderr(Stdio::piped()).output().unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "host secret\nappended\n", "{err}");
    assert!(!err.contains("host secret") && err.contains("read=EACCES") && err.contains("truncate=EACCES"), "{err}");
    }
}

on_each_isolation! {
    fn sandbox_blocks_finding_berth_and_its_data_root(b) {
    let root = b.root.path().display().to_string();
    let root_name = b.root.path().file_name().unwrap().to_string_lossy().into_owned();
    let script = format!(
        "find / \\( -path /proc -o -path /sys \\) -prune -o \\( -name 'berth*' -o -name '{root_name}' \\) -print \
         2>/dev/null | grep -v '^/opt/berth'; test -e {root} && echo root-visible; ls /opt/berth/berth"
    );
    let out = sh(b, &["--mount", b.bin_mount()], &script);
    assert_eq!(text(&out.stdout), "/opt/berth/berth\n", "{}", text(&out.stderr));
    }
}

on_each_isolation! {
    /// Init's control socket is descriptor 3 in init; a command that inherited it could report its own exit (or
    /// read the supervisor's requests).
    fn sandbox_blocks_forging_events_on_the_control_socket(b) {
    let code = "import time
try:
    s = socket.socket(fileno=3)
    s.send(b'{\"event\":\"exited\",\"id\":1,\"code\":0,\"signal\":null}')
    time.sleep(1)
except OSError:
    pass
sys.exit(7)
";
    let out = py(b, &[], code, &[]);
    assert_eq!(out.status.code(), Some(7), "a command forged its own exit: {}", text(&out.stderr));
    }
}

/// Host side: run argv with a fresh pty as its controlling terminal, stdin from /dev/null, and print its stdout.
const WITH_CTTY: &str = "import fcntl, os, subprocess, sys, termios
m, s = os.openpty()
p = subprocess.run(sys.argv[1:], start_new_session=True, pass_fds=(s,), stdin=subprocess.DEVNULL,
                   stdout=subprocess.PIPE, preexec_fn=lambda: fcntl.ioctl(s, termios.TIOCSCTTY, 0))
sys.stdout.write(p.stdout.decode())
";

on_each_isolation! {
    /// A sandbox in the caller's session could open /dev/tty even with every stream redirected, make itself the
    /// terminal's foreground group (tcsetpgrp), turn echo off and read what the user types.
    fn sandbox_blocks_the_callers_controlling_terminal(b) {
    let probe = "if (: <>/dev/tty) 2>/dev/null; then echo tty-reachable; else echo no-tty; fi";
    let with_ctty = |argv: &[&str]| {
        let out = Command::new("/usr/bin/python3").args(["-c", WITH_CTTY]).args(argv).output().unwrap();
        text(&out.stdout)
    };
    assert_eq!(with_ctty(&["sh", "-c", probe]), "tty-reachable\n", "the harness must give a controlling terminal");
    let berth = env!("CARGO_BIN_EXE_berth");
    let root = b.root.path().display().to_string();
    assert_eq!(with_ctty(&[berth, "--root", &root, "run", "--", "sh", "-c", probe]), "no-tty\n");
    }
}
