//! The file system of a running sandbox, as the files calls work on it.

use berth_api::{FileEntry, MoveFile, SandboxState as S};

use super::Engine;
use crate::EngineError;
use crate::files::{FileError, SandboxFs, parse_path};

impl Engine {
    /// The sandbox's file system through its init, worked on as `user` (see `ExecRequest::user`) when one is
    /// given: its permissions apply as to that user's processes, and what is made is owned by it. The name is
    /// checked before the sandbox is woken. A file call is activity: it wakes a paused or hibernated sandbox
    /// and starts its idle clock again.
    pub async fn files(&self, id: &str, user: Option<&str>) -> Result<SandboxFs, EngineError> {
        let spec = user.map(super::users::parse).transpose()?;
        let mut record = self.get(id).await?;
        if matches!(record.state, S::Running | S::Paused | S::Hibernated) {
            self.touch_id(id, "files").await?;
            if record.state == S::Hibernated {
                record = self.get(id).await?;
            }
        }
        let Some(pid) = record.pid else {
            return Err(EngineError::Conflict(format!("sandbox {} has no running init", record.id)));
        };
        let isolation = record.isolation;
        let fs = blocking(move || SandboxFs::open(pid, isolation).map_err(EngineError::from)).await?;
        let Some(spec) = spec else { return Ok(fs) };
        blocking(move || {
            let a = super::users::account_in(&fs, &spec)?;
            Ok(fs.as_user(a.uid, a.gid)?)
        })
        .await
    }

    /// Move (rename) `req.from` to `req.to` inside sandbox `id`, as `req.user` when given (see
    /// `SandboxFs::rename`), and journal it as `move_file`. Refused while the sandbox's journal is full.
    pub async fn move_file(&self, id: &str, req: MoveFile) -> Result<FileEntry, EngineError> {
        // Refused before the sandbox is looked up or woken.
        for (what, path) in [("from", &req.from), ("to", &req.to)] {
            if parse_path(path)?.is_empty() {
                return Err(FileError::Invalid(format!("{what} is {path}, the root: / is never moved")).into());
            }
        }
        self.admit_record(id, "no file is moved").await?;
        let fs = self.files(id, req.user.as_deref()).await?;
        let args = serde_json::json!({"from": req.from, "to": req.to, "overwrite": req.overwrite, "user": req.user});
        let entry = blocking(move || Ok(fs.rename(&req.from, &req.to, req.overwrite)?)).await?;
        self.note_files(id, "move_file", args).await;
        Ok(entry)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| EngineError::Files(crate::files::FileError::Internal("a files task failed".into())))?
}
