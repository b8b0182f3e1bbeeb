//! `berth bench`: berth against its peers, in one run, on this machine.
//!
//! Each case is a whole command line (process start to exit), timed from here. Runs are interleaved (one of
//! each case per round) so that drift in the machine's speed lands on every case alike.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use crate::BenchArgs;

#[derive(Debug, Serialize)]
pub(crate) struct CaseResult {
    pub name: String,
    pub command: String,
    pub runs: usize,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    cases: Vec<CaseResult>,
    /// berth's median over each peer's median.
    ratios: Vec<(String, f64)>,
    /// Peak resident memory of `berth run -- true` and its descendants.
    berth_run_peak_rss_bytes: u64,
    skipped: Vec<String>,
}

pub(crate) struct Case {
    pub name: &'static str,
    pub argv: Vec<String>,
    pub times: Vec<f64>,
}

pub fn bench(root: &Path, args: BenchArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe()?.display().to_string();
    let root = root.display().to_string();
    let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
    let mut cases = vec![Case {
        name: "berth run",
        argv: [vec![exe, "--root".into(), root, "run".into(), "--".into()], words("true")].concat(),
        times: vec![],
    }];
    let mut skipped = Vec::new();
    for (name, line) in [
        ("bwrap", "bwrap --unshare-all --die-with-parent --ro-bind / / true"),
        ("unshare", "unshare --user --map-root-user --mount --pid --fork --net --ipc --uts true"),
        ("true", "true"),
    ] {
        let argv = words(line);
        if found(&argv[0]) {
            cases.push(Case { name, argv, times: vec![] });
        } else {
            skipped.push(format!("{name}: {} is not installed", argv[0]));
        }
    }

    // The first command this process reaps is berth run, so the children's peak RSS is berth run's.
    time(&cases[0].argv)?;
    let peak_rss = berth_sys::process::children_max_rss();
    interleave(&mut cases, args.warmup, args.runs)?;

    let results: Vec<CaseResult> = cases.iter().map(summarise).collect();
    let berth = results[0].median_ms;
    let ratios =
        results[1..].iter().filter(|r| r.name != "true").map(|r| (r.name.clone(), berth / r.median_ms)).collect();
    let report = Report { cases: results, ratios, berth_run_peak_rss_bytes: peak_rss, skipped };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report, args.runs);
    }
    Ok(0)
}

/// `warmup` untimed rounds, then `runs` timed ones, each running every case once in turn.
pub(crate) fn interleave(cases: &mut [Case], warmup: usize, runs: usize) -> anyhow::Result<()> {
    for _ in 0..warmup {
        for case in cases.iter() {
            time(&case.argv)?;
        }
    }
    for _ in 0..runs {
        for case in cases.iter_mut() {
            let t = time(&case.argv)?;
            case.times.push(t);
        }
    }
    Ok(())
}

pub(crate) fn found(program: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file())).unwrap_or(false)
}

/// Run a command to completion and return its wall time in milliseconds; it must succeed.
pub(crate) fn time(argv: &[String]) -> anyhow::Result<f64> {
    let start = Instant::now();
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let elapsed = start.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(status.success(), "{} failed ({status}) during the benchmark", argv.join(" "));
    Ok(elapsed)
}

pub(crate) fn summarise(case: &Case) -> CaseResult {
    let mut t = case.times.clone();
    t.sort_by(f64::total_cmp);
    let at = |q: f64| t.get(((t.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    CaseResult {
        name: case.name.to_string(),
        command: case.argv.join(" "),
        runs: t.len(),
        median_ms: at(0.5),
        p90_ms: at(0.9),
        min_ms: at(0.0),
    }
}

fn print_table(report: &Report, runs: usize) {
    println!("{runs} interleaved runs of each; wall time from process start to exit\n");
    println!("{:<12} {:>10} {:>10} {:>10}", "case", "median ms", "p90 ms", "min ms");
    for r in &report.cases {
        println!("{:<12} {:>10.2} {:>10.2} {:>10.2}", r.name, r.median_ms, r.p90_ms, r.min_ms);
    }
    println!();
    for (peer, ratio) in &report.ratios {
        println!("berth run / {peer}: {ratio:.2}x");
    }
    println!(
        "berth run peak RSS (with its descendants): {:.1} MiB",
        report.berth_run_peak_rss_bytes as f64 / 1048576.0
    );
    for s in &report.skipped {
        println!("skipped {s}");
    }
}
