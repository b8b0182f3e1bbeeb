//! `berth bench --gvisor`: a gVisor sandbox through berth against `runsc run` of the same kind of bundle,
//! with the namespaces backend in the same rounds, and what an idle gVisor sandbox holds.

use std::path::Path;

use serde::Serialize;

use crate::BenchArgs;
use crate::startup::{Case, CaseResult, interleave, summarise};

#[derive(Debug, Serialize)]
struct Report {
    runsc: String,
    cases: Vec<CaseResult>,
    /// `berth run --isolation gvisor -- true` over `runsc run` of a bundle of the host's /usr.
    gvisor_over_runsc: f64,
    /// The gVisor run over the namespaces run.
    gvisor_over_namespaces: f64,
    /// The most memory a gVisor sandbox running `sleep 1` was charged (its kernel, gofer and the command).
    idle_peak_memory_bytes: u64,
}

pub fn bench_gvisor(root: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let runsc = berth_runtime::gvisor::runsc().map_err(|why| anyhow::anyhow!("no gVisor here: {why}"))?;
    let exe = std::env::current_exe()?.display().to_string();
    let root_arg = root.display().to_string();
    let berth = |isolation: &str| -> Vec<String> {
        [&exe, "--root", &root_arg, "run", "--isolation", isolation, "--", "true"].map(String::from).to_vec()
    };
    // The peer: runsc with the flags berth gives it, on a root of the host's /usr (read-only) and its links.
    let dir = Scratch(std::env::temp_dir().join(format!("berth-bench-gvisor-{}", std::process::id())));
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr"))?;
    for link in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{link}"), rootfs.join(link))?;
    }
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["/usr/bin/true"], "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "peer",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]}
    });
    std::fs::write(dir.path().join("config.json"), config.to_string())?;
    let mut peer = vec![runsc.path.display().to_string(), format!("--root={}", dir.path().join("state").display())];
    peer.extend(berth_runtime::gvisor::FLAGS.map(String::from));
    peer.extend(["run".into(), format!("--bundle={}", dir.path().display()), "berth-bench-peer".into()]);
    let mut cases = vec![
        Case { name: "berth run --isolation gvisor", argv: berth("gvisor"), times: vec![] },
        Case { name: "runsc run", argv: peer, times: vec![] },
        Case { name: "berth run (namespaces)", argv: berth("namespaces"), times: vec![] },
    ];
    interleave(&mut cases, args.warmup, args.runs)?;
    let out = std::process::Command::new(&exe)
        .args(["--root", &root_arg, "run", "--isolation", "gvisor", "--json", "--", "sleep", "1"])
        .output()?;
    let summary: serde_json::Value =
        serde_json::from_slice(out.stdout.rsplit(|b| *b == b'\n').find(|l| !l.is_empty()).unwrap_or_default())?;
    let results: Vec<CaseResult> = cases.iter().map(summarise).collect();
    let report = Report {
        runsc: format!("{} {}", runsc.path.display(), runsc.version),
        gvisor_over_runsc: results[0].median_ms / results[1].median_ms,
        gvisor_over_namespaces: results[0].median_ms / results[2].median_ms,
        idle_peak_memory_bytes: summary["peak_memory_bytes"].as_u64().unwrap_or(0),
        cases: results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    println!(
        "{} interleaved runs of each (runsc {}); wall time from process start to exit\n",
        args.runs, runsc.version
    );
    println!("{:<30} {:>10} {:>10} {:>10}", "case", "median ms", "p90 ms", "min ms");
    for r in &report.cases {
        println!("{:<30} {:>10.2} {:>10.2} {:>10.2}", r.name, r.median_ms, r.p90_ms, r.min_ms);
    }
    println!("\nberth run --isolation gvisor / runsc run: {:.2}x", report.gvisor_over_runsc);
    println!("berth run --isolation gvisor / berth run (namespaces): {:.2}x", report.gvisor_over_namespaces);
    println!(
        "peak memory of a gVisor sandbox running sleep 1: {:.1} MiB",
        report.idle_peak_memory_bytes as f64 / 1048576.0
    );
    Ok(0)
}

/// The peer's bundle, removed when the bench ends.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
