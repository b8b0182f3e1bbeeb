//! Tenants: teams sharing one daemon. An operator (the unix socket) makes a tenant with a quota and mints
//! tokens for it; such a token reaches the tenant's sandboxes, snapshots, volumes, secrets and images only,
//! and what it creates is counted against the quota. A token may be narrowed further: read-only, or to the
//! sandboxes that carry some labels (a selector). A sandbox's session token stays within its tenant.
//!
//! What another tenant owns is answered as what does not exist (404, the same sentence), so that a token
//! cannot learn another tenant's ids; what the grant forbids (a change with a read-only token, an operator's
//! call) is a 403; what the quota has no room for is a 429.

use std::sync::Arc;

use berth_api::{CreateSandbox, CreateTenant, Grant, Quota, Sandbox, Snapshot, Tenant, TenantUse};

use super::{Access, Engine, Op};
use crate::EngineError;
use crate::store::Owned;

/// The tenant of the caller being served, if it has one.
pub(crate) fn tenant_now() -> Option<String> {
    super::current_caller().and_then(|c| c.grant.tenant)
}

/// Whether a grant reaches a sandbox: its tenant's, and within its selector.
fn reaches(grant: &Grant, r: &Sandbox) -> bool {
    (grant.tenant.is_none() || grant.tenant == r.tenant) && grant.selects(&r.labels)
}

/// Whether a request of `method` only reads. A shell is a GET (a WebSocket) that runs commands.
fn reads(method: &str, access: Access<'_>) -> bool {
    // A wait for a desktop to settle is a POST that only looks.
    (matches!(method, "GET" | "HEAD") && !matches!(access, Access::On(_, Op::Shell)))
        || matches!(access, Access::On(_, Op::Desktop))
}

fn operators_only(method: &str, path: &str) -> EngineError {
    EngineError::Forbidden(format!(
        "{method} {path} is an operator's call (the unix socket, or a token minted without a tenant): this token cannot \
         make it"
    ))
}

impl Engine {
    /// Whether a narrowed token (`grant`) may make a request of `method` that does `access`.
    pub(super) async fn grant_allows(
        &self,
        grant: &Grant,
        access: Access<'_>,
        method: &str,
    ) -> Result<(), EngineError> {
        if grant.read_only && !reads(method, access) {
            let (_, path) = access.route();
            return Err(EngineError::Forbidden(format!(
                "this token is read-only: {method} {path} would change something (mint one without --read-only)"
            )));
        }
        match access {
            Access::Info | Access::Mcp | Access::Create | Access::List | Access::Snapshots => Ok(()),
            Access::Snapshot(s) | Access::RemoveSnapshot(s) => match self.store.snapshot(s)? {
                Some(snap) if self.grant_reaches_snapshot(grant, &snap).await => Ok(()),
                _ => Err(EngineError::NoSnapshot(s.to_string())),
            },
            Access::On(target, _) => self.grant_reaches_sandbox(grant, target).await,
            Access::Route(method, path) => {
                let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
                match (method, parts.as_slice()) {
                    (_, ["v1", "sandboxes", target, ..]) => self.grant_reaches_sandbox(grant, target).await,
                    // The engine answers for each volume by its owner; images and secrets are listed by it.
                    (_, ["v1", "volumes"] | ["v1", "volumes", _]) => Ok(()),
                    ("GET", ["v1", "images"] | ["v1", "secrets"] | ["v1", "tenants"] | ["v1", "tenants", _]) => Ok(()),
                    _ => Err(operators_only(method, path)),
                }
            }
        }
    }

    async fn grant_reaches_sandbox(&self, grant: &Grant, target: &str) -> Result<(), EngineError> {
        match self.any_record(target).await {
            Some(r) if reaches(grant, &r) => Ok(()),
            _ => Err(EngineError::NoSandbox(target.to_string())),
        }
    }

    async fn grant_reaches_snapshot(&self, grant: &Grant, snap: &Snapshot) -> bool {
        if grant.tenant.is_some() && grant.tenant != snap.tenant {
            return false;
        }
        if grant.selector.is_empty() {
            return true;
        }
        // With a selector, the snapshots of the sandboxes it reaches.
        self.grant_reaches_sandbox(grant, &snap.sandbox_id).await.is_ok()
    }

    /// Whether the caller being served may see sandbox `r` in a list: everything on the unix socket; its own
    /// sandbox and its children with a session token; what its grant reaches otherwise.
    pub fn sees(&self, r: &Sandbox) -> bool {
        self.sees_as(super::current_caller().as_ref(), r)
    }

    /// [`Engine::sees`] for a caller named (a stream that outlives its request keeps its caller).
    pub fn sees_as(&self, caller: Option<&super::Caller>, r: &Sandbox) -> bool {
        let Some(caller) = caller else { return true };
        if let Some(own) = &caller.session
            && r.id != *own
            && r.owner.as_deref() != Some(own.as_str())
        {
            return false;
        }
        reaches(&caller.grant, r)
    }

    /// [`Engine::sees`] for a sandbox known by its id (removed ones included).
    pub async fn sees_id(&self, id: &str) -> bool {
        self.sees_id_as(super::current_caller().as_ref(), id).await
    }

    /// [`Engine::sees_id`] for a caller named.
    pub async fn sees_id_as(&self, caller: Option<&super::Caller>, id: &str) -> bool {
        if caller.is_none() {
            return true;
        }
        self.any_record(id).await.is_some_and(|r| self.sees_as(caller, &r))
    }

    /// Whether the caller being served may see snapshot `s`.
    pub async fn sees_snapshot(&self, s: &Snapshot) -> bool {
        match super::current_caller() {
            None => true,
            Some(c) if c.session.is_some() => false,
            Some(c) => self.grant_reaches_snapshot(&c.grant, s).await,
        }
    }

    /// Whether the tenant of the caller being served may use what `owner` owns (a volume, a snapshot, an
    /// image): its own, and what no tenant owns where that is shared (images); an operator's token, anything.
    pub(super) fn may_use(&self, owner: Option<&str>, shared_if_unowned: bool) -> bool {
        match tenant_now() {
            None => true,
            Some(t) => owner == Some(t.as_str()) || (owner.is_none() && shared_if_unowned),
        }
    }

    /// The owner of a volume, as the database says.
    pub(super) fn owner(&self, what: Owned, name: &str) -> Option<String> {
        self.store.owner_of(what, name).ok().flatten()
    }

    // Tenants themselves: made, changed and removed by operators.

    /// Give a create its tenant: the caller's, when it has one (naming another is refused); for an
    /// operator, the one it names, which must exist.
    pub(super) fn assign_tenant(&self, req: &mut CreateSandbox) -> Result<(), EngineError> {
        let narrowed = super::current_caller().filter(|c| c.session.is_some() || !c.grant.is_full());
        if narrowed.as_ref().is_some_and(|c| c.session.is_none()) && !req.mounts.is_empty() {
            // A host path reaches past every tenant (the daemon's own files among them).
            return Err(EngineError::Forbidden(
                "mounts of host paths are an operator's to give: this token cannot create a sandbox with `mounts` (a \
                 named volume of its own tenant gives a sandbox lasting files)"
                    .into(),
            ));
        }
        match narrowed {
            Some(c) => match (&req.tenant, &c.grant.tenant) {
                (Some(asked), mine) if Some(asked) != mine.as_ref() => {
                    return Err(EngineError::Forbidden(format!(
                        "this token creates sandboxes in {} only: it cannot create one in tenant {asked}",
                        mine.as_ref().map_or("no tenant".to_string(), |m| format!("tenant {m}"))
                    )));
                }
                _ => req.tenant = c.grant.tenant.clone(),
            },
            None => {
                if let Some(t) = &req.tenant
                    && self.store.tenant(t)?.is_none()
                {
                    return Err(EngineError::NoTenant(t.clone()));
                }
            }
        }
        Ok(())
    }

    /// Make a tenant, or give one a new quota.
    pub async fn put_tenant(&self, req: CreateTenant) -> Result<Tenant, EngineError> {
        berth_api::check_tenant_name(&req.name).map_err(EngineError::invalid)?;
        check_quota_values(&req.quota)?;
        self.store.put_tenant(&req.name, &req.quota, super::now_ms())?;
        self.tenant(&req.name).await
    }

    /// A tenant, its quota, and what it holds now.
    pub async fn tenant(&self, name: &str) -> Result<Tenant, EngineError> {
        let row = self.store.tenant(name)?.ok_or_else(|| EngineError::NoTenant(name.to_string()))?;
        let used = self.tenant_use(name, row.egress_gone).await;
        Ok(Tenant { name: row.name, created_at_ms: row.created_at_ms, quota: row.quota, used })
    }

    /// Every tenant (a tenant's token: its own only).
    pub async fn tenants(&self) -> Result<Vec<Tenant>, EngineError> {
        let mine = tenant_now();
        let mut out = Vec::new();
        for row in self.store.tenants()? {
            if mine.as_ref().is_some_and(|m| *m != row.name) {
                continue;
            }
            out.push(self.tenant(&row.name).await?);
        }
        Ok(out)
    }

    /// Remove a tenant with no sandboxes left, and revoke every token minted for it.
    pub async fn remove_tenant(&self, name: &str) -> Result<(), EngineError> {
        if self.store.tenant(name)?.is_none() {
            return Err(EngineError::NoTenant(name.to_string()));
        }
        let mine = |t: Option<&str>| t == Some(name);
        let held = [
            (self.list().await.iter().filter(|s| mine(s.tenant.as_deref())).count(), "sandbox(es)", "berth ls"),
            (
                self.snapshots()?.iter().filter(|s| mine(s.tenant.as_deref())).count(),
                "snapshot(s)",
                "berth snapshot ls",
            ),
            (self.volumes()?.iter().filter(|v| mine(v.tenant.as_deref())).count(), "volume(s)", "berth volume ls"),
            (self.images()?.iter().filter(|i| mine(i.tenant.as_deref())).count(), "image(s)", "berth image ls"),
        ];
        let left: Vec<String> =
            held.iter().filter(|(n, ..)| *n > 0).map(|(n, what, cmd)| format!("{n} {what} ({cmd})")).collect();
        if !left.is_empty() {
            return Err(EngineError::Conflict(format!(
                "tenant {name} still holds {}: remove them first, so that nothing it owned passes to a tenant made \
                 later with the same name",
                left.join(", ")
            )));
        }
        // Its secrets go with it, for the same reason.
        self.remove_vault_of(name)?;
        match self.store.remove_tenant(name)? {
            true => Ok(()),
            false => Err(EngineError::NoTenant(name.to_string())),
        }
    }

    /// Mint a token for the TCP listener that reaches what `grant` allows; its tenant must exist.
    pub fn mint_token(&self, name: &str, grant: &Grant) -> Result<berth_api::MintedToken, EngineError> {
        if let Some(t) = &grant.tenant
            && self.store.tenant(t)?.is_none()
        {
            return Err(EngineError::NoTenant(t.clone()));
        }
        for (k, v) in &grant.selector {
            if k.is_empty() || k.len() > 63 || v.len() > 63 {
                return Err(EngineError::invalid(format!(
                    "selector {k}={v}: a label's key must be 1-63 characters and its value at most 63"
                )));
            }
        }
        self.tokens.mint(name, grant).map_err(EngineError::Log)
    }

    // Quotas.

    /// What tenant `name`'s sandboxes hold now.
    async fn tenant_use(&self, name: &str, egress_gone: u64) -> TenantUse {
        self.tenant_use_of(&self.list().await, name, egress_gone).await
    }

    /// The same, from a list of sandboxes already taken.
    async fn tenant_use_of(&self, all: &[Sandbox], name: &str, egress_gone: u64) -> TenantUse {
        let mut used = TenantUse { egress_bytes: egress_gone, ..TenantUse::default() };
        for s in all.iter().filter(|s| s.tenant.as_deref() == Some(name)) {
            used.sandboxes += 1;
            used.cpus += s.cpus.unwrap_or(0.0);
            used.memory_bytes += s.memory_bytes.unwrap_or(0);
            used.disk_bytes += s.disk_bytes.unwrap_or(0);
            used.egress_bytes += self.egress_of(&s.id).await;
        }
        used
    }

    /// The lock a tenant's creates take one at a time, when it has a quota: each is checked against the
    /// sandboxes that exist, which a concurrent create would not yet be among.
    pub(super) fn tenant_lock(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.tenant_creates.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(tenant.to_string()).or_default())
    }

    /// Fit `count` sandboxes like `req` into tenant `name`'s quota: a limit the request leaves out is given
    /// its share of what is left (at most one core, and at most the daemon's default memory and disk), and one past what
    /// is left is refused (429).
    pub(super) async fn within_quota(
        &self,
        name: &str,
        req: &mut CreateSandbox,
        count: u64,
    ) -> Result<(), EngineError> {
        let row = self.store.tenant(name)?.ok_or_else(|| EngineError::NoTenant(name.to_string()))?;
        let (q, used) = (&row.quota, self.tenant_use(name, row.egress_gone).await);
        let n = count.max(1);
        let full = |what: &str, used: String, limit: String| {
            EngineError::Quota(format!(
                "tenant {name}'s quota has no room for this: its sandboxes hold {used} of its {limit} {what} \
                 (remove some, or ask an operator to raise the quota: berth tenant create {name} --{} ...)",
                what.split(' ').next().unwrap_or(what)
            ))
        };
        if let Some(limit) = q.sandboxes
            && used.sandboxes + n > limit
        {
            return Err(full("sandboxes", used.sandboxes.to_string(), limit.to_string()));
        }
        if let Some(limit) = q.egress_bytes
            && used.egress_bytes >= limit
        {
            return Err(full("egress bytes", used.egress_bytes.to_string(), limit.to_string()));
        }
        if let Some(limit) = q.cpus {
            let left = (limit - used.cpus).max(0.0);
            let each = *req.cpus.get_or_insert((left / n as f64).min(1.0));
            if each < 0.01 || used.cpus + each * n as f64 > limit + 1e-9 {
                return Err(full("cpus", format!("{:.2}", used.cpus), format!("{limit}")));
            }
        }
        if let Some(limit) = q.memory_bytes {
            let left = limit.saturating_sub(used.memory_bytes);
            let share = left / n;
            let each =
                *req.memory_bytes.get_or_insert(self.bounds.default_memory_bytes.map_or(share, |d| d.min(share)));
            if each < berth_runtime::spec::MIN_MEMORY || used.memory_bytes + each * n > limit {
                return Err(full("memory bytes", used.memory_bytes.to_string(), limit.to_string()));
            }
        }
        if let Some(limit) = q.disk_bytes {
            let left = limit.saturating_sub(used.disk_bytes);
            let share = left / n;
            let each = *req.disk_bytes.get_or_insert(self.default_disk().map_or(share, |d| d.min(share)));
            if each == 0 || used.disk_bytes + each * n > limit {
                return Err(full("disk bytes", used.disk_bytes.to_string(), limit.to_string()));
            }
        }
        Ok(())
    }

    /// Give a create the labels of the caller's selector: a create that labels one of its keys otherwise
    /// would make a sandbox the token could not reach, and is refused.
    pub(super) fn label_for_selector(&self, req: &mut CreateSandbox) -> Result<(), EngineError> {
        let Some(caller) = super::current_caller() else { return Ok(()) };
        for (k, v) in &caller.grant.selector {
            match req.labels.get(k) {
                Some(other) if other != v => {
                    return Err(EngineError::Forbidden(format!(
                        "this token reaches sandboxes labelled {k}={v} only: a create cannot label {k}={other}"
                    )));
                }
                _ => {
                    req.labels.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(())
    }

    // Egress: counted for the tenant at teardown, and closed live when its quota is used up.

    /// The egress sandbox `id` has had (both directions), by its meter.
    async fn egress_of(&self, id: &str) -> u64 {
        match self.live(id).await {
            Ok(l) => l.meter.lock().map(|m| m.egress_seen()).unwrap_or(0),
            Err(_) => super::usage::Meter::load(&self.root, id).egress_seen(),
        }
    }

    /// At teardown: count a tenant's sandbox's egress as its tenant's for good.
    pub(super) async fn count_tenant_egress(&self, id: &str) {
        let Ok(record) = self.get(id).await else { return };
        if let Some(t) = &record.tenant {
            let bytes = self.egress_of(id).await;
            let _ = self.store.add_tenant_egress(t, bytes);
        }
    }

    /// Close the egress of every tenant whose quota is used up (each of its sandboxes' proxies refuses with
    /// a sentence saying so), and open it again once the quota has room. Run by the meter.
    pub(super) async fn police_egress(&self) {
        let Ok(rows) = self.store.tenants() else { return };
        let mut closed = std::collections::HashMap::new();
        let policed: Vec<_> = rows.into_iter().filter(|r| r.quota.egress_bytes.is_some()).collect();
        let none_closed = self.egress_closed.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
        if policed.is_empty() && none_closed {
            return;
        }
        let all = if policed.is_empty() { Vec::new() } else { self.list().await };
        for row in policed {
            let Some(limit) = row.quota.egress_bytes else { continue };
            let used = self.tenant_use_of(&all, &row.name, row.egress_gone).await.egress_bytes;
            if used >= limit {
                let why = format!(
                    "tenant {}'s egress quota is used up ({used} of {limit} bytes): an operator can raise it with \
                     berth tenant create {} --egress ...",
                    row.name, row.name
                );
                closed.insert(row.name, why);
            }
        }
        let live: Vec<Arc<super::Live>> = self.sandboxes.lock().await.values().cloned().collect();
        for l in live {
            let tenant = l.record.lock().await.tenant.clone();
            let why = tenant.and_then(|t| closed.get(&t).cloned());
            if l.egress.policy().closed != why {
                l.egress.close(why);
            }
        }
        *self.egress_closed.lock().unwrap_or_else(|p| p.into_inner()) = closed;
    }

    /// Why a new sandbox of `tenant` starts with its egress closed, if it does.
    pub(super) fn egress_closed_for(&self, tenant: Option<&str>) -> Option<String> {
        let closed = self.egress_closed.lock().unwrap_or_else(|p| p.into_inner());
        tenant.and_then(|t| closed.get(t).cloned())
    }
}

/// A quota's limits must be positive (and finite).
fn check_quota_values(q: &Quota) -> Result<(), EngineError> {
    let bad = |what: &str| EngineError::invalid(format!("quota {what} must be a positive number"));
    if q.sandboxes == Some(0) {
        return Err(bad("sandboxes"));
    }
    if q.cpus.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
        return Err(bad("cpus"));
    }
    for (what, v) in [("memory_bytes", q.memory_bytes), ("disk_bytes", q.disk_bytes), ("egress_bytes", q.egress_bytes)]
    {
        if v == Some(0) {
            return Err(bad(what));
        }
    }
    Ok(())
}
