//! Teardown with a receipt: copy out what the sandbox was asked to leave (declared outputs and the
//! workspace's patch), revoke its credentials, flush its records, destroy it, and check that nothing is left.
//! The receipt says what each step did and is kept under `<root>/receipts/<id>.json` after the sandbox is gone.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use berth_api::{OutputFile, Teardown};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use sha2::Digest;

use super::{Engine, journal_path};
use crate::EngineError;

/// The sandbox directory output globs are relative to.
const WORKSPACE: &str = "/workspace";
/// Most files one sandbox's outputs may copy, and most bytes.
const MAX_OUTPUT_FILES: usize = 10_000;
const MAX_OUTPUT_BYTES: u64 = 4 << 30;

/// Check output globs at create: each is under /workspace, and its pattern is one this module can match.
pub(crate) fn check_outputs(globs: &[String]) -> Result<(), EngineError> {
    for g in globs {
        let rel = g.strip_prefix(WORKSPACE).and_then(|r| r.strip_prefix('/'));
        let ok = rel.is_some_and(|r| !r.is_empty() && r.split('/').all(|p| !p.is_empty() && p != "." && p != ".."));
        if !ok {
            return Err(EngineError::invalid(format!(
                "output {g:?} must be a glob under /workspace, such as /workspace/dist/*.tar.gz or /workspace/**/report.json"
            )));
        }
    }
    Ok(())
}

/// Whether `name` matches one path segment's pattern (`*` any run of characters, `?` one).
fn segment_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            segment_matches(&pattern[1..], name) || (!name.is_empty() && segment_matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => segment_matches(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => segment_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// Whether a relative path matches a relative glob (`**` matches any number of whole segments).
fn glob_matches(pattern: &[&str], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(&"**"), _) => {
            glob_matches(&pattern[1..], path) || (!path.is_empty() && glob_matches(pattern, &path[1..]))
        }
        (Some(p), Some(n)) => segment_matches(p.as_bytes(), n.as_bytes()) && glob_matches(&pattern[1..], &path[1..]),
        _ => false,
    }
}

/// Every regular file under `dir` (never following a symbolic link: the tree is the sandbox's), as relative
/// paths with an open descriptor each.
fn walk(dir: &Path) -> Vec<(String, OwnedFd)> {
    let mut out = Vec::new();
    let Ok(root) =
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
    else {
        return out;
    };
    let mut stack = vec![String::new()];
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    while let Some(rel) = stack.pop() {
        let at = if rel.is_empty() { ".".to_string() } else { rel.clone() };
        let Ok(d) = rustix::fs::openat2(
            &root,
            &at,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve,
        ) else {
            continue;
        };
        let Ok(mut entries) = rustix::fs::Dir::read_from(&d) else { continue };
        while let Some(Ok(e)) = entries.next() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            match e.file_type() {
                rustix::fs::FileType::Directory => stack.push(child),
                rustix::fs::FileType::RegularFile => {
                    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
                    if let Ok(fd) = rustix::fs::openat2(&root, &child, flags, Mode::empty(), resolve)
                        && rustix::fs::fstat(&fd)
                            .is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_file())
                    {
                        out.push((child, fd));
                    }
                }
                _ => {}
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Copy `fd` to `dest`, returning its size and SHA-256.
fn copy_out(fd: OwnedFd, dest: &Path) -> std::io::Result<(u64, String)> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut src = std::fs::File::from(fd);
    let mut file = std::fs::File::create(dest)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = std::io::Read::read(&mut src, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])?;
        total += n as u64;
    }
    file.sync_all()?;
    Ok((total, hex(&hasher.finalize())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Engine {
    pub(crate) fn receipts_dir(&self) -> PathBuf {
        self.root.join("receipts")
    }

    /// Receipts and outputs are root's: what a sandbox leaves (a patch, an artefact) can hold anything.
    pub(crate) fn private_dirs(&self) {
        for dir in [self.receipts_dir(), self.root.join("outputs")] {
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        }
    }

    pub(crate) fn outputs_dir(&self, id: &str) -> PathBuf {
        self.root.join("outputs").join(id)
    }

    /// Step 1: the declared outputs and the workspace's patch, copied out of the sandbox's files.
    pub(crate) async fn collect_outputs(&self, id: &str, globs: &[String], receipt: &mut Teardown) {
        let dest = self.outputs_dir(id);
        let workspace = self.state_dir(id).join("workspace");
        let patterns: Vec<Vec<String>> = globs
            .iter()
            .filter_map(|g| g.strip_prefix("/workspace/"))
            .map(|g| g.split('/').map(str::to_string).collect())
            .collect();
        if !patterns.is_empty() {
            let dest = dest.clone();
            let copied = tokio::task::spawn_blocking(move || {
                let mut out = Vec::new();
                let mut problems = Vec::new();
                let mut bytes = 0u64;
                for (rel, fd) in walk(&workspace) {
                    let parts: Vec<&str> = rel.split('/').collect();
                    if !patterns.iter().any(|p| glob_matches(&p.iter().map(String::as_str).collect::<Vec<_>>(), &parts))
                    {
                        continue;
                    }
                    if out.len() >= MAX_OUTPUT_FILES || bytes >= MAX_OUTPUT_BYTES {
                        problems
                            .push(format!("outputs stopped at {MAX_OUTPUT_FILES} files or {MAX_OUTPUT_BYTES} bytes"));
                        break;
                    }
                    let saved = dest.join("files").join(&rel);
                    match copy_out(fd, &saved) {
                        Ok((n, sha256)) => {
                            bytes += n;
                            out.push(OutputFile {
                                path: format!("{WORKSPACE}/{rel}"),
                                saved_as: saved.display().to_string(),
                                bytes: n,
                                sha256,
                            });
                        }
                        Err(e) => problems.push(format!("output {WORKSPACE}/{rel}: {e}")),
                    }
                }
                (out, problems)
            })
            .await;
            match copied {
                Ok((files, problems)) => {
                    receipt.steps.push(format!("copied {} output files out", files.len()));
                    receipt.outputs = files;
                    receipt.leftovers.extend(problems);
                }
                Err(_) => receipt.leftovers.push("copying the outputs failed".into()),
            }
        }
        match self.workspace_patch(id).await {
            Ok(Some(patch)) => {
                let path = dest.join("workspace.patch");
                let written = tokio::task::spawn_blocking(move || -> std::io::Result<OutputFile> {
                    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
                    std::fs::write(&path, &patch)?;
                    Ok(OutputFile {
                        path: WORKSPACE.into(),
                        saved_as: path.display().to_string(),
                        bytes: patch.len() as u64,
                        sha256: hex(&sha2::Sha256::digest(&patch)),
                    })
                })
                .await;
                match written {
                    Ok(Ok(f)) => {
                        receipt.steps.push(format!("saved the workspace's changes as a patch ({} bytes)", f.bytes));
                        receipt.patch = Some(f);
                    }
                    _ => receipt.leftovers.push("the workspace patch could not be saved".into()),
                }
            }
            Ok(None) => {}
            Err(e) => receipt.leftovers.push(format!("the workspace patch: {}", berth_runtime::error_chain(&e))),
        }
    }

    /// The workspace's changes as a patch, or None when nothing changed.
    async fn workspace_patch(&self, id: &str) -> Result<Option<Vec<u8>>, EngineError> {
        let (diff, text) = self.diff_under(id, None, true, Some(WORKSPACE.into())).await?;
        Ok(text.filter(|_| !diff.changes.is_empty()))
    }

    /// Step 3: the journal's records are on disk (synced now: appends are flushed, not each synced); say how
    /// many.
    pub(crate) fn count_flushed(&self, id: &str, receipt: &mut Teardown) {
        let path = journal_path(&self.root, id);
        if let Err(e) = std::fs::File::open(&path).and_then(|f| f.sync_all()) {
            receipt.leftovers.push(format!("the journal could not be synced: {e}"));
        }
        let records = crate::journal::read(&path).unwrap_or_default();
        let egress = records.iter().filter(|r| r.action == "egress").count() as u64;
        receipt.flushed.insert("journal".into(), records.len() as u64);
        receipt.flushed.insert("egress".into(), egress);
        receipt.steps.push(format!("flushed {} journal records ({egress} of egress)", records.len()));
    }

    /// Step 5: nothing of the sandbox is left on the host.
    pub(crate) fn check_leaks(&self, id: &str, receipt: &mut Teardown) {
        if self.state_dir(id).exists() {
            receipt.leftovers.push(format!("its files at {}", self.state_dir(id).display()));
        }
        if crate::shim::socket_path(&self.root, id).exists() {
            receipt.leftovers.push("its supervisor's socket".into());
        }
        if let Some(h) = &self.cgroups
            && h.open(id).exists()
        {
            receipt.leftovers.push("its cgroup".into());
        }
        if self.root.join("logs").join(id).exists() {
            receipt.leftovers.push("its exec logs".into());
        }
        receipt.clean = receipt.leftovers.is_empty();
    }

    /// Keep the receipt for `berth receipt ID`.
    pub(crate) fn keep_receipt(&self, receipt: &Teardown) {
        let dir = self.receipts_dir();
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| serde_json::to_vec_pretty(receipt).map_err(std::io::Error::other))
            .and_then(|json| std::fs::write(dir.join(format!("{}.json", receipt.id)), json));
        if let Err(e) = written {
            crate::log::warn("cannot keep a receipt", serde_json::json!({"id": receipt.id, "error": e.to_string()}));
        }
    }

    /// Past `--keep-removed`, what is kept of the oldest removed sandboxes goes: journal, receipt, outputs
    /// and record.
    pub(crate) async fn forget_old_removed(&self) {
        let Ok(ids) = self.store.forget_removed_beyond(self.bounds.keep_removed) else { return };
        for id in ids {
            let _ = tokio::fs::remove_file(super::journal_path(&self.root, &id)).await;
            let _ = tokio::fs::remove_file(self.receipts_dir().join(format!("{id}.json"))).await;
            let _ = tokio::fs::remove_dir_all(self.outputs_dir(&id)).await;
        }
    }

    /// A removed sandbox's receipt.
    pub fn receipt(&self, id: &str) -> Result<Teardown, EngineError> {
        let valid = id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit());
        let path = self.receipts_dir().join(format!("{id}.json"));
        let text = valid.then(|| std::fs::read(&path).ok()).flatten();
        let text = text.ok_or_else(|| {
            EngineError::NoSandbox(format!("{id} (no receipt: it is not removed yet, or never existed; use its id)"))
        })?;
        serde_json::from_slice(&text).map_err(|e| EngineError::Log(std::io::Error::other(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        glob_matches(&p.split('/').collect::<Vec<_>>(), &path.split('/').collect::<Vec<_>>())
    }

    #[test]
    fn globs_match_within_and_across_directories() {
        assert!(m("dist/*.tar.gz", "dist/app-1.0.tar.gz"));
        assert!(!m("dist/*.tar.gz", "dist/sub/app.tar.gz"));
        assert!(m("**/report.json", "report.json"));
        assert!(m("**/report.json", "a/b/report.json"));
        assert!(m("out/**", "out/x/y"));
        assert!(m("f?le", "file"));
        assert!(!m("*.txt", "a.txt.bak"));
    }

    #[test]
    fn output_globs_must_be_under_the_workspace() {
        assert!(check_outputs(&["/workspace/dist/*".into()]).is_ok());
        for bad in ["/etc/shadow", "/workspace", "/workspace/", "/workspace/../etc/x", "dist/*", "/workspace//x"] {
            assert!(check_outputs(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
