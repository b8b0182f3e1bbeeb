//! `berth-oci`: the berth binary started under that name (a link to it), or as `berth oci`, is an OCI
//! runtime command line in runc's shape, so that containerd's runc shim drives it through its `BinaryName`
//! option. The verbs and flags are the ones the shim sends; the work is in `berth_runtime::oci`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use berth_api::PodEvent;
use berth_runtime::oci::{self, CreateArgs, Oci, OciError};

use crate::oci_agent::Agent;

/// The name that selects this personality.
pub const NAME: &str = "berth-oci";

/// Whether the process was started as `berth-oci`.
pub fn invoked_as_oci() -> bool {
    std::env::args_os().next().and_then(|a| Path::new(&a).file_name().map(|n| n == NAME)).unwrap_or(false)
}

/// Run an OCI verb from `args` (without the program name); returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut g = Global { root: PathBuf::from(oci::DEFAULT_ROOT), log: None, log_file: None, json: false };
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        let (flag, inline) = split(&args[i]);
        let mut value = || -> Option<String> {
            inline.clone().or_else(|| {
                i += 1;
                args.get(i).cloned()
            })
        };
        match flag {
            "--root" => g.root = value().map(PathBuf::from).unwrap_or(g.root),
            "--log" => g.log = value().map(PathBuf::from),
            "--log-format" => g.json = value().as_deref() == Some("json"),
            "--criu" | "--rootless" => {
                value();
            }
            "--debug" => {}
            "--systemd-cgroup" => {
                return g.fail(&OciError::Config(
                    "berth-oci manages cgroups itself: set SystemdCgroup = false in the runtime's options".into(),
                ));
            }
            "-v" | "--version" => {
                println!("{NAME} version {}\nspec: 1.1.0", env!("CARGO_PKG_VERSION"));
                return 0;
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return 0;
            }
            other => return g.fail(&OciError::Config(format!("unknown global flag {other}\n{}", usage()))),
        }
        i += 1;
    }
    // Opened now: `exec` enters the container's mount namespace, where the log's path means nothing.
    g.log_file = g.log.as_ref().and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok());
    let Some(verb) = args.get(i) else {
        eprintln!("{}", usage());
        return 1;
    };
    let rest = &args[i + 1..];
    match run(&g, verb, rest) {
        Ok(code) => code,
        Err(e) => g.fail(&e),
    }
}

struct Global {
    root: PathBuf,
    log: Option<PathBuf>,
    log_file: Option<std::fs::File>,
    json: bool,
}

impl Global {
    /// Report an error where the shim looks for it (the log, as JSON lines) and on stderr.
    fn fail(&self, e: &OciError) -> i32 {
        let message = berth_runtime::error_chain(e);
        let file = self.log_file.as_ref().and_then(|f| f.try_clone().ok()).or_else(|| {
            self.log.as_ref().and_then(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).ok())
        });
        if let Some(mut f) = file {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            let line = if self.json {
                serde_json::json!({"level": "error", "msg": message, "time": berth_api::rfc3339(ms)}).to_string()
            } else {
                format!("{} error: {message}", berth_api::rfc3339(ms))
            };
            let _ = writeln!(f, "{line}");
        }
        eprintln!("{NAME}: {message}");
        1
    }
}

fn usage() -> String {
    format!(
        "usage: {NAME} [--root DIR] [--log FILE] [--log-format text|json] VERB ...\n\
         verbs: create --bundle B [--pid-file F] [--console-socket S] ID | start ID | state ID |\n       \
         kill [--all] ID [SIGNAL] | delete [--force] ID | exec --process P [--detach] [--pid-file F] ID |\n       \
         pause ID | resume ID | ps [--format json] ID | list [--format json] | features |
       \
         link [DIR] (make DIR/berth-oci, default /usr/local/bin)"
    )
}

/// The node agent of container `id`'s pod, if the pod is the daemon's (see `oci_agent`).
fn agent_of(oci: &Oci, root: &Path, id: &str) -> Result<Option<Agent>, OciError> {
    match oci.state(id) {
        Ok(st) => Agent::of(root, id, &st.annotations),
        // No such container: the verb itself says so.
        Err(_) => Ok(None),
    }
}

/// `--flag=value` as (`--flag`, `value`).
fn split(arg: &str) -> (&str, Option<String>) {
    match arg.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
        _ => (arg, None),
    }
}

/// A verb's flags and positional arguments. `with_value` lists the flags that take one.
struct Parsed {
    flags: Vec<(String, Option<String>)>,
    positional: Vec<String>,
}

impl Parsed {
    fn new(args: &[String], with_value: &[&str], known: &[&str]) -> Result<Parsed, OciError> {
        let mut flags = Vec::new();
        let mut positional = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            if a == "--" {
                positional.extend(args[i + 1..].iter().cloned());
                break;
            }
            if a.starts_with('-') && positional.is_empty() && a.len() > 1 {
                let (flag, inline) = split(a);
                if with_value.contains(&flag) {
                    let v = inline.or_else(|| {
                        i += 1;
                        args.get(i).cloned()
                    });
                    if v.is_none() {
                        return Err(OciError::Config(format!("{flag} needs a value")));
                    }
                    flags.push((flag.to_string(), v));
                } else if known.contains(&flag) {
                    flags.push((flag.to_string(), None));
                } else {
                    return Err(OciError::Config(format!("unknown flag {flag}")));
                }
            } else {
                positional.push(a.clone());
            }
            i += 1;
        }
        Ok(Parsed { flags, positional })
    }

    fn value(&self, names: &[&str]) -> Option<&str> {
        self.flags.iter().rev().find(|(f, _)| names.contains(&f.as_str())).and_then(|(_, v)| v.as_deref())
    }

    fn has(&self, names: &[&str]) -> bool {
        self.flags.iter().any(|(f, _)| names.contains(&f.as_str()))
    }

    fn id(&self) -> Result<&str, OciError> {
        self.positional.first().map(String::as_str).ok_or_else(|| OciError::Config("a container id is needed".into()))
    }

    fn preserve_fds(&self) -> Result<i32, OciError> {
        match self.value(&["--preserve-fds"]) {
            None => Ok(0),
            Some(v) => v
                .parse::<i32>()
                .ok()
                .filter(|n| (0..=1024).contains(n))
                .ok_or_else(|| OciError::Config(format!("--preserve-fds {v:?} is not a count of descriptors"))),
        }
    }
}

fn run(g: &Global, verb: &str, args: &[String]) -> Result<i32, OciError> {
    let oci = Oci::new(&g.root);
    match verb {
        "create" => {
            let p = Parsed::new(
                args,
                &["--bundle", "-b", "--pid-file", "--console-socket", "--preserve-fds"],
                &["--no-pivot", "--no-new-keyring"],
            )?;
            let bundle = PathBuf::from(p.value(&["--bundle", "-b"]).unwrap_or("."));
            let bundle = std::path::absolute(&bundle).unwrap_or(bundle);
            let id = p.id()?;
            // A pod of the node agent's is registered (or found) first: it says where the workspace is.
            let config = oci::config::Config::load(&bundle)?;
            let agent = Agent::of(&g.root, id, &config.annotations)?;
            let pod = match &agent {
                Some(a) => Some(a.before_create(id, &config)?),
                None => None,
            };
            let workspace = pod.as_ref().and_then(|p| p.workspace_path.as_deref()).map(Path::new);
            let made = oci.create(
                &config,
                &CreateArgs {
                    id,
                    bundle: &bundle,
                    pid_file: p.value(&["--pid-file"]).map(Path::new),
                    console_socket: p.value(&["--console-socket"]).map(Path::new),
                    preserve_fds: p.preserve_fds()?,
                    workspace,
                    extra_env: pod.as_ref().map(|p| p.env.as_slice()).unwrap_or_default(),
                },
            );
            let Some(agent) = agent else { return made.map(|()| 0) };
            let recorded = made.and_then(|()| {
                let st = oci.state(id)?;
                agent.created(id, &config, &st.cgroup_parent.join(&st.cgroup_name)).map(|_| ())
            });
            if let Err(e) = recorded {
                // Not recorded, not kept: the container goes, and a pod registered for it ends.
                let _ = oci.delete(id, true);
                agent.abandon(id);
                return Err(e);
            }
            Ok(0)
        }
        "start" => {
            let id = Parsed::new(args, &[], &[])?.id()?.to_string();
            if let Some(agent) = agent_of(&oci, &g.root, &id)? {
                agent.event(&PodEvent::about("container_started", &id))?;
            }
            oci.start(&id)?;
            Ok(0)
        }
        "state" => {
            let st = oci.state(Parsed::new(args, &[], &[])?.id()?)?;
            println!("{}", serde_json::to_string_pretty(&st.to_oci()).unwrap_or_default());
            Ok(0)
        }
        "kill" => {
            let p = Parsed::new(args, &[], &["--all", "-a"])?;
            let signal = parse_signal(p.positional.get(1).map(String::as_str).unwrap_or("TERM"))?;
            oci.kill(p.id()?, signal, p.has(&["--all", "-a"]))?;
            Ok(0)
        }
        "delete" => {
            let p = Parsed::new(args, &[], &["--force", "-f"])?;
            let id = p.id()?;
            // Found before the container's state goes; told after it has.
            let agent = agent_of(&oci, &g.root, id).unwrap_or_else(|e| {
                eprintln!("{NAME}: {e}");
                None
            });
            oci.delete(id, p.has(&["--force", "-f"]))?;
            if let Some(agent) = agent {
                agent.deleted(id);
            }
            Ok(0)
        }
        "pause" => {
            oci.pause(Parsed::new(args, &[], &[])?.id()?)?;
            Ok(0)
        }
        "resume" => {
            oci.resume(Parsed::new(args, &[], &[])?.id()?)?;
            Ok(0)
        }
        "ps" => {
            let p = Parsed::new(args, &["--format", "-f"], &[])?;
            let pids = oci.ps(p.id()?)?;
            if p.value(&["--format", "-f"]) == Some("json") {
                println!("{}", serde_json::to_string(&pids).unwrap_or_default());
            } else {
                println!("PID");
                for pid in pids {
                    println!("{pid}");
                }
            }
            Ok(0)
        }
        "list" | "ls" => {
            let p = Parsed::new(args, &["--format", "-f"], &["--quiet", "-q"])?;
            let states: Vec<serde_json::Value> =
                oci.list().iter().filter_map(|id| oci.state(id).ok()).map(|s| s.to_oci()).collect();
            if p.value(&["--format", "-f"]) == Some("json") {
                println!("{}", serde_json::to_string(&states).unwrap_or_default());
            } else {
                for s in states {
                    println!(
                        "{}\t{}\t{}",
                        s["id"].as_str().unwrap_or(""),
                        s["pid"],
                        s["status"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(0)
        }
        "exec" => {
            let p = Parsed::new(
                args,
                &["--process", "-p", "--pid-file", "--console-socket", "--preserve-fds"],
                &["--detach", "-d"],
            )?;
            let process = p
                .value(&["--process", "-p"])
                .map(PathBuf::from)
                .ok_or_else(|| OciError::Config("exec needs --process FILE (the OCI process to run)".into()))?;
            let mut extra_env = Vec::new();
            if let Some(agent) = agent_of(&oci, &g.root, p.id()?)? {
                let args = std::fs::read(&process)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| serde_json::from_value::<Vec<String>>(v["args"].clone()).ok());
                extra_env = agent.event(&PodEvent { args, ..PodEvent::about("exec", p.id()?) })?.env;
            }
            oci::exec(
                &oci,
                &oci::exec::ExecArgs {
                    id: p.id()?,
                    process: &process,
                    pid_file: p.value(&["--pid-file"]).map(Path::new),
                    console_socket: p.value(&["--console-socket"]).map(Path::new),
                    detach: p.has(&["--detach", "-d"]),
                    preserve_fds: p.preserve_fds()?,
                    extra_env: &extra_env,
                },
            )
        }
        // Not an OCI verb: makes the `berth-oci` link that containerd's BinaryName names.
        "link" => {
            let dir = PathBuf::from(args.first().map(String::as_str).unwrap_or("/usr/local/bin"));
            let exe = std::env::current_exe()
                .map_err(|e| OciError::Io { what: "find the berth binary".into(), source: e })?;
            // Beside the binary, the link is relative: it stays right wherever the directory is mounted (an
            // installer in a container writing to the host's /usr/local/bin).
            let same_dir = std::fs::canonicalize(&dir).ok() == exe.parent().and_then(|p| std::fs::canonicalize(p).ok());
            let exe = match exe.file_name() {
                Some(name) if same_dir => PathBuf::from(name),
                _ => exe,
            };
            let link = dir.join(NAME);
            match std::fs::read_link(&link) {
                Ok(to) if to == exe => {}
                Ok(_) => std::fs::remove_file(&link)
                    .map_err(|e| OciError::Io { what: format!("replace {}", link.display()), source: e })?,
                Err(_) if link.exists() => {
                    return Err(OciError::Config(format!(
                        "{} exists and is not a link: remove it first",
                        link.display()
                    )));
                }
                Err(_) => {}
            }
            if !link.exists() {
                std::os::unix::fs::symlink(&exe, &link)
                    .map_err(|e| OciError::Io { what: format!("make the link {}", link.display()), source: e })?;
            }
            println!("{}", link.display());
            Ok(0)
        }
        "features" => {
            println!("{}", serde_json::to_string_pretty(&oci::features()).unwrap_or_default());
            Ok(0)
        }
        "checkpoint" | "restore" => Err(OciError::Config(format!(
            "{verb} is not offered through berth-oci: berth's snapshots and forks are taken through berth's own API"
        ))),
        "update" => {
            let p = Parsed::new(args, &["--resources", "-r", "--memory", "--pids-limit"], &[])?;
            let mut resources: oci::config::Resources = match p.value(&["--resources", "-r"]) {
                None => oci::config::Resources::default(),
                Some(file) => {
                    let text = if file == "-" {
                        std::io::read_to_string(std::io::stdin())
                    } else {
                        std::fs::read_to_string(file)
                    }
                    .map_err(|e| OciError::Io { what: format!("read the resources {file}"), source: e })?;
                    serde_json::from_str(&text)
                        .map_err(|e| OciError::Config(format!("the resources are not OCI Linux resources: {e}")))?
                }
            };
            let number = |flag: &str| -> Result<Option<i64>, OciError> {
                p.value(&[flag])
                    .map(|v| v.parse::<i64>().map_err(|_| OciError::Config(format!("{flag} {v:?} is not a number"))))
                    .transpose()
            };
            if let Some(bytes) = number("--memory")? {
                resources.memory = Some(oci::config::Memory { limit: Some(bytes) });
            }
            if let Some(limit) = number("--pids-limit")? {
                resources.pids = Some(oci::config::Pids { limit });
            }
            oci.update(p.id()?, &resources)?;
            Ok(0)
        }
        other => Err(OciError::Config(format!("unknown verb {other:?}\n{}", usage()))),
    }
}

/// A signal by number (`9`) or name (`KILL`, `SIGKILL`).
fn parse_signal(s: &str) -> Result<i32, OciError> {
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) { Ok(n) } else { Err(OciError::Config(format!("{s} is not a signal"))) };
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.trim_start_matches("SIG");
    // Real-time signals by offset: RTMIN+3 (34 + 3), RTMAX-1 (64 - 1), as Linux numbers them for programs.
    let rt = |base: i32, rest: &str, sign: i32| -> Option<i32> {
        let n = if rest.is_empty() { 0 } else { rest.parse::<i32>().ok()? };
        Some(base + sign * n).filter(|s| (34..=64).contains(s))
    };
    let realtime = match name {
        n if n.starts_with("RTMIN") => rt(34, n["RTMIN".len()..].trim_start_matches('+'), 1),
        n if n.starts_with("RTMAX") => rt(64, n["RTMAX".len()..].trim_start_matches('-'), -1),
        _ => None,
    };
    if let Some(n) = realtime {
        return Ok(n);
    }
    const NAMES: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2", "PIPE", "ALRM",
        "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF",
        "WINCH", "IO", "PWR", "SYS",
    ];
    NAMES
        .iter()
        .position(|n| *n == name)
        .map(|i| i as i32 + 1)
        .ok_or_else(|| OciError::Config(format!("{s} is not a signal")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_number_and_name() {
        assert_eq!(parse_signal("9").unwrap(), 9);
        assert_eq!(parse_signal("KILL").unwrap(), 9);
        assert_eq!(parse_signal("SIGTERM").unwrap(), 15);
        assert_eq!(parse_signal("sigusr1").unwrap(), 10);
        assert_eq!(parse_signal("SYS").unwrap(), 31);
        assert_eq!(parse_signal("SIGRTMIN+3").unwrap(), 37);
        assert_eq!(parse_signal("RTMIN").unwrap(), 34);
        assert_eq!(parse_signal("RTMAX-1").unwrap(), 63);
        assert_eq!(parse_signal("37").unwrap(), 37);
        assert!(parse_signal("RTMIN+40").is_err());
        assert!(parse_signal("0").is_err() && parse_signal("NOPE").is_err());
    }

    #[test]
    fn verb_flags_take_values_inline_or_after() {
        let args: Vec<String> =
            ["--bundle=/b", "--pid-file", "/p", "--no-pivot", "abc"].iter().map(|s| s.to_string()).collect();
        let p = Parsed::new(&args, &["--bundle", "--pid-file"], &["--no-pivot"]).unwrap();
        assert_eq!(p.value(&["--bundle"]), Some("/b"));
        assert_eq!(p.value(&["--pid-file"]), Some("/p"));
        assert!(p.has(&["--no-pivot"]));
        assert_eq!(p.id().unwrap(), "abc");
        let bad: Vec<String> = ["--what", "x"].iter().map(|s| s.to_string()).collect();
        assert!(Parsed::new(&bad, &[], &[]).is_err());
        let short: Vec<String> = ["--pid-file"].iter().map(|s| s.to_string()).collect();
        assert!(Parsed::new(&short, &["--pid-file"], &[]).is_err());
    }
}
