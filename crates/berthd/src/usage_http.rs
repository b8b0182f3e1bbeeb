//! The HTTP routes of metering: a sandbox's usage, every sandbox's, a change of budget, and `/metrics` in
//! the Prometheus text format.

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::header;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use berth_api::{Budget, SandboxState, Usage};

use crate::Engine;
use crate::http::{Api, ApiJson, Failure, detached};

pub fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/v1/sandboxes/{id}/usage", get(usage))
        .route("/v1/sandboxes/{id}/usage/history", get(history))
        .route("/v1/sandboxes/{id}/budget", post(budget))
        .route("/v1/usage", get(usage_all))
        .route("/metrics", get(metrics))
}

async fn usage(State(e): Api, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    Ok(Json(e.usage(&id).await?).into_response())
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    since_ms: Option<u64>,
    until_ms: Option<u64>,
}

async fn history(
    State(e): Api,
    UrlPath(id): UrlPath<String>,
    crate::http::ApiQuery(q): crate::http::ApiQuery<HistoryQuery>,
) -> Result<Response, Failure> {
    Ok(Json(e.usage_history(&id, q.since_ms, q.until_ms).await?).into_response())
}

async fn usage_all(State(e): Api) -> Json<Vec<Usage>> {
    let mut seen = Vec::new();
    for u in e.usage_all().await {
        if e.sees_id(&u.id).await {
            seen.push(u);
        }
    }
    Json(seen)
}

async fn budget(State(e): Api, UrlPath(id): UrlPath<String>, ApiJson(b): ApiJson<Budget>) -> Result<Response, Failure> {
    Ok(Json(detached(&e, move |e| async move { e.set_budget(&id, b).await }).await?).into_response())
}

/// A label value, escaped as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One per-sandbox metric: its name, type, help and how to read it from a usage record.
type Series = (&'static str, &'static str, &'static str, fn(&Usage) -> f64);

/// The metrics of these sandboxes, and the daemon's own (counts of sandboxes by state).
pub(crate) fn render(usage: &[Usage], states: &[(SandboxState, usize)], counts: (u64, u64)) -> String {
    let mut out = String::new();
    let series: [Series; 8] = [
        ("berth_sandbox_cpu_seconds_total", "counter", "CPU seconds burned by the sandbox's processes", |u| {
            u.cpu_seconds
        }),
        ("berth_sandbox_memory_bytes", "gauge", "Memory charged to the sandbox now", |u| u.memory_bytes as f64),
        ("berth_sandbox_memory_peak_bytes", "gauge", "The most memory ever charged to the sandbox", |u| {
            u.peak_memory_bytes as f64
        }),
        ("berth_sandbox_memory_gib_seconds_total", "counter", "The sandbox's memory integrated over time", |u| {
            u.memory_gib_seconds
        }),
        ("berth_sandbox_disk_bytes", "gauge", "Bytes the sandbox's files take in the pool", |u| u.disk_bytes as f64),
        ("berth_sandbox_execs_total", "counter", "Execs started in the sandbox", |u| u.execs as f64),
        ("berth_sandbox_running_seconds", "gauge", "Seconds the sandbox has run", |u| u.running_seconds),
        ("berth_sandbox_paused_seconds", "gauge", "Seconds the sandbox was paused", |u| u.paused_seconds),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} {kind}");
        for u in usage {
            let _ = writeln!(out, "{name}{{sandbox=\"{}\",name=\"{}\"}} {}", label(&u.id), label(&u.name), value(u));
        }
    }
    let name = "berth_sandbox_egress_bytes_total";
    let _ = writeln!(out, "# HELP {name} Bytes through the sandbox's egress proxy.\n# TYPE {name} counter");
    for u in usage {
        for (direction, v) in [("out", u.egress_bytes_out), ("in", u.egress_bytes_in)] {
            let _ = writeln!(
                out,
                "{name}{{sandbox=\"{}\",name=\"{}\",direction=\"{direction}\"}} {v}",
                label(&u.id),
                label(&u.name)
            );
        }
    }
    let _ = writeln!(out, "# HELP berth_sandboxes Sandboxes by state.\n# TYPE berth_sandboxes gauge");
    for (state, n) in states {
        let state = serde_json::to_value(state).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        let _ = writeln!(out, "berth_sandboxes{{state=\"{state}\"}} {n}");
    }
    let (samples, removals) = counts;
    let _ = writeln!(
        out,
        "# HELP berth_metering_samples_total Metering rounds run.\n# TYPE berth_metering_samples_total counter\n\
         berth_metering_samples_total {samples}\n\
         # HELP berth_budget_removals_total Sandboxes removed for passing a budget.\n\
         # TYPE berth_budget_removals_total counter\nberth_budget_removals_total {removals}"
    );
    out
}

/// `GET /metrics`: the sandboxes the caller sees (every one; with a session token its own sandbox and its
/// children; with a tenant's token its tenant's), and each tenant's use and quota (a tenant's: its own).
async fn metrics(State(e): Api) -> Response {
    let mut records = e.list().await;
    records.retain(|r| e.sees(r));
    let mut usage = e.usage_all().await;
    let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
    usage.retain(|u| ids.contains(&u.id));
    let session = berth_engine::current_caller().is_some_and(|c| c.session.is_some());
    let tenants = if session { Vec::new() } else { e.tenants().await.unwrap_or_default() };
    let mut states: Vec<(SandboxState, usize)> = Vec::new();
    for state in [
        SandboxState::Creating,
        SandboxState::Running,
        SandboxState::Paused,
        SandboxState::Stopping,
        SandboxState::Stopped,
    ] {
        states.push((state, records.iter().filter(|r| r.state == state).count()));
    }
    let mut body = render(&usage, &states, e.meter_counts());
    body.push_str(&render_tenants(&tenants));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}

/// Each tenant's use and quota, one series a resource (a quota not set is left out).
pub(crate) fn render_tenants(tenants: &[berth_api::Tenant]) -> String {
    type TenantSeries = (&'static str, fn(&berth_api::TenantUse) -> f64, fn(&berth_api::Quota) -> Option<f64>);
    let series: [TenantSeries; 5] = [
        ("sandboxes", |u| u.sandboxes as f64, |q| q.sandboxes.map(|v| v as f64)),
        ("cpus", |u| u.cpus, |q| q.cpus),
        ("memory_bytes", |u| u.memory_bytes as f64, |q| q.memory_bytes.map(|v| v as f64)),
        ("disk_bytes", |u| u.disk_bytes as f64, |q| q.disk_bytes.map(|v| v as f64)),
        ("egress_bytes", |u| u.egress_bytes as f64, |q| q.egress_bytes.map(|v| v as f64)),
    ];
    let mut out = String::new();
    if tenants.is_empty() {
        return out;
    }
    for (what, used, quota) in series {
        let name = format!("berth_tenant_{what}");
        let _ = writeln!(out, "# HELP {name} What the tenant's sandboxes hold ({what}).\n# TYPE {name} gauge");
        for t in tenants {
            let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {}", label(&t.name), used(&t.used));
        }
        let name = format!("berth_tenant_quota_{what}");
        let _ = writeln!(out, "# HELP {name} The tenant's quota ({what}).\n# TYPE {name} gauge");
        for t in tenants {
            if let Some(q) = quota(&t.quota) {
                let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {q}", label(&t.name));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped_and_every_line_is_a_sample_or_a_comment() {
        let u = Usage { id: "0123456789ab".into(), name: "a\"b\\c".into(), cpu_seconds: 1.5, ..Usage::default() };
        let text = render(&[u], &[(SandboxState::Running, 1)], (3, 0));
        assert!(text.contains("berth_sandbox_cpu_seconds_total{sandbox=\"0123456789ab\",name=\"a\\\"b\\\\c\"} 1.5\n"));
        assert!(text.contains("berth_sandboxes{state=\"running\"} 1\n"));
        assert!(text.contains("direction=\"in\"} 0\n"));
        for line in text.lines() {
            assert!(line.starts_with("# ") || line.split(' ').count() >= 2, "{line}");
        }
    }
}
