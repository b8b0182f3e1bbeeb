//! A sandbox's virtual desktop on a real daemon: `berth create --desktop` starts Xvfb and a window manager
//! inside as its `user`; the sandbox's browser opens a fixed test page, a screenshot (made smaller) shows it,
//! a click at the button found in that screenshot (in the screenshot's own coordinates) changes the page,
//! and the next screenshot shows the change. Typing, keys, the window list, a wait for the screen to settle,
//! pause and resume work on it; bad input is refused with a sentence; the host's display is out of reach; every
//! action is journaled; nothing is left running once it is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::text;
use serde_json::Value;

/// A page whose one button, green, turns the page red when it is clicked.
const PAGE: &str = "<html><head><title>berth desktop test</title></head>\
<body style='margin:0;background:#ffffff'>\
<button id='b' style='position:absolute;left:260px;top:180px;width:180px;height:90px;border:0;background:#00c000' \
onclick=\"document.body.style.background='#c00000'\">go</button></body></html>";

struct Shot {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Shot {
    fn decode(png_bytes: &[u8]) -> Shot {
        let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        Shot { width: info.width, height: info.height, rgb: buf }
    }

    fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let at = (y * self.width + x) as usize * 3;
        [self.rgb[at], self.rgb[at + 1], self.rgb[at + 2]]
    }

    /// The centre of the pixels near `colour`, if there are some.
    fn find(&self, colour: [u8; 3]) -> Option<(u32, u32)> {
        let (mut n, mut sx, mut sy) = (0u64, 0u64, 0u64);
        for y in 0..self.height {
            for x in 0..self.width {
                let p = self.pixel(x, y);
                if p.iter().zip(colour).all(|(a, b)| a.abs_diff(b) < 24) {
                    n += 1;
                    sx += u64::from(x);
                    sy += u64::from(y);
                }
            }
        }
        (n > 20).then(|| ((sx / n) as u32, (sy / n) as u32))
    }

    /// The share of pixels near `colour`.
    fn share(&self, colour: [u8; 3]) -> f64 {
        let near = self.rgb.chunks(3).filter(|p| p.iter().zip(colour).all(|(a, b)| a.abs_diff(b) < 24)).count();
        near as f64 / (self.width * self.height) as f64
    }
}

fn screenshot(d: &Daemon, id: &str, query: &str) -> Shot {
    let (status, body) = d.http_bytes("GET", &format!("/v1/sandboxes/{id}/desktop/screenshot{query}"), b"");
    assert_eq!(status, 200, "{}", text(&body));
    assert_eq!(&body[..8], b"\x89PNG\r\n\x1a\n");
    Shot::decode(&body)
}

fn act(d: &Daemon, id: &str, body: Value) -> (u16, Value) {
    let (status, out) = d.http("POST", &format!("/v1/sandboxes/{id}/desktop/actions"), &body.to_string());
    (status, serde_json::from_str(&out).unwrap_or(Value::String(out)))
}

fn settle(d: &Daemon, id: &str) {
    let (status, out) = d.http("POST", &format!("/v1/sandboxes/{id}/desktop/wait"), r#"{"settle_ms": 700}"#);
    assert_eq!(status, 200, "{out}");
}

/// The desktop's windows, once one whose title has `title` shows (within a minute).
fn window_titled(d: &Daemon, id: &str, title: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, out) = d.http("GET", &format!("/v1/sandboxes/{id}/desktop"), "");
        assert_eq!(status, 200, "{out}");
        let info: Value = serde_json::from_str(&out).unwrap();
        if let Some(w) =
            info["windows"].as_array().unwrap().iter().find(|w| w["title"].as_str().unwrap().contains(title))
        {
            return w.clone();
        }
        assert!(Instant::now() < deadline, "no window titled {title:?}: {info}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Host processes of the desktop this test made (its screen size is its own).
fn desktop_processes(screen: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.starts_with("Xvfb :0") && cmd.contains(screen) {
                out.push(cmd);
            }
        }
    }
    out
}

#[test]
fn an_agent_sees_the_page_clicks_its_button_and_sees_it_change() {
    let d = Daemon::start();
    // The host's own display, which the sandbox must not reach (its abstract socket is in the host's network
    // namespace, its path socket in the host's /tmp).
    let mut host_x = Command::new("Xvfb")
        .args([":57", "-screen", "0", "320x200x24", "-nolisten", "tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb is missing: run scripts/setup, which installs the desktop's packages");
    let id = d.create(&["--desktop", "--resolution", "1024x640", "--memory", "2G"]);
    let inspected: Value = serde_json::from_slice(&d.berth(&["inspect", &id]).stdout).unwrap();
    assert_eq!(inspected["desktop"], serde_json::json!({"width": 1024, "height": 640}));

    // The display is the sandbox's own, run by its `user`; every exec has it.
    assert_eq!(d.sh(&id, "echo $DISPLAY"), ":0\n");
    let who = d.sh(&id, "ps -o user=,args= -C Xvfb");
    assert!(who.starts_with("user ") && who.contains("1024x640x24"), "{who}");
    let reach = d.sh(&id, "xdpyinfo -display :57 >/dev/null 2>&1; echo $?; ls /tmp/.X11-unix");
    assert_eq!(reach, "1\nX0\n", "the host's display is out of reach");

    // The page, opened in the sandbox's browser.
    let (status, out) = d.files("PUT", &id, "files", "/workspace/page.html", "", PAGE.as_bytes());
    assert!(status < 300, "{}", text(&out));
    d.sh(&id, "chmod 644 /workspace/page.html");
    let (status, out) =
        act(&d, &id, serde_json::json!({"actions": [{"action": "open", "target": "file:///workspace/page.html"}]}));
    assert_eq!(status, 200, "{out}");
    let window = window_titled(&d, &id, "berth desktop test");
    assert!(window["pid"].as_u64().is_some(), "{window}");
    std::thread::sleep(Duration::from_millis(500));
    settle(&d, &id);

    // A screenshot made smaller: the button is found in it, and clicked in its coordinates.
    let small = screenshot(&d, &id, "?max_width=512");
    assert_eq!((small.width, small.height), (512, 320));
    let green = [0, 192, 0];
    let (bx, by) = small.find(green).expect("the green button is on the screen");
    assert!(small.share([192, 0, 0]) < 0.01, "not red before the click");
    let click = serde_json::json!({
        "actions": [{"action": "click", "x": bx, "y": by}],
        "coordinates_in": {"width": small.width, "height": small.height},
    });
    let (status, done) = act(&d, &id, click);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["done"], 1);
    let (cx, cy) = (done["cursor"]["x"].as_i64().unwrap(), done["cursor"]["y"].as_i64().unwrap());
    assert!((cx - i64::from(bx) * 2).abs() <= 2 && (cy - i64::from(by) * 2).abs() <= 2, "scaled: {done}");
    settle(&d, &id);
    let full = screenshot(&d, &id, "");
    assert_eq!((full.width, full.height), (1024, 640));
    assert!(full.share([192, 0, 0]) > 0.3, "the page turned red: {}", full.share([192, 0, 0]));

    // Keys and typing reach the focused program: the address bar takes a new address.
    d.files("PUT", &id, "files", "/workspace/other.html", "", b"<title>second page</title>");
    d.sh(&id, "chmod 644 /workspace/other.html");
    let (status, out) = act(
        &d,
        &id,
        serde_json::json!({"actions": [
            {"action": "key", "keys": "ctrl+l"},
            {"action": "type", "text": "file:///workspace/other.html"},
            {"action": "key", "keys": "Enter"},
        ]}),
    );
    assert_eq!(status, 200, "{out}");
    window_titled(&d, &id, "second page");

    // Bad input is refused with a sentence, and nothing of it is done.
    for (body, says) in [
        (serde_json::json!({"actions": [{"action": "click", "x": 5000, "y": 1}]}), "off the 1024x640 screen"),
        (serde_json::json!({"actions": [{"action": "key", "keys": "nosuchkey"}]}), "No such key name"),
        (serde_json::json!({"actions": []}), "give 1 to 100 actions"),
        (serde_json::json!({"actions": [{"action": "fly"}]}), "unknown variant"),
        (serde_json::json!({"actions": [{"action": "open", "target": "javascript://x"}]}), "not opened"),
    ] {
        let (status, out) = act(&d, &id, body.clone());
        assert_eq!(status, 400, "{body}: {out}");
        assert!(out.to_string().contains(says), "{body}: {out}");
    }
    let (status, out) = d.http("GET", &format!("/v1/sandboxes/{id}/desktop/screenshot?max_width=0"), "");
    assert_eq!(status, 400, "{out}");

    // Pause and resume: the desktop is where it was.
    assert!(d.berth(&["pause", &id]).status.success());
    assert!(d.berth(&["resume", &id]).status.success());
    assert!(screenshot(&d, &id, "").share([255, 255, 255]) > 0.3, "the second page (white) is still shown");

    // A hibernation the desktop's programs allow or not (CRIU cannot dump xfwm4's inotify handles: the
    // sandbox then runs on as it was), the desktop answers after it.
    let _ = d.berth(&["hibernate", &id]);
    assert!(screenshot(&d, &id, "").share([255, 255, 255]) > 0.3, "still shown after a hibernate");

    // A fork (of its files) has a desktop of its own, started as at create.
    let out = d.berth(&["fork", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let child = text(&out.stdout).trim().to_string();
    assert_eq!(screenshot(&d, &child, "").width, 1024);
    assert!(d.berth(&["rm", &child]).status.success());

    // Every action is journaled: a screenshot by its size and digest, typed text by its length only.
    let journal = text(&d.berth(&["journal", &id]).stdout);
    assert!(journal.contains(r#""action":"screenshot""#) && journal.contains("sha256"), "{journal}");
    assert!(journal.contains(r#""action":"click""#), "{journal}");
    assert!(journal.contains(r#""chars":28"#) && !journal.contains("file:///workspace/other.html"), "{journal}");

    // A sandbox without a desktop says so; a desktop of an impossible size is refused at create.
    let plain = d.create(&[]);
    let (status, out) = d.http("GET", &format!("/v1/sandboxes/{plain}/desktop/screenshot"), "");
    assert_eq!(status, 409, "{out}");
    assert!(out.contains("has no desktop"), "{out}");
    let out = d.berth(&["create", "--resolution", "10x10"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("each side must be 64 to 3840"), "{}", text(&out.stderr));
    // Limits a desktop cannot start within are refused before anything is made, with what it needs.
    let ids = || -> Vec<String> {
        let list: Value = serde_json::from_str(&d.http("GET", "/v1/sandboxes", "").1).unwrap();
        let list = list.get("sandboxes").unwrap_or(&list).as_array().cloned().unwrap_or_default();
        list.iter().map(|s| s["id"].as_str().unwrap_or_default().to_string()).collect()
    };
    let before = ids();
    assert!(before.contains(&plain), "{before:?}");
    let small = r#"{"desktop":{"width":3840,"height":2160},"memory_bytes":4194304}"#;
    let (status, out) = d.http("POST", "/v1/sandboxes", small);
    assert_eq!(status, 400, "{out}");
    assert!(out.contains("needs memory_bytes of at least") && out.contains("3840x2160"), "{out}");
    let (status, out) = d.http("POST", "/v1/sandboxes", r#"{"desktop":{},"pids":1}"#);
    assert_eq!(status, 400, "{out}");
    assert!(out.contains("needs pids of at least 32"), "{out}");
    // One whose TTL runs out while its desktop starts is a conflict that says so, and is gone.
    let (status, out) = d.http("POST", "/v1/sandboxes", r#"{"desktop":{},"ttl_seconds":0.001}"#);
    assert_eq!(status, 409, "{out}");
    assert!(out.contains("ended before its desktop was ready (its TTL ran out)"), "{out}");
    assert_eq!(ids(), before, "a refused create left a sandbox");

    // A persistent desktop sandbox stopped and started again has its desktop back.
    let kept = d.create(&["--desktop", "--resolution", "1024x640", "--persistent"]);
    assert!(d.berth(&["stop", &kept]).status.success());
    let out = d.berth(&["start", &kept]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(screenshot(&d, &kept, "").height, 640);

    assert!(d.berth(&["rm", &id, &plain, &kept]).status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !desktop_processes("1024x640x24").is_empty() {
        assert!(Instant::now() < deadline, "left running: {:?}", desktop_processes("1024x640x24"));
        std::thread::sleep(Duration::from_millis(100));
    }
    host_x.kill().unwrap();
    let _ = host_x.wait();
}
