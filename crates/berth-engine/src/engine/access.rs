//! Who calls the engine and what a call does: a `Caller` (the API token it came with, and for a sandbox's
//! session token that sandbox) and an `Access` (what the call does), with the rules of what a session token
//! may do. Every transport authorizes its calls here: the HTTP API maps a request's route to its `Access`
//! (`allows_route`); the E2B listener names its calls' own (`as_caller`). What a tenant's token (or another
//! narrowed one) reaches is `tenancy`'s.

use std::borrow::Cow;
use std::future::Future;

use super::Engine;
use crate::EngineError;

/// Who makes a call: the id of the API token it came with, for a session token the sandbox it belongs to,
/// and what the token may reach (its tenant, read-only, a label selector).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub token: String,
    pub session: Option<String>,
    pub grant: berth_api::Grant,
}

impl Caller {
    /// The journal's actor for this caller's calls.
    pub fn actor(&self) -> String {
        match &self.session {
            Some(sandbox) => format!("session:{sandbox}"),
            None => format!("token:{}", self.token),
        }
    }

    /// Run `f` as this caller: what it does is journaled as its actor's (and idempotency keys are its own),
    /// and what it lists and makes is its tenant's.
    pub async fn scope<F: Future>(&self, f: F) -> F::Output {
        super::live::as_caller(self.clone(), f).await
    }
}

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access<'a> {
    /// The daemon's health, its API's description and its info.
    Info,
    /// MCP: each tool call is an API request of its own, checked with the same token.
    Mcp,
    /// Create a sandbox.
    Create,
    /// List sandboxes (usage, events, metrics likewise): a session token's lists hold its own sandboxes only.
    List,
    /// List snapshots, look at one, remove one.
    Snapshots,
    Snapshot(&'a str),
    RemoveSnapshot(&'a str),
    /// Something done on one sandbox.
    On(&'a str, Op<'a>),
    /// Anything else, by its method and path.
    Route(&'a str, &'a str),
}

/// What a call does on one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    Inspect,
    Remove,
    /// Start an exec, list them, kill one, read its log, feed its stdin.
    Exec,
    Execs,
    KillExec(&'a str),
    ExecLog(&'a str),
    Stdin(&'a str),
    /// Code contexts: list, make, look at one, remove, restart, run code in one.
    Contexts,
    MakeContext,
    Context(&'a str),
    RemoveContext(&'a str),
    RestartContext(&'a str),
    Run(&'a str),
    Pause,
    Resume,
    Hibernate,
    Wake,
    Start,
    /// Files: read one (or a directory's listing), write, remove, stat, make a directory, archives.
    ReadFile,
    WriteFile,
    RemoveFile,
    Stat,
    Mkdir,
    /// Move (rename) a file or tree.
    Move,
    /// Watch a directory.
    Watch,
    Archive,
    Shell,
    Journal,
    Receipt,
    Diff,
    NetLog,
    Usage,
    UsageHistory,
    NetChange,
    Fork,
    Ttl,
    Snapshot,
    /// Its desktop: look at it (a screenshot, its windows, a wait for it to settle), or act on it.
    Desktop,
    DesktopAct,
}

impl<'a> Access<'a> {
    /// What a request of `method` on `path` (the HTTP API's route) does.
    pub fn of_route(method: &'a str, path: &'a str) -> Access<'a> {
        let parts: Vec<&'a str> = path.trim_start_matches('/').split('/').collect();
        let op = match (method, parts.as_slice()) {
            ("GET", ["healthz"]) | ("GET", ["v1", "openapi.json"]) | ("GET", ["v1", "info"]) => return Access::Info,
            (_, ["mcp"]) => return Access::Mcp,
            ("POST", ["v1", "sandboxes"]) => return Access::Create,
            ("GET", ["v1", "sandboxes"])
            | ("GET", ["v1", "usage"])
            | ("GET", ["v1", "events"])
            | ("GET", ["metrics"]) => {
                return Access::List;
            }
            ("GET", ["v1", "snapshots"]) => return Access::Snapshots,
            ("GET", ["v1", "snapshots", s]) => return Access::Snapshot(s),
            ("DELETE", ["v1", "snapshots", s]) => return Access::RemoveSnapshot(s),
            (_, ["v1", "sandboxes", target, rest @ ..]) => {
                let op = match (method, rest) {
                    ("GET", []) => Some(Op::Inspect),
                    ("DELETE", []) => Some(Op::Remove),
                    (_, ["execs", ..]) => Some(Op::Exec),
                    (_, ["contexts", ..]) => Some(Op::Contexts),
                    (_, ["pause"]) => Some(Op::Pause),
                    (_, ["resume"]) => Some(Op::Resume),
                    (_, ["hibernate"]) => Some(Op::Hibernate),
                    (_, ["wake"]) => Some(Op::Wake),
                    (_, ["files"]) => Some(Op::ReadFile),
                    (_, ["stat"]) => Some(Op::Stat),
                    (_, ["mkdir"]) => Some(Op::Mkdir),
                    (_, ["move"]) => Some(Op::Move),
                    (_, ["watch"]) => Some(Op::Watch),
                    (_, ["archive"]) => Some(Op::Archive),
                    (_, ["shell"]) => Some(Op::Shell),
                    ("GET", ["desktop", ..]) | ("POST", ["desktop", "wait"]) => Some(Op::Desktop),
                    ("POST", ["desktop", "actions"]) => Some(Op::DesktopAct),
                    ("GET", ["journal"]) => Some(Op::Journal),
                    ("GET", ["receipt"]) => Some(Op::Receipt),
                    ("GET", ["diff"]) => Some(Op::Diff),
                    ("GET", ["net", "log"]) => Some(Op::NetLog),
                    ("GET", ["usage"]) => Some(Op::Usage),
                    ("GET", ["usage", "history"]) => Some(Op::UsageHistory),
                    ("POST", ["net"]) => Some(Op::NetChange),
                    ("POST", ["fork"]) => Some(Op::Fork),
                    ("POST", ["ttl"]) => Some(Op::Ttl),
                    ("POST", ["snapshots"]) => Some(Op::Snapshot),
                    ("POST", ["start"]) => Some(Op::Start),
                    _ => None,
                };
                op.map(|op| Access::On(target, op))
            }
            _ => None,
        };
        op.unwrap_or(Access::Route(method, path))
    }

    /// The route of berth's HTTP API this access stands for: its method and path.
    pub fn route(&self) -> (&'a str, Cow<'a, str>) {
        let fixed = |m: &'a str, p: &'static str| (m, Cow::Borrowed(p));
        match *self {
            Access::Info => fixed("GET", "/v1/info"),
            Access::Mcp => fixed("POST", "/mcp"),
            Access::Create => fixed("POST", "/v1/sandboxes"),
            Access::List => fixed("GET", "/v1/sandboxes"),
            Access::Snapshots => fixed("GET", "/v1/snapshots"),
            Access::Snapshot(s) => ("GET", Cow::Owned(format!("/v1/snapshots/{s}"))),
            Access::RemoveSnapshot(s) => ("DELETE", Cow::Owned(format!("/v1/snapshots/{s}"))),
            Access::Route(method, path) => (method, Cow::Borrowed(path)),
            Access::On(id, op) => {
                let (method, tail) = op.route();
                (method, Cow::Owned(format!("/v1/sandboxes/{id}{tail}")))
            }
        }
    }
}

impl Op<'_> {
    /// Its method, and its path after `/v1/sandboxes/{id}`.
    fn route(&self) -> (&'static str, Cow<'_, str>) {
        let fixed = |m: &'static str, p: &'static str| (m, Cow::Borrowed(p));
        match *self {
            Op::Inspect => fixed("GET", ""),
            Op::Remove => fixed("DELETE", ""),
            Op::Exec => fixed("POST", "/execs"),
            Op::Execs => fixed("GET", "/execs"),
            Op::KillExec(x) => ("DELETE", Cow::Owned(format!("/execs/{x}"))),
            Op::ExecLog(x) => ("GET", Cow::Owned(format!("/execs/{x}/log"))),
            Op::Stdin(x) => ("POST", Cow::Owned(format!("/execs/{x}/stdin"))),
            Op::Contexts => fixed("GET", "/contexts"),
            Op::MakeContext => fixed("POST", "/contexts"),
            Op::Context(c) => ("GET", Cow::Owned(format!("/contexts/{c}"))),
            Op::RemoveContext(c) => ("DELETE", Cow::Owned(format!("/contexts/{c}"))),
            Op::RestartContext(c) => ("POST", Cow::Owned(format!("/contexts/{c}/restart"))),
            Op::Run(c) => ("POST", Cow::Owned(format!("/contexts/{c}/run"))),
            Op::Pause => fixed("POST", "/pause"),
            Op::Resume => fixed("POST", "/resume"),
            Op::Hibernate => fixed("POST", "/hibernate"),
            Op::Wake => fixed("POST", "/wake"),
            Op::Start => fixed("POST", "/start"),
            Op::ReadFile => fixed("GET", "/files"),
            Op::WriteFile => fixed("PUT", "/files"),
            Op::RemoveFile => fixed("DELETE", "/files"),
            Op::Stat => fixed("GET", "/stat"),
            Op::Mkdir => fixed("POST", "/mkdir"),
            Op::Move => fixed("POST", "/move"),
            Op::Watch => fixed("GET", "/watch"),
            Op::Archive => fixed("GET", "/archive"),
            Op::Shell => fixed("GET", "/shell"),
            Op::Journal => fixed("GET", "/journal"),
            Op::Receipt => fixed("GET", "/receipt"),
            Op::Diff => fixed("GET", "/diff"),
            Op::NetLog => fixed("GET", "/net/log"),
            Op::Usage => fixed("GET", "/usage"),
            Op::UsageHistory => fixed("GET", "/usage/history"),
            Op::NetChange => fixed("POST", "/net"),
            Op::Fork => fixed("POST", "/fork"),
            Op::Ttl => fixed("POST", "/ttl"),
            Op::Snapshot => fixed("POST", "/snapshots"),
            Op::Desktop => fixed("GET", "/desktop"),
            Op::DesktopAct => fixed("POST", "/desktop/actions"),
        }
    }

    /// What it may do to its own sandbox: look, nothing more (it runs its own commands directly).
    fn looks(&self) -> bool {
        matches!(self, Op::Inspect | Op::Usage | Op::UsageHistory)
    }

    /// What it may do to a child: use it, look at it, remove it; never widen what it may reach or hold (its
    /// network, its files from elsewhere, more sandboxes by forking) and never touch host paths.
    fn uses(&self) -> bool {
        !matches!(self, Op::NetChange | Op::Fork | Op::Ttl | Op::Snapshot | Op::Start)
    }
}

/// The sentence a session token's refused request gets.
fn refusal(owner: &str, method: &str, path: &str) -> String {
    format!(
        "a session token may inspect its own sandbox ({owner}) and create, use and remove sandboxes of its own; \
         {method} {path} is not one of those"
    )
}

impl Engine {
    /// The caller a token (known by its digest) stands for, if it is a valid one.
    pub fn caller_of_digest(&self, digest: &str) -> Option<Caller> {
        self.tokens.check_digest(digest).map(|(token, session, grant)| Caller { token, session, grant })
    }

    /// The caller a token stands for, if it is a valid one.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        self.caller_of_digest(&crate::tokens::digest(token))
    }

    /// Whether `caller` may do `access`: an operator's token may do anything; a session token what
    /// `session_may` says; a tenant's token, a read-only one or one with a selector what its grant reaches
    /// (`tenancy`). A session token is held to both: it stays within its sandbox's tenant.
    pub async fn allows(&self, caller: &Caller, access: Access<'_>) -> Result<(), EngineError> {
        let (method, path) = access.route();
        self.allows_as(caller, access, method, &path).await
    }

    /// Whether a request of `method` on `path` (the HTTP API's route) may go ahead for `caller`; if not,
    /// the error saying why (naming the request's own method and path).
    pub async fn allows_route(&self, caller: &Caller, method: &str, path: &str) -> Result<(), EngineError> {
        self.allows_as(caller, Access::of_route(method, path), method, path).await
    }

    async fn allows_as(
        &self,
        caller: &Caller,
        access: Access<'_>,
        method: &str,
        path: &str,
    ) -> Result<(), EngineError> {
        if let Some(owner) = &caller.session
            && !self.session_may(owner, access).await
        {
            return Err(EngineError::Unauthorized(refusal(owner, method, path)));
        }
        match caller.grant.is_full() {
            true => Ok(()),
            false => self.grant_allows(&caller.grant, access, method).await,
        }
    }

    /// Run `op` as `caller` once it is allowed `access`: journaled as the caller's, refused as it would be
    /// from any client.
    pub async fn as_caller<T>(
        &self,
        caller: &Caller,
        access: Access<'_>,
        op: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        caller
            .scope(async {
                self.allows(caller, access).await?;
                op.await
            })
            .await
    }

    /// The rules of what sandbox `owner`'s session token may do: inspect the sandbox itself, and create, use
    /// and remove sandboxes of its own.
    async fn session_may(&self, owner: &str, access: Access<'_>) -> bool {
        match access {
            // Lists hold its own sandbox and its children only (their handlers leave out the rest).
            Access::Info | Access::Mcp | Access::Create | Access::List => true,
            Access::Snapshots | Access::Snapshot(_) | Access::RemoveSnapshot(_) | Access::Route(..) => false,
            Access::On(target, op) => {
                let Some(record) = self.any_record(target).await else { return false };
                if record.id == owner { op.looks() } else { record.owner.as_deref() == Some(owner) && op.uses() }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_accesses_and_back() {
        assert_eq!(Access::of_route("GET", "/v1/sandboxes/a"), Access::On("a", Op::Inspect));
        assert_eq!(Access::of_route("POST", "/v1/sandboxes/a/execs/x/stdin"), Access::On("a", Op::Exec));
        assert_eq!(
            Access::of_route("POST", "/v1/sandboxes/a/journal"),
            Access::Route("POST", "/v1/sandboxes/a/journal")
        );
        assert_eq!(Access::of_route("GET", "/v1/snapshots"), Access::Snapshots);
        assert_eq!(Access::On("a", Op::Run("c")).route(), ("POST", Cow::Borrowed("/v1/sandboxes/a/contexts/c/run")));
        assert_eq!(Access::On("a", Op::Inspect).route(), ("GET", Cow::Borrowed("/v1/sandboxes/a")));
        assert_eq!(Access::RemoveSnapshot("s").route(), ("DELETE", Cow::Borrowed("/v1/snapshots/s")));
    }
}
