//! The tools' arguments: what a model fills in, with the JSON schema it reads (doc comments become the
//! properties' descriptions).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// A name for the sandbox (1-63 letters, digits, '-' and '.'), unique on this host; also its host name.
    /// Default: berth-<id>.
    pub name: Option<String>,
    /// The image its root file system is built from: "host" (the default) or an imported image's name.
    pub image: Option<String>,
    /// Memory limit in bytes (at least 4 MiB = 4194304), with no swap. Default: no limit.
    pub memory_bytes: Option<u64>,
    /// CPU limit in cores, such as 0.5 or 2. Default: no limit.
    pub cpus: Option<f64>,
    /// Most processes and threads at once. Default: 4096.
    pub pids: Option<u64>,
    /// Remove the sandbox this many seconds after it was created.
    pub ttl_seconds: Option<f64>,
    /// Remove the sandbox after this many seconds without an exec.
    pub idle_timeout_seconds: Option<f64>,
    /// Keep its files through stop, start and a host reboot, until it is removed.
    pub persistent: Option<bool>,
    /// Disk quota for its files in bytes (at least 16 MiB), where the host's storage pool has quotas.
    pub disk_bytes: Option<u64>,
    /// Environment variables for every exec in it.
    pub env: Option<BTreeMap<String, String>>,
    /// Free-form labels kept in its record.
    pub labels: Option<BTreeMap<String, String>>,
    /// Network destinations it may reach (egress is denied by default), such as "pypi.org:443",
    /// "*.github.com" or "files.pythonhosted.org:443". Giving any turns egress on for those only.
    pub allow_net: Option<Vec<String>>,
    /// Destinations it may never reach, whatever else allows them.
    pub deny_net: Option<Vec<String>>,
    /// Egress mode: "none" (nothing gets out), "enforce" (only allow_net), "learn" (everything, recorded, so
    /// that net_suggest can propose an allowlist) or "allow_all". Default: "enforce" when allow_net is given,
    /// else "none".
    pub net_mode: Option<String>,
    /// Start from this snapshot's files (id or name) instead of the image's clean state.
    pub from_snapshot: Option<String>,
    /// The boundary it runs behind: "namespaces" (the host kernel's) or "gvisor" (a kernel of its own, for
    /// code nobody vetted). Default: the daemon's.
    pub isolation: Option<String>,
    /// Give it a virtual desktop (a screen with a window manager, and a browser to open pages in), to see with
    /// desktop_screenshot and use with desktop_action. Default: false.
    pub desktop: Option<bool>,
    /// The desktop's screen width in pixels (64 to 3840; default 1280). Implies desktop.
    pub desktop_width: Option<u32>,
    /// The desktop's screen height in pixels (64 to 3840; default 800). Implies desktop.
    pub desktop_height: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExposeArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// The port a server in the sandbox listens on, on its own 127.0.0.1.
    pub port: u16,
    /// Reachable without a token (default false: the URL carries a token for this port only).
    pub public: Option<bool>,
    /// How long the URL works (default: until the sandbox is removed).
    pub ttl_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// The command and its arguments, run directly (no shell), such as ["python3", "-c", "print(1)"].
    /// Give this or `command`.
    pub argv: Option<Vec<String>>,
    /// A shell command line, run with `sh -c` (pipes, redirections, && and globs work). Give this or `argv`.
    pub command: Option<String>,
    /// Working directory inside the sandbox (made if missing). Default: /workspace.
    pub workdir: Option<String>,
    /// Extra environment variables for this command.
    pub env: Option<BTreeMap<String, String>>,
    /// Text given to the command on its standard input.
    pub stdin: Option<String>,
    /// Kill the command and everything it started after this many seconds (exit code 124). Default: 300.
    pub timeout_seconds: Option<f64>,
    /// Most bytes of output to return (at least 64; default 65536). Past it the middle is dropped: the head
    /// and the most recent tail are kept, with a marker where the cut is.
    pub max_output_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// The code to run. The value of a trailing expression is returned as the result.
    pub code: String,
    /// "python" (the default), "javascript" or "bash".
    pub language: Option<String>,
    /// The id of the code context to run in (from an earlier run_code). Default: the sandbox's first context
    /// of this language, made when there is none. Variables, imports and the working directory persist
    /// between runs in one context.
    pub context: Option<String>,
    /// Run in a new context (fresh state) instead of an existing one.
    pub new_context: Option<bool>,
    /// Interrupt the run after this many seconds. Default: 30.
    pub timeout_seconds: Option<f64>,
    /// Most bytes of output to return (default 65536); past it the middle is dropped, head and tail kept.
    pub max_output_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Absolute path of the file inside the sandbox, such as /workspace/app.py.
    pub path: String,
    /// Most bytes to return (default 262144); a longer file is cut there, and the answer says so.
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWriteArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Absolute path of the file inside the sandbox; an existing file is replaced.
    pub path: String,
    /// The file's whole content.
    pub content: String,
    /// True when `content` is base64 (for binary files). Default: false (UTF-8 text).
    pub base64: Option<bool>,
    /// Permission bits in octal, such as "755" for a script. Default: 644 for a new file, unchanged otherwise.
    pub mode: Option<String>,
    /// Make missing parent directories. Default: true.
    pub parents: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileListArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Absolute path of the directory. Default: /workspace.
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileMoveArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Absolute path of what to move: a file, a symbolic link (moved itself) or a directory.
    pub from: String,
    /// Its new absolute path; the parent directory must exist.
    pub to: String,
    /// Replace what is at `to` (a file or link, or an empty directory). Default: false (an existing `to` is an
    /// error).
    pub overwrite: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWatchArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Absolute path of the directory to watch. Default: /workspace.
    pub path: Option<String>,
    /// Watch every directory under it too. Default: true.
    pub recursive: Option<bool>,
    /// Give up after this many seconds (at most 600). Default: 30.
    pub timeout_seconds: Option<f64>,
    /// Return this many seconds after the last change, once there was one. Default: 1.
    pub quiet_seconds: Option<f64>,
    /// Return once this many changes were seen. Default: 200.
    pub max_events: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// A name for the snapshot, to restore it by. Default: none (use its id).
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// The snapshot's id or name.
    pub snapshot: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// How many copies to make (1 to 64). Default: 1.
    pub count: Option<u64>,
    /// Fork the running processes too: each copy continues the programs running in the sandbox (a server,
    /// a background job, an interpreter's memory) from this instant. Default: false.
    pub with_processes: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// What to compare with: a snapshot's id or name, "parent" (the snapshot it was forked or made from) or
    /// "image" (the image's clean state). Default: parent when it has one, else image.
    pub against: Option<String>,
    /// Return a git-style patch of the changes instead of the list of changed paths. Default: false.
    pub patch: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetRulesArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// Rules: a host name ("api.github.com"), optionally with a port ("pypi.org:443"), a "*." glob
    /// ("*.npmjs.org") or an IP address.
    pub rules: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetLogArgs {
    /// The sandbox's id or name (a removed sandbox's id works too).
    pub sandbox: String,
    /// Only the most recent this many attempts. Default: 100.
    pub last: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotArgs {
    /// The sandbox's id or name (one created with a desktop).
    pub sandbox: String,
    /// Make the screenshot at most this many pixels wide, its proportions kept. Default: it fits within
    /// 1280x800 (a screen that already fits is shot at its own size).
    pub max_width: Option<u32>,
    /// Make the screenshot at most this many pixels high, its proportions kept.
    pub max_height: Option<u32>,
}

/// What a desktop action is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Move the pointer to x,y.
    Move,
    /// Click at x,y (or where the pointer is): button, count (2 for a double click).
    Click,
    /// Press a button at `from`, move to `to` holding it, release it there.
    Drag,
    /// Press a button alone (for a drag of your own making).
    MouseDown,
    /// Release a button.
    MouseUp,
    /// Turn the wheel at x,y (or where the pointer is): dy notches down (negative: up), dx right.
    Scroll,
    /// Type `text` as the keyboard would.
    Type,
    /// Press a key or a chord in `keys`.
    Key,
    /// Open `target`, a file inside the sandbox or a URL, with its default program (the browser for a URL).
    Open,
    /// Start the program `argv` on the desktop, in the background.
    Launch,
    /// Raise and focus the window whose id is `window` (from desktop_info).
    Focus,
}

/// One action on a desktop, as berth's API takes it: `action` says which, and only its own fields are given.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopActionArg {
    pub action: ActionKind,
    /// For move, click and scroll: pixels from the left, in the screenshot's coordinates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x: Option<i32>,
    /// For move, click and scroll: pixels from the top, in the screenshot's coordinates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y: Option<i32>,
    /// For click, drag, mouse_down and mouse_up: "left" (the default), "middle" or "right".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub button: Option<String>,
    /// For click: how many clicks (2 for a double click). Default: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// For drag: where it starts, [x, y].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<[i32; 2]>,
    /// For drag: where it ends, [x, y].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<[i32; 2]>,
    /// For scroll: notches right (negative: left).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dx: Option<i32>,
    /// For scroll: notches down (negative: up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dy: Option<i32>,
    /// For type: the text (any Unicode; use a key action for Enter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// For key: X key names joined by '+', such as "Return", "ctrl+a", "ctrl+shift+t", "alt+F4" ("enter",
    /// "esc", "cmd", "pagedown" are taken too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<String>,
    /// For open: a path inside the sandbox or a URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// For launch: the program and its arguments, such as ["xterm"].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// For focus: the window's id ("0x…"), from desktop_info.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SizeArg {
    pub width: u32,
    pub height: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopActionArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// The actions, done in order (1 to 100); every one is checked before the first is done, and the first
    /// that fails stops the rest.
    pub actions: Vec<DesktopActionArg>,
    /// The size of the screenshot the coordinates were read from, as desktop_screenshot gave it: the
    /// coordinates are scaled from it to the screen's. Leave it out only for coordinates in the screen's own
    /// pixels.
    pub coordinates_in: Option<SizeArg>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DesktopWaitArgs {
    /// The sandbox's id or name.
    pub sandbox: String,
    /// How long the screen must stay the same, in milliseconds. Default: 500.
    pub settle_ms: Option<u64>,
    /// The longest wait, in milliseconds (at most 120000). Default: 10000.
    pub timeout_ms: Option<u64>,
}
