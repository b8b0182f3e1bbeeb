//! `GET /v1/sandboxes/{id}/watch`: what changes under a directory of a running sandbox, as it happens.

use serde::{Deserialize, Serialize};

/// What happened. The stream's first event is `ready` (every change from then on is reported); its last,
/// when the sandbox's side ends it, is `end` with a `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    Ready,
    /// Made (or moved in from outside the watch).
    Create,
    /// Its content changed (consecutive writes to one file are one event).
    Write,
    /// Removed (or moved out of the watch).
    Remove,
    /// Moved within the watch: `from` is its old path.
    Rename,
    /// Its mode, owner or times changed.
    Chmod,
    /// Events were lost (the watcher did not keep up): look at the directory again.
    Overflow,
    End,
}

/// One line of the watch's stream (every field is written; init's own lines leave out what is empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchEvent {
    #[serde(rename = "type")]
    pub kind: WatchKind,
    /// Relative to the watched directory (`a/b.txt`); null for `ready`, `overflow` and `end`.
    #[serde(default)]
    pub path: Option<String>,
    /// A `rename`'s old path, relative to the watched directory.
    #[serde(default)]
    pub from: Option<String>,
    /// It is a directory.
    #[serde(default)]
    pub dir: bool,
    /// Why an `end` came: the directory was removed, the sandbox stopped or hibernated.
    #[serde(default)]
    pub reason: Option<String>,
}

impl WatchEvent {
    pub fn of(kind: WatchKind) -> WatchEvent {
        WatchEvent { kind, path: None, from: None, dir: false, reason: None }
    }

    pub fn end(reason: impl Into<String>) -> WatchEvent {
        WatchEvent { reason: Some(reason.into()), ..WatchEvent::of(WatchKind::End) }
    }
}
