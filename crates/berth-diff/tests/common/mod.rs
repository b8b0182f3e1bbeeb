//! Builders for layer directories: files, links, overlay whiteouts and opaque directories on disk.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_diff::{Change, Kind, Tree};
use rustix::fs::{CWD, FileType, Mode};

/// One layer directory under construction.
pub struct Layer {
    pub path: PathBuf,
}

impl Layer {
    pub fn new(parent: &Path, name: &str) -> Self {
        let path = parent.join(name);
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    fn at(&self, rel: &str) -> PathBuf {
        let p = self.path.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        p
    }

    pub fn file(&self, rel: &str, content: &str) -> &Self {
        self.bytes(rel, content.as_bytes())
    }

    pub fn bytes(&self, rel: &str, content: &[u8]) -> &Self {
        std::fs::write(self.at(rel), content).unwrap();
        self
    }

    pub fn mode(&self, rel: &str, mode: u32) -> &Self {
        std::fs::set_permissions(self.path.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
        self
    }

    pub fn dir(&self, rel: &str) -> &Self {
        std::fs::create_dir_all(self.path.join(rel)).unwrap();
        self
    }

    pub fn link(&self, rel: &str, target: &str) -> &Self {
        let p = self.at(rel);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(target, p).unwrap();
        self
    }

    /// An overlayfs whiteout: a character device 0:0 (needs root).
    pub fn whiteout(&self, rel: &str) -> &Self {
        let p = self.at(rel);
        rustix::fs::mknodat(CWD, &p, FileType::CharacterDevice, Mode::from_bits_truncate(0o600), 0)
            .expect("creating a whiteout needs root");
        self
    }

    /// The newer whiteout form: an empty file with a whiteout xattr.
    pub fn xattr_whiteout(&self, rel: &str) -> &Self {
        let p = self.at(rel);
        std::fs::write(&p, b"").unwrap();
        rustix::fs::lsetxattr(&p, "user.overlay.whiteout", b"y", rustix::fs::XattrFlags::empty()).unwrap();
        self
    }

    /// An opaque directory: hides what the lower layers hold under it.
    pub fn opaque(&self, rel: &str) -> &Self {
        let p = self.path.join(rel);
        std::fs::create_dir_all(&p).unwrap();
        rustix::fs::lsetxattr(&p, "user.overlay.opaque", b"y", rustix::fs::XattrFlags::empty()).unwrap();
        self
    }

    pub fn fifo(&self, rel: &str) -> &Self {
        rustix::fs::mknodat(CWD, self.at(rel), FileType::Fifo, Mode::from_bits_truncate(0o644), 0).unwrap();
        self
    }

    pub fn remove(&self, rel: &str) -> &Self {
        let p = self.path.join(rel);
        if p.symlink_metadata().unwrap().is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
        self
    }

    /// A copy of this layer (as `cp -a` makes it: new inodes, same contents, modes and times).
    pub fn copy(&self, parent: &Path, name: &str) -> Layer {
        let to = parent.join(name);
        let status = Command::new("cp").arg("-a").arg(&self.path).arg(&to).status().unwrap();
        assert!(status.success());
        Layer { path: to }
    }
}

/// "A /path", "M /path", "D /path" lines, in order.
pub fn summary(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            let k = match c.kind {
                Kind::Added => "A",
                Kind::Modified => "M",
                Kind::Deleted => "D",
            };
            format!("{k} {}", c.path)
        })
        .collect()
}

pub fn plain(at: &str, layer: &Layer) -> Tree {
    Tree::plain(at, &layer.path)
}

pub fn overlay(at: &str, layers: &[&Layer]) -> Tree {
    Tree::new(vec![berth_diff::Layered::new(at, layers.iter().map(|l| l.path.clone()).collect())])
}

/// Runs a command in `dir`, panicking with its output when it fails; returns stdout.
pub fn run(dir: &Path, program: &str, args: &[&str], input: Option<&[u8]>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
