//! Samples of the wire types of code contexts (`contexts.rs`): a context, the request that makes one, a run's
//! request and every frame of its stream. `schemas` checks them with the rest.

use serde_json::{Value, json};

use super::*;

fn context_sample() -> Context {
    Context {
        id: "c0123456789ab".into(),
        sandbox_id: "0123456789ab".into(),
        language: ContextLanguage::Python,
        cwd: "/workspace/project".into(),
        state: ContextState::Busy,
        execution_count: 3,
        created_at_ms: 1_700_000_000_000,
        last_run_at_ms: Some(1_700_000_005_000),
        exec_id: "x4".into(),
    }
}

fn frames() -> Vec<RunFrame> {
    let data: BTreeMap<String, Value> = [
        ("text/plain".to_string(), json!("<Figure size 640x480 with 1 Axes>")),
        ("image/png".to_string(), json!("iVBORw0KGgo=")),
        ("application/json".to_string(), json!({"a": [1, 2]})),
    ]
    .into_iter()
    .collect();
    vec![
        RunFrame::Stdout { data: "hello\n".into() },
        RunFrame::Stderr { data: "warning\n".into() },
        RunFrame::Result { is_main: true, data },
        RunFrame::Error {
            name: "ZeroDivisionError".into(),
            value: "division by zero".into(),
            traceback: "Traceback (most recent call last):\n".into(),
        },
        RunFrame::Truncated { dropped_bytes: 4096 },
        RunFrame::End(RunEnd {
            execution_count: 3,
            duration_ms: 12,
            interrupted: true,
            timed_out: true,
            killed: false,
            output_bytes: 8192,
            bytes_dropped: 4096,
        }),
    ]
}

/// Fully populated samples, by schema name.
pub(super) fn contexts_full_samples() -> Vec<(&'static str, Value)> {
    let create = CreateContext {
        language: ContextLanguage::Javascript,
        cwd: Some("/workspace".into()),
        env: map(&[("NODE_ENV", "test")]),
    };
    let run = RunCode {
        code: "x + 1".into(),
        timeout_seconds: Some(30.0),
        max_output_bytes: Some(65536),
        env: [("GREETING".to_string(), "hej".to_string())].into(),
    };
    let mut samples = vec![
        ("Context", to_value(&context_sample())),
        ("CreateContext", to_value(&create)),
        ("RunCode", to_value(&run)),
        ("Interrupted", to_value(&Interrupted { interrupted: true })),
        ("RunEnd", to_value(&RunEnd { execution_count: 1, ..RunEnd::default() })),
    ];
    samples.extend(frames().iter().map(|f| ("RunFrame", to_value(f))));
    samples
}

/// Samples with every optional value left out, and the other values of the enums.
pub(super) fn contexts_sparse_samples() -> Vec<(&'static str, Value)> {
    let idle = Context { state: ContextState::Idle, last_run_at_ms: None, ..context_sample() };
    let mut samples = vec![
        ("Context", to_value(&idle)),
        ("RunCode", to_value(&RunCode { code: String::new(), ..RunCode::default() })),
        ("RunFrame", to_value(&RunFrame::Result { is_main: false, data: BTreeMap::new() })),
        ("RunFrame", to_value(&RunFrame::End(RunEnd::default()))),
    ];
    for language in [ContextLanguage::Python, ContextLanguage::Javascript, ContextLanguage::Bash] {
        let create = CreateContext { language, cwd: None, env: BTreeMap::new() };
        samples.push(("CreateContext", to_value(&create)));
    }
    samples
}

#[test]
fn context_requests_need_a_language_and_refuse_unknown_fields() {
    assert!(serde_json::from_str::<CreateContext>("{}").is_err());
    assert!(serde_json::from_str::<CreateContext>(r#"{"language": "cobol"}"#).is_err());
    assert!(serde_json::from_str::<CreateContext>(r#"{"language": "bash", "shell": "zsh"}"#).is_err());
    let c: CreateContext = serde_json::from_str(r#"{"language": "python"}"#).unwrap();
    assert_eq!((c.cwd, c.env.len()), (None, 0));
    assert!(serde_json::from_str::<RunCode>("{}").is_err());
    assert!(serde_json::from_str::<RunCode>(r#"{"code": "1", "timeout": 3}"#).is_err());
}
