//! Samples of the wire types of preview URLs (`previews.rs`): a preview and the request that makes one.
//! `schemas` checks them with the rest.

use serde_json::Value;

use super::*;

/// A preview and its request, with every optional value set (`full`) or left out.
pub(super) fn preview_samples(full: bool) -> Vec<(&'static str, Value)> {
    let preview = Preview {
        id: "a1b2c3".into(),
        sandbox_id: "0123456789ab".into(),
        port: 8080,
        public: !full,
        url: "http://127.0.0.1:7777/preview/0123456789ab/8080/".into(),
        host_url: full.then(|| "http://8080-0123456789ab.preview.test:7777/".into()),
        token: full.then(|| "bpv_00ff".into()),
        created_at_ms: 1_795_945_351_531,
        expires_at_ms: full.then_some(1_795_945_411_531),
    };
    let create = CreatePreview { port: 8080, public: full, ttl_seconds: full.then_some(60.0) };
    vec![("Preview", to_value(&preview)), ("CreatePreview", to_value(&create))]
}
