//! The proxy's address checks through the real resolver: the daemon resolves names with glibc, as in
//! production, against a DNS server of the test's own (`Daemon::start_with_resolver`), so what the checks see
//! is what a DNS answer said, not an `--add-host` mapping. Upstream servers listen on the host's loopback,
//! which a rule naming the exact address lets through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::dns::{Answer, Dns};
use common::text;
use serde_json::Value;

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// An HTTP server on `ip` that answers every request with `body` and counts the connections it accepts.
struct Upstream {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Upstream {
    fn on(ip: Ipv4Addr, port: u16, body: &'static str) -> std::io::Result<Upstream> {
        let l = TcpListener::bind((ip, port))?;
        let port = l.local_addr()?.port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        std::thread::spawn(move || {
            for mut conn in l.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let reply =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        Ok(Upstream { port, hits })
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// One plain-HTTP request for `http://DEST/` through the sandbox's proxy; prints the whole answer.
const GET: &str = r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (sys.argv[1], sys.argv[1])).encode())
out = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    out += d
sys.stdout.write(out.decode())
"#;

/// An HTTP answer: its status, headers (names lowercase) and body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn parse(raw: &str) -> Reply {
        let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {raw:?}"));
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Reply { status, headers, body: body.to_string() }
    }

    fn header(&self, name: &str) -> &str {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).unwrap_or("")
    }
}

fn get(d: &Daemon, id: &str, dest: &str) -> Reply {
    let out = d.berth(&["exec", id, "--", "python3", "-c", GET, dest]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    Reply::parse(&text(&out.stdout))
}

fn log(d: &Daemon, id: &str) -> Vec<Value> {
    let out = d.berth(&["net", "log", id, "--json"]);
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

/// The name the DNS server was asked for A records, as often as it was.
fn a_questions(dns: &Dns, name: &str) -> usize {
    dns.asked().iter().filter(|(n, t)| n == name && *t == 1).count()
}

/// Check a refusal by address: a 403 whose headers give `reason`, and a denied record of it in the log.
fn assert_refused_by_address(d: &Daemon, id: &str, reply: &Reply, host: &str, reason: &str) {
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(reply.header("x-berth-egress"), format!("denied; reason=\"{reason}\""));
    assert_eq!(reply.header("proxy-status"), format!("berth; error=destination_ip_prohibited; details=\"{reason}\""));
    let records = log(d, id);
    let record = records.iter().find(|r| r["host"] == host).unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(record["verdict"], "denied", "{record}");
    assert_eq!(record["reason"], reason, "{record}");
    assert!(record["rule"].is_null(), "an address check, not a rule, refused it: {record}");
}

#[test]
fn an_allowed_name_that_resolves_to_a_private_address_is_refused_and_logged() {
    let dns = Dns::start(|name, _| match name {
        "private.dns.test" => Answer::A(vec![Ipv4Addr::new(10, 53, 0, 7)]),
        _ => Answer::A(vec![]),
    });
    let d = Daemon::start_with_resolver(&dns, &[]);
    let id = d.create(&["--allow-net", "private.dns.test:8080"]);
    let reply = get(&d, &id, "private.dns.test:8080");
    // The address in the reason is the one the DNS server gave: the name was resolved, through it.
    let reason = "private.dns.test resolves to 10.53.0.7, which is a private address; only a rule naming that exact \
                  address can allow it";
    assert_refused_by_address(&d, &id, &reply, "private.dns.test", reason);
    assert_eq!(a_questions(&dns, "private.dns.test"), 1);
}

#[test]
fn a_name_resolving_to_an_address_a_rule_names_is_reached_at_that_address() {
    let dns = Dns::start(|name, _| match name {
        "named.dns.test" => Answer::A(vec![LOOPBACK]),
        _ => Answer::A(vec![]),
    });
    let up = Upstream::on(LOOPBACK, 0, "reached by name").unwrap();
    let d = Daemon::start_with_resolver(&dns, &[]);
    let (dest, by_address) = (format!("named.dns.test:{}", up.port), format!("127.0.0.1:{}", up.port));
    let id = d.create(&["--allow-net", &format!("{dest},{by_address}")]);
    let reply = get(&d, &id, &dest);
    assert_eq!((reply.status, reply.body.as_str()), (200, "reached by name"));
    assert_eq!(up.hits(), 1);
    assert_eq!(a_questions(&dns, "named.dns.test"), 1);
    let records = log(&d, &id);
    let record = records.iter().find(|r| r["host"] == "named.dns.test").unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(record["verdict"], "allowed", "{record}");
    assert_eq!(record["rule"], dest.as_str(), "{record}");
    let reason =
        format!("{dest} is allowed by rule {dest}; 127.0.0.1 is a loopback address named by rule {by_address}");
    assert_eq!(record["reason"], reason.as_str(), "{record}");
}

#[test]
fn one_refused_address_among_several_refuses_the_name() {
    let dns = Dns::start(|name, _| match name {
        "mixed.dns.test" => Answer::A(vec![LOOPBACK, Ipv4Addr::new(10, 53, 0, 8)]),
        _ => Answer::A(vec![]),
    });
    let up = Upstream::on(LOOPBACK, 0, "should not be reached").unwrap();
    let d = Daemon::start_with_resolver(&dns, &[]);
    let dest = format!("mixed.dns.test:{}", up.port);
    // 127.0.0.1 passes (a rule names it), 10.53.0.8 does not: the name is refused, whatever the order.
    let id = d.create(&["--allow-net", &format!("{dest},127.0.0.1:{}", up.port)]);
    let reply = get(&d, &id, &dest);
    let reason = "mixed.dns.test resolves to 10.53.0.8, which is a private address; only a rule naming that exact \
                  address can allow it";
    assert_refused_by_address(&d, &id, &reply, "mixed.dns.test", reason);
    assert_eq!(up.hits(), 0, "not even the address that passed was connected to");
}

/// Two servers on one port: one on 127.0.0.1, one on 127.0.0.2.
fn two_servers() -> (Upstream, Upstream) {
    for _ in 0..100 {
        let first = Upstream::on(LOOPBACK, 0, "first").unwrap();
        if let Ok(second) = Upstream::on(Ipv4Addr::new(127, 0, 0, 2), first.port, "second") {
            return (first, second);
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

#[test]
fn a_rebinding_answer_cannot_move_a_checked_connection_to_a_refused_address() {
    // The first answer for the name is an address a rule allows; every later one a loopback address no rule
    // names. A proxy that resolved the name again to connect would land on the second server.
    let dns = Dns::start(|name, before| match (name, before) {
        ("rebind.dns.test", 0) => Answer::A(vec![LOOPBACK]),
        ("rebind.dns.test", _) => Answer::A(vec![Ipv4Addr::new(127, 0, 0, 2)]),
        _ => Answer::A(vec![]),
    });
    let (first, second) = two_servers();
    let d = Daemon::start_with_resolver(&dns, &[]);
    let dest = format!("rebind.dns.test:{}", first.port);
    let id = d.create(&["--allow-net", &format!("{dest},127.0.0.1:{}", first.port)]);
    let reply = get(&d, &id, &dest);
    assert_eq!((reply.status, reply.body.as_str()), (200, "first"));
    assert_eq!(a_questions(&dns, "rebind.dns.test"), 1, "the name was resolved once for the connection");
    assert_eq!((first.hits(), second.hits()), (1, 0));
    // The next answer is the rebound one: checked, and refused.
    let reply = get(&d, &id, &dest);
    let reason = "rebind.dns.test resolves to 127.0.0.2, which is a loopback address; only a rule naming that exact \
                  address can allow it";
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(reply.header("x-berth-egress"), format!("denied; reason=\"{reason}\""));
    assert_eq!(a_questions(&dns, "rebind.dns.test"), 2);
    assert_eq!((first.hits(), second.hits()), (1, 0), "the second server is never reached");
}

/// Ask the proxy for `http://stuck-N.dns.test:80/` for N below COUNT, all at once, then print each answer's
/// status and X-Berth-Egress header (or `hung` if none came within a minute).
const STUCK: &str = r#"
import socket, sys
count = int(sys.argv[1])
socks = []
for n in range(count):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    host = "stuck-%d.dns.test:80" % n
    s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (host, host)).encode())
    socks.append(s)
for s in socks:
    out = b""
    try:
        while b"\r\n\r\n" not in out:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except socket.timeout:
        print("hung", flush=True)
        continue
    head = out.split(b"\r\n\r\n")[0].decode().split("\r\n")
    egress = [h.split(": ", 1)[1] for h in head if h.lower().startswith("x-berth-egress:")]
    print(head[0].split(" ")[1], egress[0] if egress else "-", flush=True)
"#;

#[test]
fn lookups_that_never_end_in_one_sandbox_leave_another_sandboxs_lookups_free() {
    let dns = Dns::start(|name, _| match name {
        "ok.dns.test" => Answer::A(vec![LOOPBACK]),
        n if n.starts_with("stuck-") => Answer::Never,
        _ => Answer::A(vec![]),
    });
    let up = Upstream::on(LOOPBACK, 0, "answered").unwrap();
    // The default share of lookups, 8 per sandbox; room for every request head at once.
    let d = Daemon::start_with_resolver(&dns, &["--max-proxy-pending", "128"]);
    let hostile = d.create(&["--allow-net", "*.dns.test"]);
    let dest = format!("ok.dns.test:{}", up.port);
    let other = d.create(&["--allow-net", &format!("{dest},127.0.0.1:{}", up.port)]);

    // More lookups than the whole daemon has places for (64), each of a name whose server never answers.
    const COUNT: usize = 72;
    let stuck = d
        .cmd(&["exec", &hostile, "--", "python3", "-c", STUCK, &COUNT.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let is_stuck = |n: &str| n.starts_with("stuck-");
    let deadline = Instant::now() + Duration::from_secs(30);
    while dns.names_asked(is_stuck).len() < 8 {
        assert!(Instant::now() < deadline, "the hostile sandbox's lookups did not start: {:?}", dns.asked());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its share is full: the rest of its lookups wait for it, and another sandbox's lookup goes through.
    let reply = get(&d, &other, &dest);
    assert_eq!((reply.status, reply.body.as_str()), (200, "answered"));
    assert_eq!(
        dns.names_asked(is_stuck).len(),
        8,
        "no more than its share of the hostile lookups reached the resolver"
    );

    // Every stuck request, those in the resolver and those waiting for a place, ends with the proxy's timeout.
    let out = common::daemon::wait_output(stuck, Duration::from_secs(60));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), COUNT, "{lines:?}");
    for (n, line) in lines.iter().enumerate() {
        let reason = format!("resolving stuck-{n}.dns.test took longer than 10000 ms");
        assert_eq!(*line, format!("504 error; reason=\"{reason}\""));
    }
    let records = log(&d, &hostile);
    for n in 0..COUNT {
        let host = format!("stuck-{n}.dns.test");
        let record = records.iter().find(|r| r["host"] == host.as_str()).unwrap_or_else(|| panic!("{records:?}"));
        assert_eq!(record["verdict"], "error", "{record}");
        assert_eq!(record["reason"], format!("resolving {host} took longer than 10000 ms").as_str());
    }
    assert_eq!(dns.names_asked(is_stuck).len(), 8, "the waiting ones never reached the resolver");
}
