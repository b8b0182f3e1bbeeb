//! `berth shell` and `GET /v1/sandboxes/{id}/shell` end to end: a real daemon on a private socket, real
//! sandboxes, a terminal of the sandbox's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::text;
use serde_json::Value;
use tungstenite::Message;

/// A daemon of its own for one test (as in tests/daemon.rs).
struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::Builder::new().prefix("berth-shell-").tempdir().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("--root")
            .arg(dir.path().join("root"))
            .arg("--socket")
            .arg(dir.path().join("berth.sock"))
            .arg("daemon")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon { dir, child: Some(child) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.http("GET /healthz HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n").0 != 200 {
            assert!(Instant::now() < deadline, "the daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("berth.sock")
    }

    fn berth(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
        c.arg("--socket").arg(self.socket()).args(args).stdin(Stdio::null());
        c
    }

    /// `berth shell ARGS...` with `input` as its (piped) stdin.
    fn shell(&self, args: &[&str], input: &str) -> Output {
        let mut all = vec!["shell"];
        all.extend_from_slice(args);
        let mut child =
            self.berth(&all).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        wait_output(child, Duration::from_secs(30))
    }

    /// One raw HTTP/1.1 request over the socket: (status, head and body). The answer is read to the end of
    /// its `Content-Length` body, since a request to upgrade keeps the connection open.
    fn http(&self, request: &str) -> (u16, String) {
        let Ok(mut s) = UnixStream::connect(self.socket()) else { return (0, String::new()) };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(request.as_bytes());
        let mut resp = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&resp).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok());
                if length.is_some_and(|n| body.len() >= n) {
                    break;
                }
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => resp.extend_from_slice(&buf[..n]),
            }
        }
        let resp = String::from_utf8_lossy(&resp).into_owned();
        (resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), resp)
    }

    fn create(&self) -> String {
        let out = self.berth(&["create"]).output().unwrap();
        assert!(out.status.success(), "create: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    fn execs(&self, id: &str) -> Vec<Value> {
        let out = self.berth(&["ps", id, "--json"]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
    }

    /// A WebSocket to the shell route.
    fn ws(&self, id: &str, query: &str) -> tungstenite::WebSocket<UnixStream> {
        let stream = UnixStream::connect(self.socket()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let url = format!("ws://berth/v1/sandboxes/{id}/shell?{query}");
        tungstenite::client::client(url, stream).unwrap().0
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = self.berth(&["rm", "--all"]).output();
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

/// Wait for a child's output, killing it after `limit` (a test must not hang on a shell that never ends).
fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}; output so far: {}", text(&out.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

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

#[test]
fn a_shell_runs_on_a_terminal_of_the_sandbox() {
    let d = Daemon::start();
    let id = d.create();
    let out = d.shell(
        &[&id, "--cmd", "sh"],
        "tty; echo $TERM; stty size; stat -c 'owner %u:%g' $(tty); echo ctty=$(ps -o tty= -p $$); exit 3\n",
    );
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{shown} {}", text(&out.stderr));
    assert!(shown.contains("/dev/pts/"), "tty names the sandbox's terminal: {shown}");
    assert!(shown.contains("xterm-256color"), "TERM: {shown}");
    assert!(shown.contains("24 80"), "the default size: {shown}");
    // The terminal belongs to root inside (and to the tty group, as devpts's gid=5 says).
    assert!(shown.contains("owner 0:5"), "{shown}");
    // It is the shell's controlling terminal.
    assert!(shown.contains("ctty=pts/"), "{shown}");
    // It is an exec like any other: listed, with its exit code, and its log holds what the terminal showed.
    let execs = d.execs(&id);
    assert_eq!(execs.len(), 1);
    assert_eq!(execs[0]["result"]["exit_code"], 3);
    assert_eq!(execs[0]["argv"], serde_json::json!(["/bin/sh", "-c", "sh"]));
    let exec_id = execs[0]["exec_id"].as_str().unwrap();
    let log = d.berth(&["logs", &id, exec_id]).output().unwrap();
    assert!(text(&log.stdout).contains("xterm-256color"), "{}", text(&log.stdout));

    // The end of piped input ends a shell that is still reading; --term is passed on.
    let out = d.shell(&[&id, "--cmd", "sh", "--term", "vt100"], "echo term=$TERM\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("term=vt100"), "{}", text(&out.stdout));

    // A command that cannot start gets the shell's code.
    let out = d.shell(&[&id, "--cmd", "exec /no/such/program"], "");
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
}

#[test]
fn resizing_changes_the_terminal_size_and_signals_the_command() {
    let d = Daemon::start();
    let id = d.create();
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

#[test]
fn a_terminal_client_sends_its_size_and_comes_back_cooked() {
    let d = Daemon::start();
    let id = d.create();
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

#[test]
fn a_client_that_goes_away_hangs_the_shell_up() {
    let d = Daemon::start();
    let id = d.create();
    let mut ws = d.ws(&id, "cmd=sh");
    ws.send(Message::binary(b"echo re''ady\n".to_vec())).unwrap();
    read_until(&mut ws, |s| s.contains("ready\r\n"));
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let execs = d.execs(&id);
        if execs[0]["running"] == false {
            // SIGHUP ends sh: 128 + 1.
            assert_eq!(execs[0]["result"]["exit_code"], 129, "{execs:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the shell still runs without its client");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bad_id_is_404_before_upgrading() {
    let d = Daemon::start();
    let upgrade = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: berth\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
    };
    let (status, resp) = d.http(&upgrade("/v1/sandboxes/nosuch/shell"));
    assert_eq!(status, 404, "{resp}");
    assert!(resp.contains(r#""code":"not_found""#), "{resp}");
    let out = d.berth(&["shell", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("there is no sandbox"), "{}", text(&out.stderr));
    // Without the upgrade, or with a bad size, it is a 400 with an error body.
    let id = d.create();
    let (status, resp) =
        d.http(&format!("GET /v1/sandboxes/{id}/shell HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains(r#""code":"invalid_request""#), "{resp}");
    let (status, resp) = d.http(&upgrade(&format!("/v1/sandboxes/{id}/shell?rows=0")));
    assert_eq!(status, 400, "{resp}");
}
