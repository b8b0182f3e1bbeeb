//! `berth bench --watch`: how long a change in a sandbox's directory takes to reach a client of the API's
//! watch (`GET /v1/sandboxes/{id}/watch`: inotify in the sandbox's init, its line through the engine and
//! the HTTP stream), against an inotify watch the host holds itself on the same directory, the floor. One
//! file is made per round, from the host in the sandbox's workspace in the storage pool (`<root>/pool/
//! sandboxes/<id>/workspace`, the directory the sandbox's /workspace is), and both watchers see the same
//! change. (Before the engine had a watch, E2B's watchers looked at the directory
//! every 250 ms.)

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use berth_api::{CreateSandbox, Sandbox, WatchEvent, WatchKind};
use berth_client::Client;
use rustix::fs::inotify;

use crate::BenchArgs;
use crate::hibernate::median_of;

pub fn bench_watch(root: &Path, socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let (_, body) = Client::connect(socket)?.post_json("/v1/sandboxes", &CreateSandbox::default())?;
    let sb: Sandbox = serde_json::from_slice(&body)?;
    let result = measure(root, socket, &sb, &args);
    let _ = Client::connect(socket)?.delete(&format!("/v1/sandboxes/{}", sb.id));
    let (berth, host) = result?;
    let (mut b, mut h) = (berth.clone(), host.clone());
    let (b50, h50) = (median_of(&mut b), median_of(&mut h));
    let (b99, h99) = (p99(&mut b), p99(&mut h));
    let report = serde_json::json!({
        "runs": berth.len(), "berth_watch_p50_ms": b50, "berth_watch_p99_ms": b99,
        "host_inotify_p50_ms": h50, "host_inotify_p99_ms": h99, "ratio_p50": b50 / h50,
        "polling_every_250ms_mean_ms": 125.0,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{} files made one at a time; from the write to the event, medians (p99)", berth.len());
        println!("  berth's watch (API stream)   {b50:7.3} ms ({b99:.3})");
        println!("  host inotify, same dir       {h50:7.3} ms ({h99:.3})   {:.1}x", b50 / h50);
        println!("  (a look every 250 ms, as E2B's watchers did before: 125 ms on average)");
    }
    Ok(0)
}

fn p99(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() * 99 / 100).copied().unwrap_or(0.0)
}

/// The two latencies of each round, in ms.
fn measure(root: &Path, socket: &Path, sb: &Sandbox, args: &BenchArgs) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let workspace = root.join("pool/sandboxes").join(&sb.id).join("workspace");
    anyhow::ensure!(
        workspace.is_dir(),
        "{} is not the sandbox's workspace: give the daemon's --root (berth --root DIR bench --watch)",
        workspace.display()
    );
    let dir = workspace.join("watched");
    std::fs::create_dir_all(&dir)?;
    // The host's own watch.
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC)?;
    inotify::add_watch(&fd, &dir, inotify::WatchFlags::CREATE)?;
    let (host_tx, host_rx) = mpsc::channel::<(String, Instant)>();
    std::thread::spawn(move || {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&fd, &mut buf);
        while let Ok(ev) = reader.next() {
            let name = ev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if host_tx.send((name, Instant::now())).is_err() {
                return;
            }
        }
    });
    // berth's.
    let url = format!("/v1/sandboxes/{}/watch?path=/workspace/watched", sb.id);
    let mut stream = Client::connect(socket)?.get_stream(&url)?;
    let (berth_tx, berth_rx) = mpsc::channel::<(String, Instant)>();
    let first = stream.next_line()?.unwrap_or_default();
    let ready: WatchEvent = serde_json::from_slice(&first)?;
    anyhow::ensure!(ready.kind == WatchKind::Ready, "the watch did not start: {}", String::from_utf8_lossy(&first));
    std::thread::spawn(move || {
        while let Ok(Some(line)) = stream.next_line() {
            let at = Instant::now();
            let Ok(ev) = serde_json::from_slice::<WatchEvent>(&line) else { continue };
            if ev.kind == WatchKind::Create && berth_tx.send((ev.path.unwrap_or_default(), at)).is_err() {
                return;
            }
        }
    });
    let (mut berth, mut host) = (Vec::new(), Vec::new());
    let total = args.warmup + args.runs.max(1);
    for n in 0..total {
        let name = format!("f{n}");
        let t = Instant::now();
        std::fs::write(dir.join(&name), b"x")?;
        let b = wait_for(&berth_rx, &name)?;
        let h = wait_for(&host_rx, &name)?;
        if n >= args.warmup {
            berth.push((b - t).as_secs_f64() * 1000.0);
            host.push((h - t).as_secs_f64() * 1000.0);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok((berth, host))
}

fn wait_for(rx: &mpsc::Receiver<(String, Instant)>, name: &str) -> anyhow::Result<Instant> {
    loop {
        let (got, at) =
            rx.recv_timeout(Duration::from_secs(10)).map_err(|_| anyhow::anyhow!("no event for {name} within 10 s"))?;
        if got == name {
            return Ok(at);
        }
    }
}
