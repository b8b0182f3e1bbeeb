//! Who an exec runs as: a user of the sandbox's own `/etc/passwd`, named or given by ids. The daemon reads
//! that file through the files API's confinement (the sandbox may have written anything there) and sends
//! init the ids; init drops its supplementary groups and becomes them before it executes the command.

use crate::EngineError;

/// Inside ids a sandbox has (its maps cover `0..65536`).
const IDS: u32 = berth_runtime::ids::IDS_PER_SANDBOX;
/// Largest `/etc/passwd` read.
const MAX_PASSWD: usize = 1 << 20;

/// What a request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    Name(String),
    Ids { uid: u32, gid: Option<u32> },
}

/// Whom to run as, once resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Its name and home, when the sandbox's `/etc/passwd` has it.
    pub name: Option<String>,
    pub home: Option<String>,
}

impl Account {
    /// The variables that follow the user: `HOME`, `USER` and `LOGNAME` (a user the sandbox does not name
    /// gets `HOME=/` and neither name).
    pub(crate) fn env(&self) -> Vec<(&'static str, Option<String>)> {
        let home = self.home.clone().unwrap_or_else(|| "/".into());
        vec![("HOME", Some(home)), ("USER", self.name.clone()), ("LOGNAME", self.name.clone())]
    }
}

/// Check a request's `user`: a name as `useradd` takes it, or `UID[:GID]` below 65536.
pub(crate) fn parse(spec: &str) -> Result<Spec, EngineError> {
    let bad = || {
        EngineError::invalid(format!(
            "user {spec:?} is neither a user name (such as user) nor ids (such as 1000 or 1000:1000, each below {IDS})"
        ))
    };
    if spec.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        let id = |s: &str| s.parse::<u32>().ok().filter(|n| *n < IDS && s.bytes().all(|b| b.is_ascii_digit()));
        return match spec.split_once(':') {
            Some((u, g)) => Ok(Spec::Ids { uid: id(u).ok_or_else(bad)?, gid: Some(id(g).ok_or_else(bad)?) }),
            None => Ok(Spec::Ids { uid: id(spec).ok_or_else(bad)?, gid: None }),
        };
    }
    let body = spec.strip_suffix('$').unwrap_or(spec);
    let first = body.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest = body.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
    if first && rest && spec.len() <= 32 { Ok(Spec::Name(spec.to_string())) } else { Err(bad()) }
}

/// One entry of a passwd file: name, uid, gid, home.
fn entries(passwd: &str) -> impl Iterator<Item = (&str, u32, u32, &str)> {
    passwd.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 7 || f[0].is_empty() {
            return None;
        }
        let (uid, gid) = (f[2].parse::<u32>().ok()?, f[3].parse::<u32>().ok()?);
        (uid < IDS && gid < IDS).then_some((f[0], uid, gid, f[5]))
    })
}

/// Resolve `spec` against the text of a sandbox's `/etc/passwd` (`None`: it has none).
pub fn resolve(spec: &Spec, passwd: Option<&str>) -> Result<Account, EngineError> {
    let home = |h: &str| (h.starts_with('/') && !h.contains('\0')).then(|| h.to_string());
    let mut found = passwd.into_iter().flat_map(entries);
    match spec {
        Spec::Name(name) => found
            .find(|(n, ..)| n == name)
            .map(|(n, uid, gid, h)| Account { uid, gid, name: Some(n.to_string()), home: home(h) })
            .ok_or_else(|| {
                EngineError::invalid(format!(
                    "the sandbox has no user named {name} in its /etc/passwd: give one it has, or ids (such as 1000:1000)"
                ))
            }),
        Spec::Ids { uid, gid } => Ok(match found.find(|(_, u, ..)| u == uid) {
            Some((n, _, g, h)) => Account { uid: *uid, gid: gid.unwrap_or(g), name: Some(n.to_string()), home: home(h) },
            None => Account { uid: *uid, gid: gid.unwrap_or(*uid), name: None, home: None },
        }),
    }
}

/// Read the sandbox's `/etc/passwd` (running init `pid`) and resolve `spec` against it. Root by name or id
/// needs no file.
pub(crate) async fn account(pid: i32, isolation: berth_api::Isolation, spec: &Spec) -> Result<Account, EngineError> {
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || {
        let fs = crate::files::SandboxFs::open(pid, isolation).map_err(|e| EngineError::Conflict(e.to_string()))?;
        account_in(&fs, &spec)
    })
    .await
    .map_err(|_| EngineError::Conflict("reading the sandbox's /etc/passwd failed".into()))?
}

/// `spec` resolved against the `/etc/passwd` of the sandbox `fs` reaches (blocking).
pub(crate) fn account_in(fs: &crate::files::SandboxFs, spec: &Spec) -> Result<Account, EngineError> {
    if matches!(spec, Spec::Ids { uid: 0, gid: None | Some(0) }) {
        return resolve(spec, Some(ROOT));
    }
    let text = match fs.get("/etc/passwd") {
        Ok(crate::files::Got::File(data)) if data.len() <= MAX_PASSWD => {
            Some(String::from_utf8_lossy(&data).into_owned())
        }
        Ok(crate::files::Got::File(_)) => {
            return Err(EngineError::invalid(format!(
                "the sandbox's /etc/passwd is larger than {MAX_PASSWD} bytes: give ids (such as 1000:1000)"
            )));
        }
        _ => None,
    };
    match resolve(spec, text.as_deref()) {
        // Root is root, whether or not the image's /etc/passwd names it.
        Err(_) if *spec == Spec::Name("root".into()) => resolve(&Spec::Ids { uid: 0, gid: None }, Some(ROOT)),
        r => r,
    }
}

/// Root's entry, for an image that has none.
const ROOT: &str = "root:x:0:0:root:/root:/bin/sh";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n\
                          broken line\nbig:x:70000:70000::/big:/bin/sh\nnohome:x:1001:100::relative:/bin/sh\n";

    #[test]
    fn names_and_ids_are_checked() {
        assert_eq!(parse("user").unwrap(), Spec::Name("user".into()));
        assert_eq!(parse("_svc-1.a").unwrap(), Spec::Name("_svc-1.a".into()));
        assert_eq!(parse("1000").unwrap(), Spec::Ids { uid: 1000, gid: None });
        assert_eq!(parse("1000:0").unwrap(), Spec::Ids { uid: 1000, gid: Some(0) });
        for bad in ["", "User", "a b", "1000:", ":1", "65536", "1:65536", "-1", "+1", "1x", &"a".repeat(33), "a:b"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn accounts_come_from_the_sandbox_passwd() {
        let user = resolve(&Spec::Name("user".into()), Some(PASSWD)).unwrap();
        assert_eq!((user.uid, user.gid, user.home.as_deref()), (1000, 1000, Some("/home/user")));
        let by_id = resolve(&Spec::Ids { uid: 1000, gid: Some(5) }, Some(PASSWD)).unwrap();
        assert_eq!((by_id.gid, by_id.name.as_deref()), (5, Some("user")));
        let unknown = resolve(&Spec::Ids { uid: 4242, gid: None }, Some(PASSWD)).unwrap();
        assert_eq!((unknown.gid, &unknown.name, &unknown.home), (4242, &None, &None));
        assert!(unknown.env().contains(&("HOME", Some("/".into()))));
        // Beyond the sandbox's ids, or a home that is no absolute path: not taken.
        assert!(resolve(&Spec::Name("big".into()), Some(PASSWD)).is_err());
        assert_eq!(resolve(&Spec::Name("nohome".into()), Some(PASSWD)).unwrap().home, None);
        let err = resolve(&Spec::Name("nobody".into()), None).unwrap_err().to_string();
        assert!(err.contains("no user named nobody"), "{err}");
    }
}
