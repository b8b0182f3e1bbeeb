//! `berth run`: an ephemeral sandbox for one command.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_init::protocol::Event;
use berth_runtime::cgroup::Limits;
use berth_runtime::spec::Spec;
use berth_runtime::{Runtime, Sandbox, Stdio};
use rustix::event::{PollFd, PollFlags};
use serde::Serialize;

use crate::cli::RunArgs;
use crate::exit;

/// Signals `berth run` passes on to the command instead of dying of them.
const FORWARDED: [i32; 4] = [1 /* HUP */, 2 /* INT */, 3 /* QUIT */, 15 /* TERM */];

/// The `--json` summary.
#[derive(Debug, Serialize)]
struct Summary {
    /// The sandbox's id (it no longer exists when this is printed).
    id: String,
    exit_code: i32,
    signal: Option<i32>,
    duration_ms: u64,
    cpu_ms: u64,
    peak_memory_bytes: u64,
    oom_killed: bool,
    timed_out: bool,
    /// The boundary it ran behind: `namespaces` or `gvisor`.
    isolation: &'static str,
    /// What the sandbox's init said of its landlock rules: `enforced`, `partial` or `unavailable`.
    landlock: String,
}

/// How the command ended.
enum Outcome {
    /// `over_memory`: the sandbox's init killed it for going over the memory limit (gVisor's, see
    /// `berth_init::memory`).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        over_memory: bool,
    },
    NotStarted {
        code: i32,
        message: String,
    },
    TimedOut,
}

/// The `--state` directory, made if missing, as an absolute path.
fn state_dir(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the state directory {}", dir.display()))?;
    std::fs::canonicalize(dir).with_context(|| format!("cannot use the state directory {}", dir.display()))
}

pub fn run(root: &Path, args: RunArgs) -> anyhow::Result<i32> {
    // Signals arrive on a descriptor from here on, so a Ctrl-C during setup still tears down cleanly.
    berth_runtime::trace::mark("main");
    let sigfd = berth_sys::process::signal_fd(&FORWARDED)?;
    let runtime = Runtime::open(root)?;
    berth_runtime::trace::mark("open runtime");
    let spec = Spec {
        name: args.name.clone().unwrap_or_else(|| format!("berth-{}", std::process::id())),
        image: args.image.clone(),
        limits: Limits {
            memory_bytes: Some(args.memory.unwrap_or_else(default_memory)),
            pids: Some(args.pids),
            cpu_millis: args.cpus,
        },
        mounts: args.mounts.clone(),
        state: args.state.as_deref().map(state_dir).transpose()?,
        isolation: args.isolation,
        ..Spec::default()
    };
    let sandbox = runtime.create(&spec).context("cannot create the sandbox")?;
    let id = sandbox.id().to_string();
    let landlock = sandbox.landlock().to_string();
    let started = Instant::now();
    let outcome = supervise(&sandbox, &args, sigfd.as_fd());
    let duration = started.elapsed();
    let usage = sandbox.usage();
    let backend = sandbox.backend();
    let teardown = sandbox.destroy();
    berth_runtime::trace::mark("destroyed");
    let outcome = match outcome {
        // A kernel of the sandbox's own (gVisor's) is one host process: the cgroup's OOM killer ends the whole
        // sandbox, not one of its processes, and init with it.
        Err(_)
            if backend.supports().oom == berth_runtime::OomScope::Sandbox
                && usage.as_ref().is_ok_and(|u| u.oom_kills > 0) =>
        {
            eprintln!(
                "berth: the sandbox went over its memory limit, which under {} ends the whole sandbox",
                backend.name()
            );
            Outcome::Exited { code: None, signal: Some(9), over_memory: false }
        }
        outcome => outcome?,
    };
    teardown.context("the sandbox was not cleaned up")?;
    let usage = usage.unwrap_or_default();

    let over_memory = matches!(outcome, Outcome::Exited { over_memory: true, .. });
    let (code, signal, timed_out) = match outcome {
        Outcome::Exited { code: Some(c), .. } => (c, None, false),
        Outcome::Exited { signal: Some(s), .. } => (exit::for_signal(s), Some(s), false),
        Outcome::Exited { .. } => (exit::BERTH_FAILED, None, false),
        Outcome::NotStarted { code, message } => {
            eprintln!("berth: {message}");
            (code, None, false)
        }
        Outcome::TimedOut => {
            eprintln!(
                "berth: the command timed out after {}; everything it started was killed",
                humanize(args.timeout)
            );
            (exit::TIMED_OUT, Some(9), true)
        }
    };
    if args.json {
        let summary = Summary {
            id,
            exit_code: code,
            signal,
            duration_ms: duration.as_millis() as u64,
            cpu_ms: usage.cpu_ns / 1_000_000,
            peak_memory_bytes: usage.peak_memory_bytes,
            oom_killed: usage.oom_kills > 0 || over_memory,
            timed_out,
            isolation: args.isolation.as_str(),
            landlock,
        };
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(code)
}

/// Start the command and wait for it to end, forwarding signals and enforcing the timeout.
fn supervise(sandbox: &Sandbox, args: &RunArgs, sigfd: std::os::fd::BorrowedFd<'_>) -> anyhow::Result<Outcome> {
    let env = environment(&args.env, &args.workdir);
    let stdio = Stdio {
        stdin: Some(rustix::stdio::stdin()),
        stdout: Some(rustix::stdio::stdout()),
        stderr: Some(rustix::stdio::stderr()),
    };
    sandbox.exec(1, &args.command, &env, &args.workdir, stdio)?;
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let mut over_memory = false;
    loop {
        let remaining = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) => Some(r),
                None => {
                    sandbox.kill()?;
                    return Ok(Outcome::TimedOut);
                }
            },
            None => None,
        };
        let ts = remaining
            .map(|d| rustix::time::Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) });
        let (control_ready, signal_ready) = {
            let control = sandbox.control();
            let mut fds = [PollFd::new(&control, PollFlags::IN), PollFd::new(&sigfd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e).context("wait for the command"),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if signal_ready {
            for sig in berth_sys::process::read_signals(sigfd) {
                sandbox.signal(1, sig)?;
            }
        }
        if control_ready {
            match sandbox.next_event(Some(Duration::ZERO))? {
                Some(Event::Exited { id: 1, code, signal }) => {
                    return Ok(Outcome::Exited { code, signal, over_memory });
                }
                Some(Event::OverMemory { id: 1, limit, .. }) => {
                    eprintln!("berth: the command went over the sandbox's memory limit ({limit} bytes) and was killed");
                    over_memory = true;
                }
                Some(Event::Failed { id: 1, code, message }) => return Ok(Outcome::NotStarted { code, message }),
                Some(Event::Rejected { message }) => anyhow::bail!("the sandbox's init refused the command: {message}"),
                _ => {}
            }
        }
    }
}

/// The command's environment: a fixed base, then the caller's `--env` on top.
fn environment(extra: &[(String, String)], workdir: &str) -> Vec<String> {
    let mut env: Vec<(String, String)> =
        berth_runtime::spec::BASE_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    env.push(("PWD".into(), workdir.into()));
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".into(), term));
    }
    for (k, v) in extra {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// Half of the host's memory: a runaway sandbox cannot take the host down with it.
fn default_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib * 1024 / 2)
        .unwrap_or(4 << 30)
}

fn humanize(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.3}s", d.as_secs_f64()).replace(".000s", "s")).unwrap_or_default()
}
