//! `berth run --isolation gvisor`: what only the gVisor backend has to show. What both backends promise is
//! tested behind each of them in run.rs and escape.rs (`on_each_isolation!`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{Berth, text};
use serde_json::Value;

#[test]
fn the_kernel_a_gvisor_sandbox_sees_is_gvisors() {
    let b = Berth::on("gvisor");
    let out = b.run(&[], &["sh", "-c", "uname -r; cat /proc/version; dmesg >/dev/null 2>&1 || echo no-log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(lines[0], host.trim(), "the sandbox saw the host's kernel release");
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    assert_ne!(lines[1], host_version.trim(), "the sandbox saw the host's kernel: {said}");
    // The kernel's log is refused by berth's filter, behind gVisor as behind namespaces.
    assert_eq!(lines[2], "no-log", "{said}");
    // The same command behind the namespaces backend sees the host's kernel: the control case.
    let same = Berth::new().run(&[], &["uname", "-r"]);
    assert_eq!(text(&same.stdout).trim(), host.trim());
}

#[test]
fn a_command_inside_gvisor_is_no_process_of_the_host() {
    let b = Berth::on("gvisor");
    let needle = format!("sleep {}", 6000 + std::process::id() % 1000);
    let mut run =
        b.run_cmd(&[], &["sh", "-c", &format!("echo ready; exec {needle}")]).stdout(Stdio::piped()).spawn().unwrap();
    let mut ready = String::new();
    BufReader::new(run.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    // Behind namespaces the sleeper would be a host process (with the host's kernel running its calls);
    // behind gVisor only gVisor's own processes are.
    let seen = common::host_processes_with(&needle);
    common::terminate(&mut run);
    let status = run.wait().unwrap();
    assert!(seen.is_empty(), "the command ran as a host process: {seen:?}");
    assert_eq!(status.code(), Some(143), "berth run passes SIGTERM on and the command ends of it");
}

#[test]
fn an_isolation_the_host_lacks_is_an_error_never_a_fallback() {
    let b = Berth::new();
    let missing = b
        .cmd(&["run", "--isolation", "gvisor", "--", "true"])
        .env("BERTH_RUNSC", "/nonexistent/runsc")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(125));
    assert!(
        text(&missing.stderr).contains("the gvisor isolation is not available on this host: /nonexistent/runsc"),
        "{}",
        text(&missing.stderr)
    );
    // A runsc from before the systrap platform is named as such.
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("runsc");
    std::fs::write(&old, "#!/bin/sh\necho 'runsc version 0.0~20221219.0'\n").unwrap();
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let too_old = b.cmd(&["run", "--isolation", "gvisor", "--", "true"]).env("BERTH_RUNSC", &old).output().unwrap();
    assert_eq!(too_old.status.code(), Some(125));
    assert!(text(&too_old.stderr).contains("older than the systrap platform"), "{}", text(&too_old.stderr));
    // berth info says the same.
    let info = Command::new(env!("CARGO_BIN_EXE_berth")).arg("info").env("BERTH_RUNSC", &old).output().unwrap();
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    let gvisor = info["isolation"].as_array().unwrap().iter().find(|i| i["name"] == "gvisor").unwrap();
    assert_eq!(gvisor["available"], false, "{gvisor}");
    assert!(gvisor["reason"].as_str().unwrap().contains("older than the systrap platform"), "{gvisor}");
    // An isolation berth does not know is refused before anything is made.
    let unknown = b.cmd(&["run", "--isolation", "microvm", "--", "true"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(125));
    assert!(text(&unknown.stderr).contains("use namespaces (the default) or gvisor"), "{}", text(&unknown.stderr));
}

#[test]
fn output_to_a_shared_file_lands_where_the_caller_left_off() {
    let b = Berth::on("gvisor");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let berth = format!("{} --root {} run --isolation gvisor --", env!("CARGO_BIN_EXE_berth"), b.root.path().display());
    let script =
        format!("(echo zero; {berth} echo one; {berth} sh -c 'echo two >&2' 2>&1; echo three) > {}", out.display());
    let status = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "zero\none\ntwo\nthree\n");
    // And a file as standard input is read whole.
    let input = dir.path().join("in");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let counted = b.run_cmd(&[], &["wc", "-c"]).stdin(std::fs::File::open(&input).unwrap()).output().unwrap();
    assert_eq!(text(&counted.stdout).trim(), "1000000");
}

#[test]
fn a_command_over_the_memory_limit_is_killed_inside_gvisor_and_says_so() {
    let b = Berth::on("gvisor");
    let grow = "x = []\nwhile True: x.append(b'x' * (1 << 20))";
    for (how, code) in [("at once", "x = bytearray(512 << 20)"), ("a MiB at a time", grow)] {
        let out = b.run(&["--memory", "128M", "--json"], &["python3", "-c", code]);
        assert_eq!(out.status.code(), Some(137), "{how}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("went over the sandbox's memory limit (134217728 bytes) and was killed"),
            "{how}: {}",
            text(&out.stderr)
        );
        let j: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
        assert_eq!((&j["oom_killed"], &j["isolation"]), (&Value::from(true), &Value::from("gvisor")), "{how}: {j}");
    }
}

/// Behind gVisor a command gets the same process policy as behind namespaces: the same capability sets,
/// no_new_privs, and berth's seccomp filter, which gVisor's kernel runs itself. One gVisor bug is then not
/// the whole game: a new user namespace, a mount, bpf, the keyring, io_uring, a packet socket and a signal
/// to PID 1 are refused by the filter first, with the errno the namespaces backend gives.
#[test]
fn behind_gvisor_a_command_has_the_process_policy_it_has_behind_namespaces() {
    let (g, n) = (Berth::on("gvisor"), Berth::on("namespaces"));
    let (pg, pn) = (g.probe(&[], &[]), n.probe(&[], &[]));
    for key in ["cap_bnd", "cap_eff", "no_new_privs", "seccomp", "uid"] {
        assert_eq!(pg[key], pn[key], "{key}: gvisor {} namespaces {}", pg[key], pn[key]);
    }
    assert_eq!((pg["no_new_privs"].as_bool(), pg["seccomp"].as_str()), (Some(true), Some("2")));
    let code = format!(
        "{}\nprint('unshare_user=' + sc(272, 0x10000000))\nprint('unshare_net=' + sc(272, 0x40000000))\n\
         print('mount=' + sc(165, 0, 0, 0, 0, 0))\nprint('bpf=' + sc(321, 0, 0, 0))\nprint('keyctl=' + sc(250, 0))\n\
         print('io_uring_setup=' + sc(425, 1, 0))\nprint('kill_1=' + sc(62, 1, 19))\n\
         print('packet=' + attempt(lambda: socket.socket(17, socket.SOCK_RAW, 0)))\n\
         print('clone3=' + sc(435, 0, 0))\n",
        common::PY_SYSCALLS
    );
    let outcome = |b: &Berth| {
        let out = b.run(&[], &["python3", "-c", &code]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let (og, on) = (outcome(&g), outcome(&n));
    // A signal to PID 1 from its own namespace: Linux drops it (kill answers ok, and init goes on); gVisor's
    // kernel would deliver it, so there the filter refuses it.
    let but_pid_1 = |o: &str| o.lines().filter(|l| !l.starts_with("kill_1=")).collect::<Vec<_>>().join("\n");
    assert_eq!(but_pid_1(&og), but_pid_1(&on), "gvisor (left) and namespaces (right) answer differently");
    assert!(on.contains("kill_1=ok"), "{on}");
    for want in [
        "unshare_user=EPERM",
        "mount=EPERM",
        "bpf=EPERM",
        "keyctl=EPERM",
        "kill_1=EPERM",
        "packet=EAFNOSUPPORT",
        "clone3=ENOSYS",
    ] {
        assert!(og.contains(want), "{want} in {og}");
    }
}
