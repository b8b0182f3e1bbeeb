//! Phase timings for tuning: with `BERTH_TRACE=1`, each process that marks phases prints them to stderr
//! (`berth trace <pid> <monotonic µs> <phase> <µs since the previous mark>`). Off, a mark costs one relaxed load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

static STATE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 off, 2 on
static LAST: Mutex<Option<Instant>> = Mutex::new(None);

fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var_os("BERTH_TRACE").is_some_and(|v| v == "1");
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// Record that `phase` just ended.
pub fn mark(phase: &str) {
    if !enabled() {
        return;
    }
    let now = Instant::now();
    let Ok(mut last) = LAST.lock() else { return };
    let since = last.map(|l| now.duration_since(l).as_micros()).unwrap_or(0);
    *last = Some(now);
    let mono = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let at = mono.tv_sec as u64 * 1_000_000 + mono.tv_nsec as u64 / 1000;
    eprintln!("berth trace {} {at} {phase} {since}", std::process::id());
}
