//! Live code contexts, end to end on a real daemon: state that survives runs (and a daemon restart), rich
//! results, errors, interrupts from another client, timeouts that interrupt and then kill, the output budget,
//! JavaScript and bash, the CLI, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::{Value, json};

fn make(d: &Daemon, id: &str, body: Value) -> String {
    let (status, got) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts"), &body.to_string());
    assert_eq!(status, 201, "{got}");
    serde_json::from_str::<Value>(&got).unwrap()["id"].as_str().unwrap().to_string()
}

/// The frames of one run.
fn run(d: &Daemon, id: &str, ctx: &str, body: Value) -> Vec<Value> {
    let (status, got) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"), &body.to_string());
    assert_eq!(status, 200, "{got}");
    got.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn code(d: &Daemon, id: &str, ctx: &str, code: &str) -> Vec<Value> {
    run(d, id, ctx, json!({"code": code}))
}

fn of<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

fn main_text(frames: &[Value]) -> Option<String> {
    frames
        .iter()
        .find(|f| f["type"] == "result" && f["is_main"] == true)
        .map(|f| f["data"]["text/plain"].as_str().unwrap().to_string())
}

fn stdout(frames: &[Value]) -> String {
    of(frames, "stdout").iter().map(|f| f["data"].as_str().unwrap()).collect()
}

fn end(frames: &[Value]) -> Value {
    let last = frames.last().unwrap().clone();
    assert_eq!(last["type"], "end", "{frames:?}");
    last
}

on_each_daemon_isolation! {
    fn python_state_results_and_errors_survive_from_run_to_run_and_a_daemon_restart(d, _iso) {
        let id = d.create(&[]);
        let ctx = make(d, &id, json!({"language": "python"}));
        let f = code(d, &id, &ctx, "x = 1\nprint('hello')\nimport os; os.system('echo from a child')\nx");
        assert_eq!(stdout(&f), "hello\nfrom a child\n");
        assert_eq!(main_text(&f).as_deref(), Some("1"));
        assert_eq!(end(&f)["execution_count"], 1);
        let f = code(d, &id, &ctx, "x + 1");
        assert_eq!(main_text(&f).as_deref(), Some("2"), "{f:?}");

        // Rich representations, display(), JSON for plain data.
        let f = code(
            d,
            &id,
            &ctx,
            "class Table:\n    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'\n\
             display(Table())\n{'a': [1, 2]}",
        );
        let shown = of(&f, "result");
        assert_eq!(shown[0]["is_main"], false);
        assert_eq!(shown[0]["data"]["text/html"], "<table><tr><td>1</td></tr></table>");
        assert_eq!(shown[1]["data"]["application/json"], json!({"a": [1, 2]}));
        // A matplotlib figure comes back as a PNG.
        let f = code(d, &id, &ctx, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
        let png = of(&f, "result").iter().find_map(|r| r["data"]["image/png"].as_str().map(String::from));
        let png = png.unwrap_or_else(|| panic!("no figure: {f:?}"));
        assert!(png.starts_with("iVBORw0KGgo"), "not a PNG: {}", &png[..20]);

        // An error: its name, value and traceback, and the state before it kept.
        let f = code(d, &id, &ctx, "y = x * 10\n1 / 0");
        let err = of(&f, "error")[0].clone();
        assert_eq!((err["name"].as_str(), err["value"].as_str()), (Some("ZeroDivisionError"), Some("division by zero")));
        assert!(err["traceback"].as_str().unwrap().contains("1 / 0"), "{err}");
        assert_eq!(main_text(&code(d, &id, &ctx, "y")).as_deref(), Some("10"));
        let f = code(d, &id, &ctx, "def broken(:\n  pass");
        assert_eq!(of(&f, "error")[0]["name"], "SyntaxError");
        // Top-level await runs.
        let f = code(d, &id, &ctx, "import asyncio\nawait asyncio.sleep(0.01)\n'awaited'");
        assert_eq!(main_text(&f).as_deref(), Some("'awaited'"));

        // A daemon killed and started again reaches the same interpreter, with its state.
        d.kill();
        d.spawn();
        assert_eq!(main_text(&code(d, &id, &ctx, "x + y")).as_deref(), Some("11"));
        let (_, listed) = d.http("GET", &format!("/v1/sandboxes/{id}/contexts"), "");
        let listed: Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(listed[0]["id"], ctx.as_str());
        assert_eq!(listed[0]["state"], "idle");
        assert!(listed[0]["execution_count"].as_u64().unwrap() >= 8, "{listed}");

        // Every run is in the journal; removing the context ends its interpreter.
        let (_, journal) = d.http("GET", &format!("/v1/sandboxes/{id}/journal"), "");
        assert!(journal.contains("\"context_run\"") && journal.contains("\"context_run_finished\""));
        let exec_id = listed[0]["exec_id"].as_str().unwrap().to_string();
        let (status, _) = d.http("DELETE", &format!("/v1/sandboxes/{id}/contexts/{ctx}"), "");
        assert_eq!(status, 204);
        let _ = exec_id;
        let script = "ls -A /run/berth/contexts; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c 'context drive[r]'";
        let out = d.berth(&["exec", &id, "--", "sh", "-c", script]);
        assert_eq!(text(&out.stdout).trim(), "0", "the interpreter and its sockets are gone");
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"), r#"{"code": "1"}"#);
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("has no code context"), "{body}");
    }
}

on_each_daemon_isolation! {
    fn an_interrupt_from_another_client_stops_the_run_and_keeps_the_state(d, _iso) {
        let id = d.create(&[]);
        let ctx = make(d, &id, json!({"language": "python"}));
        code(d, &id, &ctx, "kept = 'still here'");
        let runner = d
            .cmd(&["context", "run", &id, &ctx, "--json", "import time\nprint('started', flush=True)\ntime.sleep(60)"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Busy until the interrupt: a second run is refused, and the context says so.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, c) = d.http("GET", &format!("/v1/sandboxes/{id}/contexts/{ctx}"), "");
            if c.contains("\"busy\"") {
                break;
            }
            assert!(Instant::now() < deadline, "the context never became busy: {c}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let (status, body) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"), r#"{"code": "1"}"#);
        assert_eq!(status, 409, "{body}");
        let out = d.berth(&["context", "interrupt", &id, &ctx]);
        assert_eq!(text(&out.stdout).trim(), "interrupted", "{}", text(&out.stderr));
        let out = common::daemon::wait_output(runner, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(130));
        let frames: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(of(&frames, "error")[0]["name"], "KeyboardInterrupt");
        assert_eq!(end(&frames)["interrupted"], true);
        assert_eq!(main_text(&code(d, &id, &ctx, "kept")).as_deref(), Some("'still here'"));
        let out = d.berth(&["context", "interrupt", &id, &ctx]);
        assert_eq!(text(&out.stdout).trim(), "nothing was running");
    }
}

on_each_daemon_isolation! {
    fn a_timeout_interrupts_and_code_that_will_not_stop_is_killed_and_started_afresh(d, _iso) {
        let id = d.create(&[]);
        let ctx = make(d, &id, json!({"language": "python"}));
        code(d, &id, &ctx, "n = 5");
        let f = run(d, &id, &ctx, json!({"code": "import time\ntime.sleep(30)", "timeout_seconds": 0.5}));
        let e = end(&f);
        assert_eq!(
            (e["timed_out"].clone(), e["interrupted"].clone(), e["killed"].clone()),
            (json!(true), json!(true), json!(false))
        );
        assert_eq!(main_text(&code(d, &id, &ctx, "n")).as_deref(), Some("5"), "an interrupt keeps the state");
        // Code that ignores the interrupt: killed after the grace period, and the context says so.
        let stubborn = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
        let f = run(d, &id, &ctx, json!({"code": stubborn, "timeout_seconds": 0.5}));
        let e = end(&f);
        assert_eq!((e["timed_out"].clone(), e["killed"].clone()), (json!(true), json!(true)), "{f:?}");
        let err = of(&f, "error")[0].clone();
        assert_eq!(err["name"], "ContextKilled");
        assert!(err["value"].as_str().unwrap().contains("its variables and imports are lost"), "{err}");
        let f = code(d, &id, &ctx, "n");
        assert_eq!(of(&f, "error")[0]["name"], "NameError", "a fresh interpreter: {f:?}");
        assert_eq!(end(&f)["execution_count"], 1);
    }
}

on_each_daemon_isolation! {
    fn output_past_the_budget_keeps_head_and_tail_with_a_marker_and_the_log_keeps_it_all(d, _iso) {
        let id = d.create(&[]);
        let ctx = make(d, &id, json!({"language": "python"}));
        let f = run(d, &id, &ctx, json!({"code": "for i in range(20000): print(i)", "max_output_bytes": 4096}));
        let out = stdout(&f);
        assert!(out.starts_with("0\n1\n2\n"), "the head is kept");
        assert!(out.ends_with("19998\n19999\n"), "the tail is kept");
        assert!(out.len() <= 4096, "{} bytes", out.len());
        let dropped = of(&f, "truncated")[0]["dropped_bytes"].as_u64().unwrap();
        let e = end(&f);
        assert_eq!(e["bytes_dropped"].as_u64().unwrap(), dropped);
        assert_eq!(e["output_bytes"].as_u64().unwrap(), out.len() as u64 + dropped);
        let log = std::fs::read(d.root().join("logs").join(&id).join(format!("{ctx}-1.log"))).unwrap();
        assert_eq!(log.len() as u64, e["output_bytes"].as_u64().unwrap(), "the run's log has all of it");
    }
}

on_each_daemon_isolation! {
    fn javascript_and_bash_contexts_keep_their_state_too(d, _iso) {
        let id = d.create(&[]);
        let js = make(d, &id, json!({"language": "javascript"}));
        let f = code(d, &id, &js, "let total = 40; console.log('from node'); total");
        assert_eq!((stdout(&f).as_str(), main_text(&f).as_deref()), ("from node\n", Some("40")));
        assert_eq!(main_text(&code(d, &id, &js, "total + 2")).as_deref(), Some("42"));
        let f = code(d, &id, &js, "({a: [1, 2]})");
        assert_eq!(of(&f, "result")[0]["data"]["application/json"], json!({"a": [1, 2]}));
        let f = code(d, &id, &js, "await new Promise(r => setTimeout(() => r(7), 10))");
        assert_eq!(main_text(&f).as_deref(), Some("7"));
        let f = code(d, &id, &js, "throw new TypeError('bad thing')");
        let err = of(&f, "error")[0].clone();
        assert_eq!((err["name"].as_str(), err["value"].as_str()), (Some("TypeError"), Some("bad thing")));
        let f = run(d, &id, &js, json!({"code": "while (true) {}", "timeout_seconds": 0.5}));
        assert_eq!((end(&f)["timed_out"].clone(), end(&f)["killed"].clone()), (json!(true), json!(false)), "{f:?}");
        assert_eq!(main_text(&code(d, &id, &js, "total")).as_deref(), Some("40"));

        let sh = make(d, &id, json!({"language": "bash", "cwd": "/tmp", "env": {"GREETING": "hi"}}));
        let f = code(d, &id, &sh, "COUNT=3; cd /workspace; echo $GREETING");
        assert_eq!(stdout(&f), "hi\n");
        let f = code(d, &id, &sh, "echo $COUNT $PWD; false");
        assert_eq!(stdout(&f), "3 /workspace\n");
        assert_eq!(of(&f, "error")[0]["name"], "ExitStatus");
        let f = run(d, &id, &sh, json!({"code": "sleep 30; echo not reached", "timeout_seconds": 0.5}));
        assert_eq!(stdout(&f), "", "{f:?}");
        assert_eq!(end(&f)["timed_out"], true);
        assert_eq!(stdout(&code(d, &id, &sh, "echo still $COUNT")), "still 3\n");
    }
}

on_each_daemon_isolation! {
    fn the_cli_creates_lists_runs_from_stdin_and_removes(d, _iso) {
        let id = d.create(&[]);
        let out = d.berth(&["context", "create", &id, "--language", "python", "--env", "NAME=berth"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ctx = text(&out.stdout).trim().to_string();
        let out = d.berth(&["context", "ls", &id]);
        assert!(text(&out.stdout).contains(&ctx) && text(&out.stdout).contains("python"), "{}", text(&out.stdout));
        let mut child = d.cmd(&["context", "run", &id, &ctx]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"import os\nprint(os.environ['NAME'])\n6 * 7\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(text(&out.stdout), "berth\n42\n");
        let out = d.berth(&["context", "run", &id, &ctx, "raise ValueError('no')"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains("ValueError: no"), "{}", text(&out.stderr));
        let out = d.berth(&["context", "run", &id, &ctx, "--timeout", "300ms", "import time; time.sleep(10)"]);
        assert_eq!(out.status.code(), Some(124));
        let out = d.berth(&["context", "rm", &id, &ctx]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(!text(&d.berth(&["context", "ls", &id]).stdout).contains(&ctx));
    }
}

on_each_daemon_isolation! {
    fn bad_requests_are_refused_with_a_reason_and_an_idle_clock_ignores_a_waiting_interpreter(d, _iso) {
        let id = d.create(&["--idle-timeout", "3s"]);
        for (body, status, says) in [
            (json!({"language": "cobol"}), 400, "unknown variant"),
            (json!({"language": "python", "cwd": "relative"}), 400, "absolute"),
            (json!({"language": "python", "surprise": 1}), 400, "unknown field"),
        ] {
            let (got, text) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts"), &body.to_string());
            assert_eq!(got, status, "{body}: {text}");
            assert!(text.contains(says), "{body}: {text}");
        }
        let (got, body) = d.http("POST", "/v1/sandboxes/nope/contexts", r#"{"language": "python"}"#);
        assert_eq!(got, 404, "{body}");
        let ctx = make(d, &id, json!({"language": "python"}));
        for (body, says) in [
            (json!({"code": "1", "timeout_seconds": -1}), "timeout_seconds"),
            (json!({"code": "1", "max_output_bytes": 1}), "max_output_bytes"),
        ] {
            let (got, text) = d.http("POST", &format!("/v1/sandboxes/{id}/contexts/{ctx}/run"), &body.to_string());
            assert_eq!(got, 400, "{text}");
            assert!(text.contains(says), "{text}");
        }
        // A context waiting between runs is no activity: the idle sandbox is removed as if it had none.
        let deadline = Instant::now() + Duration::from_secs(20);
        while d.ids().contains(&id) {
            assert!(Instant::now() < deadline, "an idle sandbox with a context was kept alive");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
