//! Samples of the wire types of a sandbox's desktop (`desktop.rs`): its screen, the actions done on it and
//! what is read back. `schemas` checks them with the rest.

use serde_json::Value;

use super::*;

/// The schemas of the desktop's actions, one a variant, in the order of the samples'.
pub(super) const ACTION_VARIANTS: [&str; 11] = [
    "DesktopActionMove",
    "DesktopActionClick",
    "DesktopActionDrag",
    "DesktopActionMouseDown",
    "DesktopActionMouseUp",
    "DesktopActionScroll",
    "DesktopActionType",
    "DesktopActionKey",
    "DesktopActionOpen",
    "DesktopActionLaunch",
    "DesktopActionFocus",
];

/// The desktop's types, with every optional value set (`full`) or left out.
pub(super) fn desktop_samples(full: bool) -> Vec<(&'static str, Value)> {
    let at = |v: i32| full.then_some(v);
    let size = ScreenSize { width: 640, height: 400 };
    let actions = vec![
        DesktopAction::Move { x: 10, y: 20 },
        DesktopAction::Click { x: at(1), y: at(2), button: Button::Right, count: 2 },
        DesktopAction::Drag { from: [1, 2], to: [3, 4], button: Button::Middle },
        DesktopAction::MouseDown { button: Button::Left },
        DesktopAction::MouseUp { button: Button::Left },
        DesktopAction::Scroll { x: at(5), y: at(6), dx: -1, dy: 3 },
        DesktopAction::Type { text: "hello".into() },
        DesktopAction::Key { keys: "ctrl+a".into() },
        DesktopAction::Open { target: "https://example.test/".into() },
        DesktopAction::Launch { argv: vec!["xterm".into()] },
        DesktopAction::Focus { window: "0x00600002".into() },
    ];
    let window = Window {
        id: "0x00600002".into(),
        title: "page - Chromium".into(),
        class: "chromium.Chromium".into(),
        pid: full.then_some(68),
        x: 10,
        y: 10,
        width: 1004,
        height: 620,
        focused: full,
    };
    let cursor = Cursor { x: 362, y: 320 };
    let info = DesktopInfo { width: 1024, height: 640, display: ":0".into(), cursor, windows: vec![window.clone()] };
    let mut out = vec![
        ("Desktop", to_value(&Desktop { width: 1024, height: 640 })),
        ("ScreenSize", to_value(&size)),
        (
            "DesktopActions",
            to_value(&DesktopActions { actions: actions.clone(), coordinates_in: full.then_some(size) }),
        ),
        ("ActionsDone", to_value(&ActionsDone { done: 3, cursor })),
        ("Cursor", to_value(&cursor)),
        ("Window", to_value(&window)),
        ("DesktopInfo", to_value(&info)),
        ("WaitSettled", to_value(&WaitSettled { settle_ms: 700, timeout_ms: 5000 })),
        ("Settled", to_value(&Settled { settled: full, waited_ms: 812 })),
    ];
    out.extend(ACTION_VARIANTS.into_iter().zip(&actions).map(|(name, a)| (name, to_value(a))));
    out
}
