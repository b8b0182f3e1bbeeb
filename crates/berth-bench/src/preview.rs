//! `berth bench --preview`: a request through a preview URL (the daemon's listener, the sandbox's init, the
//! server on the sandbox's own loopback) against the same request to the same server program (`python3 -m
//! http.server`) serving the same files on the host's loopback, interleaved round by round.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_api::{CreatePreview, CreateSandbox, Preview, Sandbox};
use berth_client::Client;

use crate::BenchArgs;
use crate::hibernate::{exec, median_of, ms};

/// The port both servers listen on (inside the sandbox; on the host, a free one).
const INSIDE_PORT: u16 = 8000;

pub fn bench_preview(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let big = args.bytes.min(1 << 30);
    let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let sb: Sandbox = serde_json::from_slice(&body)?;
    let dir = std::env::temp_dir().join(format!("berth-bench-preview-{}", std::process::id()));
    let result = (|| {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("index.html"), b"hello\n")?;
        std::fs::File::create(dir.join("big"))?.set_len(big)?;
        let script = format!(
            "cd /workspace && echo hello > index.html && truncate -s {big} big && \
             (python3 -m http.server {INSIDE_PORT} --bind 127.0.0.1 >/dev/null 2>&1 &)"
        );
        anyhow::ensure!(exec(socket, &sb.id, &["sh", "-c", &script])? == 0, "the server in the sandbox did not start");
        let req = CreatePreview { port: INSIDE_PORT, public: false, ttl_seconds: Some(3600.0) };
        let (status, body) = Client::connect(socket)?.post_json(&format!("/v1/sandboxes/{}/previews", sb.id), &req)?;
        anyhow::ensure!(status == 201, "expose: {} (the daemon needs --listen)", String::from_utf8_lossy(&body));
        let preview: Preview = serde_json::from_slice(&body)?;
        let rest = preview.url.strip_prefix("http://").unwrap_or(&preview.url);
        let (listener, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let token = preview.token.clone().unwrap_or_default();
        let host_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut host = Command::new("python3")
            .args(["-m", "http.server", &host_port.to_string(), "--bind", "127.0.0.1"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let direct = format!("127.0.0.1:{host_port}");
        let out = (|| {
            let header = format!("X-Berth-Preview-Token: {token}\r\n");
            let through =
                |file: &str| get(listener, &format!("{}{file}", path.split('?').next().unwrap_or(path)), &header);
            let straight = |file: &str| get(&direct, &format!("/{file}"), "");
            wait_up(|| through("index.html").is_ok() && straight("index.html").is_ok())?;
            let (mut p_small, mut d_small, mut p_big, mut d_big) = (vec![], vec![], vec![], vec![]);
            for round in 0..args.runs.max(1) {
                // Each goes first in half the rounds.
                for first in [round % 2 == 0, round % 2 == 1] {
                    if first {
                        p_small.push(timed(|| through("index.html"))?);
                    } else {
                        d_small.push(timed(|| straight("index.html"))?);
                    }
                }
            }
            for round in 0..args.runs.clamp(1, 5) {
                for first in [round % 2 == 0, round % 2 == 1] {
                    if first {
                        p_big.push(timed(|| through("big"))?);
                    } else {
                        d_big.push(timed(|| straight("big"))?);
                    }
                }
            }
            Ok::<_, anyhow::Error>((
                median_of(&mut p_small),
                median_of(&mut d_small),
                median_of(&mut p_big),
                median_of(&mut d_big),
            ))
        })();
        let _ = host.kill();
        let _ = host.wait();
        let (ps, ds, pb, db) = out?;
        let mib = big as f64 / 1048576.0;
        let report = serde_json::json!({
            "runs": args.runs, "small_preview_ms": ps, "small_direct_ms": ds, "small_ratio": ps / ds,
            "bytes": big, "big_preview_ms": pb, "big_direct_ms": db,
            "big_preview_mib_s": mib / (pb / 1000.0), "big_direct_mib_s": mib / (db / 1000.0),
        });
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!(
                "{} interleaved rounds, medians; python3 -m http.server in the sandbox and on the host",
                args.runs
            );
            println!("  small page, new connection   preview {ps:7.2} ms   direct {ds:7.2} ms   {:.2}x", ps / ds);
            println!(
                "  {mib:.0} MiB file                preview {:7.1} MiB/s  direct {:7.1} MiB/s",
                mib / (pb / 1000.0),
                mib / (db / 1000.0)
            );
        }
        Ok(0)
    })();
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sb.id));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn wait_up(mut up: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !up() {
        anyhow::ensure!(Instant::now() < deadline, "the servers did not answer");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn timed(f: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<f64> {
    let t = Instant::now();
    f()?;
    Ok(ms(t))
}

/// One GET on a new connection, read to its end: the bytes of the answer.
fn get(addr: &str, path: &str, headers: &str) -> anyhow::Result<u64> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n")?;
    let mut buf = vec![0u8; 256 * 1024];
    let (mut total, mut head) = (0u64, Vec::new());
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if head.len() < 16 {
            head.extend_from_slice(&buf[..n.min(16)]);
        }
        total += n as u64;
    }
    anyhow::ensure!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "{addr}{path}: {}",
        String::from_utf8_lossy(&head)
    );
    Ok(total)
}
