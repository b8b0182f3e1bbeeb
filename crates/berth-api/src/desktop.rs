//! A sandbox's virtual desktop: the screen it is made with, what an agent does on it, and what it reads back.

use serde::{Deserialize, Serialize};

/// The smallest and largest side of a desktop's screen, in pixels: at most a 4K screen's width, so that the
/// largest screen's file (4 bytes a pixel) stays within what one read of a sandbox's file may be (64 MiB).
pub const MIN_DESKTOP_SIDE: u32 = 64;
pub const MAX_DESKTOP_SIDE: u32 = 3840;

/// `desktop` in `POST /v1/sandboxes`: a display server at this size, with a window manager, run inside as the
/// sandbox's `user` (its display is `:0`, in every exec's `DISPLAY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Desktop {
    #[serde(default = "default_width")]
    pub width: u32,
    #[serde(default = "default_height")]
    pub height: u32,
}

fn default_width() -> u32 {
    1280
}

fn default_height() -> u32 {
    800
}

impl Default for Desktop {
    fn default() -> Desktop {
        Desktop { width: default_width(), height: default_height() }
    }
}

/// A mouse button.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    #[default]
    Left,
    Middle,
    Right,
}

/// One thing done on a desktop. Coordinates are pixels from the screen's top left, or in the space of the
/// request's `coordinates_in` (a screenshot's size) when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DesktopAction {
    /// Move the pointer.
    Move { x: i32, y: i32 },
    /// Click `count` times (2: a double click), at `x`,`y` if given, else where the pointer is.
    Click {
        #[serde(default)]
        x: Option<i32>,
        #[serde(default)]
        y: Option<i32>,
        #[serde(default)]
        button: Button,
        #[serde(default = "one")]
        count: u32,
    },
    /// Press a button at `from`, move to `to` holding it, release it there.
    Drag {
        from: [i32; 2],
        to: [i32; 2],
        #[serde(default)]
        button: Button,
    },
    /// Press or release a button alone (for a drag of the agent's own making).
    MouseDown {
        #[serde(default)]
        button: Button,
    },
    MouseUp {
        #[serde(default)]
        button: Button,
    },
    /// Turn the wheel: `dy` notches down (negative: up), `dx` right (negative: left), at `x`,`y` if given.
    Scroll {
        #[serde(default)]
        x: Option<i32>,
        #[serde(default)]
        y: Option<i32>,
        #[serde(default)]
        dx: i32,
        #[serde(default)]
        dy: i32,
    },
    /// Type text as the keyboard would (any Unicode).
    Type { text: String },
    /// Press a key or a chord and let it go: X keysym names joined by `+` (`Return`, `ctrl+a`,
    /// `ctrl+shift+t`, `alt+F4`); the common names of other tools (`enter`, `esc`, `cmd`, `pagedown`, …)
    /// are taken too.
    Key { keys: String },
    /// Open a file inside the sandbox or a URL with its default program (the browser for a URL).
    Open { target: String },
    /// Start a program on the desktop, in the background: its argument vector.
    Launch { argv: Vec<String> },
    /// Raise and focus a window (its id from the window list).
    Focus { window: String },
}

fn one() -> u32 {
    1
}

/// `POST /v1/sandboxes/{id}/desktop/actions`: actions done in order; the first that fails stops the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopActions {
    pub actions: Vec<DesktopAction>,
    /// The size of the screenshot the coordinates were read from (one made smaller with `max_width`): they
    /// are scaled to the screen's own.
    #[serde(default)]
    pub coordinates_in: Option<ScreenSize>,
}

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenSize {
    pub width: u32,
    pub height: u32,
}

/// What the actions did: how many ran, and where the pointer is after them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionsDone {
    pub done: usize,
    pub cursor: Cursor,
}

/// Where the pointer is, in the screen's pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub x: i32,
    pub y: i32,
}

/// `GET /v1/sandboxes/{id}/desktop`: the desktop as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesktopInfo {
    /// Its screen's size.
    pub width: u32,
    pub height: u32,
    /// The X display inside (`:0`).
    pub display: String,
    pub cursor: Cursor,
    /// Its windows, bottom to top.
    pub windows: Vec<Window>,
}

/// A window on a desktop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The X window id (`0x…`), as `focus` takes it.
    pub id: String,
    pub title: String,
    /// Its WM_CLASS (`instance.Class`).
    pub class: String,
    /// The pid inside the sandbox of the program that shows it, when it says.
    pub pid: Option<u32>,
    pub x: i32,
    pub y: i32,
    pub width: u32,
    pub height: u32,
    /// Whether it has the focus.
    pub focused: bool,
}

/// `POST /v1/sandboxes/{id}/desktop/wait`: wait until the screen has not changed for `settle_ms`, at most
/// `timeout_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitSettled {
    #[serde(default = "default_settle")]
    pub settle_ms: u64,
    #[serde(default = "default_wait")]
    pub timeout_ms: u64,
}

fn default_settle() -> u64 {
    500
}

fn default_wait() -> u64 {
    10_000
}

impl Default for WaitSettled {
    fn default() -> WaitSettled {
        WaitSettled { settle_ms: default_settle(), timeout_ms: default_wait() }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    /// False when it ran out of time with the screen still changing.
    pub settled: bool,
    pub waited_ms: u64,
}
