//! `berth bench --egress`: the whole path a sandboxed program's connection takes, against a direct loopback
//! connection from the host to the same servers, in one run.
//!
//! The proxied path is everything a program in a sandbox goes through: a connection to init's listener on
//! the sandbox's 127.0.0.1:3128, init's accept and the hand-over of the socket to the daemon over the
//! control socket, the daemon's per-sandbox proxy (CONNECT, policy, a connection from the host, relaying)
//! and the upstream's loopback. The timing is done inside the sandbox by `berth bench-client` (this same
//! binary, mounted read-only), which the host drives over a tunnel of its own through the proxy; the host
//! times its direct connections with the same code, round by round, so drift in the machine's speed lands
//! on both alike.
//!
//! A live policy change is timed from just before the `POST /v1/sandboxes/{id}/net` call on the host until
//! the client inside sees its open tunnel end, both read from CLOCK_MONOTONIC (one clock system-wide; the
//! run checks the sandbox shares it).

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, ExecFrame, ExecRequest, ExecResult, Mount, NetChange, NetChanged, Network, Sandbox};
use berth_client::Client;
use serde_json::{Value, json};

use crate::BenchArgs;
use crate::egress_client::{self, monotonic_ns};

/// The name the sandbox's policy allows; `--add-host` maps it to the host's 127.0.0.1, which the proxy
/// otherwise refuses.
const HOST: &str = "bench.egress";
/// Pushes of `--bytes` each way: a few, since each moves a gigabyte.
const PUSHES: usize = 5;
/// How long the client has to call in, and to answer any one command (a slow push included).
const CALL_IN: Duration = Duration::from_secs(60);
const ANSWER: Duration = Duration::from_secs(600);
/// A safety net: the daemon removes the sandbox after this even if this process dies before its guard runs.
const TTL_SECONDS: f64 = 3600.0;

pub fn bench_egress(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let servers = Servers::start()?;
    let exe = std::env::current_exe()?;
    let (dir, name) = match (exe.parent(), exe.file_name()) {
        (Some(d), Some(n)) => (d.to_path_buf(), n.to_string_lossy().into_owned()),
        _ => anyhow::bail!("cannot tell which directory {} is in", exe.display()),
    };
    let rules: Vec<String> =
        [servers.sink, servers.echo, servers.hold, servers.control].into_iter().map(target).collect();
    let request = CreateSandbox {
        ttl_seconds: Some(TTL_SECONDS),
        labels: BTreeMap::from([("berth-bench".to_string(), "egress".to_string())]),
        mounts: vec![Mount { host: dir.to_string_lossy().into_owned(), target: "/opt/berth".into(), readonly: true }],
        network: Network {
            allow: rules,
            add_hosts: BTreeMap::from([(HOST.to_string(), "127.0.0.1".to_string())]),
            ..Network::default()
        },
        ..CreateSandbox::default()
    };
    let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &request)?;
    let sandbox: Sandbox = berth_client::decode(&body)?;
    let guard = Guard { socket: socket.to_path_buf(), id: sandbox.id.clone() };

    let argv = vec![format!("/opt/berth/{name}"), "bench-client".into(), "--control".into(), target(servers.control)];
    let exec = spawn_exec(socket, &sandbox.id, argv);
    let mut ctl = Control::accept(&servers.control_listener, &exec)?;
    let report = measure(socket, &guard.id, &servers, &mut ctl, &args)?;
    ctl.send("quit")?;
    let (result, stderr) = exec.join().map_err(|_| anyhow::anyhow!("the exec thread panicked"))??;
    anyhow::ensure!(result.exit_code == 0, "bench-client failed in the sandbox ({result:?}): {stderr}");
    drop(guard);

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(0)
}

/// Removes the sandbox when the run ends, however it ends.
struct Guard {
    socket: PathBuf,
    id: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let path = format!("/v1/sandboxes/{}", berth_client::segment(&self.id));
        if let Err(e) = Client::connect(&self.socket).and_then(|c| c.delete(&path)) {
            eprintln!("berth bench: could not remove sandbox {}: {e}", self.id);
        }
    }
}

type ExecThread = JoinHandle<anyhow::Result<(ExecResult, String)>>;

/// Run the client through the API on a thread of its own; its result, and what it wrote to stderr.
fn spawn_exec(socket: &Path, id: &str, argv: Vec<String>) -> ExecThread {
    let (socket, path) = (socket.to_path_buf(), format!("/v1/sandboxes/{}/execs", berth_client::segment(id)));
    std::thread::spawn(move || {
        let req = ExecRequest { argv, ..ExecRequest::default() };
        let mut stream = Client::connect(&socket)?.post_json_stream(&path, &req)?;
        let mut output = String::new();
        while let Some(line) = stream.next_line()? {
            match serde_json::from_slice::<ExecFrame>(&line) {
                Ok(ExecFrame::Output { data, .. }) => output.push_str(&data),
                Ok(ExecFrame::Exit(result)) => return Ok((result, output)),
                _ => {}
            }
        }
        anyhow::bail!("the exec stream ended without an exit frame: {output}")
    })
}

/// The upstream servers on the host's loopback, and the listener the client calls in to.
struct Servers {
    sink: u16,
    echo: u16,
    hold: u16,
    control: u16,
    control_listener: TcpListener,
}

impl Servers {
    fn start() -> io::Result<Servers> {
        let sink = serve(|mut s| {
            // Read to the end, then acknowledge: the pusher's time runs until every byte was read.
            let mut buf = vec![0u8; 256 * 1024];
            while let Ok(1..) = s.read(&mut buf) {}
            let _ = s.write_all(b"!");
        })?;
        let echo = TcpListener::bind("127.0.0.1:0")?;
        let echo_port = echo.local_addr()?.port();
        // Latency connections come one at a time, so they are answered in turn on one thread: a thread
        // started per connection would add its own start to every figure.
        std::thread::spawn(move || {
            for s in echo.incoming().flatten() {
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                echo_until_end(s);
            }
        });
        let hold = serve(echo_until_end)?;
        let control_listener = TcpListener::bind("127.0.0.1:0")?;
        let control = control_listener.local_addr()?.port();
        Ok(Servers { sink, echo: echo_port, hold, control, control_listener })
    }
}

/// `bench.egress:PORT`: a server as the sandbox reaches it.
fn target(port: u16) -> String {
    format!("{HOST}:{port}")
}

/// Listen on the host's loopback; each connection gets a thread running `handle`.
fn serve(handle: fn(TcpStream)) -> io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || handle(s));
        }
    });
    Ok(port)
}

fn echo_until_end(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        if s.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// The command line to the client in the sandbox.
struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Control {
    /// Wait for the client's tunnel; if its exec ends first, say why.
    fn accept(listener: &TcpListener, exec: &ExecThread) -> anyhow::Result<Control> {
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + CALL_IN;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            anyhow::ensure!(!exec.is_finished(), "bench-client ended before it called in (see its exec's log)");
            anyhow::ensure!(Instant::now() < deadline, "bench-client did not call in within {CALL_IN:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(ANSWER))?;
        Ok(Control { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    fn send(&mut self, command: &str) -> io::Result<()> {
        writeln!(self.writer, "{command}")
    }

    /// The next answer's first value; an `error` answer is an error here.
    fn answer(&mut self) -> anyhow::Result<u64> {
        Ok(self.answer_pair()?.0)
    }

    /// The next answer's one or two values (the second is 0 when there is one).
    fn answer_pair(&mut self) -> anyhow::Result<(u64, u64)> {
        let mut line = String::new();
        anyhow::ensure!(self.reader.read_line(&mut line)? > 0, "bench-client hung up");
        match line.trim().split_once(' ') {
            Some(("ok", values)) => {
                let (a, b) = values.split_once(' ').unwrap_or((values, "0"));
                Ok((a.parse()?, b.parse()?))
            }
            Some(("error", message)) => anyhow::bail!("bench-client: {message}"),
            _ => anyhow::bail!("bench-client answered {:?}", line.trim()),
        }
    }

    fn ask(&mut self, command: &str) -> anyhow::Result<u64> {
        self.send(command)?;
        self.answer()
    }
}

fn measure(socket: &Path, id: &str, servers: &Servers, ctl: &mut Control, args: &BenchArgs) -> anyhow::Result<Value> {
    // Readings taken in the sandbox are compared with the host's: check that they share the clock.
    let before = monotonic_ns();
    let theirs = ctl.ask("clock")?;
    let after = monotonic_ns();
    anyhow::ensure!(
        (before..=after).contains(&theirs),
        "the sandbox's CLOCK_MONOTONIC ({theirs}) is not the host's ({before}..{after})"
    );

    let (sink, echo) = (format!("127.0.0.1:{}", servers.sink), format!("127.0.0.1:{}", servers.echo));
    let pushes = PUSHES.min(args.runs);
    let (mut push_proxied, mut push_direct) = (Vec::new(), Vec::new());
    let warm = args.bytes.min(64 << 20);
    for round in 0..pushes + 1 {
        let bytes = if round == 0 { warm } else { args.bytes };
        let proxied_first = round % 2 == 0;
        for proxied in [proxied_first, !proxied_first] {
            let secs = if proxied {
                ctl.ask(&format!("push {} {bytes}", target(servers.sink)))? as f64 / 1e9
            } else {
                egress_client::push(egress_client::connect(&sink)?, bytes)?.as_secs_f64()
            };
            if round > 0 {
                let v = bytes as f64 / secs / 1e9;
                if proxied { push_proxied.push(v) } else { push_direct.push(v) }
            }
        }
    }

    // Each connection's whole time, and the part until it was open (connect; through the proxy, until its
    // answer to CONNECT was read), in µs.
    let (mut rtt_proxied, mut rtt_direct, mut open_proxied, mut open_direct) = (vec![], vec![], vec![], vec![]);
    let rtt = format!("rtt {}", target(servers.echo));
    for round in 0..args.warmup + args.runs {
        let proxied_first = round % 2 == 0;
        let (mut p, mut d) = ((0, 0), (Duration::ZERO, Duration::ZERO));
        for proxied in [proxied_first, !proxied_first] {
            if proxied {
                ctl.send(&rtt)?;
                p = ctl.answer_pair()?;
            } else {
                d = egress_client::one_rtt(&|| egress_client::connect(&echo))?;
            }
        }
        if round >= args.warmup {
            rtt_proxied.push(p.0 as f64 / 1e3);
            open_proxied.push(p.1 as f64 / 1e3);
            rtt_direct.push(d.0.as_secs_f64() * 1e6);
            open_direct.push(d.1.as_secs_f64() * 1e6);
        }
    }

    let changes = policy_changes(socket, id, servers, ctl, args)?;

    let (tp, td) = (Stats::of(push_proxied), Stats::of(push_direct));
    let (lp, ld) = (Stats::of(rtt_proxied), Stats::of(rtt_direct));
    let (op, od) = (Stats::of(open_proxied), Stats::of(open_direct));
    Ok(json!({
        "runs": args.runs,
        "throughput": {
            "bytes": args.bytes, "pushes": pushes, "unit": "GB/s",
            "proxied": tp.json(), "direct": td.json(), "proxied_over_direct": tp.median / td.median,
        },
        "connection": {
            "what": "connect, (CONNECT,) one byte there and back, close", "unit": "us",
            "proxied": lp.json(), "direct": ld.json(), "proxied_over_direct": lp.median / ld.median,
            "added_median_us": lp.median - ld.median, "added_p90_us": lp.p90 - ld.p90,
            "open": {
                "what": "until connect returned; through the proxy, until its answer to CONNECT was read",
                "proxied": op.json(), "direct": od.json(),
            },
        },
        "policy_change": changes,
    }))
}

/// Open a tunnel to the hold server from inside, deny it through the API and time until the client sees
/// it end; allow it again for the next round.
fn policy_changes(
    socket: &Path,
    id: &str,
    servers: &Servers,
    ctl: &mut Control,
    args: &BenchArgs,
) -> anyhow::Result<Value> {
    let rule = target(servers.hold);
    let path = format!("/v1/sandboxes/{}/net", berth_client::segment(id));
    let change = |allow: bool| -> anyhow::Result<NetChanged> {
        let rules = vec![rule.clone()];
        let change =
            if allow { NetChange { allow: rules, deny: vec![] } } else { NetChange { allow: vec![], deny: rules } };
        let (_, body) = Client::connect(socket)?.post_json(&path, &change)?;
        Ok(berth_client::decode(&body)?)
    };
    let warmup = args.warmup.min(3);
    let (mut to_eof, mut call) = (Vec::new(), Vec::new());
    for round in 0..warmup + args.runs {
        ctl.ask(&format!("hold {rule}"))?;
        let started = monotonic_ns();
        let changed = change(false)?;
        let answered = monotonic_ns();
        // Anything but the held tunnel closed (or nothing) means the rule did not do what is timed here.
        anyhow::ensure!(changed.closed == 1, "denying {rule} closed {} connections, not 1", changed.closed);
        let eof = ctl.answer()?;
        anyhow::ensure!(eof >= started, "the held tunnel ended before the policy changed");
        change(true)?;
        if round >= warmup {
            to_eof.push((eof - started) as f64 / 1e6);
            call.push((answered - started) as f64 / 1e6);
        }
    }
    let (e, c) = (Stats::of(to_eof), Stats::of(call));
    Ok(json!({
        "what": "POST /v1/sandboxes/{id}/net deny, until the client's read of its open tunnel returns",
        "unit": "ms", "rounds": args.runs, "until_eof": e.json(), "api_call": c.json(),
    }))
}

struct Stats {
    median: f64,
    p90: f64,
    min: f64,
    n: usize,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        Stats { median: at(0.5), p90: at(0.9), min: at(0.0), n: v.len() }
    }

    fn json(&self) -> Value {
        json!({"median": self.median, "p90": self.p90, "min": self.min, "n": self.n})
    }
}

fn print_table(r: &Value) {
    let f = |path: &[&str]| path.iter().fold(r, |v, k| &v[*k]).as_f64().unwrap_or(f64::NAN);
    let gib = f(&["throughput", "bytes"]) / (1u64 << 30) as f64;
    println!(
        "egress: a sandbox's connections through init's 127.0.0.1:3128 and the daemon's proxy, against direct \
         loopback connections from the host to the same servers; interleaved rounds\n"
    );
    println!("{:<48} {:>10} {:>10} {:>9} {:>12}", "case", "proxied", "direct", "ratio", "added");
    println!(
        "{:<48} {:>10.2} {:>10.2} {:>8.2}x",
        format!("throughput GB/s, median of {} x {gib:.2} GiB", f(&["throughput", "pushes"])),
        f(&["throughput", "proxied", "median"]),
        f(&["throughput", "direct", "median"]),
        f(&["throughput", "proxied_over_direct"])
    );
    let row = |label: &str, proxied: f64, direct: f64| {
        println!("{label:<48} {proxied:>10.1} {direct:>10.1} {:>8.2}x {:>9.1} us", proxied / direct, proxied - direct);
    };
    let q = |side: &str, which: &str| f(&["connection", side, which]);
    let open = |side: &str| f(&["connection", "open", side, "median"]);
    row("connection + 1-byte round trip us, median", q("proxied", "median"), q("direct", "median"));
    row("  of it, until open (CONNECT answered), median", open("proxied"), open("direct"));
    row("connection + 1-byte round trip us, p90", q("proxied", "p90"), q("direct", "p90"));
    println!(
        "\nlive deny until the client sees its tunnel end ({} rounds): median {:.2} ms, p90 {:.2} ms, min {:.2} ms; \
         the API call alone: median {:.2} ms",
        f(&["policy_change", "rounds"]),
        f(&["policy_change", "until_eof", "median"]),
        f(&["policy_change", "until_eof", "p90"]),
        f(&["policy_change", "until_eof", "min"]),
        f(&["policy_change", "api_call", "median"])
    );
    println!("connections: {} interleaved rounds each way", f(&["runs"]));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The options as `berth` takes them: under its `bench` subcommand.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Command {
        Bench(BenchArgs),
    }

    fn bench_args(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
        let Command::Bench(args) = Cli::try_parse_from(argv)?.command;
        Ok(args)
    }

    #[test]
    fn egress_pushes_a_gibibyte_by_default_and_runs_alone() {
        assert_eq!(bench_args(&["berth", "bench", "--egress"]).unwrap().bytes, 1 << 30);
        assert_eq!(bench_args(&["berth", "bench", "--exec"]).unwrap().bytes, 2 << 30);
        assert_eq!(bench_args(&["berth", "bench", "--egress", "--bytes", "64M"]).unwrap().bytes, 64 << 20);
        assert!(bench_args(&["berth", "bench", "--egress", "--exec"]).is_err());
        assert!(bench_args(&["berth", "bench", "--egress", "--storage"]).is_err());
    }

    #[test]
    fn the_servers_answer_what_the_client_times() {
        let servers = Servers::start().unwrap();
        let sink = format!("127.0.0.1:{}", servers.sink);
        egress_client::push(egress_client::connect(&sink).unwrap(), (3 << 20) + 1).unwrap();
        let echo = format!("127.0.0.1:{}", servers.echo);
        for _ in 0..3 {
            let (all, open) = egress_client::one_rtt(&|| egress_client::connect(&echo)).unwrap();
            assert!(open <= all);
        }
    }

    #[test]
    fn answers_carry_one_or_two_values_or_the_clients_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut ctl = Control { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream };
        client.write_all(b"ok 5 7\nok 9\nerror no tunnel\n").unwrap();
        assert_eq!(ctl.answer_pair().unwrap(), (5, 7));
        assert_eq!(ctl.answer().unwrap(), 9);
        assert!(ctl.answer().unwrap_err().to_string().contains("no tunnel"));
        drop(client);
        assert!(ctl.answer().is_err(), "a client that hung up");
    }
}
