//! Committing a sandbox's changes to a new branch of a host git repository.
//!
//! Only git plumbing is used, with an index in a temporary directory: the repository's working tree, index
//! and `HEAD` are never touched, and the one reference written is the new branch, created only if it does
//! not exist yet. Contents reach git through `hash-object --stdin`, read from descriptors opened without
//! following links, so no path inside the sandbox's tree is ever handed to git.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::layers::Side;
use crate::plan::{self, Content};
use crate::{DiffError, Options, Tree, check_sandbox_path, diff};

/// Where and how to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// The top directory of a git work tree, or a bare repository.
    pub repo: PathBuf,
    /// The branch to create; it must not exist.
    pub branch: String,
    /// The commit the branch starts from; `HEAD` when `None`.
    pub base: Option<String>,
    /// The sandbox directory that maps to the repository's root, e.g. "/workspace".
    pub prefix: String,
    /// Author and committer name.
    pub author_name: String,
    /// Author and committer email.
    pub author_email: String,
    /// The commit message.
    pub message: String,
}

/// What [`export`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The new commit's object name; the branch points at it.
    pub commit: String,
    /// How many paths the commit changes relative to its base.
    pub files: usize,
}

/// Commits the changes from `old` to `new` under `opts.prefix`, applied to the base commit, as a new branch.
///
/// The branch's `git diff BASE BRANCH` is what [`crate::write_patch_under`] prints for the same trees and
/// prefix (binary files included, which the patch only names), provided the base holds what `old` holds
/// under the prefix.
pub fn export(old: &Tree, new: &Tree, opts: &ExportOptions) -> Result<Exported, DiffError> {
    check_sandbox_path("prefix", &opts.prefix)?;
    check_author("name", &opts.author_name)?;
    check_author("email", &opts.author_email)?;
    let git = Git::open(&opts.repo)?;
    git.check_branch(&opts.branch)?;
    let base_name = opts.base.as_deref().unwrap_or("HEAD");
    let base = git.resolve(base_name)?;
    if git.branch_exists(&opts.branch)? {
        return Err(DiffError::BranchExists { branch: opts.branch.clone(), repo: opts.repo.clone() });
    }

    let changes = diff(old, new, &Options { include: Some(opts.prefix.clone()) })?;
    let items = plan::plan(&changes, &opts.prefix)?;
    let side = Side::open(new, "new")?;
    let temp = tempfile::Builder::new().prefix("berth-export-").tempdir().map_err(DiffError::TempDir)?;
    let work_tree = temp.path().join("work-tree");
    std::fs::create_dir(&work_tree).map_err(DiffError::TempDir)?;
    let git = Git { index: Some(temp.path().join("index")), work_tree: Some(work_tree), ..git };
    git.run("read-tree", &["read-tree", &base], None)?;

    let mut removals = Vec::new();
    let mut entries = Vec::new();
    for item in &items {
        match item.new {
            None => {
                removals.extend_from_slice(item.rel.as_bytes());
                removals.push(0);
            }
            Some(blob) => {
                let id = git.hash(plan::open(&side, item.path, blob)?, &side, item.path)?;
                entries.extend_from_slice(format!("{} {id}\t{}", blob.mode(), item.rel).as_bytes());
                entries.push(0);
            }
        }
    }
    if !removals.is_empty() {
        git.run("update-index", &["update-index", "-z", "--force-remove", "--stdin"], Some(&removals))?;
    }
    if !entries.is_empty() {
        git.run("update-index", &["update-index", "-z", "--index-info"], Some(&entries))?;
    }
    let tree = git.run("write-tree", &["write-tree"], None)?;
    let ident = [
        ("GIT_AUTHOR_NAME", opts.author_name.as_str()),
        ("GIT_AUTHOR_EMAIL", opts.author_email.as_str()),
        ("GIT_COMMITTER_NAME", opts.author_name.as_str()),
        ("GIT_COMMITTER_EMAIL", opts.author_email.as_str()),
    ];
    let mut cmd = git.command(&["commit-tree", "--no-gpg-sign", "-p", &base, "-F", "-", &tree]);
    cmd.envs(ident);
    let commit = git.finish("commit-tree", cmd, Some(opts.message.as_bytes()))?;
    let changed =
        git.run("diff-tree", &["diff-tree", "-r", "-z", "--name-only", "--no-renames", &base, &commit], None)?;
    let files = changed.split('\0').filter(|p| !p.is_empty()).count();

    let branch_ref = format!("refs/heads/{}", opts.branch);
    if let Err(e) = git.run("update-ref", &["update-ref", "-m", "berth export", &branch_ref, &commit, ""], None) {
        if git.branch_exists(&opts.branch)? {
            return Err(DiffError::BranchExists { branch: opts.branch.clone(), repo: opts.repo.clone() });
        }
        return Err(e);
    }
    Ok(Exported { commit, files })
}

fn check_author(field: &'static str, value: &str) -> Result<(), DiffError> {
    if value.trim().is_empty() || value.contains(['<', '>', '\n', '\0']) {
        return Err(DiffError::BadAuthor { field, value: value.to_owned() });
    }
    Ok(())
}

/// The git command line, run in one repository with a clean environment.
struct Git {
    repo: PathBuf,
    /// The repository's parent: git must not find a repository above the one given.
    ceiling: PathBuf,
    /// The temporary index, once there is one.
    index: Option<PathBuf>,
    /// An empty directory given as the work tree along with the temporary index: `update-index` wants one
    /// (a bare repository has none), and this one keeps it away from the repository's own.
    work_tree: Option<PathBuf>,
}

impl Git {
    /// Checks that `repo` is itself a repository (a work tree's top or a bare repository).
    fn open(repo: &Path) -> Result<Self, DiffError> {
        let not_repo = || DiffError::NotARepo { path: repo.to_path_buf() };
        let canonical = std::fs::canonicalize(repo).map_err(|_| not_repo())?;
        let ceiling = canonical.parent().map(Path::to_path_buf).unwrap_or_else(|| canonical.clone());
        let git = Git { repo: canonical, ceiling, index: None, work_tree: None };
        match git.run("rev-parse", &["rev-parse", "--git-dir"], None) {
            Ok(_) => Ok(git),
            Err(DiffError::GitMissing(e)) => Err(DiffError::GitMissing(e)),
            Err(_) => Err(not_repo()),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_COMMON_DIR",
            "GIT_NAMESPACE",
            "GIT_PREFIX",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("GIT_CEILING_DIRECTORIES", &self.ceiling).env("GIT_TERMINAL_PROMPT", "0").env("LC_ALL", "C");
        if let Some(index) = &self.index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.arg("-C").arg(&self.repo);
        if let Some(work_tree) = &self.work_tree {
            cmd.arg("--work-tree").arg(work_tree);
        }
        cmd.args(args.iter().map(OsStr::new));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    /// Runs git with `args` and optional input, returning its trimmed output.
    fn run(&self, step: &'static str, args: &[&str], input: Option<&[u8]>) -> Result<String, DiffError> {
        self.finish(step, self.command(args), input)
    }

    fn finish(&self, step: &'static str, mut cmd: Command, input: Option<&[u8]>) -> Result<String, DiffError> {
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(DiffError::GitMissing)?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            // A git that fails early closes its input; its exit status and message say why.
            let _ = stdin.write_all(input);
        }
        Self::output(step, child)
    }

    fn output(step: &'static str, child: std::process::Child) -> Result<String, DiffError> {
        let out = child.wait_with_output().map_err(|e| DiffError::Git { step, message: e.to_string() })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            let message = if said.is_empty() { out.status.to_string() } else { said };
            return Err(DiffError::Git { step, message });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Stores contents as a blob and returns its object name.
    fn hash(&self, content: Content, side: &Side, path: &str) -> Result<String, DiffError> {
        let mut cmd = self.command(&["hash-object", "-w", "--no-filters", "--stdin"]);
        cmd.stdin(Stdio::piped());
        let mut child = cmd.spawn().map_err(DiffError::GitMissing)?;
        if let Some(mut stdin) = child.stdin.take() {
            let fed = match content {
                Content::Link(target) => stdin.write_all(&target),
                Content::File(mut file, _) => std::io::copy(&mut file, &mut stdin).map(|_| ()),
            };
            drop(stdin);
            if let Err(source) = fed
                && source.kind() != std::io::ErrorKind::BrokenPipe
            {
                let _ = child.kill();
                let _ = child.wait();
                return Err(DiffError::Read { side: side.name, path: path.to_owned(), source });
            }
        }
        Self::output("hash-object", child)
    }

    /// Refuses names git would not take as a branch, and shorthands that name some other branch.
    fn check_branch(&self, branch: &str) -> Result<(), DiffError> {
        let bad = || DiffError::BadBranch { branch: branch.to_owned() };
        if branch.is_empty() || branch.starts_with('-') || branch.contains("@{") {
            return Err(bad());
        }
        match self.run("check-ref-format", &["check-ref-format", "--branch", branch], None) {
            Ok(out) if out == branch => Ok(()),
            Err(DiffError::GitMissing(e)) => Err(DiffError::GitMissing(e)),
            _ => Err(bad()),
        }
    }

    /// The commit `base` names.
    fn resolve(&self, base: &str) -> Result<String, DiffError> {
        let spec = format!("{base}^{{commit}}");
        match self.run("rev-parse", &["rev-parse", "--verify", "--quiet", "--end-of-options", &spec], None) {
            Ok(id) if !id.is_empty() => Ok(id),
            Err(DiffError::GitMissing(e)) => Err(DiffError::GitMissing(e)),
            _ => Err(DiffError::BadBase { base: base.to_owned(), repo: self.repo.clone() }),
        }
    }

    fn branch_exists(&self, branch: &str) -> Result<bool, DiffError> {
        let full = format!("refs/heads/{branch}");
        match self.run("show-ref", &["show-ref", "--verify", "--quiet", &full], None) {
            Ok(_) => Ok(true),
            Err(DiffError::GitMissing(e)) => Err(DiffError::GitMissing(e)),
            Err(_) => Ok(false),
        }
    }
}
