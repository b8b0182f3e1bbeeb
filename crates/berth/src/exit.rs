//! Exit codes, shared with timeout(1) and the shell so that scripts can tell who failed.

/// berth itself failed (bad option, missing kernel feature, failed setup).
pub const BERTH_FAILED: i32 = 125;
/// The command was killed by berth's timeout.
pub const TIMED_OUT: i32 = 124;

/// The exit code for a command killed by `signal`.
pub fn for_signal(signal: i32) -> i32 {
    128 + signal
}

/// Print an error chain once, on one line.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}
