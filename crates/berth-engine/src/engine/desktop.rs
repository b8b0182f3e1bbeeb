//! A sandbox's virtual desktop: Xvfb and a window manager started inside as its `user` when the sandbox is
//! made with `desktop`, and what agents do on it. A screenshot is a read of the screen file Xvfb keeps
//! (`-fbdir`) through the sandbox's root, decoded and encoded here (`berth_desktop`): no process inside and
//! no X connection. Input and the window list go through the X tools of the sandbox's image (`xdotool`,
//! `wmctrl`), run as its `user` like any exec. Every action is journaled as `desktop`.

use std::time::{Duration, Instant};

use berth_api::{
    ActionsDone, Cursor, Desktop, DesktopActions, DesktopInfo, ExecFrame, ExecRequest, ScreenSize, Settled, Stream,
    WaitSettled,
};

use sha2::Digest;

use super::Engine;
use crate::EngineError;

mod input;

/// The X display a desktop has inside.
pub const DISPLAY: &str = ":0";
/// Where Xvfb keeps its screen: on the sandbox's own memory file system, so that drawing never writes a disk.
const SCREEN_DIR: &str = "/dev/shm/.berth-desktop";
const SCREEN_FILE: &str = "/dev/shm/.berth-desktop/Xvfb_screen0";
/// The desktop's D-Bus session bus.
const BUS_PATH: &str = "/dev/shm/.berth-desktop/bus";
const BUS: &str = "unix:path=/dev/shm/.berth-desktop/bus";
/// How long a desktop may take to come up before the create fails.
const START_WITHIN: Duration = Duration::from_secs(30);
/// Longest wait for a settled screen a request may ask.
const MAX_WAIT_MS: u64 = 120_000;
/// Most actions in one request, and most characters typed by one.
const MAX_ACTIONS: usize = 100;
const MAX_TYPED: usize = 10_000;

/// A screenshot: a PNG, its size, and the screen's.
pub struct Shot {
    pub png: Vec<u8>,
    pub size: ScreenSize,
    pub screen: ScreenSize,
}

/// The programs a desktop needs in the sandbox's image, each with the Debian package that has it.
const NEEDS: &[(&str, &str)] = &[
    ("Xvfb", "xvfb"),
    ("xfwm4", "xfwm4"),
    ("xdotool", "xdotool"),
    ("wmctrl", "wmctrl"),
    ("dbus-daemon", "dbus-daemon"),
];

/// Check a desktop's screen size, and that the sandbox's boundary can show it.
pub(super) fn check(d: &Desktop, isolation: berth_api::Isolation) -> Result<(), EngineError> {
    // A boundary whose memory file system the daemon cannot read (gVisor's own kernel) cannot show a screen.
    if !berth_runtime::backend(isolation).supports().shm_from_host {
        return Err(EngineError::Unsupported(
            "a desktop runs behind the namespaces isolation only: behind gVisor its screen is in a file system of \
             the sandbox's own kernel, which the daemon cannot read"
                .into(),
        ));
    }
    let sides = berth_api::MIN_DESKTOP_SIDE..=berth_api::MAX_DESKTOP_SIDE;
    if !sides.contains(&d.width) || !sides.contains(&d.height) {
        return Err(EngineError::invalid(format!(
            "a desktop of {}x{} pixels: each side must be {} to {}",
            d.width,
            d.height,
            berth_api::MIN_DESKTOP_SIDE,
            berth_api::MAX_DESKTOP_SIDE
        )));
    }
    Ok(())
}

/// The fewest processes a desktop runs with: its bus, display server, window manager and the shell that
/// waits on them, with room for the X tools each action runs and a few programs.
pub const MIN_DESKTOP_PIDS: u64 = 32;

/// The least memory a desktop sandbox is made with: the display server, window manager and bus at rest
/// (about 60 MiB measured), with room for a program, plus the screen itself, which is in the sandbox's memory.
pub fn min_desktop_memory(d: &Desktop) -> u64 {
    128 * 1024 * 1024 + u64::from(d.width) * u64::from(d.height) * 4
}

/// Check that a sandbox's limits leave its desktop room to start: below them the display server would be
/// killed by the sandbox's own memory or process limit, with nothing to show for it.
pub(super) fn check_limits(d: &Desktop, memory_bytes: Option<u64>, pids: Option<u64>) -> Result<(), EngineError> {
    let least = min_desktop_memory(d);
    if let Some(m) = memory_bytes.filter(|&m| m < least) {
        return Err(EngineError::invalid(format!(
            "a {}x{} desktop needs memory_bytes of at least {least} ({} MiB), its screen and display server \
             included; {m} was asked",
            d.width,
            d.height,
            least.div_ceil(1024 * 1024)
        )));
    }
    if let Some(p) = pids.filter(|&p| p < MIN_DESKTOP_PIDS) {
        return Err(EngineError::invalid(format!(
            "a desktop needs pids of at least {MIN_DESKTOP_PIDS} (its display server, window manager, bus and \
             the tools each action runs); {p} was asked"
        )));
    }
    Ok(())
}

/// The environment every exec of a desktop sandbox gets: its display and session bus, and the browser
/// `xdg-open` starts (Debian's chromium, whose flags for a sandbox are in the image's /etc/chromium.d).
pub(super) fn env() -> [(&'static str, &'static str); 4] {
    [
        ("DISPLAY", DISPLAY),
        ("DBUS_SESSION_BUS_ADDRESS", BUS),
        ("BROWSER", "chromium"),
        // No accessibility bus: each GTK program would start one, and a call to it left unanswered stalls
        // the program for D-Bus's 25 s timeout (xfwm4's start among them).
        ("NO_AT_BRIDGE", "1"),
    ]
}

/// What one command run for the desktop said.
pub(super) struct Said {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Engine {
    /// Start the desktop of sandbox `id` and wait until its window manager has the screen.
    pub(super) async fn start_desktop(&self, id: &str, d: Desktop) -> Result<(), EngineError> {
        let missing = self.run_inside(id, None, &which_missing(), Duration::from_secs(10)).await?;
        if !missing.stdout.trim().is_empty() {
            return Err(EngineError::Unsupported(format!(
                "a desktop needs {} in the sandbox's image (Debian: apt-get install {})",
                missing.stdout.split_whitespace().collect::<Vec<_>>().join(", "),
                missing_packages(&missing.stdout)
            )));
        }
        // The X socket's directory is root's and everyone's, as on any host.
        let made = self.run_inside(id, None, &["mkdir", "-p", "-m", "1777", "/tmp/.X11-unix"], Duration::from_secs(10));
        made.await?;
        // A session bus first (xfwm4 keeps its settings through it, and quits without one), at a fixed address
        // every exec has in its environment; then the display, and the window manager once it listens, started
        // again should it end while the display lives.
        let script = format!(
            "mkdir -p {SCREEN_DIR} && \
             dbus-daemon --session --address={BUS} --nofork --nopidfile --nosyslog & \
             Xvfb {DISPLAY} -screen 0 {w}x{h}x24 -dpi 96 -nolisten tcp -fbdir {SCREEN_DIR} & x=$!; \
             i=0; until [ -S /tmp/.X11-unix/X0 ] && [ -S {BUS_PATH} ]; do \
               i=$((i+1)); [ $i -lt 600 ] || exit 1; sleep 0.05; done; \
             while kill -0 $x 2>/dev/null; do xfwm4 --compositor=off --sm-client-disable; \
               echo \"the window manager ended ($?): started again\" >&2; sleep 0.5; done & wait $x",
            w = d.width,
            h = d.height
        );
        let req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script],
            user: Some("user".into()),
            detach: true,
            ..Default::default()
        };
        let (started, _) = self.exec_because(id, req, "desktop").await?;
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let ready = self.run_inside(id, Some("user"), &["wmctrl", "-m"], Duration::from_secs(5)).await?;
            if ready.code == 0 && self.screen_file(id).await.is_ok() {
                return Ok(());
            }
            let ended = self.execs(id).await?.into_iter().find(|x| x.exec_id == started.exec_id).and_then(|x| x.result);
            if let Some(end) = ended {
                return Err(EngineError::Create(format!(
                    "the desktop's display server ended (exit {}) before it was ready: see exec {}'s log",
                    end.exit_code, started.exec_id
                )));
            }
            if Instant::now() > deadline {
                return Err(EngineError::Create(format!(
                    "the desktop was not ready within {} s: {}; its programs said: {}",
                    START_WITHIN.as_secs(),
                    ready.stderr.trim(),
                    self.log_tail(id, &started.exec_id).await
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The end of what the desktop's programs wrote, for a start that failed (the sandbox, and so the log, is
    /// removed with it).
    async fn log_tail(&self, id: &str, exec_id: &str) -> String {
        let Ok(path) = self.log_path(id, exec_id).await else { return "(no log)".into() };
        let log = tokio::fs::read(&path).await.unwrap_or_default();
        let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(800)..]).trim().replace('\n', " | ");
        if tail.is_empty() { "nothing".into() } else { tail }
    }

    /// Sandbox `id`'s desktop screen, if it has one: refused with a sentence for one made without.
    async fn desktop_of(&self, id: &str) -> Result<Desktop, EngineError> {
        let record = self.get(id).await?;
        record.desktop.ok_or_else(|| {
            EngineError::Conflict(format!(
                "sandbox {} has no desktop: make one with `berth create --desktop` (or `desktop` in the API)",
                record.id
            ))
        })
    }

    /// The bytes of the screen file of sandbox `id`, read through its root.
    async fn screen_file(&self, id: &str) -> Result<Vec<u8>, EngineError> {
        let record = self.get(id).await?;
        let Some(pid) = record.pid else {
            return Err(EngineError::Conflict(format!("sandbox {} has no running init", record.id)));
        };
        let isolation = record.isolation;
        blocking(move || {
            let fs = crate::files::SandboxFs::open(pid, isolation)?;
            match fs.get(SCREEN_FILE)? {
                crate::files::Got::File(data) => Ok(data),
                crate::files::Got::Dir(_) => {
                    Err(EngineError::Conflict(format!("{SCREEN_FILE} is a directory, not the desktop's screen")))
                }
            }
        })
        .await
    }

    /// Why a desktop's start failed: its sandbox's own end (a TTL, budget or idle timeout that ran out while it
    /// started), when that came first, is the caller's to know, not a failure of the daemon.
    pub(super) async fn ended_while_starting(&self, id: &str, failed: EngineError) -> EngineError {
        let live = |s: &Result<berth_api::SandboxState, EngineError>| {
            matches!(s, Ok(berth_api::SandboxState::Running | berth_api::SandboxState::Paused))
        };
        let mut state = self.get(id).await.map(|s| s.state);
        // An init that went away is seen by the command before its end is recorded: a moment for that.
        let deadline = Instant::now() + Duration::from_secs(2);
        while live(&state) && matches!(failed, EngineError::InitGone) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            state = self.get(id).await.map(|s| s.state);
        }
        if live(&state) {
            return failed;
        }
        // One on its way out has its receipt, with the reason, in a moment.
        let deadline = Instant::now() + Duration::from_secs(2);
        let why = loop {
            match self.receipt(id) {
                Ok(receipt) if receipt.reason == "reaped" => break "its TTL ran out".into(),
                Ok(receipt) => break receipt.reason,
                Err(_) if Instant::now() < deadline && !matches!(state, Ok(berth_api::SandboxState::Stopped)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    state = self.get(id).await.map(|s| s.state);
                }
                Err(_) => break "its TTL, a budget or its idle timeout ran out".into(),
            }
        };
        EngineError::Conflict(format!("sandbox {id} ended before its desktop was ready ({why}), and is removed"))
    }

    /// A screenshot of sandbox `id`'s desktop, made to fit `max` when given (never larger than the screen).
    pub async fn screenshot(&self, id: &str, max: Option<ScreenSize>) -> Result<Shot, EngineError> {
        self.desktop_of(id).await?;
        self.touch_id(id, "desktop").await?;
        let bytes = self.screen_file(id).await?;
        let shot = blocking(move || {
            let frame = berth_desktop::parse_xwd(&bytes).map_err(|e| EngineError::Conflict(e.to_string()))?;
            let screen = ScreenSize { width: frame.width, height: frame.height };
            let frame = match max {
                Some(m) => frame.fit(m.width, m.height),
                None => frame,
            };
            let png = berth_desktop::encode_png(&frame).map_err(|e| EngineError::Create(e.to_string()))?;
            Ok(Shot { png, size: ScreenSize { width: frame.width, height: frame.height }, screen })
        })
        .await?;
        if let Ok(live) = self.live(id).await {
            let digest: String = sha2::Sha256::digest(&shot.png).iter().map(|b| format!("{b:02x}")).collect();
            live.note(
                "desktop",
                serde_json::json!({"action": "screenshot", "max_width": max.map(|m| m.width).filter(|w| *w != u32::MAX), "max_height": max.map(|m| m.height).filter(|h| *h != u32::MAX)}),
                serde_json::json!({"width": shot.size.width, "height": shot.size.height, "bytes": shot.png.len(), "sha256": digest}),
            );
        }
        Ok(shot)
    }

    /// Sandbox `id`'s desktop as it is: its size, the pointer and the windows.
    pub async fn desktop(&self, id: &str) -> Result<DesktopInfo, EngineError> {
        let d = self.desktop_of(id).await?;
        let script = "wmctrl -l -G -p -x; echo --; xdotool getactivewindow 2>/dev/null; echo --; \
                      xdotool getmouselocation --shell";
        let said = self.run_inside(id, Some("user"), &["sh", "-c", script], Duration::from_secs(10)).await?;
        if said.code != 0 {
            return Err(EngineError::Conflict(format!("the desktop did not answer: {}", said.stderr.trim())));
        }
        let mut parts = said.stdout.split("--\n");
        let (list, active, pointer) =
            (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let active: Option<u64> = active.trim().parse().ok();
        Ok(DesktopInfo {
            width: d.width,
            height: d.height,
            display: DISPLAY.into(),
            cursor: input::cursor_of(pointer)?,
            windows: input::windows_of(list, active),
        })
    }

    /// Do `req`'s actions on sandbox `id`'s desktop, in order, journaled as one `desktop` record.
    pub async fn desktop_act(&self, id: &str, req: DesktopActions) -> Result<ActionsDone, EngineError> {
        let d = self.desktop_of(id).await?;
        if req.actions.is_empty() || req.actions.len() > MAX_ACTIONS {
            return Err(EngineError::invalid(format!("give 1 to {MAX_ACTIONS} actions, not {}", req.actions.len())));
        }
        let space = req.coordinates_in.unwrap_or(ScreenSize { width: d.width, height: d.height });
        if space.width == 0 || space.height == 0 {
            return Err(EngineError::invalid("coordinates_in must be a size of at least 1x1"));
        }
        // All are checked before the first is done.
        let mut plans = Vec::with_capacity(req.actions.len());
        for a in &req.actions {
            plans.push(input::plan(a, &d, space, MAX_TYPED)?);
        }
        self.admit_record(id, "no desktop action is done").await?;
        let mut done = 0;
        let mut failed = None;
        for plan in plans {
            let outcome = match plan {
                input::Plan::Run(argv, stdin) => {
                    let said = self.run_fed(id, Some("user"), &argv, stdin, Duration::from_secs(30)).await?;
                    input::check(&said)
                }
                input::Plan::Background(argv) => {
                    let req = ExecRequest { argv, user: Some("user".into()), detach: true, ..Default::default() };
                    self.exec_because(id, req, "desktop").await.map(|_| ())
                }
            };
            match outcome {
                Ok(()) => done += 1,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let pointer =
            self.run_inside(id, Some("user"), &["xdotool", "getmouselocation", "--shell"], Duration::from_secs(10));
        let cursor = input::cursor_of(&pointer.await?.stdout).unwrap_or(Cursor { x: 0, y: 0 });
        if let Ok(live) = self.live(id).await {
            let summary: Vec<serde_json::Value> = req.actions.iter().map(input::journaled).collect();
            let result = match &failed {
                None => serde_json::json!({"done": done, "cursor": cursor}),
                Some(e) => serde_json::json!({"done": done, "error": e.to_string()}),
            };
            live.note("desktop", serde_json::json!({"actions": summary, "coordinates_in": req.coordinates_in}), result);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(ActionsDone { done, cursor }),
        }
    }

    /// Wait until sandbox `id`'s screen has stayed the same for `w.settle_ms`, or `w.timeout_ms` ran out.
    pub async fn desktop_wait(&self, id: &str, w: WaitSettled) -> Result<Settled, EngineError> {
        self.desktop_of(id).await?;
        if w.timeout_ms > MAX_WAIT_MS || w.settle_ms > w.timeout_ms {
            return Err(EngineError::invalid(format!(
                "timeout_ms may be at most {MAX_WAIT_MS}, and settle_ms at most timeout_ms"
            )));
        }
        let start = Instant::now();
        let mut last = None;
        let mut same_since = Instant::now();
        loop {
            self.touch_id(id, "desktop").await?;
            let bytes = self.screen_file(id).await?;
            if last.as_ref() != Some(&bytes) {
                last = Some(bytes);
                same_since = Instant::now();
            }
            let waited_ms = start.elapsed().as_millis() as u64;
            if same_since.elapsed() >= Duration::from_millis(w.settle_ms) {
                return Ok(Settled { settled: true, waited_ms });
            }
            if waited_ms >= w.timeout_ms {
                return Ok(Settled { settled: false, waited_ms });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Run `argv` in sandbox `id` (as `user` when given, else its root) and collect what it says; it is killed
    /// after `timeout`.
    pub(super) async fn run_inside<S: AsRef<str>>(
        &self,
        id: &str,
        user: Option<&str>,
        argv: &[S],
        timeout: Duration,
    ) -> Result<Said, EngineError> {
        self.run_fed(id, user, argv, None, timeout).await
    }

    /// `run_inside`, with `stdin` as the command's standard input.
    async fn run_fed<S: AsRef<str>>(
        &self,
        id: &str,
        user: Option<&str>,
        argv: &[S],
        stdin: Option<String>,
        timeout: Duration,
    ) -> Result<Said, EngineError> {
        let req = ExecRequest {
            argv: argv.iter().map(|a| a.as_ref().to_string()).collect(),
            user: user.map(str::to_string),
            stdin,
            timeout_seconds: Some(timeout.as_secs_f64()),
            ..Default::default()
        };
        let (_, frames) = self.exec_because(id, req, "desktop").await?;
        let mut frames = frames.ok_or_else(|| EngineError::Create("an exec without a stream".into()))?;
        let (mut stdout, mut stderr) = (String::new(), String::new());
        while let Some(frame) = frames.recv().await {
            match frame {
                ExecFrame::Output { stream: Stream::Stdout, data, .. } => stdout.push_str(&data),
                ExecFrame::Output { stream: Stream::Stderr, data, .. } => stderr.push_str(&data),
                ExecFrame::Exit(end) => return Ok(Said { code: end.exit_code, stdout, stderr }),
                _ => {}
            }
        }
        Err(EngineError::Create("the command ended without an exit status".into()))
    }
}

/// A shell line that prints which of the programs a desktop needs are not on the image's PATH.
fn which_missing() -> [&'static str; 3] {
    ["sh", "-c", "for p in Xvfb xfwm4 xdotool wmctrl dbus-daemon; do command -v $p >/dev/null || printf '%s ' $p; done"]
}

/// The Debian packages that have the programs named in `missing`.
fn missing_packages(missing: &str) -> String {
    let names: Vec<&str> = missing.split_whitespace().collect();
    NEEDS.iter().filter(|(p, _)| names.contains(p)).map(|(_, pkg)| *pkg).collect::<Vec<_>>().join(" ")
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(f).await.map_err(|_| EngineError::Create("a desktop task failed".into()))?
}
