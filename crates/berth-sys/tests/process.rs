//! A tool started with `end_with_caller` ends when the thread that started it does (as it would when the
//! whole calling process dies), and not before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_tool_started_so_ends_with_the_thread_that_started_it() {
    let (tx, rx) = std::sync::mpsc::channel();
    let starter = std::thread::spawn(move || {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        berth_sys::process::end_with_caller(&mut cmd);
        let child = cmd.spawn().unwrap();
        // Alive while its starter lives.
        std::thread::sleep(Duration::from_millis(200));
        assert!(std::path::Path::new(&format!("/proc/{}", child.id())).exists());
        tx.send(child).unwrap();
    });
    starter.join().unwrap();
    let mut child = rx.recv().unwrap();
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "it outlived its starter");
}

#[test]
fn a_tool_started_so_runs_to_its_end_while_its_caller_waits() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 0.2; echo done"]);
    berth_sys::process::end_with_caller(&mut cmd);
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
}
