//! Giving memory back after a burst. glibc's allocator keeps the memory its per-thread arenas freed; after a
//! burst of requests (many sandboxes created, execs streamed, removed) the daemon would go on holding its
//! high-water mark while idle. Once the API has been quiet for a while after some activity, the free memory
//! is handed back to the kernel, once per quiet spell.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Requests answered since the daemon started, on any of its listeners.
static ANSWERED: AtomicU64 = AtomicU64::new(0);

/// How long the API must have answered nothing before memory is handed back.
const QUIET: Duration = Duration::from_secs(5);

/// Count one answered request.
pub fn answered() {
    ANSWERED.fetch_add(1, Ordering::Relaxed);
}

/// Watch for quiet spells after activity, and hand the allocator's free memory back in each.
pub fn spawn_trimmer() {
    tokio::spawn(async move {
        let mut seen = ANSWERED.load(Ordering::Relaxed);
        let mut trimmed = seen;
        loop {
            tokio::time::sleep(QUIET).await;
            let now = ANSWERED.load(Ordering::Relaxed);
            if now != seen {
                // Still busy: wait for a whole quiet interval.
                seen = now;
                continue;
            }
            if now != trimmed {
                trimmed = now;
                let before = rss_kib();
                let released = tokio::task::spawn_blocking(berth_sys::process::release_free_memory).await;
                crate::log::info(
                    "released free memory",
                    serde_json::json!({
                        "released": released.unwrap_or(false), "requests": now,
                        "rss_kib_before": before, "rss_kib_after": rss_kib(),
                    }),
                );
            }
        }
    });
}

/// The daemon's resident memory, from /proc.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()
}
