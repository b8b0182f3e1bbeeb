//! The file system of a running sandbox, as the files calls work on it.

use berth_api::{FileEntry, MoveFile};

use super::Engine;
use crate::EngineError;
use crate::files::{FileError, Got, MAX_FILE, SandboxFs, parse_path};

impl Engine {
    /// The sandbox's file system through its init, worked on as `user` (see `ExecRequest::user`) when one is
    /// given: its permissions apply as to that user's processes, and what is made is owned by it. The name is
    /// checked before the sandbox is woken. A file call is activity: it wakes a paused or hibernated sandbox
    /// and starts its idle clock again.
    pub async fn files(&self, id: &str, user: Option<&str>) -> Result<SandboxFs, EngineError> {
        let spec = user.map(super::users::parse).transpose()?;
        // Activity: refused for a sandbox without a runtime, as the table says.
        self.touch_id(id, "files").await?;
        let record = self.get(id).await?;
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

/// The files calls the API offers, each on the sandbox's file system as `user` (see `files`): what changes
/// a file is refused while the journal is full, and journaled.
impl Engine {
    /// A file's bytes, or a directory's entries.
    pub async fn read_file(&self, id: &str, user: Option<&str>, path: &str) -> Result<Got, EngineError> {
        let fs = self.files(id, user).await?;
        let path = path.to_string();
        blocking(move || Ok(fs.get(&path)?)).await
    }

    /// What a path is.
    pub async fn stat_file(&self, id: &str, user: Option<&str>, path: &str) -> Result<FileEntry, EngineError> {
        let fs = self.files(id, user).await?;
        let path = path.to_string();
        blocking(move || Ok(fs.stat(&path)?)).await
    }

    /// Write a file (at most `MAX_FILE` bytes): its entry, and whether it was made.
    pub async fn write_file(
        &self,
        id: &str,
        user: Option<&str>,
        path: &str,
        data: Vec<u8>,
        mode: Option<u32>,
        parents: bool,
    ) -> Result<(FileEntry, bool), EngineError> {
        parse_path(path)?;
        if data.len() as u64 > MAX_FILE {
            let e = crate::files::FileError::TooLarge(format!("the request body is larger than {MAX_FILE} bytes"));
            return Err(e.into());
        }
        self.admit_record(id, "no file is changed").await?;
        let fs = self.files(id, user).await?;
        let (p, bytes) = (path.to_string(), data.len());
        let made = blocking(move || Ok(fs.write(&p, &data, mode, parents)?)).await?;
        self.note_files(id, "write_file", serde_json::json!({"path": path, "bytes": bytes})).await;
        Ok(made)
    }

    /// Remove a file, or a directory (with what it holds, `recursive`).
    pub async fn remove_file(
        &self,
        id: &str,
        user: Option<&str>,
        path: &str,
        recursive: bool,
    ) -> Result<(), EngineError> {
        self.admit_record(id, "no file is changed").await?;
        let fs = self.files(id, user).await?;
        let p = path.to_string();
        blocking(move || Ok(fs.remove(&p, recursive)?)).await?;
        self.note_files(id, "remove_file", serde_json::json!({"path": path, "recursive": recursive})).await;
        Ok(())
    }

    /// Make a directory (and its parents, `parents`): its entry, and whether it was made.
    pub async fn make_dir(
        &self,
        id: &str,
        user: Option<&str>,
        path: &str,
        parents: bool,
        mode: Option<u32>,
    ) -> Result<(FileEntry, bool), EngineError> {
        self.admit_record(id, "no file is changed").await?;
        let fs = self.files(id, user).await?;
        let p = path.to_string();
        let made = blocking(move || Ok(fs.mkdir(&p, parents, mode)?)).await?;
        self.note_files(id, "mkdir", serde_json::json!({"path": path})).await;
        Ok(made)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| EngineError::Files(crate::files::FileError::Internal("a files task failed".into())))?
}
