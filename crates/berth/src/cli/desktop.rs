//! `berth desktop`: look at a sandbox's virtual desktop and act on it (made with `berth create --desktop`).

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum DesktopCommand {
    /// Save a PNG of the screen (to FILE, or - for stdout), made smaller to fit --max-width/--max-height.
    Screenshot {
        id: String,
        #[arg(short, long, value_name = "FILE", default_value = "screenshot.png")]
        output: PathBuf,
        #[arg(long, value_name = "PIXELS")]
        max_width: Option<u32>,
        #[arg(long, value_name = "PIXELS")]
        max_height: Option<u32>,
    },
    /// Show the screen's size, the pointer and the windows.
    Show {
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move the pointer to X Y.
    Move { id: String, x: i32, y: i32 },
    /// Click at X Y (or where the pointer is).
    Click {
        id: String,
        x: Option<i32>,
        y: Option<i32>,
        #[arg(long, value_enum, default_value = "left")]
        button: ButtonArg,
        /// A double click.
        #[arg(long)]
        double: bool,
    },
    /// Press at X1 Y1, move to X2 Y2 holding the button, release.
    Drag { id: String, x1: i32, y1: i32, x2: i32, y2: i32 },
    /// Turn the wheel where the pointer is: --dy notches down (negative: up), --dx right (negative: left).
    Scroll {
        id: String,
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        dy: i32,
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        dx: i32,
    },
    /// Type TEXT as the keyboard would.
    Type { id: String, text: String },
    /// Press a key or a chord: Return, ctrl+a, alt+F4.
    Key { id: String, keys: String },
    /// Open a file in the sandbox or a URL (in its browser).
    Open { id: String, target: String },
    /// Start a program on the desktop: berth desktop launch ID -- xterm.
    Launch {
        id: String,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Raise and focus a window (its id from `berth desktop show`).
    Focus { id: String, window: String },
    /// Wait until the screen has not changed for --settle, at most --timeout.
    Wait {
        id: String,
        #[arg(long, value_parser = humantime_ms, default_value = "500ms")]
        settle: u64,
        #[arg(long, value_parser = humantime_ms, default_value = "10s")]
        timeout: u64,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ButtonArg {
    Left,
    Middle,
    Right,
}

impl From<ButtonArg> for berth_api::Button {
    fn from(b: ButtonArg) -> berth_api::Button {
        match b {
            ButtonArg::Left => berth_api::Button::Left,
            ButtonArg::Middle => berth_api::Button::Middle,
            ButtonArg::Right => berth_api::Button::Right,
        }
    }
}

/// `WIDTHxHEIGHT`, such as 1280x800.
pub fn parse_size(s: &str) -> Result<berth_api::ScreenSize, String> {
    let bad = || format!("{s:?} is not a size: WIDTHxHEIGHT, such as 1280x800");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    Ok(berth_api::ScreenSize { width: w.parse().map_err(|_| bad())?, height: h.parse().map_err(|_| bad())? })
}

/// A duration as milliseconds: 500ms, 2s, 1.5s.
fn humantime_ms(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a duration: such as 500ms or 2s");
    let (n, scale) = match s.strip_suffix("ms") {
        Some(n) => (n, 1.0),
        None => (s.strip_suffix('s').unwrap_or(s), 1000.0),
    };
    let v: f64 = n.parse().map_err(|_| bad())?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(bad());
    }
    Ok((v * scale).round() as u64)
}
