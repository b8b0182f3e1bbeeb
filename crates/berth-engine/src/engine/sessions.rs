//! A sandbox's session token may inspect the sandbox itself, and create, use and remove sandboxes of its own
//! (children), which count against its limits and are removed with it. Nothing else: not other sandboxes,
//! not tokens, images, volumes or snapshots, not host paths (the rules are `access`'s).

use berth_api::{CreateSandbox, Sandbox};

use super::Engine;
use crate::EngineError;

/// Most children one sandbox may have at once.
pub const MAX_CHILDREN: usize = 8;

impl Engine {
    /// Sandbox `id`'s record, live or kept, or removed (removed sandboxes keep their records, for their
    /// journal and receipt).
    pub(super) async fn any_record(&self, id: &str) -> Option<berth_api::Sandbox> {
        match self.get(id).await {
            Ok(r) => Some(r),
            Err(_) => self.store.record(id).ok().flatten(),
        }
    }

    /// A child's request, checked against and filled in from its owner: no limit above the owner's, owner's
    /// limits where none is given, a bounded number of children, and no host mounts.
    pub(super) async fn as_child(&self, owner: &str, req: &mut CreateSandbox) -> Result<Sandbox, EngineError> {
        let parent = self.get(owner).await?;
        let refused =
            |what: &str| EngineError::invalid(format!("a sandbox created with a session token cannot {what}"));
        if !req.mounts.is_empty() {
            return Err(refused("mount host paths"));
        }
        if !req.volumes.is_empty() || req.from_snapshot.is_some() || !req.secrets.is_empty() {
            return Err(refused("mount volumes, start from a snapshot or declare secrets"));
        }
        if parent.owner.is_some() {
            return Err(EngineError::Conflict(format!(
                "sandbox {owner} was itself made with a session token: it cannot make sandboxes of its own"
            )));
        }
        let children: Vec<Sandbox> =
            self.list().await.into_iter().filter(|s| s.owner.as_deref() == Some(owner)).collect();
        if children.len() >= MAX_CHILDREN {
            return Err(EngineError::Conflict(format!(
                "sandbox {owner} already has {} sandboxes of its own, the most it may have",
                children.len()
            )));
        }
        // Memory and processes are shared out of the owner's: its children together get no more than it has.
        let over = |what: &str| EngineError::invalid(format!("its sandboxes' {what} together cannot exceed its own"));
        if let Some(limit) = parent.memory_bytes {
            let left = limit.saturating_sub(children.iter().filter_map(|c| c.memory_bytes).sum());
            match req.memory_bytes {
                Some(m) if m > left => return Err(over("memory")),
                None if left < berth_runtime::spec::MIN_MEMORY => return Err(over("memory")),
                None => req.memory_bytes = Some(left),
                _ => {}
            }
        }
        if let Some(limit) = parent.pids {
            let left = limit.saturating_sub(children.iter().filter_map(|c| c.pids).sum());
            match req.pids {
                Some(p) if p > left => return Err(over("process limits")),
                None if left == 0 => return Err(over("process limits")),
                None => req.pids = Some(left),
                _ => {}
            }
        }
        let over = |what: &str| EngineError::invalid(format!("a child's {what} cannot exceed its owner's"));
        if let Some(limit) = parent.cpus {
            match req.cpus {
                Some(c) if c > limit => return Err(over("cpus")),
                None => req.cpus = Some(limit),
                _ => {}
            }
        }
        if let Some(limit) = parent.disk_bytes {
            match req.disk_bytes {
                Some(d) if d > limit => return Err(over("disk")),
                None => req.disk_bytes = Some(limit),
                _ => {}
            }
        }
        // It reaches no further than its owner: its egress rules are its owner's.
        req.network = parent.network.clone();
        Ok(parent)
    }

    /// The sandboxes `owner` created with its session token.
    pub(super) async fn children_of(&self, owner: &str) -> Vec<String> {
        self.list().await.into_iter().filter(|s| s.owner.as_deref() == Some(owner)).map(|s| s.id).collect()
    }
}
