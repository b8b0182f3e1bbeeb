//! Metering and budgets. CPU time, memory and its peak are the kernel's counts for the sandbox's cgroup (its
//! execs' cgroups are nested in it); egress bytes are the proxy's per-connection counters, summed per sandbox
//! (closed connections as their attempts are logged, open ones read live); disk is the pool's count of its
//! volume. The daemon samples every running sandbox once a second: memory is integrated over time from these
//! samples, and budgets are checked against them. What only the daemon knows (the integral, closed
//! connections' bytes, what removed children used) is written under `<root>/meters/` every 10 seconds and
//! read back when a restarted daemon adopts the sandbox.
//!
//! Each pause, when it ends, adds its length to [`Meter::paused_ms`] (the one going on is read from the
//! sandbox's pause clock): running time, and with it the wall budget, leave paused time out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_api::{Budget, Charged, EventKind, SandboxState, Usage};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use super::{Engine, Live, now_ms};
use crate::EngineError;

/// How often every running sandbox is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How often what only the daemon counts is written out.
const PERSIST_EVERY_MS: u64 = 10_000;
/// How often a sandbox's disk use is read by the sampler (it may take a walk of its files), and how old a
/// reading may be when usage is asked for.
const DISK_EVERY_MS: u64 = 30_000;
const DISK_ASKED_MS: u64 = 5_000;
/// The share of a limit at which a warning is given.
const WARN_AT: f64 = 0.8;

/// What the daemon counts of one sandbox itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(super) struct Meter {
    memory_gib_seconds: f64,
    pub(super) last_sample_ms: u64,
    last_memory_bytes: u64,
    peak_seen: u64,
    egress_out_closed: u64,
    egress_in_closed: u64,
    /// What its removed children used, charged to it.
    children_cpu_seconds: f64,
    children_egress_bytes: u64,
    /// Time spent paused, in the pauses that have ended.
    pub(super) paused_ms: u64,
    /// Time spent hibernated, in the hibernations that have ended.
    pub(super) hibernated_ms: u64,
    /// CPU time of the runtimes it had before its last wake (a woken sandbox's cgroup counts from zero).
    pub(super) cpu_carried_seconds: f64,
    /// The CPU time of its current runtime at the last sample.
    last_cpu_seconds: f64,
    disk_bytes: u64,
    disk_at_ms: u64,
    /// The limits already warned about (`cpu`, `egress`, `wall`).
    warned: Vec<String>,
    /// The last counts reported, so that counters never go back.
    egress_out_seen: u64,
    egress_in_seen: u64,
    #[serde(skip)]
    persisted_at_ms: u64,
    /// The budget (from the sandbox's spec; read on the first sample).
    #[serde(skip)]
    budget: Option<Budget>,
    /// Recent usage, a point every `HISTORY_EVERY_MS`, the last `HISTORY_POINTS` (in memory only).
    #[serde(skip)]
    history: std::collections::VecDeque<berth_api::UsagePoint>,
}

/// How often a point of a sandbox's recent usage is kept, and how many are (an hour's).
const HISTORY_EVERY_MS: u64 = 5_000;
const HISTORY_POINTS: usize = 720;

impl Meter {
    /// Keep `u` as a point of the recent usage, if the last one is old enough.
    fn keep_point(&mut self, u: &Usage) {
        if self.history.back().is_some_and(|p| u.sampled_at_ms < p.at_ms + HISTORY_EVERY_MS) {
            return;
        }
        if self.history.len() >= HISTORY_POINTS {
            self.history.pop_front();
        }
        self.history.push_back(berth_api::UsagePoint {
            at_ms: u.sampled_at_ms,
            cpu_seconds: u.cpu_seconds,
            memory_bytes: u.memory_bytes,
            disk_bytes: u.disk_bytes,
        });
    }
}

/// The file the meter of sandbox `id` is kept in.
pub(super) fn meter_path(root: &Path, id: &str) -> PathBuf {
    root.join("meters").join(format!("{id}.json"))
}

impl Meter {
    pub(super) fn load(root: &Path, id: &str) -> Meter {
        std::fs::read(meter_path(root, id)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// At a resume: the memory sampled at the pause was held all through it, so the integral grows by that
    /// much for the time since that sample, with nothing read from the kernel.
    pub(super) fn resumed(&mut self, now: u64) {
        if self.last_sample_ms > 0 && now > self.last_sample_ms {
            let secs = (now - self.last_sample_ms) as f64 / 1000.0;
            self.memory_gib_seconds += self.last_memory_bytes as f64 / (1u64 << 30) as f64 * secs;
            self.last_sample_ms = now;
        }
    }

    /// The egress counted so far, both directions, as last reported.
    pub(super) fn egress_seen(&self) -> u64 {
        self.egress_out_seen.saturating_add(self.egress_in_seen)
    }

    /// Count a closed proxy connection's bytes.
    pub(super) fn add_egress(&mut self, up: u64, down: u64) {
        self.egress_out_closed = self.egress_out_closed.saturating_add(up);
        self.egress_in_closed = self.egress_in_closed.saturating_add(down);
    }
}

/// Check a budget from a request: every limit given is a positive, finite amount.
pub(crate) fn check_budget(b: &Budget) -> Result<(), EngineError> {
    let bad = |what: &str, v: String| {
        Err(EngineError::invalid(format!(
            "budget {what} must be a positive number (cpu_seconds and wall_seconds at most {} seconds), not {v}",
            berth_api::MAX_DURATION_SECONDS
        )))
    };
    for (what, v) in [("cpu_seconds", b.cpu_seconds), ("wall_seconds", b.wall_seconds)] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0 && *v <= berth_api::MAX_DURATION_SECONDS)) {
            return bad(what, v.to_string());
        }
    }
    if b.egress_bytes == Some(0) {
        return bad("egress_bytes", "0".into());
    }
    Ok(())
}

/// The limits of `b` with those of `change` in their place where it gives them.
fn merged(b: &Budget, change: &Budget) -> Budget {
    Budget {
        cpu_seconds: change.cpu_seconds.or(b.cpu_seconds),
        egress_bytes: change.egress_bytes.or(b.egress_bytes),
        wall_seconds: change.wall_seconds.or(b.wall_seconds),
    }
}

/// What the kernel says of one cgroup, and the disk count when it was due.
struct Reading {
    cgroup: Option<berth_runtime::cgroup::Counters>,
    disk: Option<u64>,
}

/// Each limit of a budget reached (≥ 80 % or ≥ 100 %), as (kind, used, limit, unit).
fn limits_reached(b: &Budget, c: &Charged, share: f64) -> Vec<(&'static str, f64, f64, &'static str)> {
    let mut out = Vec::new();
    if let Some(l) = b.cpu_seconds.filter(|l| c.cpu_seconds >= l * share) {
        out.push(("cpu", c.cpu_seconds, l, "s"));
    }
    if let Some(l) = b.egress_bytes.filter(|l| c.egress_bytes as f64 >= *l as f64 * share) {
        out.push(("egress", c.egress_bytes as f64, l as f64, "bytes"));
    }
    if let Some(l) = b.wall_seconds.filter(|l| c.wall_seconds >= l * share) {
        out.push(("wall", c.wall_seconds, l, "s"));
    }
    out
}

/// The removal reason for a limit passed, e.g. `budget: cpu 600.1 s of 600 s`.
fn reason(kind: &str, used: f64, limit: f64, unit: &str) -> String {
    match unit {
        "bytes" => format!("budget: {kind} {used} bytes of {limit} bytes"),
        _ => format!("budget: {kind} {used:.1} s of {limit} s"),
    }
}

impl Engine {
    /// Sample every running sandbox once a second, for as long as the engine lives. While none runs (none
    /// there, or every one paused) there is nothing to sample: the meter waits for a lifecycle event (a create,
    /// a resume, …) instead.
    pub fn spawn_meter(self: &Arc<Engine>) {
        let weak = Arc::downgrade(self);
        let events = self.events.tx.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SAMPLE_EVERY).await;
                // Listening from before the round: an event during it is not missed.
                let mut stirred = events.subscribe();
                let Some(engine) = weak.upgrade() else { return };
                let sampled = engine.sample_all().await;
                drop(engine);
                if sampled == 0 && matches!(stirred.recv().await, Err(RecvError::Closed)) {
                    return;
                }
            }
        });
    }

    /// The running sandboxes' ids and handles, not being removed or stopped. A paused one is passed over
    /// without a look at its record: it uses no CPU and its memory stays as it was sampled at the pause (the
    /// resume integrates the time between).
    async fn metered(&self) -> Vec<(String, Arc<Live>)> {
        let all: Vec<Arc<Live>> = self.sandboxes.lock().await.values().cloned().collect();
        let mut out = Vec::new();
        for l in all {
            if l.pause.is_paused() {
                continue;
            }
            let (id, state) = {
                let r = l.record.lock().await;
                (r.id.clone(), r.state)
            };
            if state == SandboxState::Running && !self.holds.tearing_down(&id) {
                out.push((id, l));
            }
        }
        out
    }

    /// Read the kernel's and the pool's counts of these sandboxes (off the async threads).
    async fn read_counts(&self, ids: Vec<(String, bool)>) -> HashMap<String, Reading> {
        let cgroups = self.cgroups.clone();
        let pool = self.pool();
        tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .map(|(id, disk_due)| {
                    let cgroup = cgroups.as_ref().and_then(|h| h.open(&id).counters().ok());
                    let dir = pool.path().join("sandboxes").join(&id);
                    let disk = disk_due.then(|| pool.usage(&dir).ok()).flatten();
                    (id, Reading { cgroup, disk })
                })
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Sample these sandboxes: update each meter, and return their usage (own use only in `charged`). Disk
    /// use is read again where the last reading is older than `disk_age_ms`.
    pub(super) async fn sample(&self, live: &[(String, Arc<Live>)], disk_age_ms: u64) -> Vec<Usage> {
        let now = now_ms();
        let due: Vec<(String, bool)> = live
            .iter()
            .map(|(id, l)| {
                let disk_due = disk_age_ms == 0
                    || l.meter.lock().map(|m| now.saturating_sub(m.disk_at_ms) >= disk_age_ms).unwrap_or(false);
                (id.clone(), disk_due)
            })
            .collect();
        let mut readings = self.read_counts(due).await;
        let mut out = Vec::with_capacity(live.len());
        for (id, l) in live {
            let (name, created) = {
                let r = l.record.lock().await;
                (r.name.clone(), r.created_at_ms)
            };
            let reading = readings.remove(id).unwrap_or(Reading { cgroup: None, disk: None });
            let (open_up, open_down) =
                l.egress.open_connections().iter().fold((0u64, 0u64), |(u, d), c| (u + c.bytes_up, d + c.bytes_down));
            let budget_missing = l.meter.lock().map(|m| m.budget.is_none()).unwrap_or(false);
            let spec_budget = if budget_missing { Some(self.spec_budget(id)) } else { None };
            let execs = l.next_exec.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(1);
            let Ok(mut m) = l.meter.lock() else { continue };
            if let Some(b) = spec_budget {
                m.budget = Some(b);
            }
            let cg = reading.cgroup.unwrap_or_default();
            if m.last_sample_ms > 0 && now > m.last_sample_ms {
                // The trapezoid between this sample and the last.
                let secs = (now - m.last_sample_ms) as f64 / 1000.0;
                let avg = (m.last_memory_bytes as f64 + cg.memory_bytes as f64) / 2.0;
                m.memory_gib_seconds += avg / (1u64 << 30) as f64 * secs;
            }
            m.last_sample_ms = now;
            m.last_memory_bytes = cg.memory_bytes;
            m.peak_seen = m.peak_seen.max(cg.memory_bytes).max(cg.peak_memory_bytes);
            if let Some(d) = reading.disk {
                m.disk_bytes = d;
                m.disk_at_ms = now;
            }
            m.egress_out_seen = m.egress_out_seen.max(m.egress_out_closed.saturating_add(open_up));
            m.egress_in_seen = m.egress_in_seen.max(m.egress_in_closed.saturating_add(open_down));
            // Pauses that ended are in the meter; the one going on, if any, is the pause clock's.
            let paused_ms = m.paused_ms + l.pause.ongoing_ms();
            let running_seconds =
                (now.saturating_sub(created).saturating_sub(paused_ms).saturating_sub(m.hibernated_ms)) as f64 / 1000.0;
            m.last_cpu_seconds = cg.cpu_ns as f64 / 1e9;
            let cpu_seconds = m.cpu_carried_seconds + m.last_cpu_seconds;
            out.push(Usage {
                id: id.clone(),
                name,
                cpu_seconds,
                memory_bytes: cg.memory_bytes,
                memory_gib_seconds: m.memory_gib_seconds,
                peak_memory_bytes: m.peak_seen,
                disk_bytes: m.disk_bytes,
                egress_bytes_out: m.egress_out_seen,
                egress_bytes_in: m.egress_in_seen,
                execs,
                running_seconds,
                paused_seconds: paused_ms as f64 / 1000.0,
                hibernated_seconds: m.hibernated_ms as f64 / 1000.0,
                budget: m.budget.clone().unwrap_or_default(),
                charged: Charged {
                    cpu_seconds: cpu_seconds + m.children_cpu_seconds,
                    egress_bytes: m.egress_out_seen + m.egress_in_seen + m.children_egress_bytes,
                    wall_seconds: running_seconds,
                },
                sampled_at_ms: now,
            });
            if now.saturating_sub(m.persisted_at_ms) >= PERSIST_EVERY_MS {
                m.persisted_at_ms = now;
                let path = meter_path(&self.root, id);
                if let Some(dir) = path.parent()
                    && !dir.exists()
                {
                    let _ = std::fs::create_dir_all(dir);
                    let _ = std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700));
                }
                if let Ok(json) = serde_json::to_vec(&*m) {
                    let _ = std::fs::write(&path, json);
                }
            }
        }
        out
    }

    /// Keep sandbox `id`'s meter on disk now (before its runtime goes, as at hibernation), with the CPU time
    /// its runtime used so far carried over (`cpu_ns`: its cgroup's count now).
    pub(super) fn save_meter(&self, id: &str, m: &mut Meter, cpu_ns: Option<u64>) {
        m.cpu_carried_seconds += cpu_ns.map(|n| n as f64 / 1e9).unwrap_or(m.last_cpu_seconds);
        m.last_cpu_seconds = 0.0;
        let path = meter_path(&self.root, id);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Ok(json) = serde_json::to_vec(&*m) {
            let _ = std::fs::write(&path, json);
        }
    }

    /// The budget in sandbox `id`'s spec.
    fn spec_budget(&self, id: &str) -> Budget {
        self.store
            .spec(id)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<berth_api::CreateSandbox>(v).ok())
            .map(|s| s.budget)
            .unwrap_or_default()
    }

    /// Add each sandbox's live children's use to what is charged to it (both among those in `usage`).
    async fn charge_children(&self, usage: &mut [Usage]) {
        let lives: Vec<Arc<Live>> = {
            let all = self.sandboxes.lock().await;
            usage.iter().filter_map(|u| all.get(&u.id).cloned()).collect()
        };
        let mut owners: HashMap<String, String> = HashMap::new();
        for l in lives {
            let r = l.record.lock().await;
            if let Some(o) = &r.owner {
                owners.insert(r.id.clone(), o.clone());
            }
        }
        let own: Vec<(String, f64, u64)> =
            usage.iter().map(|u| (u.id.clone(), u.cpu_seconds, u.egress_bytes_out + u.egress_bytes_in)).collect();
        for (child, cpu, egress) in own {
            let Some(owner) = owners.get(&child) else { continue };
            if let Some(u) = usage.iter_mut().find(|u| &u.id == owner) {
                u.charged.cpu_seconds += cpu;
                u.charged.egress_bytes += egress;
            }
        }
    }

    /// One round: sample every running sandbox, warn at 80 % of a limit, and remove those past one. Returns
    /// how many were sampled.
    async fn sample_all(&self) -> usize {
        let live = self.metered().await;
        let mut usage = self.sample(&live, DISK_EVERY_MS).await;
        self.charge_children(&mut usage).await;
        let mut ending = Vec::new();
        for u in &usage {
            if let Some((_, l)) = live.iter().find(|(id, _)| id == &u.id)
                && let Ok(mut m) = l.meter.lock()
            {
                m.keep_point(u);
            }
            if let Some((kind, used, limit, unit)) = limits_reached(&u.budget, &u.charged, 1.0).into_iter().next() {
                ending.push((u.id.clone(), reason(kind, used, limit, unit)));
                continue;
            }
            for (kind, used, limit, _) in limits_reached(&u.budget, &u.charged, WARN_AT) {
                let Some((_, l)) = live.iter().find(|(id, _)| id == &u.id) else { continue };
                let first = l
                    .meter
                    .lock()
                    .map(|mut m| {
                        let first = !m.warned.iter().any(|w| w == kind);
                        if first {
                            m.warned.push(kind.to_string());
                        }
                        first
                    })
                    .unwrap_or(false);
                if first {
                    l.note_as(
                        "daemon",
                        "budget_warning",
                        serde_json::json!({"kind": kind, "limit": limit}),
                        serde_json::json!({"used": used, "share": used / limit}),
                    );
                    self.events.emit(&u.id, EventKind::BudgetWarning, None, None);
                }
            }
        }
        for (id, why) in ending {
            self.budget_removals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) {
                tokio::spawn(async move {
                    let _ = this.remove_because(&id, &why).await;
                });
            }
        }
        self.police_egress().await;
        self.samples.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        usage.len()
    }

    /// Sandbox `id`'s recent usage: a point every 5 s for the last hour it ran (kept in memory), those from
    /// `since_ms` to `until_ms`.
    pub async fn usage_history(
        &self,
        id: &str,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
    ) -> Result<Vec<berth_api::UsagePoint>, EngineError> {
        let live = self.live(id).await?;
        let m = live.meter.lock().map_err(|_| EngineError::Storage("a meter's lock was poisoned".into()))?;
        Ok(m.history
            .iter()
            .filter(|p| since_ms.is_none_or(|t| p.at_ms >= t) && until_ms.is_none_or(|t| p.at_ms <= t))
            .cloned()
            .collect())
    }

    /// What running sandbox `id` has used, measured now (its disk too).
    pub async fn usage(&self, id: &str) -> Result<Usage, EngineError> {
        let live = self.live(id).await?;
        let sid = live.record.lock().await.id.clone();
        let mut all = self.sample(&[(sid.clone(), Arc::clone(&live))], DISK_ASKED_MS).await;
        // Its live children's use is charged to it.
        let children: Vec<(String, Arc<Live>)> = {
            let mut out = Vec::new();
            for l in self.sandboxes.lock().await.values() {
                let r = l.record.lock().await;
                if r.owner.as_deref() == Some(sid.as_str()) {
                    out.push((r.id.clone(), Arc::clone(l)));
                }
            }
            out
        };
        all.extend(self.sample(&children, DISK_EVERY_MS).await);
        self.charge_children(&mut all).await;
        all.into_iter().find(|u| u.id == sid).ok_or_else(|| EngineError::NoSandbox(id.to_string()))
    }

    /// What every running sandbox has used, oldest first.
    pub async fn usage_all(&self) -> Vec<Usage> {
        let mut live = self.metered().await;
        let mut created = HashMap::new();
        for (id, l) in &live {
            created.insert(id.clone(), l.record.lock().await.created_at_ms);
        }
        live.sort_by_key(|(id, _)| created.get(id).copied().unwrap_or(0));
        let mut usage = self.sample(&live, DISK_EVERY_MS).await;
        self.charge_children(&mut usage).await;
        usage
    }

    /// Change a running sandbox's budget: the limits given replace those set. Kept in its spec.
    pub async fn set_budget(&self, id: &str, change: Budget) -> Result<Usage, EngineError> {
        check_budget(&change)?;
        let live = self.live(id).await?;
        let sid = live.record.lock().await.id.clone();
        let mut spec: berth_api::CreateSandbox =
            self.store.spec(&sid)?.and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();
        spec.budget = merged(&spec.budget, &change);
        self.store.put_spec(&sid, &serde_json::to_value(&spec).unwrap_or_default())?;
        if let Ok(mut m) = live.meter.lock() {
            m.budget = Some(spec.budget.clone());
            // A raised limit may warn again.
            m.warned.clear();
        }
        live.note(
            "budget",
            serde_json::to_value(&change).unwrap_or_default(),
            serde_json::to_value(&spec.budget).unwrap_or_default(),
        );
        self.usage(&sid).await
    }

    /// At teardown, before the runtime goes: what the sandbox used, for its receipt, charged to its owner.
    pub(super) async fn final_usage(&self, sid: &str) -> Option<Usage> {
        let live = self.live(sid).await.ok()?;
        let owner = live.record.lock().await.owner.clone();
        let mut u = self.sample(&[(sid.to_string(), Arc::clone(&live))], 0).await.pop()?;
        // What its removed children used is in its meter; its live ones are removed before it.
        let own_egress = u.egress_bytes_out + u.egress_bytes_in;
        if let Some(owner) = owner
            && let Ok(o) = self.live(&owner).await
            && let Ok(mut m) = o.meter.lock()
        {
            m.children_cpu_seconds += u.cpu_seconds;
            m.children_egress_bytes += own_egress;
            m.persisted_at_ms = 0;
        }
        u.charged.egress_bytes = u.charged.egress_bytes.max(own_egress);
        Some(u)
    }

    /// A sandbox as `inspect` shows it: its record, with its usage while it runs.
    pub async fn inspect(&self, id: &str) -> Result<berth_api::Sandbox, EngineError> {
        let mut record = self.get(id).await?;
        if record.state == SandboxState::Running {
            record.usage = self.usage(&record.id).await.ok();
        }
        Ok(record)
    }

    /// Counts of the daemon's own, for `/metrics`.
    pub fn meter_counts(&self) -> (u64, u64) {
        (
            self.samples.load(std::sync::atomic::Ordering::Relaxed),
            self.budget_removals.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn budgets_must_be_positive_and_finite() {
        assert!(check_budget(&Budget::default()).is_ok());
        assert!(
            check_budget(&Budget { cpu_seconds: Some(0.5), egress_bytes: Some(1), wall_seconds: Some(1.0) }).is_ok()
        );
        for bad in [
            Budget { cpu_seconds: Some(0.0), ..Budget::default() },
            Budget { cpu_seconds: Some(-1.0), ..Budget::default() },
            Budget { wall_seconds: Some(f64::INFINITY), ..Budget::default() },
            Budget { wall_seconds: Some(4e9), ..Budget::default() },
            Budget { egress_bytes: Some(0), ..Budget::default() },
        ] {
            let e = check_budget(&bad).unwrap_err().to_string();
            assert!(e.contains("must be a positive number"), "{e}");
        }
    }

    #[test]
    fn limits_warn_at_80_percent_and_end_at_100() {
        let b = Budget { cpu_seconds: Some(10.0), egress_bytes: Some(1000), wall_seconds: None };
        let c = Charged { cpu_seconds: 8.5, egress_bytes: 500, wall_seconds: 1e9 };
        assert_eq!(limits_reached(&b, &c, WARN_AT).iter().map(|l| l.0).collect::<Vec<_>>(), ["cpu"]);
        assert!(limits_reached(&b, &c, 1.0).is_empty());
        let c = Charged { cpu_seconds: 10.04, egress_bytes: 1000, wall_seconds: 0.0 };
        let over = limits_reached(&b, &c, 1.0);
        assert_eq!(over.len(), 2);
        assert_eq!(reason(over[0].0, over[0].1, over[0].2, over[0].3), "budget: cpu 10.0 s of 10 s");
        assert_eq!(reason(over[1].0, over[1].1, over[1].2, over[1].3), "budget: egress 1000 bytes of 1000 bytes");
    }

    #[test]
    fn a_change_replaces_only_the_limits_it_gives() {
        let b = Budget { cpu_seconds: Some(10.0), egress_bytes: Some(5), wall_seconds: None };
        let m = merged(&b, &Budget { wall_seconds: Some(60.0), cpu_seconds: Some(20.0), ..Budget::default() });
        assert_eq!(m, Budget { cpu_seconds: Some(20.0), egress_bytes: Some(5), wall_seconds: Some(60.0) });
    }
}
