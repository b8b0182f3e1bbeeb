//! What changed in a sandbox's files: a path list, a patch, or a commit on a host git branch. Both sides of a
//! comparison are the sandbox's overlay layers over its image: its live state, a snapshot, or the image's
//! clean state (an empty upper), so the image itself is never walked.

use std::path::{Path, PathBuf};

use berth_api::{Change, ChangeKind, Diff, ExportRequest, Exported, PathState, Sandbox};
use berth_diff::{Layered, Tree};

use super::Engine;
use crate::EngineError;

/// The sandbox path whose changes export commits, mapped to the repository's top.
const WORKSPACE: &str = "/workspace";

fn diff_err(e: berth_diff::DiffError) -> EngineError {
    use berth_diff::DiffError as D;
    match e {
        e @ (D::NotARepo { .. }
        | D::BadBranch { .. }
        | D::BadBase { .. }
        | D::BadAuthor { .. }
        | D::BadSandboxPath { .. }) => EngineError::invalid(e.to_string()),
        e @ D::BranchExists { .. } => EngineError::Conflict(e.to_string()),
        e => EngineError::Storage(berth_runtime::error_chain(&e)),
    }
}

impl Engine {
    /// An empty directory: the upper layer of an image's clean state.
    fn empty_dir(&self) -> Result<PathBuf, EngineError> {
        let dir = self.root.join("run").join("empty");
        std::fs::create_dir_all(&dir).map_err(EngineError::Log)?;
        Ok(dir)
    }

    /// A sandbox's file system with `state` (a sandbox's or a snapshot's files; `None`: clean) over `image`.
    fn tree(&self, image: &str, state: Option<&Path>) -> Result<Tree, EngineError> {
        let layers = berth_runtime::image::Images::new(self.root.join("images"))
            .layers(image)
            .map_err(|e| EngineError::Storage(berth_runtime::error_chain(&e)))?;
        let empty = self.empty_dir()?;
        let part = |sub: &str| -> PathBuf {
            state.map(|s| s.join(sub)).filter(|p| p.is_dir()).unwrap_or_else(|| empty.clone())
        };
        let mut mounts = vec![
            Layered::new("/", vec![part("upper/root"), layers.skeleton]),
            Layered::new(WORKSPACE, vec![part("workspace")]),
        ];
        if let Some(usr) = layers.usr {
            mounts.push(Layered::new("/usr", vec![part("upper/usr"), usr]));
        }
        Ok(Tree::new(mounts))
    }

    /// The two trees to compare for sandbox `record` `against` a snapshot, `parent` or `image`, and what the
    /// old side turned out to be.
    fn sides(&self, record: &Sandbox, against: Option<&str>) -> Result<(Tree, Tree, String), EngineError> {
        let against = match against {
            Some("parent") => Some(record.parent.clone().ok_or_else(|| {
                EngineError::invalid(format!(
                    "sandbox {} has no parent: it was not forked or made from a snapshot",
                    record.id
                ))
            })?),
            Some("image") => None,
            Some(s) => Some(s.to_string()),
            None => record.parent.clone(),
        };
        let new = self.tree(&record.image, Some(&self.state_dir(&record.id)))?;
        match against {
            None => Ok((self.tree(&record.image, None)?, new, "image".into())),
            Some(s) => {
                let snap = self.get_snapshot(&s)?;
                // A session token compares its sandboxes with their own snapshots only, never another's files.
                let own = snap.sandbox_id == record.id || record.parent.as_deref() == Some(&snap.id);
                if super::actor().starts_with("session:") && !own {
                    return Err(EngineError::NoSnapshot(s));
                }
                let old = self.tree(&snap.image, Some(&self.snapshot_dir(&snap.id)))?;
                Ok((old, new, snap.id))
            }
        }
    }

    /// The paths that differ, or (with `patch`) a git-style patch of them.
    pub async fn diff(
        &self,
        id: &str,
        against: Option<String>,
        patch: bool,
    ) -> Result<(Diff, Option<Vec<u8>>), EngineError> {
        self.diff_under(id, against, patch, None).await
    }

    /// A diff of what is under `include` only (a patch then has paths relative to it).
    pub(crate) async fn diff_under(
        &self,
        id: &str,
        against: Option<String>,
        patch: bool,
        include: Option<String>,
    ) -> Result<(Diff, Option<Vec<u8>>), EngineError> {
        let record = self.get(id).await?;
        let (old, new, label) = self.sides(&record, against.as_deref())?;
        tokio::task::spawn_blocking(move || {
            let opts = berth_diff::Options { include: include.clone() };
            let changes = berth_diff::diff(&old, &new, &opts).map_err(diff_err)?;
            let text = if patch {
                let mut out = Vec::new();
                match &include {
                    Some(root) => berth_diff::write_patch_under(&old, &new, &changes, root, &mut out),
                    None => berth_diff::write_patch(&old, &new, &changes, &mut out),
                }
                .map_err(diff_err)?;
                Some(out)
            } else {
                None
            };
            Ok((Diff { against: label, changes: changes.into_iter().map(wire_change).collect() }, text))
        })
        .await
        .map_err(|_| EngineError::Storage("the diff panicked".into()))?
    }

    /// Commit the workspace's changes to a new branch of a host repository.
    pub async fn export(&self, id: &str, req: ExportRequest) -> Result<Exported, EngineError> {
        let record = self.get(id).await?;
        self.admit_record(&record.id, "nothing is exported").await?;
        if req.repo.is_empty() || !Path::new(&req.repo).is_absolute() {
            return Err(EngineError::invalid(
                "repo must be the absolute path of a git repository on the daemon's host",
            ));
        }
        if req.branch.is_empty() {
            return Err(EngineError::invalid("branch must name the new branch"));
        }
        let (old, new, label) = self.sides(&record, req.against.as_deref())?;
        let opts = berth_diff::ExportOptions {
            repo: PathBuf::from(&req.repo),
            branch: req.branch.clone(),
            base: req.base.clone(),
            prefix: WORKSPACE.into(),
            author_name: req.author_name.clone().unwrap_or_else(|| "berth".into()),
            author_email: req.author_email.clone().unwrap_or_else(|| "berth@localhost".into()),
            message: req.message.clone().unwrap_or_else(|| {
                format!("Work from sandbox {} ({})\n\nChanges against {label}.", record.name, record.id)
            }),
        };
        let done = tokio::task::spawn_blocking(move || berth_diff::export(&old, &new, &opts))
            .await
            .map_err(|_| EngineError::Storage("the export panicked".into()))?
            .map_err(diff_err)?;
        let out = Exported { branch: req.branch.clone(), commit: done.commit, files: done.files };
        if let Ok(live) = self.live(&record.id).await {
            live.note(
                "export",
                serde_json::json!({"repo": req.repo, "branch": req.branch, "base": req.base}),
                serde_json::json!({"commit": out.commit, "files": out.files}),
            );
        }
        Ok(out)
    }
}

fn wire_change(c: berth_diff::Change) -> Change {
    let state = |m: berth_diff::Meta| PathState {
        file_type: m.file_type.as_str().to_string(),
        mode: m.mode,
        size: m.size,
        symlink_target: m.symlink_target,
    };
    Change {
        path: c.path,
        kind: match c.kind {
            berth_diff::Kind::Added => ChangeKind::Added,
            berth_diff::Kind::Modified => ChangeKind::Modified,
            berth_diff::Kind::Deleted => ChangeKind::Deleted,
        },
        old: c.old.map(state),
        new: c.new.map(state),
    }
}
