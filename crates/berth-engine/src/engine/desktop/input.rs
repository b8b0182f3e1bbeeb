//! Desktop actions as the X tools inside do them: each checked and turned into a command line (`xdotool`,
//! `wmctrl`, `xdg-open`, chromium), and what those tools print read back.

use berth_api::{Button, Cursor, Desktop, DesktopAction, ScreenSize, Window};

use super::Said;
use crate::EngineError;

/// How an action is done: a command waited for, or one left running on the desktop.
pub(super) enum Plan {
    /// With data for its stdin (typed text, kept out of the exec's argument vector and so of the journal).
    Run(Vec<String>, Option<String>),
    Background(Vec<String>),
}

/// The browser a URL opens in: Debian's wrapper, which adds the flags a sandbox's image gives it.
const BROWSER: &[&str] = &["chromium"];

/// Check `action` and make its command, its coordinates given in `space` and done on `desktop`'s screen.
pub(super) fn plan(
    action: &DesktopAction,
    desktop: &Desktop,
    space: ScreenSize,
    max_typed: usize,
) -> Result<Plan, EngineError> {
    let at = |x: i32, y: i32| point(x, y, desktop, space);
    let xdotool = |args: Vec<String>| Plan::Run([vec!["xdotool".to_string()], args].concat(), None);
    Ok(match action {
        DesktopAction::Move { x, y } => {
            let (x, y) = at(*x, *y)?;
            xdotool(strings(&["mousemove", &x, &y]))
        }
        DesktopAction::Click { x, y, button, count } => {
            if !(1..=3).contains(count) {
                return Err(EngineError::invalid(format!("count is 1 to 3 clicks, not {count}")));
            }
            let mut args = moved_to(*x, *y, desktop, space)?;
            args.extend(strings(&["click", "--repeat", &count.to_string(), "--delay", "80", button_of(*button)]));
            xdotool(args)
        }
        DesktopAction::Drag { from, to, button } => {
            let (fx, fy) = at(from[0], from[1])?;
            let (tx, ty) = at(to[0], to[1])?;
            let b = button_of(*button);
            // In steps, with pauses: programs that track a drag see it start, move and end.
            xdotool(strings(&[
                "mousemove",
                &fx,
                &fy,
                "mousedown",
                b,
                "sleep",
                "0.05",
                "mousemove",
                &tx,
                &ty,
                "sleep",
                "0.05",
                "mouseup",
                b,
            ]))
        }
        DesktopAction::MouseDown { button } => xdotool(strings(&["mousedown", button_of(*button)])),
        DesktopAction::MouseUp { button } => xdotool(strings(&["mouseup", button_of(*button)])),
        DesktopAction::Scroll { x, y, dx, dy } => {
            if *dx == 0 && *dy == 0 {
                return Err(EngineError::invalid("a scroll needs dx or dy"));
            }
            if dx.unsigned_abs() > 100 || dy.unsigned_abs() > 100 {
                return Err(EngineError::invalid("a scroll is at most 100 notches each way"));
            }
            let mut args = moved_to(*x, *y, desktop, space)?;
            // X's wheel is buttons 4 (up), 5 (down), 6 (left) and 7 (right).
            for (n, button) in [(*dy, if *dy < 0 { "4" } else { "5" }), (*dx, if *dx < 0 { "6" } else { "7" })] {
                if n != 0 {
                    args.extend(strings(&[
                        "click",
                        "--repeat",
                        &n.unsigned_abs().to_string(),
                        "--delay",
                        "30",
                        button,
                    ]));
                }
            }
            xdotool(args)
        }
        DesktopAction::Type { text } => {
            if text.is_empty() {
                return Err(EngineError::invalid("type needs some text"));
            }
            if text.chars().count() > max_typed {
                return Err(EngineError::invalid(format!("type takes at most {max_typed} characters at once")));
            }
            Plan::Run(strings(&["xdotool", "type", "--delay", "8", "--file", "-"]), Some(text.clone()))
        }
        DesktopAction::Key { keys } => xdotool(strings(&["key", "--clearmodifiers", "--", &chord(keys)?])),
        DesktopAction::Open { target } => {
            if target.is_empty() || target.starts_with('-') || target.contains('\0') {
                return Err(EngineError::invalid(format!("{target:?} is not a file or a URL to open")));
            }
            match target.split_once("://") {
                Some(("http" | "https" | "file", _)) => {
                    Plan::Background([strings(BROWSER), vec![target.clone()]].concat())
                }
                Some((scheme, _)) => {
                    return Err(EngineError::invalid(format!(
                        "{scheme}: URLs are not opened: http, https and file are"
                    )));
                }
                None => Plan::Background(strings(&["xdg-open", target])),
            }
        }
        DesktopAction::Launch { argv } => {
            if argv.first().is_none_or(|a| a.is_empty()) {
                return Err(EngineError::invalid("launch needs a program to start"));
            }
            Plan::Background(argv.clone())
        }
        DesktopAction::Focus { window } => {
            window_id(window)?;
            Plan::Run(strings(&["wmctrl", "-i", "-a", window]), None)
        }
    })
}

/// Whether a tool's run went well, as a user would be told if not.
pub(super) fn check(said: &Said) -> Result<(), EngineError> {
    // xdotool says so, but exits 0, for a key name it does not know.
    if let Some(line) = said.stderr.lines().find(|l| l.contains("No such key name")) {
        return Err(EngineError::invalid(format!("{}: use X keysym names (Return, ctrl+a, F5)", line.trim())));
    }
    match said.code {
        0 => Ok(()),
        code => {
            Err(EngineError::Conflict(format!("the desktop refused the action (exit {code}): {}", said.stderr.trim())))
        }
    }
}

/// The pointer's place from `xdotool getmouselocation --shell` (`X=…`, `Y=…` lines).
pub(super) fn cursor_of(out: &str) -> Result<Cursor, EngineError> {
    let value = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.trim().parse().ok())
    };
    match (value("X"), value("Y")) {
        (Some(x), Some(y)) => Ok(Cursor { x, y }),
        _ => Err(EngineError::Conflict(format!("the desktop did not say where its pointer is: {out:?}"))),
    }
}

/// The windows in `wmctrl -l -G -p -x`'s lines (`id desktop pid x y w h class host title…`), the one whose
/// id is `active` focused.
pub(super) fn windows_of(list: &str, active: Option<u64>) -> Vec<Window> {
    list.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let id = f.next()?.to_string();
            let _desk = f.next()?;
            let pid: i64 = f.next()?.parse().ok()?;
            let x = f.next()?.parse().ok()?;
            let y = f.next()?.parse().ok()?;
            let width = f.next()?.parse().ok()?;
            let height = f.next()?.parse().ok()?;
            let class = f.next()?.to_string();
            let _host = f.next();
            let title = f.collect::<Vec<_>>().join(" ");
            let number = u64::from_str_radix(id.trim_start_matches("0x"), 16).ok();
            Some(Window {
                focused: number.is_some() && number == active,
                id,
                title,
                class,
                pid: u32::try_from(pid).ok().filter(|p| *p > 0),
                x,
                y,
                width,
                height,
            })
        })
        .collect()
}

/// What the journal keeps of an action: all of it but typed text, of which only its length.
pub(super) fn journaled(action: &DesktopAction) -> serde_json::Value {
    match action {
        DesktopAction::Type { text } => serde_json::json!({"action": "type", "chars": text.chars().count()}),
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn button_of(b: Button) -> &'static str {
    match b {
        Button::Left => "1",
        Button::Middle => "2",
        Button::Right => "3",
    }
}

/// `mousemove X Y` when a place is given (both or neither).
fn moved_to(x: Option<i32>, y: Option<i32>, d: &Desktop, space: ScreenSize) -> Result<Vec<String>, EngineError> {
    match (x, y) {
        (Some(x), Some(y)) => {
            let (x, y) = point(x, y, d, space)?;
            Ok(strings(&["mousemove", &x, &y]))
        }
        (None, None) => Ok(Vec::new()),
        _ => Err(EngineError::invalid("give both x and y, or neither (where the pointer is)")),
    }
}

/// A point given in `space`, on the screen, as xdotool's arguments.
fn point(x: i32, y: i32, d: &Desktop, space: ScreenSize) -> Result<(String, String), EngineError> {
    if x < 0 || y < 0 || x as u32 >= space.width || y as u32 >= space.height {
        return Err(EngineError::invalid(format!("({x}, {y}) is off the {}x{} screen", space.width, space.height)));
    }
    let scale = |v: i32, from: u32, to: u32| (i64::from(v) * i64::from(to) + i64::from(from) / 2) / i64::from(from);
    let sx = scale(x, space.width, d.width).min(i64::from(d.width) - 1);
    let sy = scale(y, space.height, d.height).min(i64::from(d.height) - 1);
    Ok((sx.to_string(), sy.to_string()))
}

/// A window id as wmctrl and xdotool take it: `0x` and hexadecimal digits.
fn window_id(w: &str) -> Result<(), EngineError> {
    match w.strip_prefix("0x") {
        Some(hex) if !hex.is_empty() && hex.len() <= 8 && hex.chars().all(|c| c.is_ascii_hexdigit()) => Ok(()),
        _ => Err(EngineError::invalid(format!("{w:?} is not a window id (0x… from the window list)"))),
    }
}

/// A chord (`ctrl+shift+t`) as xdotool's keysym names, the names other tools use mapped to X's.
fn chord(keys: &str) -> Result<String, EngineError> {
    let parts: Vec<&str> = keys.split('+').collect();
    // A lone "+" is the plus key.
    if keys == "+" {
        return Ok("plus".into());
    }
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        let ok = !p.is_empty() && p.len() <= 32 && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let single = p.chars().count() == 1 && !p.chars().any(char::is_control);
        if !ok && !single {
            return Err(EngineError::invalid(format!(
                "{keys:?} is not a key or a chord: X keysym names joined by + (Return, ctrl+a, alt+F4)"
            )));
        }
        out.push(keysym(p));
    }
    Ok(out.join("+"))
}

fn keysym(name: &str) -> String {
    let known = match name.to_ascii_lowercase().as_str() {
        "enter" | "return" => "Return",
        "esc" | "escape" => "Escape",
        "ctrl" | "control" => "ctrl",
        "alt" | "option" => "alt",
        "shift" => "shift",
        "cmd" | "command" | "super" | "meta" | "win" | "windows" => "super",
        "backspace" => "BackSpace",
        "tab" => "Tab",
        "space" => "space",
        "delete" | "del" => "Delete",
        "insert" => "Insert",
        "home" => "Home",
        "end" => "End",
        "pageup" | "page_up" => "Prior",
        "pagedown" | "page_down" => "Next",
        "up" | "arrowup" => "Up",
        "down" | "arrowdown" => "Down",
        "left" | "arrowleft" => "Left",
        "right" | "arrowright" => "Right",
        "capslock" => "Caps_Lock",
        _ => "",
    };
    match known {
        "" => name.to_string(),
        k => k.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const D: Desktop = Desktop { width: 1280, height: 800 };
    const SCREEN: ScreenSize = ScreenSize { width: 1280, height: 800 };

    fn argv(p: Plan) -> Vec<String> {
        match p {
            Plan::Run(a, _) | Plan::Background(a) => a,
        }
    }

    #[test]
    fn coordinates_are_checked_and_scaled_from_the_screenshot() {
        let click = DesktopAction::Click { x: Some(320), y: Some(200), button: Button::Right, count: 2 };
        let half = ScreenSize { width: 640, height: 400 };
        let a = argv(plan(&click, &D, half, 10).unwrap());
        assert_eq!(a, ["xdotool", "mousemove", "640", "400", "click", "--repeat", "2", "--delay", "80", "3"]);
        let off = DesktopAction::Move { x: 1280, y: 0 };
        let e = plan(&off, &D, SCREEN, 10).err().unwrap().to_string();
        assert!(e.contains("off the 1280x800 screen"), "{e}");
        assert!(plan(&DesktopAction::Move { x: -1, y: 0 }, &D, SCREEN, 10).is_err());
        let one = DesktopAction::Click { x: Some(1), y: None, button: Button::Left, count: 1 };
        assert!(plan(&one, &D, SCREEN, 10).is_err(), "x without y");
    }

    #[test]
    fn chords_take_common_names_and_refuse_what_is_not_a_key() {
        assert_eq!(chord("ctrl+a").unwrap(), "ctrl+a");
        assert_eq!(chord("Enter").unwrap(), "Return");
        assert_eq!(chord("cmd+shift+PageDown").unwrap(), "super+shift+Next");
        assert_eq!(chord("+").unwrap(), "plus");
        assert_eq!(chord("ctrl+-").unwrap(), "ctrl+-");
        for bad in ["", "ctrl+", "a b", "x\ny", "ctrl++"] {
            assert!(chord(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn typing_is_bounded_and_journaled_without_its_text() {
        let t = DesktopAction::Type { text: "secret".into() };
        assert_eq!(journaled(&t), serde_json::json!({"action": "type", "chars": 6}));
        assert!(plan(&DesktopAction::Type { text: "x".repeat(11) }, &D, SCREEN, 10).is_err());
        let typed = plan(&t, &D, SCREEN, 10).unwrap();
        assert!(matches!(&typed, Plan::Run(a, Some(text)) if text == "secret" && !a.contains(text)), "on stdin");
    }

    #[test]
    fn opening_takes_files_and_web_urls_only() {
        let url = DesktopAction::Open { target: "https://example.test/".into() };
        assert!(matches!(plan(&url, &D, SCREEN, 10).unwrap(), Plan::Background(a) if a[0].ends_with("chromium")));
        let file = DesktopAction::Open { target: "/workspace/a.txt".into() };
        assert_eq!(argv(plan(&file, &D, SCREEN, 10).unwrap()), ["xdg-open", "/workspace/a.txt"]);
        for bad in ["javascript://x", "-x", ""] {
            assert!(plan(&DesktopAction::Open { target: bad.into() }, &D, SCREEN, 10).is_err(), "{bad}");
        }
        assert!(plan(&DesktopAction::Focus { window: "0x1;rm".into() }, &D, SCREEN, 10).is_err());
    }

    #[test]
    fn tool_output_is_read() {
        assert_eq!(cursor_of("X=12\nY=34\nSCREEN=0\nWINDOW=5\n").unwrap(), Cursor { x: 12, y: 34 });
        assert!(cursor_of("").is_err());
        let list =
            "0x0020000c  0 22731  20   68   484  316  xterm.XTerm  berth user@box: ~\n0x00400003 0 0 0 0 10 10 x.Y h\n";
        let w = windows_of(list, Some(0x0020000c));
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].pid, w[0].x, w[0].width, w[0].focused), (Some(22731), 20, 484, true));
        assert_eq!(w[0].title, "user@box: ~");
        assert_eq!((w[1].pid, w[1].focused), (None, false));
    }
}
