//! `berth cp`: copy a file or a directory tree between the host and a sandbox, through the daemon's files
//! API. A file travels as its bytes; a directory as a tar, packed and unpacked by the same descriptor-based
//! code the daemon uses (symbolic links are copied as links and never followed while unpacking).

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use berth_api::{FileEntry, FileKind};
use berth_client::Client;
use berth_engine::files::{MAX_FILE, extract_host, write_tar_host};
use rustix::fs::{Mode, OFlags};

use crate::cli::CpArgs;

/// One side of a copy.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    Host(PathBuf),
    Sandbox { id: String, path: String },
}

impl Side {
    /// `ID:/path` (or `ID:path`, relative to /workspace) is in a sandbox; anything else is a host path. A host
    /// path with a colon in its first component can be written `./a:b`.
    fn parse(s: &str) -> Side {
        match s.split_once(':') {
            Some((id, path)) if !id.is_empty() && !id.contains('/') => {
                let path = if path.starts_with('/') {
                    path.to_string()
                } else if path.is_empty() {
                    "/workspace".to_string()
                } else {
                    format!("/workspace/{path}")
                };
                Side::Sandbox { id: id.to_string(), path }
            }
            _ => Side::Host(PathBuf::from(s)),
        }
    }
}

pub fn cp(socket: &Path, args: CpArgs) -> anyhow::Result<i32> {
    match (Side::parse(&args.src), Side::parse(&args.dst)) {
        (Side::Sandbox { id, path }, Side::Host(host)) => download(&Client::connect(socket)?, &id, &path, &host)?,
        (Side::Host(host), Side::Sandbox { id, path }) => upload(&Client::connect(socket)?, &host, &id, &path)?,
        (Side::Host(_), Side::Host(_)) => bail!("one of SRC and DST must be in a sandbox, written ID:/path"),
        (Side::Sandbox { .. }, Side::Sandbox { .. }) => {
            bail!("only one of SRC and DST may be in a sandbox: copy between sandboxes through the host")
        }
    }
    Ok(0)
}

fn url(what: &str, id: &str, path: &str, extra: &str) -> String {
    format!("/v1/sandboxes/{}/{what}?path={}{extra}", berth_client::segment(id), berth_client::segment(path))
}

/// What `path` is in the sandbox; `None` when it does not exist (a missing sandbox is an error).
fn stat(client: &Client, id: &str, path: &str) -> anyhow::Result<Option<FileEntry>> {
    // Ask for the sandbox first, so that "no such sandbox" is not mistaken for "no such file".
    client.get(&format!("/v1/sandboxes/{}", berth_client::segment(id)))?;
    match client.get(&url("stat", id, path, "")) {
        Ok((_, body)) => Ok(Some(berth_client::decode(&body)?)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The last component of a sandbox path ("" for /).
fn base_name(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or_default()
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn download(client: &Client, id: &str, path: &str, host: &Path) -> anyhow::Result<()> {
    let Some(entry) = stat(client, id, path)? else { bail!("{id}:{path} does not exist") };
    let name = base_name(path);
    let target = if host.is_dir() && !name.is_empty() { host.join(name) } else { host.to_path_buf() };
    match entry.kind {
        FileKind::File => {
            let (_, data) = client.get(&url("files", id, path, ""))?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(entry.mode & 0o777)
                .open(&target)
                .with_context(|| format!("cannot write {}", target.display()))?;
            f.write_all(&data).with_context(|| format!("cannot write {}", target.display()))?;
        }
        FileKind::Directory => {
            match std::fs::create_dir(&target) {
                Ok(()) => std::fs::set_permissions(&target, std::fs::Permissions::from_mode(entry.mode & 0o1777))?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && target.is_dir() => {}
                Err(e) => return Err(e).with_context(|| format!("cannot make the directory {}", target.display())),
            }
            let dir = rustix::fs::open(&target, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .with_context(|| format!("cannot open {}", target.display()))?;
            let tar = client.get_stream(&url("archive", id, path, ""))?;
            extract_host(dir.as_fd(), tar).with_context(|| format!("cannot copy {id}:{path}"))?;
        }
        other => bail!("{id}:{path} is a {other:?}; berth cp copies files and directories"),
    }
    Ok(())
}

fn upload(client: &Client, host: &Path, id: &str, path: &str) -> anyhow::Result<()> {
    let meta = std::fs::metadata(host).with_context(|| format!("cannot read {}", host.display()))?;
    let remote = stat(client, id, path)?;
    let name = host.file_name().map(|n| n.to_string_lossy().into_owned());
    let into_dir = |r: &Option<FileEntry>| r.as_ref().is_some_and(|e| e.kind == FileKind::Directory);
    if meta.is_file() {
        let target = match name {
            Some(n) if into_dir(&remote) => join(path, &n),
            _ => path.to_string(),
        };
        if meta.len() > MAX_FILE {
            bail!("{} is {} bytes; berth cp copies files of up to {MAX_FILE} bytes", host.display(), meta.len());
        }
        let data = std::fs::read(host).with_context(|| format!("cannot read {}", host.display()))?;
        let mode = meta.permissions().mode() & 0o777;
        client.put_bytes(&url("files", id, &target, &format!("&mode={mode:o}")), &data)?;
    } else if meta.is_dir() {
        let target = match (&remote, name) {
            (Some(e), _) if e.kind != FileKind::Directory => bail!("{id}:{path} exists and is not a directory"),
            (Some(_), Some(n)) => join(path, &n),
            _ => path.to_string(),
        };
        let dir = rustix::fs::open(host, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .with_context(|| format!("cannot open {}", host.display()))?;
        let tar = write_tar_host(dir.as_fd(), Vec::new()).with_context(|| format!("cannot pack {}", host.display()))?;
        if tar.len() as u64 > MAX_FILE {
            bail!(
                "{} packs to {} bytes; berth cp copies directories of up to {MAX_FILE} bytes at once: copy its parts",
                host.display(),
                tar.len()
            );
        }
        client.put_bytes(&url("archive", id, &target, ""), &tar)?;
    } else {
        bail!("{} is neither a file nor a directory", host.display());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sides() {
        assert_eq!(Side::parse("abc:/x/y"), Side::Sandbox { id: "abc".into(), path: "/x/y".into() });
        assert_eq!(Side::parse("abc:rel"), Side::Sandbox { id: "abc".into(), path: "/workspace/rel".into() });
        assert_eq!(Side::parse("abc:"), Side::Sandbox { id: "abc".into(), path: "/workspace".into() });
        assert_eq!(Side::parse("./a:b"), Side::Host("./a:b".into()));
        assert_eq!(Side::parse("/tmp/x"), Side::Host("/tmp/x".into()));
        assert_eq!(Side::parse(":x"), Side::Host(":x".into()));
        assert_eq!(base_name("/a/b/"), "b");
        assert_eq!(base_name("/"), "");
        assert_eq!(join("/a/", "b"), "/a/b");
    }
}
