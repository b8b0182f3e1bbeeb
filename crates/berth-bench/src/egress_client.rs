//! `berth bench-client` (hidden): the half of `berth bench --egress` that runs inside the sandbox.
//!
//! The timing has to happen where a sandboxed program's connections start, so this is what does it, on
//! commands the host sends over a tunnel through the sandbox's own proxy (exec has no live stdin, and a
//! second channel through the proxy is the one way in and out that needs nothing else). One command per
//! line, one answer per line: `ok VALUE` or `error MESSAGE`.
//!
//! - `clock` → the CLOCK_MONOTONIC reading, in ns (the host checks it shares the clock);
//! - `rtt HOST:PORT` → ns for: connect to the proxy, CONNECT, one byte there and back, close; then the ns
//!   until the tunnel was open (the proxy's answer read), which splits the figure into opening and relaying;
//! - `push HOST:PORT BYTES` → ns to push BYTES through a tunnel until the server acknowledges the end;
//! - `hold HOST:PORT` → `ok 0` once a tunnel is open, then, when it is closed from outside, the
//!   CLOCK_MONOTONIC reading at which the read saw it end;
//! - `quit`.
//!
//! The same measuring functions serve the host's direct connections, so both sides time the same code.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use crate::BenchClientArgs;

/// Write size of a push: large enough that system calls do not bound the rate.
const CHUNK: usize = 256 * 1024;

pub fn bench_client(args: BenchClientArgs) -> anyhow::Result<i32> {
    let control = tunnel(&args.proxy, &args.control)?;
    let mut reader = BufReader::new(control.try_clone()?);
    let mut writer = control;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            // The host went away: nothing more to measure.
            return Ok(0);
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["quit"] => return Ok(0),
            ["clock"] => Ok(monotonic_ns().to_string()),
            ["rtt", target] => {
                one_rtt(&|| tunnel(&args.proxy, target)).map(|(all, open)| format!("{} {}", nanos(all), nanos(open)))
            }
            ["push", target, bytes] => bytes
                .parse::<u64>()
                .map_err(io::Error::other)
                .and_then(|bytes| push(tunnel(&args.proxy, target)?, bytes))
                .map(|d| nanos(d).to_string()),
            ["hold", target] => hold(&args.proxy, target, &mut writer).map(|t| t.to_string()),
            _ => Err(io::Error::other(format!("unknown command {:?}", line.trim()))),
        };
        match answer {
            Ok(value) => writeln!(writer, "ok {value}")?,
            Err(e) => {
                writeln!(writer, "error {e}")?;
                return Err(e.into());
            }
        }
    }
}

/// Open a tunnel, say so, and block reading it until the proxy closes it; the time that happened.
fn hold(proxy: &str, target: &str, control: &mut TcpStream) -> io::Result<u64> {
    let mut s = tunnel(proxy, target)?;
    // One byte there and back: the tunnel is relaying, past the proxy's look at its first bytes.
    round_trip(&mut s)?;
    writeln!(control, "ok 0")?;
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return Ok(monotonic_ns()),
            Ok(_) => {}
        }
    }
}

/// CLOCK_MONOTONIC in ns. It is one clock for the whole system (berth gives sandboxes no time namespace),
/// so a reading taken in the sandbox can be set against one taken on the host.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// A connection to `addr` with Nagle off, as latency-minded clients open them.
pub fn connect(addr: &str) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// A CONNECT tunnel to `target` through the proxy at `proxy`, ready to carry bytes.
pub fn tunnel(proxy: &str, target: &str) -> io::Result<TcpStream> {
    let mut s = connect(proxy)?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())?;
    // Read until the end of the answer's head. The servers behind never speak first, so nothing of the
    // tunnel's own bytes can come with it.
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        let first = String::from_utf8_lossy(&head);
        let first = first.lines().next().unwrap_or("no answer");
        return Err(io::Error::other(format!("the proxy refused CONNECT {target}: {first}")));
    }
    Ok(s)
}

/// One byte to an echo server and back.
pub fn round_trip(s: &mut TcpStream) -> io::Result<()> {
    s.write_all(b"x")?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)
}

/// The time of one whole connection: open (with `open`), one byte there and back, close; and the time
/// until `open` returned.
pub fn one_rtt(open: &dyn Fn() -> io::Result<TcpStream>) -> io::Result<(Duration, Duration)> {
    let started = Instant::now();
    let mut s = open()?;
    let opened = started.elapsed();
    round_trip(&mut s)?;
    drop(s);
    Ok((started.elapsed(), opened))
}

/// Write `bytes` zeros, end the stream, and wait for the sink's one-byte acknowledgement that it read them
/// all: the time is until the last byte arrived, not until it was queued.
pub fn push(mut s: TcpStream, bytes: u64) -> io::Result<Duration> {
    let chunk = vec![0u8; CHUNK];
    let started = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    s.shutdown(Shutdown::Write)?;
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack)?;
    Ok(started.elapsed())
}
