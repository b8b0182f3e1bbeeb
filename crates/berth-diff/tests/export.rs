//! Export to a git branch: the branch holds exactly the reported changes, the repository is otherwise left
//! alone, and bad input is refused with a clear reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use berth_diff::{DiffError, ExportOptions, Layered, Options, Tree, diff, export, write_patch_under};
use common::{Layer, run};

fn git(repo: &Path, args: &[&str]) -> String {
    run(repo, "git", args, None).trim().to_owned()
}

/// A repository whose one commit holds `files`, and a copy of them as the sandbox's old workspace.
fn repo_with(tmp: &Path, files: &Layer) -> std::path::PathBuf {
    let repo = tmp.join("repo");
    let status = std::process::Command::new("cp").arg("-a").arg(&files.path).arg(&repo).status().unwrap();
    assert!(status.success());
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    repo
}

fn options(repo: &Path, branch: &str) -> ExportOptions {
    ExportOptions {
        repo: repo.to_path_buf(),
        branch: branch.to_owned(),
        base: None,
        prefix: "/workspace".to_owned(),
        author_name: "Sandbox Author".to_owned(),
        author_email: "author@example.com".to_owned(),
        message: "Work done in the sandbox\n".to_owned(),
    }
}

/// The root overlay plus a workspace, as a sandbox has them.
fn sandbox(root_upper: &Layer, lower: &Layer, workspace: &Layer) -> Tree {
    Tree::new(vec![
        Layered::new("/", vec![root_upper.path.clone(), lower.path.clone()]),
        Layered::new("/workspace", vec![workspace.path.clone()]),
    ])
}

struct Setup {
    tmp: tempfile::TempDir,
    old: Tree,
    new: Tree,
    new_ws: Layer,
    repo: std::path::PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let lower = Layer::new(tmp.path(), "lower");
    lower.file("etc/hosts", "127.0.0.1 localhost\n");
    let (upper_a, upper_b) = (Layer::new(tmp.path(), "upper-a"), Layer::new(tmp.path(), "upper-b"));
    upper_b.file("etc/motd", "changes outside the workspace stay out of the branch\n");
    let ws = Layer::new(tmp.path(), "ws-old");
    ws.file("README.md", "# Demo\n")
        .file("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n")
        .file("src/old.rs", "// old\n")
        .file("run.sh", "#!/bin/sh\n")
        .file("data.bin", "\u{0}\u{1}")
        .link("current", "src/main.rs")
        .file("swap/inner.txt", "inner\n");
    let repo = repo_with(tmp.path(), &ws);
    let new_ws = ws.copy(tmp.path(), "ws-new");
    new_ws
        .file("README.md", "# Demo\n\nNow with words.\n")
        .remove("src/old.rs")
        .file("src/new.rs", "// new\n")
        .mode("run.sh", 0o755)
        .bytes("data.bin", b"\x00\x02\xff")
        .link("current", "src/new.rs")
        .link("secret", "/etc/shadow")
        .remove("swap")
        .file("swap", "now a file\n")
        .file("with space/and \"quotes\".txt", "odd name\n")
        .dir("empty-dir");
    let old = sandbox(&upper_a, &lower, &ws);
    let new = sandbox(&upper_b, &lower, &new_ws);
    Setup { tmp, old, new, new_ws, repo }
}

#[test]
fn the_branch_holds_exactly_the_diff() {
    let s = setup();
    let head = git(&s.repo, &["rev-parse", "HEAD"]);
    let exported = export(&s.old, &s.new, &options(&s.repo, "sandbox/work")).unwrap();
    assert_eq!(git(&s.repo, &["rev-parse", "sandbox/work"]), exported.commit);
    assert_eq!(git(&s.repo, &["rev-parse", "sandbox/work^"]), head);

    // The files git changed are the files the diff reported under the prefix (git holds no directories).
    let changes = diff(&s.old, &s.new, &Options { include: Some("/workspace".to_owned()) }).unwrap();
    let mut reported: Vec<String> = changes
        .iter()
        .filter(|c| {
            let git_kind = |m: &Option<berth_diff::Meta>| {
                m.as_ref()
                    .is_some_and(|m| matches!(m.file_type, berth_diff::FileType::File | berth_diff::FileType::Symlink))
            };
            git_kind(&c.old) || git_kind(&c.new)
        })
        .map(|c| c.path.strip_prefix("/workspace/").unwrap().to_owned())
        .collect();
    reported.sort();
    let touched = run(&s.repo, "git", &["diff", "--name-only", "-z", "--no-renames", &head, "sandbox/work"], None);
    let mut touched: Vec<String> = touched.split('\0').filter(|p| !p.is_empty()).map(str::to_owned).collect();
    touched.sort();
    assert_eq!(touched, reported);
    assert_eq!(exported.files, touched.len());
    assert!(!touched.iter().any(|p| p.contains("motd")));

    // Contents and modes are the new workspace's.
    let tree = git(&s.repo, &["ls-tree", "-r", "sandbox/work"]);
    assert!(tree.contains("100755 blob") && tree.contains("\trun.sh"), "{tree}");
    assert!(tree.lines().any(|l| l.starts_with("120000") && l.ends_with("\tsecret")), "{tree}");
    for (path, want) in
        [("README.md", "# Demo\n\nNow with words.\n"), ("swap", "now a file\n"), ("secret", "/etc/shadow")]
    {
        assert_eq!(run(&s.repo, "git", &["show", &format!("sandbox/work:{path}")], None), want, "{path}");
    }
    let blob = std::process::Command::new("git")
        .args(["-C", s.repo.to_str().unwrap(), "cat-file", "blob", "sandbox/work:data.bin"])
        .output()
        .unwrap();
    assert_eq!(blob.stdout, b"\x00\x02\xff");
    assert_eq!(
        git(&s.repo, &["log", "-1", "--format=%an <%ae>|%cn|%s", "sandbox/work"]),
        "Sandbox Author <author@example.com>|Sandbox Author|Work done in the sandbox"
    );

    // The repository's head, index and working tree are untouched.
    assert_eq!(git(&s.repo, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&s.repo, &["symbolic-ref", "HEAD"]), "refs/heads/main");
    assert_eq!(git(&s.repo, &["status", "--porcelain"]), "");
    assert!(!s.repo.join("src/new.rs").exists());
    drop(s.new_ws);
}

#[test]
fn the_branch_equals_the_patch_applied_to_its_base() {
    let s = setup();
    let exported = export(&s.old, &s.new, &options(&s.repo, "exported")).unwrap();
    let changes = diff(&s.old, &s.new, &Options::default()).unwrap();
    let mut patch = Vec::new();
    write_patch_under(&s.old, &s.new, &changes, "/workspace", &mut patch).unwrap();
    let patch = String::from_utf8(patch).unwrap();
    assert!(patch.contains("diff --git a/README.md b/README.md\n"), "{patch}");
    assert!(patch.contains("Binary files a/data.bin and b/data.bin differ"), "{patch}");

    // Apply the patch in a clone at the base; the binary file (named, not carried, by the patch) is copied.
    let clone = s.tmp.path().join("clone");
    git(s.tmp.path(), &["clone", "-q", s.repo.to_str().unwrap(), clone.to_str().unwrap()]);
    let text_only: String = patch.split_inclusive("diff --git ").filter(|p| !p.contains("Binary files")).collect();
    let text_only = text_only.trim_end_matches("diff --git ");
    let text_only =
        if text_only.starts_with("diff --git ") { text_only.to_owned() } else { format!("diff --git {text_only}") };
    std::fs::write(s.tmp.path().join("ws.patch"), &text_only).unwrap();
    git(&clone, &["apply", "../ws.patch"]);
    std::fs::copy(s.new_ws.path.join("data.bin"), clone.join("data.bin")).unwrap();
    git(&clone, &["add", "-A"]);
    let applied = git(&clone, &["write-tree"]);
    assert_eq!(applied, git(&s.repo, &["rev-parse", &format!("{}^{{tree}}", exported.commit)]));
}

#[test]
fn bad_requests_are_refused_clearly() {
    let s = setup();
    // Not a repository: a plain directory, and a directory inside a repository.
    let plain = s.tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let err = export(&s.old, &s.new, &options(&plain, "b")).unwrap_err();
    assert!(matches!(err, DiffError::NotARepo { .. }) && err.to_string().contains("is not a git repository"), "{err}");
    let inside = s.repo.join("src");
    assert!(matches!(export(&s.old, &s.new, &options(&inside, "b")), Err(DiffError::NotARepo { .. })));
    let missing = s.tmp.path().join("missing");
    assert!(matches!(export(&s.old, &s.new, &options(&missing, "b")), Err(DiffError::NotARepo { .. })));

    for bad in ["", "-x", "a..b", "a b", "@{-1}", "HEAD", "x.lock", "a~1", "trailing/"] {
        let err = export(&s.old, &s.new, &options(&s.repo, bad)).unwrap_err();
        assert!(matches!(err, DiffError::BadBranch { .. }), "{bad:?}: {err}");
        assert!(err.to_string().contains("is not a valid git branch name"), "{err}");
    }

    let err = export(&s.old, &s.new, &options(&s.repo, "main")).unwrap_err();
    assert!(matches!(err, DiffError::BranchExists { .. }) && err.to_string().contains("already exists"), "{err}");

    let mut opts = options(&s.repo, "new-branch");
    opts.base = Some("no-such-ref".to_owned());
    let err = export(&s.old, &s.new, &opts).unwrap_err();
    assert!(matches!(err, DiffError::BadBase { .. }) && err.to_string().contains("does not name a commit"), "{err}");
    opts.base = Some("--help".to_owned());
    assert!(matches!(export(&s.old, &s.new, &opts), Err(DiffError::BadBase { .. })));

    let mut opts = options(&s.repo, "new-branch");
    opts.author_email = "a <b>".to_owned();
    assert!(matches!(export(&s.old, &s.new, &opts), Err(DiffError::BadAuthor { .. })));
    let mut opts = options(&s.repo, "new-branch");
    opts.prefix = "workspace".to_owned();
    assert!(matches!(export(&s.old, &s.new, &opts), Err(DiffError::BadSandboxPath { .. })));

    // An empty repository has no HEAD to start from.
    let empty = s.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    git(&empty, &["init", "-q"]);
    assert!(matches!(export(&s.old, &s.new, &options(&empty, "b")), Err(DiffError::BadBase { .. })));

    // Nothing was created by any of these.
    assert_eq!(git(&s.repo, &["for-each-ref", "--format=%(refname)"]), "refs/heads/main");
}

#[test]
fn an_explicit_base_and_a_bare_repository_work() {
    let s = setup();
    let bare = s.tmp.path().join("bare.git");
    git(s.tmp.path(), &["clone", "-q", "--bare", s.repo.to_str().unwrap(), bare.to_str().unwrap()]);
    let mut opts = options(&bare, "from-bare");
    opts.base = Some("main".to_owned());
    let exported = export(&s.old, &s.new, &opts).unwrap();
    assert_eq!(git(&bare, &["rev-parse", "from-bare"]), exported.commit);
    assert_eq!(git(&bare, &["show", "from-bare:src/new.rs"]), "// new");
    // A second export to the same branch is refused.
    let err = export(&s.old, &s.new, &opts).unwrap_err();
    assert!(matches!(err, DiffError::BranchExists { .. }), "{err}");
}
