//! Metering and budgets, end to end: CPU, memory, disk and egress as the kernel and the proxy count them, `/metrics`
//! in the Prometheus text format, budgets that warn at 80 % and end a sandbox at 100 % (CPU, egress, running
//! time, a child drawing on its owner's), counters kept across a daemon restart, and bad budgets refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

fn usage(d: &Daemon, id: &str) -> Value {
    let out = d.berth(&["usage", id, "--json"]);
    assert!(out.status.success(), "usage: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Wait (up to a minute) until `f` holds; panics with `what` if it never does.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The receipt of a sandbox once it is gone.
fn receipt(d: &Daemon, id: &str) -> Value {
    wait_for(&format!("the removal of {id}"), || {
        let (status, body) = d.http("GET", &format!("/v1/sandboxes/{id}/receipt"), "");
        (status == 200).then(|| serde_json::from_str(&body).unwrap())
    })
}

fn journal_actions(d: &Daemon, id: &str) -> Vec<Value> {
    let out = d.berth(&["journal", id, "--json"]);
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

/// Burn `seconds` of this process's own CPU time, then print it.
const BURN: &str = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass\nprint(time.process_time())";

#[test]
fn cpu_seconds_are_what_the_sandbox_burned() {
    let d = Daemon::start();
    let id = d.create(&["--cpus", "1"]);
    let out = d.berth(&["exec", &id, "--", "python3", "-c", BURN, "1.5"]);
    let burned: f64 = text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
    let u = usage(&d, &id);
    let cpu = u["cpu_seconds"].as_f64().unwrap();
    // The cgroup holds the exec's process: it counts at least what that process burned, and with one core
    // at most its running time (plus a quota period).
    assert!(cpu >= burned, "cpu_seconds {cpu} < {burned} burned by the exec");
    let running = u["running_seconds"].as_f64().unwrap();
    assert!(cpu <= running + 0.1, "one core cannot burn {cpu} s in {running} s");
    assert!(u["execs"].as_u64().unwrap() >= 1);
    assert_eq!(u["paused_seconds"], 0.0);
    assert_eq!(u["id"], id.as_str());
    // In its recent usage: points 5 s apart, CPU counting up to what `usage` says now.
    let points = wait_for("two usage points", || {
        let out = d.berth(&["usage", &id, "--history", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (v.as_array().unwrap().len() >= 2).then_some(v)
    });
    let (a, b) = (&points[0], &points[1]);
    assert!(b["at_ms"].as_u64().unwrap() - a["at_ms"].as_u64().unwrap() >= 5000, "{points}");
    assert!(b["cpu_seconds"].as_f64() >= a["cpu_seconds"].as_f64(), "{points}");
    assert!(text(&d.berth(&["usage", &id, "--history"]).stdout).starts_with("TIME"));
    // In inspect too.
    let rec: Value = serde_json::from_slice(&d.berth(&["inspect", &id, "--json"]).stdout).unwrap();
    assert!(rec["usage"]["cpu_seconds"].as_f64().unwrap() >= burned, "{rec}");
    // And in the receipt, measured before the runtime went.
    let rm = d.berth(&["rm", &id, "--json"]);
    let receipts: Value = serde_json::from_slice(&rm.stdout).unwrap();
    assert!(receipts[0]["usage"]["cpu_seconds"].as_f64().unwrap() >= burned, "{receipts}");
}

#[test]
fn peak_memory_holds_what_was_allocated_disk_what_was_written_and_memory_is_integrated() {
    let d = Daemon::start();
    let id = d.create(&["--memory", "512M"]);
    // 96 MiB written (so every page is charged), held until the exec ends.
    let out = d.berth(&["exec", &id, "--", "python3", "-c", "b = bytearray(b'x' * (96 << 20)); print(len(b))"]);
    assert_eq!(text(&out.stdout).trim(), (96u64 << 20).to_string(), "{}", text(&out.stderr));
    let u = usage(&d, &id);
    let peak = u["peak_memory_bytes"].as_u64().unwrap();
    assert!(peak >= 96 << 20, "peak {peak} below the 96 MiB allocated");
    assert!(peak <= 512 << 20, "peak {peak} above the limit");
    // Disk: what its files take in the pool (read again when older than 5 s; btrfs counts as of its last
    // commit, which sync makes).
    d.sh(&id, "head -c 8388608 /dev/urandom > /workspace/blob && sync");
    wait_for("8 MiB on disk", || (usage(&d, &id)["disk_bytes"].as_u64().unwrap() >= 8 << 20).then_some(()));
    // The integral grows with every sample of memory above zero.
    wait_for("memory integrated over two samples", || {
        (usage(&d, &id)["memory_gib_seconds"].as_f64().unwrap() > 0.0).then_some(())
    });
    d.berth(&["rm", &id]);
}

const FETCH: &str = "import sys, urllib.request\nprint(len(urllib.request.urlopen(sys.argv[1], timeout=10).read()))";

fn fetch(d: &Daemon, id: &str, port: u16) -> usize {
    let out = d.berth(&["exec", id, "--", "python3", "-c", FETCH, &format!("http://up.test:{port}/")]);
    text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("fetch: {} {}", text(&out.stdout), text(&out.stderr)))
}

fn allowing(port: u16) -> Vec<String> {
    vec!["--allow-net".into(), format!("up.test:{port}"), "--add-host".into(), "up.test:127.0.0.1".into()]
}

#[test]
fn egress_bytes_are_counted_each_way_and_kept_across_a_daemon_restart() {
    let mut d = Daemon::start();
    let port = common::upstream(100_000);
    let args = allowing(port);
    let id = d.create(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(fetch(&d, &id, port), 100_000);
    let u = usage(&d, &id);
    let (out, inn) = (u["egress_bytes_out"].as_u64().unwrap(), u["egress_bytes_in"].as_u64().unwrap());
    assert!(inn >= 100_000, "egress_bytes_in {inn}: the body alone is 100000 bytes");
    assert!(out > 0 && out < 10_000, "egress_bytes_out {out}: one request");
    // What only the daemon counts is written out within 10 s; a new daemon reads it back.
    let file = d.root().join("meters").join(format!("{id}.json"));
    wait_for("the meter written out", || {
        let m: Value = serde_json::from_slice(&std::fs::read(&file).ok()?).ok()?;
        (m["egress_in_closed"].as_u64()? >= 100_000).then_some(())
    });
    d.kill();
    d.spawn();
    let after = usage(&d, &id);
    assert!(after["egress_bytes_in"].as_u64().unwrap() >= inn, "lost across a restart: {after}");
    assert!(after["cpu_seconds"].as_f64().unwrap() >= u["cpu_seconds"].as_f64().unwrap(), "the kernel's count");
    d.berth(&["rm", &id]);
    assert!(!file.exists(), "the meter goes with the sandbox");
}

/// One sample of the Prometheus text format: its name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A small parser of the text format: `# HELP`/`# TYPE` comments, and `name{k="v",...} value` lines, with
/// `\\`, `\"` and `\n` escapes in label values. Each sample's family must have been typed before it.
fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut typed = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap();
            assert!(matches!(parts.next(), Some("counter" | "gauge")), "{line}");
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}"));
                let mut labels = BTreeMap::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    let mut v = String::new();
                    loop {
                        match chars.next().unwrap_or_else(|| panic!("unterminated: {line}")) {
                            '"' => break,
                            '\\' => v.push(match chars.next().unwrap() {
                                'n' => '\n',
                                c => c,
                            }),
                            c => v.push(c),
                        }
                    }
                    labels.insert(key, v);
                    if chars.peek() == Some(&',') {
                        chars.next();
                    }
                }
                (name.to_string(), labels)
            }
        };
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "metric name {name}");
        assert!(typed.contains(&name), "{name} has no TYPE before it");
        out.push(Sample { name, labels, value });
    }
    out
}

/// The body of a whole HTTP/1.1 answer, chunks put back together.
fn body_of(answer: &str) -> String {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        String::from_utf8(common::daemon::dechunk(body.as_bytes())).unwrap()
    } else {
        body.to_string()
    }
}

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v)))
}

#[test]
fn metrics_are_prometheus_text_with_every_sandbox_and_the_daemons_counts() {
    let api_port = common::free_port();
    let d = Daemon::start_with(&["--listen", &format!("127.0.0.1:{api_port}")]);
    let id = d.create(&["--name", "metered"]);
    d.sh(&id, "true");
    let (status, body) = d.http("GET", "/metrics", "");
    assert_eq!(status, 200, "{body}");
    let samples = parse_metrics(&body);
    let me = [("sandbox", id.as_str()), ("name", "metered")];
    for name in [
        "berth_sandbox_cpu_seconds_total",
        "berth_sandbox_memory_bytes",
        "berth_sandbox_memory_peak_bytes",
        "berth_sandbox_memory_gib_seconds_total",
        "berth_sandbox_disk_bytes",
        "berth_sandbox_execs_total",
        "berth_sandbox_running_seconds",
    ] {
        assert!(find(&samples, name, &me).is_some(), "no {name} for {id}:\n{body}");
    }
    assert!(find(&samples, "berth_sandbox_cpu_seconds_total", &me).unwrap().value > 0.0);
    assert!(find(&samples, "berth_sandbox_execs_total", &me).unwrap().value >= 1.0);
    for direction in ["out", "in"] {
        let labels = [me[0], me[1], ("direction", direction)];
        assert!(find(&samples, "berth_sandbox_egress_bytes_total", &labels).is_some(), "{direction}:\n{body}");
    }
    assert_eq!(find(&samples, "berth_sandboxes", &[("state", "running")]).unwrap().value, 1.0);
    assert!(find(&samples, "berth_metering_samples_total", &[]).is_some());
    // On the TCP listener a token is needed, as for every route.
    let get = |auth: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", api_port)).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        (out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), out)
    };
    assert_eq!(get("").0, 401);
    let minted: Value =
        serde_json::from_slice(&d.berth(&["token", "create", "--name", "scrape", "--json"]).stdout).unwrap();
    let (status, out) = get(&format!("Authorization: Bearer {}\r\n", minted["token"].as_str().unwrap()));
    assert_eq!(status, 200);
    assert!(find(&parse_metrics(&body_of(&out)), "berth_sandbox_cpu_seconds_total", &me).is_some());
    d.berth(&["rm", &id]);
}

#[test]
fn a_cpu_budget_ends_the_sandbox_with_the_reason_in_its_receipt() {
    let d = Daemon::start();
    let id = d.create(&["--budget", "cpu=1s"]);
    assert_eq!(usage(&d, &id)["budget"]["cpu_seconds"], 1.0);
    // It burns without end; the daemon ends it, and the command's result says it was killed.
    let (_, frames) =
        d.http("POST", &format!("/v1/sandboxes/{id}/execs"), r#"{"argv": ["python3", "-c", "while True: pass"]}"#);
    let exit: Value = serde_json::from_str(frames.lines().last().unwrap()).unwrap();
    assert_eq!((exit["type"].as_str(), exit["killed"].as_bool()), (Some("exit"), Some(true)), "{frames}");
    let r = receipt(&d, &id);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("budget: cpu ") && reason.ends_with(" s of 1 s"), "{reason}");
    assert!(r["usage"]["cpu_seconds"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["clean"].as_bool().unwrap(), "{r}");
    assert!(!d.ids().contains(&id));
    // berth receipt says why it ended.
    let shown = text(&d.berth(&["receipt", &id]).stdout);
    assert!(shown.lines().nth(1).is_some_and(|l| l.trim() == format!("reason: {reason}")), "{shown}");
}

#[test]
fn an_egress_budget_warns_at_80_percent_and_ends_the_sandbox_at_100() {
    let d = Daemon::start();
    let port = common::upstream(50_000);
    let mut args = allowing(port);
    args.extend(["--budget".to_string(), "egress=10M".to_string()]);
    let id = d.create(&args.iter().map(String::as_str).collect::<Vec<_>>());
    fetch(&d, &id, port);
    let used = usage(&d, &id)["charged"]["egress_bytes"].as_u64().unwrap();
    assert!(used >= 50_000);
    // Changed live: what it used is now 85 % of its budget.
    let limit = (used as f64 / 0.85) as u64;
    let out = d.berth(&["budget", &id, &format!("egress={limit}"), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let u: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u["budget"]["egress_bytes"], limit);
    wait_for("the 80 % warning in the journal", || {
        journal_actions(&d, &id).into_iter().find(|r| r["action"] == "budget_warning")
    });
    let (_, events) = d.http("GET", "/v1/events", "");
    assert!(events.contains("\"budget_warning\"") && events.contains(&id), "{events}");
    assert!(d.ids().contains(&id), "a warning does not end it");
    // The next fetch passes the limit.
    let _ = d.berth(&["exec", &id, "--", "python3", "-c", FETCH, &format!("http://up.test:{port}/")]);
    let r = receipt(&d, &id);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("budget: egress ") && reason.ends_with(&format!(" bytes of {limit} bytes")), "{reason}");
}

#[test]
fn a_wall_budget_ends_an_idle_sandbox() {
    let d = Daemon::start();
    let id = d.create(&["--budget", "wall=2s"]);
    let r = receipt(&d, &id);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("budget: wall ") && reason.ends_with(" s of 2 s"), "{reason}");
    assert!(r["usage"]["running_seconds"].as_f64().unwrap() >= 2.0, "{r}");
}

#[test]
fn a_child_draws_on_its_owners_budget_and_a_session_sees_only_its_own_metrics() {
    let api_port = common::free_port();
    let d = Daemon::start_with(&["--listen", &format!("127.0.0.1:{api_port}")]);
    let owner = d.create(&["--budget", "cpu=2s"]);
    let other = d.create(&[]);
    let token = text(&d.berth(&["exec", &owner, "--", "printenv", "BERTH_TOKEN"]).stdout).trim().to_string();
    let call = |method: &str, path: &str, body: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", api_port)).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, body_of(&out))
    };
    let (status, body) = call("POST", "/v1/sandboxes", "{}");
    assert_eq!(status, 201, "{body}");
    let child = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string();
    // The session sees its sandbox and its child, not the other.
    let (status, metrics) = call("GET", "/metrics", "");
    assert_eq!(status, 200, "{metrics}");
    let samples = parse_metrics(&metrics);
    assert!(find(&samples, "berth_sandbox_cpu_seconds_total", &[("sandbox", &owner)]).is_some(), "{metrics}");
    assert!(find(&samples, "berth_sandbox_cpu_seconds_total", &[("sandbox", &child)]).is_some(), "{metrics}");
    assert!(find(&samples, "berth_sandbox_cpu_seconds_total", &[("sandbox", &other)]).is_none(), "{metrics}");
    assert_eq!(call("GET", &format!("/v1/sandboxes/{child}/usage"), "").0, 200);
    assert_eq!(call("GET", &format!("/v1/sandboxes/{other}/usage"), "").0, 401);
    assert_eq!(call("POST", &format!("/v1/sandboxes/{owner}/budget"), r#"{"cpu_seconds": 1000}"#).0, 401);
    // The child burns; its owner's budget runs out, and both go.
    let burn = serde_json::json!({"argv": ["python3", "-c", "while True: pass"], "detach": true}).to_string();
    let (status, body) = call("POST", &format!("/v1/sandboxes/{child}/execs"), &burn);
    assert_eq!(status, 201, "a detached exec: {body}");
    let r = receipt(&d, &owner);
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.starts_with("budget: cpu ") && reason.ends_with(" s of 2 s"), "{reason}");
    assert!(r["usage"]["cpu_seconds"].as_f64().unwrap() < 2.0, "its own use alone did not pass it: {r}");
    assert_eq!(receipt(&d, &child)["reason"], "owner removed");
    assert!(d.ids() == vec![other.clone()], "{:?}", d.ids());
    d.berth(&["rm", &other]);
}

#[test]
fn bad_budgets_are_refused_with_a_sentence() {
    let d = Daemon::start();
    for bad in ["ram=1G", "cpu=0", "cpu", "egress=lots", "cpu=1m,cpu=2m"] {
        let out = d.berth(&["create", "--budget", bad]);
        assert!(!out.status.success(), "{bad} was taken");
        assert!(text(&out.stderr).contains("budget"), "{bad}: {}", text(&out.stderr));
    }
    for body in [
        r#"{"budget": {"cpu_seconds": 0}}"#,
        r#"{"budget": {"wall_seconds": -5}}"#,
        r#"{"budget": {"egress_bytes": 0}}"#,
        r#"{"budget": {"disk": 1}}"#,
        r#"{"budget": "cpu=10m"}"#,
    ] {
        let (status, reply) = d.http("POST", "/v1/sandboxes", body);
        assert_eq!(status, 400, "{body}: {reply}");
        let v: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(v["error"]["code"], "invalid_request", "{reply}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 20, "{reply}");
    }
    assert!(d.ids().is_empty(), "nothing was created");
    let id = d.create(&[]);
    let (status, reply) = d.http("POST", &format!("/v1/sandboxes/{id}/budget"), r#"{"cpu_seconds": -1}"#);
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("must be a positive number"), "{reply}");
    let out = d.berth(&["budget", &id, "memory=1G"]);
    assert!(!out.status.success() && text(&out.stderr).contains("not a kind of budget"), "{}", text(&out.stderr));
    assert!(usage(&d, &id)["budget"]["cpu_seconds"].is_null(), "nothing was changed");
    d.berth(&["rm", &id]);
}
