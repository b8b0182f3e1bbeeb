//! What a sandbox should be: the spec a caller hands the runtime, and the parsers for its human forms.

use std::path::PathBuf;
use std::time::Duration;

use crate::cgroup::Limits;

/// A host directory or file brought into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    pub host: PathBuf,
    /// Absolute, normalised path inside the sandbox.
    pub target: String,
    pub readonly: bool,
}

/// A directory of berth's storage (a named volume) brought into the sandbox. Its files are stored under
/// [`crate::ids::STORAGE_BASE`] and seen inside as the sandbox's own ids, whichever id block it runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    pub source: PathBuf,
    /// Absolute, normalised path inside the sandbox.
    pub target: String,
    pub readonly: bool,
}

/// Everything the runtime needs to build one sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spec {
    /// The sandbox's host name; also how it is named in errors.
    pub name: String,
    pub image: String,
    pub limits: Limits,
    pub mounts: Vec<BindMount>,
    /// The id to run under (a persistent sandbox started again keeps its id); a fresh one when `None`.
    pub id: Option<String>,
    /// A host directory that keeps the sandbox's writable state (the root file system's changes and the
    /// workspace) across runs, stored under [`crate::ids::STORAGE_BASE`]. `None`: a private tmpfs that
    /// vanishes with the sandbox.
    pub state: Option<PathBuf>,
    /// The state is the sandbox's only while it lives (an ephemeral sandbox's): its overlays are mounted
    /// `volatile`, with no sync of the whole host file system at unmount, which otherwise makes removing (or
    /// hibernating) a sandbox wait for every dirty page on that file system, and no `fsync` inside it.
    pub volatile: bool,
    pub volumes: Vec<VolumeMount>,
    /// Small files berth hands the sandbox (name, contents), such as the certificate of the authority its
    /// proxy signs with: written to a private tmpfs at [`crate::plan::BERTH_FILES`], never into its files.
    pub files: Vec<(String, String)>,
    /// The boundary the sandbox runs behind.
    pub isolation: Isolation,
}

pub use berth_api::Isolation;

/// A value given on the command line or in a request that berth cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{0:?} is not a size: use a number with an optional K, M, G or T suffix, such as 512M")]
    Size(String),
    #[error("{0:?} is not a duration: use a number with a unit, such as 500ms, 30s, 10m or 2h")]
    Duration(String),
    #[error("{0:?} is not a CPU count: use a positive number of cores, such as 0.5 or 2")]
    Cpus(String),
    #[error("{0:?} is not a positive whole number")]
    Count(String),
    #[error("{0:?} is not KEY=VALUE with a non-empty KEY made of letters, digits and _")]
    Env(String),
    #[error("{0:?} is not HOST:SANDBOX[:ro] with absolute paths")]
    Mount(String),
    #[error("the sandbox path {0:?} must be absolute and must not contain . or .. components")]
    SandboxPath(String),
    #[error("the sandbox path {0:?} is reserved by berth and cannot be mounted over")]
    Reserved(String),
    #[error(
        "{0:?} is not a valid sandbox name: use 1-63 letters, digits, '-' and '.', starting with a letter or digit"
    )]
    Name(String),
    #[error("{0:?} is not a sandbox id: ids are twelve lower-case hex digits")]
    Id(String),
    #[error("the memory limit of {0} bytes is too small: a sandbox needs at least 4M")]
    MemoryTooSmall(u64),
}

/// The environment every command in a sandbox starts from, before `PWD` and the caller's variables.
pub const BASE_ENV: [(&str, &str); 4] = [
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", "/root"),
    ("USER", "root"),
    ("LANG", "C.UTF-8"),
];

/// The smallest memory limit a sandbox can be built under.
pub const MIN_MEMORY: u64 = 4 << 20;

/// Parse `512M`, `2G`, `1048576` (bytes; suffixes are binary: K = 1024).
pub fn parse_size(s: &str) -> Result<u64, SpecError> {
    let err = || SpecError::Size(s.to_string());
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(err()),
            };
            (&t[..i], mult)
        }
        None => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| err())?;
    if !n.is_finite() || n <= 0.0 {
        return Err(err());
    }
    let bytes = n * mult as f64;
    if bytes > u64::MAX as f64 / 2.0 {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// Parse `500ms`, `30s`, `10m`, `2h`, `1d`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, SpecError> {
    let err = || SpecError::Duration(s.to_string());
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let n: f64 = t[..split].parse().map_err(|_| err())?;
    let secs = match &t[split..] {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(err()),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 365.0 * 86400.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse a CPU count (`1.5`) into thousandths of a core.
pub fn parse_cpus(s: &str) -> Result<u64, SpecError> {
    let n: f64 = s.trim().parse().map_err(|_| SpecError::Cpus(s.to_string()))?;
    if !n.is_finite() || !(0.01..=1024.0).contains(&n) {
        return Err(SpecError::Cpus(s.to_string()));
    }
    Ok((n * 1000.0).round() as u64)
}

/// Parse a positive count such as a pids limit.
pub fn parse_count(s: &str) -> Result<u64, SpecError> {
    match s.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(SpecError::Count(s.to_string())),
    }
}

/// Parse `KEY=VALUE`.
pub fn parse_env(s: &str) -> Result<(String, String), SpecError> {
    let (k, v) = s.split_once('=').ok_or_else(|| SpecError::Env(s.to_string()))?;
    let valid = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid || v.contains('\0') {
        return Err(SpecError::Env(s.to_string()));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Check one variable given as a name and a value (a map's entry): the name as `parse_env` takes it, and
/// wholly the name (one with `=` in it would set another variable).
pub fn check_env(name: &str, value: &str) -> Result<(), SpecError> {
    match parse_env(&format!("{name}={value}")) {
        Ok((k, _)) if k == name => Ok(()),
        _ => Err(SpecError::Env(format!("{name}={value}"))),
    }
}

/// Check that a path inside the sandbox is absolute and normal, and return it without a trailing slash.
pub fn sandbox_path(s: &str) -> Result<String, SpecError> {
    let bad = || SpecError::SandboxPath(s.to_string());
    if !s.starts_with('/') || s.contains('\0') {
        return Err(bad());
    }
    let parts: Vec<&str> = s.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(bad());
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Sandbox paths that berth itself mounts and that a bind mount may not cover.
const RESERVED: [&str; 5] = ["/", "/proc", "/sys", "/dev", "/usr"];

/// Check that `target` may be mounted over: not one of the paths berth mounts itself.
pub fn check_target(target: &str) -> Result<(), SpecError> {
    if RESERVED.iter().any(|r| target == *r || (*r != "/" && target.starts_with(&format!("{r}/")))) {
        return Err(SpecError::Reserved(target.to_string()));
    }
    Ok(())
}

/// Parse `HOST:SANDBOX[:ro]` (or `:rw`).
pub fn parse_mount(s: &str) -> Result<BindMount, SpecError> {
    let bad = || SpecError::Mount(s.to_string());
    let mut parts = s.split(':');
    let (host, target) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
    let readonly = match parts.next() {
        None | Some("rw") => false,
        Some("ro") => true,
        Some(_) => return Err(bad()),
    };
    if parts.next().is_some() || !host.starts_with('/') {
        return Err(bad());
    }
    let target = sandbox_path(target)?;
    check_target(&target)?;
    Ok(BindMount { host: PathBuf::from(host), target, readonly })
}

/// Check a sandbox id handed in by a caller: twelve lower-case hex digits, as the runtime makes them.
pub fn check_id(s: &str) -> Result<(), SpecError> {
    let ok = s.len() == 12 && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if ok { Ok(()) } else { Err(SpecError::Id(s.to_string())) }
}

/// Check a sandbox name (it becomes the host name, so it follows host name rules).
pub fn check_name(s: &str) -> Result<(), SpecError> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok { Ok(()) } else { Err(SpecError::Name(s.to_string())) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        for bad in ["", "M", "-1M", "0", "12Q", "1e400", "nan"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        for bad in ["", "s", "-1s", "0s", "3y", "1 s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpus_and_counts() {
        assert_eq!(parse_cpus("1.5").unwrap(), 1500);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("lots").is_err());
        assert_eq!(parse_count("256").unwrap(), 256);
        assert!(parse_count("0").is_err());
        assert!(parse_count("-3").is_err());
    }

    #[test]
    fn env_pairs() {
        assert_eq!(parse_env("A_1=x=y").unwrap(), ("A_1".into(), "x=y".into()));
        assert_eq!(parse_env("EMPTY=").unwrap(), ("EMPTY".into(), String::new()));
        for bad in ["NOEQ", "=v", "1A=v", "A-B=v"] {
            assert!(parse_env(bad).is_err(), "{bad}");
        }
        assert!(check_env("A_1", "x=y").is_ok());
        for (name, value) in [("BAD=NAME", "x"), ("", "x"), ("A", "nul\0"), ("A B", "x")] {
            assert!(check_env(name, value).is_err(), "{name:?}");
        }
    }

    #[test]
    fn mounts() {
        let m = parse_mount("/src:/workspace/src:ro").unwrap();
        assert_eq!(m, BindMount { host: "/src".into(), target: "/workspace/src".into(), readonly: true });
        assert!(!parse_mount("/a:/b/").unwrap().readonly);
        assert_eq!(parse_mount("/a:/b/").unwrap().target, "/b");
        for bad in ["rel:/b", "/a", "/a:b", "/a:/b:rx", "/a:/b:ro:x", "/a:/b/../c"] {
            assert!(parse_mount(bad).is_err(), "{bad}");
        }
        for reserved in ["/a:/", "/a:/proc", "/a:/proc/sys", "/a:/dev/x", "/a:/usr"] {
            assert!(matches!(parse_mount(reserved), Err(SpecError::Reserved(_))), "{reserved}");
        }
    }

    #[test]
    fn names() {
        assert!(check_name("agent-1.test").is_ok());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
