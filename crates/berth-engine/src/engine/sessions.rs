//! What a sandbox's session token may do: inspect the sandbox itself, and create, use and remove sandboxes of
//! its own (children), which count against its limits and are removed with it. Nothing else: not other
//! sandboxes, not tokens, images, volumes or snapshots, not host paths.

use berth_api::{CreateSandbox, Sandbox};

use super::Engine;
use crate::EngineError;

/// Most children one sandbox may have at once.
pub const MAX_CHILDREN: usize = 8;

impl Engine {
    /// Whether a request with sandbox `owner`'s session token may go ahead; if not, a sentence saying why.
    pub async fn session_allows(&self, owner: &str, method: &str, path: &str) -> Result<(), String> {
        let refuse = || {
            Err(format!(
                "a session token may inspect its own sandbox ({owner}) and create, use and remove sandboxes of its \
                 own; {method} {path} is not one of those"
            ))
        };
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method, parts.as_slice()) {
            ("GET", ["healthz"]) | ("GET", ["v1", "openapi.json"]) | ("GET", ["v1", "info"]) => Ok(()),
            // MCP: each tool call is an API request of its own, checked here with the same token.
            (_, ["mcp"]) => Ok(()),
            ("POST", ["v1", "sandboxes"]) => Ok(()),
            // Lists and events of its own sandbox and its children only (the handlers leave out the rest).
            ("GET", ["v1", "sandboxes"]) | ("GET", ["v1", "usage"]) | ("GET", ["v1", "events"]) => Ok(()),
            // Its own sandbox's and its children's metrics only (the handler leaves out the rest).
            ("GET", ["metrics"]) => Ok(()),
            (_, ["v1", "sandboxes", target, rest @ ..]) => {
                // Removed children keep their records (for their journal and receipt).
                let record = match self.get(target).await {
                    Ok(r) => r,
                    Err(_) => match self.store.record(target) {
                        Ok(Some(r)) => r,
                        _ => return refuse(),
                    },
                };
                if record.id == owner {
                    // Itself: it may look, nothing more (it runs its own commands directly).
                    return if method == "GET" && matches!(rest, [] | ["usage"] | ["usage", "history"]) {
                        Ok(())
                    } else {
                        refuse()
                    };
                }
                if record.owner.as_deref() != Some(owner) {
                    return refuse();
                }
                // A child: use it, look at it, remove it; never widen what it may reach or hold (its network,
                // its files from elsewhere, more sandboxes by forking) and never touch host paths.
                let allowed = match rest {
                    [] => matches!(method, "GET" | "DELETE"),
                    ["execs", ..]
                    | ["contexts", ..]
                    | ["pause"]
                    | ["resume"]
                    | ["hibernate"]
                    | ["wake"]
                    | ["files"]
                    | ["stat"]
                    | ["mkdir"]
                    | ["move"]
                    | ["archive"]
                    | ["shell"] => true,
                    ["journal"] | ["receipt"] | ["diff"] | ["net", "log"] | ["usage"] | ["usage", "history"] => {
                        method == "GET"
                    }
                    _ => false,
                };
                if allowed { Ok(()) } else { refuse() }
            }
            _ => refuse(),
        }
    }

    /// Whether sandbox `id` is `owner` itself or one of its children (removed ones included).
    pub async fn owned_by(&self, owner: &str, id: &str) -> bool {
        if id == owner {
            return true;
        }
        let record = match self.get(id).await {
            Ok(r) => Some(r),
            Err(_) => self.store.record(id).ok().flatten(),
        };
        record.is_some_and(|r| r.owner.as_deref() == Some(owner))
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
