//! `berth bench --pause`: pause and resume through the daemon's API against the kernel's freezer written
//! directly, on the same sandbox (its processes running a loop), round by round.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_api::ExecRequest;
use berth_client::Client;

use crate::BenchArgs;

pub fn bench_pause(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    crate::contexts::on_a_sandbox(socket, &args, measure)
}

/// The freezer of the sandbox's cgroup, as the kernel shows it: v2's `cgroup.freeze` and `cgroup.events`, or
/// v1's `freezer.state`.
enum Freezer {
    V1(PathBuf),
    V2(PathBuf),
}

impl Freezer {
    fn find(id: &str) -> anyhow::Result<Freezer> {
        let v1 = Path::new("/sys/fs/cgroup/freezer/berth").join(id);
        if v1.join("freezer.state").exists() {
            return Ok(Freezer::V1(v1));
        }
        let v2 = Path::new("/sys/fs/cgroup/berth").join(id);
        if v2.join("cgroup.freeze").exists() {
            return Ok(Freezer::V2(v2));
        }
        anyhow::bail!("no freezer for sandbox {id} under /sys/fs/cgroup")
    }

    /// Freeze or thaw, and wait until the kernel says it is done. A freeze that has not settled in 500 ms is
    /// thawed and tried again (as berth does: see `Cgroup::freeze`); returns how many tries it took.
    fn set(&self, frozen: bool) -> anyhow::Result<u32> {
        for attempt in 1..=10 {
            let deadline = Instant::now() + Duration::from_millis(500);
            let settled = match self {
                Freezer::V1(dir) => {
                    let state = dir.join("freezer.state");
                    std::fs::write(&state, if frozen { "FROZEN" } else { "THAWED" })?;
                    loop {
                        if !frozen || std::fs::read_to_string(&state)?.trim() == "FROZEN" {
                            break true;
                        }
                        if Instant::now() >= deadline {
                            break false;
                        }
                    }
                }
                Freezer::V2(dir) => {
                    std::fs::write(dir.join("cgroup.freeze"), if frozen { "1" } else { "0" })?;
                    let want = if frozen { "frozen 1" } else { "frozen 0" };
                    loop {
                        if std::fs::read_to_string(dir.join("cgroup.events"))?.lines().any(|l| l == want) {
                            break true;
                        }
                        if Instant::now() >= deadline {
                            break false;
                        }
                    }
                }
            };
            if settled {
                return Ok(attempt);
            }
            self.set(false)?;
        }
        anyhow::bail!("the freezer did not settle in ten tries")
    }
}

/// One HTTP/1.1 connection kept open across requests, as an SDK keeps it (the CLI's client closes each).
struct KeptAlive {
    stream: std::io::BufReader<std::os::unix::net::UnixStream>,
}

impl KeptAlive {
    fn connect(socket: &Path) -> anyhow::Result<KeptAlive> {
        Ok(KeptAlive { stream: std::io::BufReader::new(std::os::unix::net::UnixStream::connect(socket)?) })
    }

    /// POST `{}` to `path`; the response's status (its body is read and dropped).
    fn post(&mut self, path: &str) -> anyhow::Result<u16> {
        use std::io::{BufRead, Read, Write};
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        self.stream.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        self.stream.read_line(&mut line)?;
        let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut length = 0usize;
        loop {
            line.clear();
            self.stream.read_line(&mut line)?;
            if line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse()?;
            }
        }
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body)?;
        anyhow::ensure!(status == 200, "{path}: {status} {}", String::from_utf8_lossy(&body));
        Ok(status)
    }
}

fn stats(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v.get(v.len() / 2).copied().unwrap_or(0.0), v.get(v.len() * 9 / 10).copied().unwrap_or(0.0))
}

fn measure(socket: &Path, id: &str, args: &BenchArgs) -> anyhow::Result<serde_json::Value> {
    let busy = ExecRequest {
        argv: ["sh", "-c", "while true; do :; done & while true; do sleep 0.01; done"].map(String::from).to_vec(),
        detach: true,
        ..ExecRequest::default()
    };
    Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{id}/execs"), &busy)?;
    let freezer = Freezer::find(id)?;
    let (pause, resume) = (format!("/v1/sandboxes/{id}/pause"), format!("/v1/sandboxes/{id}/resume"));
    let mut times: [Vec<f64>; 6] = Default::default();
    let mut retries = 0;
    let mut kept = KeptAlive::connect(socket)?;
    for round in 0..args.warmup + args.runs {
        let t = Instant::now();
        Client::connect(socket)?.post_json(&pause, &serde_json::json!({}))?;
        let api_pause = t.elapsed();
        let t = Instant::now();
        Client::connect(socket)?.post_json(&resume, &serde_json::json!({}))?;
        let api_resume = t.elapsed();
        let t = Instant::now();
        kept.post(&pause)?;
        let kept_pause = t.elapsed();
        let t = Instant::now();
        kept.post(&resume)?;
        let kept_resume = t.elapsed();
        let t = Instant::now();
        retries += freezer.set(true)? - 1;
        let raw_freeze = t.elapsed();
        let t = Instant::now();
        freezer.set(false)?;
        let raw_thaw = t.elapsed();
        if round >= args.warmup {
            for (i, d) in [api_pause, api_resume, raw_freeze, raw_thaw, kept_pause, kept_resume].into_iter().enumerate()
            {
                times[i].push(d.as_secs_f64() * 1000.0);
            }
        }
    }
    let names =
        ["API pause", "API resume", "freezer: freeze", "freezer: thaw", "API pause (kept)", "API resume (kept)"];
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (p50, p90) = stats(&mut times[i]);
        println!("{name:<18} median {p50:>7.3} ms   p90 {p90:>7.3} ms   ({} runs)", times[i].len());
        rows.push(serde_json::json!({"case": name, "median_ms": p50, "p90_ms": p90}));
    }
    let m = |i: usize| rows[i]["median_ms"].as_f64().unwrap_or(0.0).max(f64::EPSILON);
    println!("pause: {:.2}x the raw freezer; resume: {:.2}x the raw thaw", m(0) / m(2), m(1) / m(3));
    println!("on a kept-alive connection (as the SDK's): pause {:.2}x, resume {:.2}x", m(4) / m(2), m(5) / m(3));
    println!("raw freezes that had to be undone and tried again: {retries}");
    Ok(serde_json::json!({"cases": rows, "raw_retries": retries}))
}
