//! Turning the API's NDJSON streams into what a model reads: an exec's frames into its exit code, stdout and
//! stderr (with where the middle was dropped), and a code context's run into its output, results and error.

use serde_json::{Map, Value, json};

/// The marker put where the API dropped the middle of the output. The budget is shared by stdout and stderr,
/// so the marker goes into each stream that has a tail, and counts what both lost.
fn dropped(bytes: u64) -> String {
    format!("\n[... output cut here: {bytes} bytes of stdout and stderr were dropped; what follows is the tail ...]\n")
}

/// One stream's text: what came before the `truncated` frame (the head) and after it (the tail).
#[derive(Default)]
struct Stream {
    head: String,
    tail: String,
}

impl Stream {
    fn push(&mut self, after_cut: bool, data: &str) {
        if after_cut { self.tail.push_str(data) } else { self.head.push_str(data) }
    }

    fn text(&self, cut: Option<u64>) -> String {
        match cut {
            Some(n) if !self.tail.is_empty() => format!("{}{}{}", self.head, dropped(n), self.tail),
            _ => format!("{}{}", self.head, self.tail),
        }
    }
}

/// An exec's result, read from its NDJSON frames.
pub struct ExecOutcome {
    pub structured: Value,
    pub text: String,
}

pub fn exec(body: &[u8]) -> ExecOutcome {
    let (mut out, mut err) = (Stream::default(), Stream::default());
    let mut cut: Option<u64> = None;
    let mut exit = Value::Null;
    let mut exec_id = Value::Null;
    for frame in frames(body) {
        match frame.get("type").and_then(Value::as_str) {
            Some("started") => exec_id = frame.get("exec_id").cloned().unwrap_or(Value::Null),
            Some("output") => {
                let data = frame.get("data").and_then(Value::as_str).unwrap_or_default();
                match frame.get("stream").and_then(Value::as_str) {
                    Some("stderr") => err.push(cut.is_some(), data),
                    _ => out.push(cut.is_some(), data),
                }
            }
            Some("truncated") => cut = Some(frame.get("dropped_bytes").and_then(Value::as_u64).unwrap_or(0)),
            Some("exit") => exit = frame,
            _ => {}
        }
    }
    let field = |name: &str| exit.get(name).cloned().unwrap_or(Value::Null);
    if exec_id.is_null() {
        exec_id = field("exec_id");
    }
    let (stdout, stderr) = (out.text(cut), err.text(cut));
    let structured = json!({
        "exec_id": exec_id,
        "exit_code": field("exit_code"),
        "signal": field("signal"),
        "timed_out": field("timed_out"),
        "killed": field("killed"),
        "duration_ms": field("duration_ms"),
        "error": field("error"),
        "truncated": cut.is_some(),
        "bytes_dropped": cut.unwrap_or(0),
        "stdout": stdout,
        "stderr": stderr,
    });
    let mut text = match exit.get("exit_code").and_then(Value::as_i64) {
        Some(code) => format!("exit code: {code}"),
        None => "exit code: unknown (the exec's stream ended without its exit frame)".to_string(),
    };
    if field("timed_out") == Value::Bool(true) {
        text.push_str(" (timed out)");
    }
    if field("killed") == Value::Bool(true) {
        text.push_str(" (killed)");
    }
    if let Some(e) = exit.get("error").and_then(Value::as_str) {
        text.push_str(&format!("\nerror: {e}"));
    }
    if let Some(n) = cut {
        text.push_str(&format!("\noutput truncated: {n} bytes dropped from the middle, head and tail kept"));
    }
    text.push_str(&section("stdout", &stdout));
    text.push_str(&section("stderr", &stderr));
    ExecOutcome { structured, text }
}

fn section(name: &str, body: &str) -> String {
    if body.is_empty() {
        return format!("\n--- {name}: (empty) ---");
    }
    let newline = if body.ends_with('\n') { "" } else { "\n" };
    format!("\n--- {name} ---\n{body}{newline}--- end of {name} ---")
}

/// A code context's run, read from its NDJSON frames.
pub struct RunOutcome {
    pub structured: Value,
    pub text: String,
    /// PNG images the run displayed, base64.
    pub images: Vec<String>,
}

pub fn run(context: &str, body: &[u8]) -> RunOutcome {
    let (mut out, mut err) = (Stream::default(), Stream::default());
    let mut cut: Option<u64> = None;
    let mut results = Vec::new();
    let mut images = Vec::new();
    let mut error = Value::Null;
    let mut end = Value::Null;
    for frame in frames(body) {
        let data = || frame.get("data").and_then(Value::as_str).unwrap_or_default().to_string();
        match frame.get("type").and_then(Value::as_str) {
            Some("stdout") => out.push(cut.is_some(), &data()),
            Some("stderr") => err.push(cut.is_some(), &data()),
            Some("truncated") => cut = Some(frame.get("dropped_bytes").and_then(Value::as_u64).unwrap_or(0)),
            Some("result") => {
                let bundle = frame.get("data").and_then(Value::as_object).cloned().unwrap_or_default();
                if let Some(png) = bundle.get("image/png").and_then(Value::as_str) {
                    images.push(png.to_string());
                }
                let is_main = frame.get("is_main").and_then(Value::as_bool).unwrap_or(false);
                results.push(json!({"is_main": is_main, "data": without_images(bundle)}));
            }
            Some("error") => error = frame.clone(),
            Some("end") => end = frame.clone(),
            _ => {}
        }
    }
    let (stdout, stderr) = (out.text(cut), err.text(cut));
    let mut text = String::new();
    for r in &results {
        if let Some(plain) = r.pointer("/data/text~1plain").and_then(Value::as_str) {
            let label = if r["is_main"] == Value::Bool(true) { "result" } else { "displayed" };
            text.push_str(&format!("{label}: {plain}\n"));
        }
    }
    if !images.is_empty() {
        text.push_str(&format!("{} image(s) displayed (attached)\n", images.len()));
    }
    if !error.is_null() {
        let field = |n: &str| error.get(n).and_then(Value::as_str).unwrap_or_default().to_string();
        text.push_str(&format!("error: {}: {}\n", field("name"), field("value")));
        let tb = field("traceback");
        if !tb.is_empty() {
            text.push_str(&tb);
            if !tb.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    let flag = |n: &str| end.get(n) == Some(&Value::Bool(true));
    for (name, what) in [("timed_out", "timed out"), ("interrupted", "interrupted"), ("killed", "killed")] {
        if flag(name) {
            text.push_str(&format!("the run {what}\n"));
        }
    }
    if flag("killed") {
        text.push_str("the interpreter was restarted: the context's state is lost\n");
    }
    if let Some(n) = cut {
        text.push_str(&format!("output truncated: {n} bytes dropped from the middle, head and tail kept\n"));
    }
    text.push_str(&format!("context: {context}"));
    if let Some(n) = end.get("execution_count").and_then(Value::as_u64) {
        text.push_str(&format!(" (execution {n})"));
    }
    text.push_str(&section("stdout", &stdout));
    text.push_str(&section("stderr", &stderr));
    let structured = json!({
        "context": context,
        "results": results,
        "error": error,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": cut.is_some(),
        "end": end,
        "images": images.len(),
    });
    RunOutcome { structured, text, images }
}

fn without_images(mut bundle: Map<String, Value>) -> Map<String, Value> {
    bundle.remove("image/png");
    bundle
}

fn frames(body: &[u8]) -> impl Iterator<Item = Value> + '_ {
    body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).filter_map(|l| serde_json::from_slice(l).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_marked_where_the_tail_begins() {
        let body = br#"{"type":"started","exec_id":"x1","pid":2}
{"type":"output","stream":"stdout","seq":1,"data":"1\n2\n"}
{"type":"output","stream":"stderr","seq":2,"data":"oops\n"}
{"type":"truncated","dropped_bytes":99}
{"type":"output","stream":"stdout","seq":3,"data":"99\n100\n"}
{"type":"exit","exec_id":"x1","exit_code":3,"signal":null,"duration_ms":2,"timed_out":false,"killed":false,"bytes_dropped":99,"output_bytes":120,"error":null}
"#;
        let o = exec(body);
        assert_eq!(o.structured["exit_code"], 3);
        assert_eq!(o.structured["truncated"], true);
        let stdout = o.structured["stdout"].as_str().unwrap_or_default();
        assert!(stdout.starts_with("1\n2\n\n[... output cut here: 99 bytes"), "{stdout}");
        assert!(stdout.ends_with("tail ...]\n99\n100\n"), "{stdout}");
        assert_eq!(o.structured["stderr"], "oops\n");
        assert!(o.text.starts_with("exit code: 3\noutput truncated: 99 bytes"), "{}", o.text);
    }

    #[test]
    fn a_run_shows_its_result_and_error() {
        let body = br#"{"type":"stdout","data":"hi\n"}
{"type":"result","is_main":true,"data":{"text/plain":"2","image/png":"iVBO"}}
{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"Traceback ...\n"}
{"type":"end","execution_count":3,"duration_ms":12,"interrupted":false,"timed_out":false,"killed":false,"output_bytes":3,"bytes_dropped":0}
"#;
        let o = run("c-1", body);
        assert_eq!(o.images, vec!["iVBO".to_string()]);
        assert!(o.text.contains("result: 2\n"), "{}", o.text);
        assert!(o.text.contains("error: ZeroDivisionError: division by zero\n"), "{}", o.text);
        assert_eq!(o.structured["results"][0]["data"], json!({"text/plain": "2"}));
    }
}
