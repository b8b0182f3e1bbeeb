//! The daemon's own log: one JSON object per line on stderr (`time_ms`, `level`, `msg`, then fields), so
//! that a supervisor (systemd, a container runtime) can ship and query it. Requests and lifecycle events are
//! logged; request bodies and environment values never are.

use std::io::Write;

/// Write one log line. `fields` is a JSON object whose members follow `msg`.
pub fn line(level: &str, msg: &str, fields: serde_json::Value) {
    let mut obj = serde_json::Map::new();
    obj.insert("time_ms".into(), crate::engine::now_ms().into());
    obj.insert("level".into(), level.into());
    obj.insert("msg".into(), msg.into());
    if let serde_json::Value::Object(f) = fields {
        obj.extend(f);
    }
    let mut text = serde_json::Value::Object(obj).to_string();
    text.push('\n');
    // One write per line, so that lines from concurrent tasks never interleave.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

pub fn info(msg: &str, fields: serde_json::Value) {
    line("info", msg, fields);
}

pub fn warn(msg: &str, fields: serde_json::Value) {
    line("warn", msg, fields);
}
