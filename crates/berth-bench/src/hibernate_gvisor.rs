//! `berth bench --hibernate --isolation gvisor`: hibernate and wake through the daemon's API of a gVisor
//! sandbox holding 256 MiB of touched memory, and the first exec after the wake, against runsc itself
//! checkpointing and restoring the same program in a bundle of the host's /usr with the flags berth gives it,
//! round by round.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::BenchArgs;
use crate::hibernate::{HOLDER, api_round, median_of, ms};

pub fn bench(socket: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let runsc = berth_runtime::gvisor::runsc().map_err(|why| anyhow::anyhow!("no gVisor here: {why}"))?;
    let rounds = args.runs.clamp(1, 50);
    let (mut hib, mut wake, mut first, mut ck, mut restore) = (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let (h, w, f) = api_round(socket, berth_api::Isolation::Gvisor)?;
        hib.push(h);
        wake.push(w);
        first.push(f);
        let (c, r) = raw_round(&runsc.path, round)?;
        ck.push(c);
        restore.push(r);
    }
    let (hib_p50, ck_p50) = (median_of(&mut hib), median_of(&mut ck));
    let (wake_p50, restore_p50) = (median_of(&mut wake), median_of(&mut restore));
    let first_p50 = median_of(&mut first);
    let report = serde_json::json!({
        "rounds": rounds, "memory_mib": 256, "isolation": "gvisor",
        "api_hibernate_ms": hib_p50, "raw_checkpoint_ms": ck_p50, "hibernate_ratio": hib_p50 / ck_p50,
        "api_wake_ms": wake_p50, "raw_restore_ms": restore_p50, "wake_ratio": wake_p50 / restore_p50,
        "first_exec_after_wake_ms": first_p50, "runsc": runsc.version,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{rounds} rounds, medians; a gVisor sandbox holding 256 MiB of touched memory (runsc {})",
            runsc.version
        );
        println!(
            "  hibernate (API)        {hib_p50:8.1} ms   raw runsc checkpoint {ck_p50:8.1} ms   {:.2}x",
            hib_p50 / ck_p50
        );
        println!(
            "  wake (API)             {wake_p50:8.1} ms   raw runsc restore    {restore_p50:8.1} ms   {:.2}x",
            wake_p50 / restore_p50
        );
        println!("  first exec after wake  {first_p50:8.1} ms");
    }
    Ok(0)
}

/// The same program under runsc alone: `runsc checkpoint` until the sandbox is gone (as berth waits for it),
/// and `runsc restore` until it runs again, ms each.
fn raw_round(runsc: &Path, round: usize) -> anyhow::Result<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!("berth-bench-runsc-{}-{round}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let id = format!("berth-bench-ck-{}-{round}", std::process::id());
    let result = raw_round_in(runsc, &dir, &id);
    if dir.exists() {
        let _ = runsc_cmd(runsc, &dir).args(["delete", "--force", &id]).status();
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// runsc with berth's flags and the round's state. Its output goes to a file: a pipe would be held open by
/// the sandbox processes runsc leaves behind.
fn runsc_cmd(runsc: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(runsc);
    cmd.arg(format!("--root={}", dir.join("state").display()));
    cmd.args(berth_runtime::gvisor::FLAGS);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("runsc.log"));
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd.stderr(log.map(Stdio::from).unwrap_or_else(|_| Stdio::null()));
    cmd
}

/// The last line runsc wrote to the round's log.
fn said(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("runsc.log")).unwrap_or_default();
    text.lines().rev().find(|l| l.contains("failed")).unwrap_or("").chars().take(300).collect()
}

fn raw_round_in(runsc: &Path, dir: &Path, id: &str) -> anyhow::Result<(f64, f64)> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr"))?;
    std::fs::create_dir_all(rootfs.join("mark"))?;
    std::fs::create_dir_all(dir.join("mark"))?;
    std::fs::create_dir_all(dir.join("img"))?;
    for link in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{link}"), rootfs.join(link))?;
    }
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["/usr/bin/python3", "-c", HOLDER, "/mark/ready"],
                    "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "peer",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
            {"destination": "/mark", "type": "bind", "source": dir.join("mark"), "options": ["rbind", "rw"]}
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]}
    });
    std::fs::write(dir.join("config.json"), config.to_string())?;
    let bundle = format!("--bundle={}", dir.display());
    let mut run = runsc_cmd(runsc, dir).args(["run", &bundle, id]).spawn()?;
    let ready = dir.join("mark/ready");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        if Instant::now() > deadline {
            let _ = run.kill();
            anyhow::bail!("the program holding the memory did not start under runsc");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let image = format!("--image-path={}", dir.join("img").display());
    let t = Instant::now();
    let out = runsc_cmd(runsc, dir).args(["checkpoint", &image, id]).status()?;
    anyhow::ensure!(out.success(), "raw runsc checkpoint failed: {}", said(dir));
    wait_within(&mut run, Duration::from_secs(60))?;
    let c = ms(t);
    let _ = runsc_cmd(runsc, dir).args(["delete", "--force", id]).status();
    let t = Instant::now();
    let out = runsc_cmd(runsc, dir).args(["restore", &image, &bundle, "--detach", id]).status()?;
    let r = ms(t);
    anyhow::ensure!(out.success(), "raw runsc restore failed: {}", said(dir));
    let _ = runsc_cmd(runsc, dir).args(["kill", id, "9"]).status();
    Ok((c, r))
}

/// Wait for `child` to end, at most `limit`.
fn wait_within(child: &mut Child, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            anyhow::bail!("runsc did not end after its checkpoint");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
