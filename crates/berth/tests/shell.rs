//! `berth shell` and `GET /v1/sandboxes/{id}/shell` end to end: a real daemon on a private socket, real
//! sandboxes, a terminal of the sandbox's own; each behind both isolations (under gVisor the terminal is one
//! its kernel's devpts has, opened by init and copied to the daemon).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::wait_output;
use common::text;
use serde_json::Value;
use tungstenite::Message;

/// Read the shell's messages until `until` says stop or the exit message comes: (terminal output, exit).
fn read_until(
    ws: &mut tungstenite::WebSocket<UnixStream>,
    mut until: impl FnMut(&str) -> bool,
) -> (String, Option<Value>) {
    let mut shown = String::new();
    loop {
        match ws.read() {
            Ok(Message::Binary(b)) => {
                shown.push_str(&String::from_utf8_lossy(&b));
                if until(&shown) {
                    return (shown, None);
                }
            }
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v.get("exit").is_some() {
                    return (shown, Some(v["exit"].clone()));
                }
            }
            Ok(_) => {}
            Err(e) => panic!("the shell's connection failed ({e}); shown so far: {shown}"),
        }
    }
}

on_each_daemon_isolation! {
    fn a_shell_runs_on_a_terminal_of_the_sandbox(d, iso) {
        let id = d.create(&[]);
        let out = d.shell(
            &[&id, "--cmd", "sh"],
            "tty; echo $TERM; stty size; stat -c 'owner %u:%g' $(tty); (exec 3</dev/tty) && echo has-ctty; exit 3\n",
        );
        let shown = text(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{shown} {}", text(&out.stderr));
        assert!(shown.contains("/dev/pts/"), "tty names the sandbox's terminal: {shown}");
        assert!(shown.contains("xterm-256color"), "TERM: {shown}");
        assert!(shown.contains("24 80"), "the default size: {shown}");
        if iso == "namespaces" {
            // The terminal belongs to root inside (and to the tty group, as devpts's gid=5 says).
            assert!(shown.contains("owner 0:5"), "{shown}");
            // It is the shell's controlling terminal.
            assert!(shown.contains("has-ctty"), "{shown}");
        } else {
            // gVisor's devpts gives its terminals root's group, and its /dev/tty opens for nobody (EIO); that
            // the terminal controls the shell's session shows in its hangup and resize tests.
            assert!(shown.contains("owner 0:0"), "{shown}");
            assert!(shown.contains("/dev/tty: Input/output error"), "{shown}");
        }
        // It is an exec like any other: listed, with its exit code, and its log holds what the terminal showed.
        let execs = d.execs(&id);
        assert_eq!(execs.len(), 1);
        assert_eq!(execs[0]["result"]["exit_code"], 3);
        assert_eq!(execs[0]["argv"], serde_json::json!(["/bin/sh", "-c", "sh"]));
        let exec_id = execs[0]["exec_id"].as_str().unwrap();
        let log = d.berth(&["logs", &id, exec_id]);
        assert!(text(&log.stdout).contains("xterm-256color"), "{}", text(&log.stdout));

        // The end of piped input ends a shell that is still reading; --term is passed on.
        let out = d.shell(&[&id, "--cmd", "sh", "--term", "vt100"], "echo term=$TERM\n");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("term=vt100"), "{}", text(&out.stdout));

        // A command that cannot start gets the shell's code.
        let out = d.shell(&[&id, "--cmd", "exec /no/such/program"], "");
        assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    }
}

on_each_daemon_isolation! {
    fn resizing_changes_the_terminal_size_and_signals_the_command(d, _iso) {
        let id = d.create(&[]);
        let mut ws = d.ws(&id, "cmd=sh&rows=30&cols=90");
        ws.send(Message::binary(b"stty size; trap 'echo got-winch' WINCH; echo re''ady\n".to_vec())).unwrap();
        let (shown, exit) = read_until(&mut ws, |s| s.contains("ready\r\n"));
        assert!(exit.is_none() && shown.contains("30 90"), "the size asked for: {shown}");
        ws.send(Message::text(r#"{"resize":{"rows":40,"cols":100}}"#)).unwrap();
        ws.send(Message::binary(b"stty size; exit 7\n".to_vec())).unwrap();
        let (shown, exit) = read_until(&mut ws, |_| false);
        assert!(shown.contains("40 100"), "the new size: {shown}");
        // The shell was told (it runs its trap once it has read the next line, at the latest).
        assert!(shown.contains("got-winch"), "{shown}");
        assert_eq!(exit.unwrap()["code"], 7);
    }
}

on_each_daemon_isolation! {
    fn a_terminal_client_sends_its_size_and_comes_back_cooked(d, _iso) {
        let id = d.create(&[]);
        // script(1) gives the client a terminal of its own.
        let client = format!(
            "stty rows 33 cols 99; {} --socket {} shell {id} --cmd 'stty size; exit 5'; stty -a",
            env!("CARGO_BIN_EXE_berth"),
            d.socket().display()
        );
        let child = Command::new("script")
            .args(["-qec", &client, "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script(1) from util-linux");
        let out = wait_output(child, Duration::from_secs(30));
        let shown = text(&out.stdout);
        assert!(shown.contains("33 99"), "{shown}");
        // The local terminal is back in its own mode after raw mode.
        assert!(shown.contains(" icanon ") && shown.contains(" echo "), "{shown}");
    }
}

on_each_daemon_isolation! {
    fn a_client_that_goes_away_hangs_the_shell_up(d, _iso) {
        let id = d.create(&[]);
        let mut ws = d.ws(&id, "cmd=sh");
        ws.send(Message::binary(b"echo re''ady\n".to_vec())).unwrap();
        read_until(&mut ws, |s| s.contains("ready\r\n"));
        drop(ws);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let execs = d.execs(&id);
            if execs[0]["running"] == false {
                // SIGHUP ends sh (128 + 1); or sh reads the hung-up terminal's EIO first and exits 2 on it.
                let code = execs[0]["result"]["exit_code"].as_i64();
                assert!(matches!(code, Some(129 | 2)), "{execs:?}");
                break;
            }
            assert!(Instant::now() < deadline, "the shell still runs without its client");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

on_each_daemon_isolation! {
    fn a_bad_id_is_404_before_upgrading(d, _iso) {
        let upgrade = |path: &str| {
            format!(
                "GET {path} HTTP/1.1\r\nHost: berth\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
        };
        let (status, resp) = d.raw(&upgrade("/v1/sandboxes/nosuch/shell"));
        assert_eq!(status, 404, "{resp}");
        assert!(resp.contains(r#""code":"not_found""#), "{resp}");
        let out = d.berth(&["shell", "nosuch"]);
        assert_eq!(out.status.code(), Some(125));
        assert!(text(&out.stderr).contains("there is no sandbox"), "{}", text(&out.stderr));
        // Without the upgrade, or with a bad size, it is a 400 with an error body.
        let id = d.create(&[]);
        let (status, resp) =
            d.raw(&format!("GET /v1/sandboxes/{id}/shell HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n"));
        assert_eq!(status, 400, "{resp}");
        assert!(resp.contains(r#""code":"invalid_request""#), "{resp}");
        let (status, resp) = d.raw(&upgrade(&format!("/v1/sandboxes/{id}/shell?rows=0")));
        assert_eq!(status, 400, "{resp}");
    }
}
