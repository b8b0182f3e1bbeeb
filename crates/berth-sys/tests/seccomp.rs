//! The seccomp filter, installed for real. A filter cannot be removed, so each test re-runs this test binary
//! as a child process (selected by an environment variable) and does its filtering there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Seek, Write};
use std::process::{Command, Stdio};

use berth_sys::seccomp::{SeccompPolicy, set_no_new_privs};

const CHILD: &str = "BERTH_SECCOMP_TEST_CHILD";

/// In the test process: run `test` again in a child and require it to pass. In that child: return true.
fn in_child(test: &str) -> bool {
    if std::env::var(CHILD).is_ok_and(|t| t == test) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed: {:?}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "child ran no test:\n{stdout}");
    false
}

fn runs(program: &str, args: &[&str]) -> Option<bool> {
    let status = Command::new(program).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    status.ok().map(|s| s.success())
}

#[test]
fn filter_denies_and_allows() {
    if !in_child("filter_denies_and_allows") {
        return;
    }
    // Both come with util-linux; without them the two denials below would go unchecked.
    assert_eq!(runs("unshare", &["--version"]), Some(true), "this test needs unshare(1) from util-linux");
    assert_eq!(runs("setarch", &["--version"]), Some(true), "this test needs setarch(8) from util-linux");

    set_no_new_privs().unwrap();
    SeccompPolicy::sandbox_default().install().unwrap();

    // Ordinary file IO still works.
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(b"still here").unwrap();
    f.rewind().unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");

    // Spawning works: libc's clone3 gets ENOSYS and falls back to clone without CLONE_NEWUSER.
    assert_eq!(runs("true", &[]), Some(true));

    // mount fails with EPERM before the kernel looks at the (missing) target, which would be ENOENT.
    let err =
        rustix::mount::mount("none", "/nonexistent/berth-seccomp", "tmpfs", rustix::mount::MountFlags::empty(), None)
            .unwrap_err();
    assert_eq!(err, rustix::io::Errno::PERM);

    assert_eq!(runs("unshare", &["--user", "true"]), Some(false), "unshare(CLONE_NEWUSER) succeeded");
    // personality(ADDR_NO_RANDOMIZE) is denied.
    assert_eq!(runs("setarch", &[std::env::consts::ARCH, "-R", "true"]), Some(false), "setarch -R succeeded");
}

#[test]
fn install_requires_no_new_privs() {
    if !in_child("install_requires_no_new_privs") {
        return;
    }
    assert!(
        !rustix::thread::no_new_privs().unwrap(),
        "no_new_privs is already set by whoever ran the tests, so a refusal without it cannot be checked; run the \
         tests from a process without no_new_privs"
    );
    let err = SeccompPolicy::sandbox_default().install().unwrap_err();
    assert!(err.to_string().contains("no_new_privs"), "{err}");
}
