//! `berth probe`: what a process can see and do, as JSON. Tests run it inside sandboxes so that what they
//! assert reads like what a user would check by hand.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::ProbeArgs;

pub fn probe(args: ProbeArgs) -> anyhow::Result<i32> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let read_trim = |p: &str| fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
    let pid1 = fs::read("/proc/1/cmdline")
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let interfaces: Vec<String> = fs::read_to_string("/proc/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|s| s.trim().to_string()))
        .collect();
    let pids: Vec<i32> = fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect())
        .unwrap_or_default();
    let mounts: Vec<String> = berth_sys::mountinfo::read()
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_point.to_string_lossy().into_owned())
        .collect();

    let mut connect = BTreeMap::new();
    for target in &args.connect {
        let outcome = match target.to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(addr)) => match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(_) => "connected".to_string(),
                Err(e) => e.to_string(),
            },
            Ok(None) => "no address".to_string(),
            Err(e) => e.to_string(),
        };
        connect.insert(target.clone(), outcome);
    }
    let mut read = BTreeMap::new();
    for p in &args.read {
        let outcome = match fs::read(p) {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        read.insert(p.display().to_string(), outcome);
    }
    let mut write = BTreeMap::new();
    for p in &args.write {
        let outcome = match fs::File::create(p).and_then(|mut f| f.write_all(b"probe\n")) {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        write.insert(p.display().to_string(), outcome);
    }

    let report: Value = json!({
        "pid": std::process::id(),
        "uid": rustix::process::getuid().as_raw(),
        "gid": rustix::process::getgid().as_raw(),
        "hostname": read_trim("/proc/sys/kernel/hostname"),
        "uid_map": read_trim("/proc/self/uid_map"),
        "pid1": pid1,
        "pids": pids,
        "interfaces": interfaces,
        "mounts": mounts,
        "cap_eff": field("CapEff"),
        "cap_bnd": field("CapBnd"),
        // Asked of the kernel (gVisor's /proc/self/status has no NoNewPrivs line).
        "no_new_privs": rustix::thread::no_new_privs().unwrap_or(field("NoNewPrivs") == "1"),
        "seccomp": field("Seccomp"),
        "cgroup": read_trim("/proc/self/cgroup"),
        "connect": connect,
        "read": read,
        "write": write,
    });
    println!("{}", serde_json::to_string(&report)?);
    Ok(0)
}
