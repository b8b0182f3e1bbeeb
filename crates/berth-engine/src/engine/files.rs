//! The file system of a running sandbox, as the files calls work on it.

use super::Engine;
use crate::EngineError;
use crate::files::SandboxFs;

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
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| EngineError::Files(crate::files::FileError::Internal("a files task failed".into())))?
}
