//! The shim: one small, single-threaded supervisor process per sandbox.
//!
//! It builds the sandbox, then serves a `SOCK_SEQPACKET` socket at `<root>/run/shims/<id>.sock` where the
//! daemon asks for the sandbox's record, its init's control socket, or its teardown. It exits when the
//! sandbox is destroyed or its init dies; it does not exit when the daemon does.

use std::io::{BufRead, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use berth_runtime::{Runtime, Sandbox, spec::Spec};
use rustix::event::{PollFd, PollFlags};
use serde::{Deserialize, Serialize};

/// What the daemon hands a new shim on its stdin: the runtime spec and the API record to keep.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShimStart {
    pub name: String,
    pub image: String,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_millis: Option<u64>,
    pub mounts: Vec<berth_api::Mount>,
    /// The sandbox as the API shows it (id and pid are filled in by the shim).
    pub record: berth_api::Sandbox,
    /// The environment of every exec, kept (in memory only) for the next daemon.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// The id to run under (chosen by the daemon, which prepares the sandbox's storage first).
    #[serde(default)]
    pub id: Option<String>,
    /// The storage volume of the sandbox's writable state.
    #[serde(default)]
    pub state: Option<PathBuf>,
    /// Named volumes: host directory, sandbox path, read-only.
    #[serde(default)]
    pub volumes: Vec<(PathBuf, String, bool)>,
    /// Files handed to the sandbox at /run/egress (name, contents).
    #[serde(default)]
    pub files: Vec<(String, String)>,
    /// The authority the sandbox's proxy signs intercepted connections with (certificate, key; PEM), kept in
    /// memory only, for the next daemon.
    #[serde(default)]
    pub authority: Option<(String, String)>,
    /// Built ahead for the warm pool: it listens at `<root>/run/pool/<id>.sock` until a `claim` makes it a
    /// sandbox like any other, and tears itself down if its daemon goes first (its stdin closes).
    #[serde(default)]
    pub pooled: bool,
    /// Wake the sandbox hibernated in this directory instead of building it from its image.
    #[serde(default)]
    pub restore: Option<PathBuf>,
    /// The CRIU binary to restore with, where the backend needs one (found on the PATH when unset).
    #[serde(default)]
    pub criu: Option<PathBuf>,
    /// Its version, as the daemon checked it (asked of the binary again when unset).
    #[serde(default)]
    pub criu_version: Option<String>,
    /// For a restore: CRIU's names (`pipe:[INODE]`) of the pipes whose other ends the daemon held, given in
    /// their place the new pipes' ends the shim was started with on descriptors 3, 4, … in this order.
    #[serde(default)]
    pub pipes: Vec<String>,
    /// The image in `restore` is another sandbox's, which runs on: this one is a fork of it with its
    /// processes, under its own id, host ids, cgroup and name.
    #[serde(default)]
    pub fork: bool,
    /// The boundary to build it behind.
    #[serde(default)]
    pub isolation: berth_api::Isolation,
}

/// The first line a shim prints: the sandbox, or why it could not be built.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShimReady {
    Ready {
        record: Box<berth_api::Sandbox>,
    },
    /// `invalid`: the request was at fault (a bad limit, a missing mount source), not berth.
    Failed {
        message: String,
        #[serde(default)]
        invalid: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ShimRequest {
    /// The sandbox's record.
    Info,
    /// A descriptor for init's control socket (attached to the reply).
    Control,
    /// Tear the sandbox down, reply with what was done, and exit.
    Destroy,
    /// A pooled sandbox becomes this one: its record (its host named after `record.name`), its exec
    /// environment and its proxy's authority; its socket moves to `<root>/run/shims/<id>.sock`.
    Claim {
        record: Box<berth_api::Sandbox>,
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        authority: Option<(String, String)>,
    },
    /// Write the sandbox's processes to `dir` as its backend does (they end), reply, and exit; on failure the
    /// sandbox runs on and the shim keeps serving. `criu`: where the backend needs it.
    Hibernate {
        dir: PathBuf,
        #[serde(default)]
        criu: Option<PathBuf>,
        #[serde(default)]
        criu_version: Option<String>,
    },
    /// Write the sandbox's processes to `dir` and leave them running (a fork with its processes), where its
    /// backend can; a cgroup the daemon froze for it stays frozen.
    Checkpoint {
        dir: PathBuf,
        #[serde(default)]
        criu: Option<PathBuf>,
        #[serde(default)]
        criu_version: Option<String>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum ShimReply {
    Info {
        record: Box<berth_api::Sandbox>,
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        authority: Option<(String, String)>,
    },
    Control,
    Claimed {
        record: Box<berth_api::Sandbox>,
    },
    Destroyed {
        teardown: berth_api::Teardown,
    },
    Hibernated {
        /// Bytes of the image on disk.
        bytes: u64,
        teardown: berth_api::Teardown,
    },
    Checkpointed {
        /// Bytes of the image on disk.
        bytes: u64,
    },
    Error {
        message: String,
    },
}

/// Where the shim of sandbox `id` listens.
pub fn socket_path(root: &Path, id: &str) -> PathBuf {
    shims_dir(root).join(format!("{id}.sock"))
}

pub fn shims_dir(root: &Path) -> PathBuf {
    root.join("run").join("shims")
}

/// Where the shim of pooled sandbox `id` listens until it is claimed.
pub fn pool_socket_path(root: &Path, id: &str) -> PathBuf {
    pool_dir(root).join(format!("{id}.sock"))
}

pub fn pool_dir(root: &Path) -> PathBuf {
    root.join("run").join("pool")
}

/// The shim's main: returns the process exit code.
pub fn main(root: &Path) -> i32 {
    let mut out = std::io::stdout();
    let mut line = String::new();
    let start: ShimStart = match std::io::stdin().lock().read_line(&mut line).map(|_| serde_json::from_str(&line)) {
        Ok(Ok(s)) => s,
        _ => {
            return report(
                &mut out,
                ShimReady::Failed { message: "the shim got no valid start message".into(), invalid: false },
            );
        }
    };
    let (mut sandbox, record) = match build(root, &start) {
        Ok(r) => r,
        Err((message, invalid)) => return report(&mut out, ShimReady::Failed { message, invalid }),
    };
    let (path, dir) = match start.pooled {
        true => (pool_socket_path(root, sandbox.id()), pool_dir(root)),
        false => (socket_path(root, sandbox.id()), shims_dir(root)),
    };
    let listener = match std::fs::create_dir_all(dir)
        .map_err(|e| e.to_string())
        .and_then(|()| berth_sys::fd::seqpacket_listen(&path).map_err(|e| berth_runtime::error_chain(&e)))
    {
        Ok(l) => l,
        Err(message) => {
            let _ = sandbox.destroy();
            return report(&mut out, ShimReady::Failed { message, invalid: false });
        }
    };
    // The daemon that asked for it died while it was being built: nobody will adopt a sandbox that a new
    // daemon may already have counted as lost, so it goes (the new daemon waits for that; see recovery).
    if !report_ready(&mut out, ShimReady::Ready { record: Box::new(record.clone()) }) {
        let _ = std::fs::remove_file(&path);
        let _ = sandbox.destroy();
        return 125;
    }
    let mut held = Held {
        record,
        env: start.env,
        authority: start.authority,
        socket: path,
        pooled: start.pooled,
        root: root.to_path_buf(),
    };
    let code = serve(&mut sandbox, &listener, &mut held);
    let _ = std::fs::remove_file(&held.socket);
    // Dropping the sandbox tears it down if `serve` did not.
    drop(sandbox);
    code
}

/// Hand `ready` to the daemon; whether it could be written (not when the daemon is gone).
fn report_ready(out: &mut std::io::Stdout, ready: ShimReady) -> bool {
    serde_json::to_writer(&mut *out, &ready)
        .map_err(std::io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .is_ok()
}

fn report(out: &mut std::io::Stdout, ready: ShimReady) -> i32 {
    let failed = matches!(ready, ShimReady::Failed { .. });
    let _ = serde_json::to_writer(&mut *out, &ready).map(|()| out.write_all(b"\n"));
    let _ = out.flush();
    if failed { 125 } else { 0 }
}

/// What the shim holds for the daemon besides the sandbox.
struct Held {
    record: berth_api::Sandbox,
    env: std::collections::BTreeMap<String, String>,
    authority: Option<(String, String)>,
    /// Where it listens now.
    socket: PathBuf,
    /// In the warm pool, not yet claimed.
    pooled: bool,
    root: PathBuf,
}

impl Held {
    /// Become the sandbox the daemon names: its host renamed (unless already so named), its record, and its
    /// socket moved where every sandbox's is.
    fn claim(
        &mut self,
        sandbox: &Sandbox,
        mut record: berth_api::Sandbox,
        env: std::collections::BTreeMap<String, String>,
        authority: Option<(String, String)>,
    ) -> Result<berth_api::Sandbox, String> {
        if !self.pooled || record.id != sandbox.id() {
            return Err("this sandbox is not in the warm pool, or is another".into());
        }
        if record.name != self.record.name {
            sandbox.rename_host(&record.name).map_err(|e| berth_runtime::error_chain(&e))?;
        }
        let to = socket_path(&self.root, sandbox.id());
        std::fs::create_dir_all(shims_dir(&self.root)).map_err(|e| e.to_string())?;
        std::fs::rename(&self.socket, &to).map_err(|e| format!("move the shim's socket: {e}"))?;
        record.pid = Some(sandbox.pid());
        record.landlock = Some(sandbox.landlock().to_string());
        crate::engine::lifecycle::built(&mut record);
        (self.record, self.env, self.authority, self.socket, self.pooled) = (record, env, authority, to, false);
        Ok(self.record.clone())
    }
}

impl Held {
    /// Write the sandbox's processes to `dir` (they end) and tear the rest down: the image's size and what
    /// was done.
    fn hibernate(
        &self,
        sandbox: &mut Sandbox,
        dir: &Path,
        criu: Option<&Path>,
        version: Option<&str>,
    ) -> Result<(u64, berth_api::Teardown), String> {
        let criu = self.dumpable(sandbox, criu, version)?;
        let owner = berth_runtime::reservation_owner(&self.root, &self.record.id);
        let dump = berth_runtime::Dump { criu: criu.as_ref(), owner: &owner };
        let (manifest, t) = sandbox.hibernate(dir, &dump).map_err(|e| berth_runtime::error_chain(&e))?;
        let teardown = berth_api::Teardown {
            id: self.record.id.clone(),
            steps: t.steps,
            leftovers: t.leftovers,
            ..Default::default()
        };
        Ok((manifest.bytes, teardown))
    }
}

/// CRIU as the daemon found and checked it (its path and version), or found again here when not given; only
/// where `backend` needs it.
fn needed_criu(
    backend: &dyn berth_runtime::Backend,
    path: Option<&Path>,
    version: Option<&str>,
) -> Result<Option<berth_runtime::checkpoint::Criu>, String> {
    if !backend.supports().needs_criu {
        return Ok(None);
    }
    match (path, version) {
        (Some(path), Some(version)) => {
            Ok(Some(berth_runtime::checkpoint::Criu { path: path.to_path_buf(), version: version.to_string() }))
        }
        (path, _) => berth_runtime::checkpoint::Criu::find(path).map(Some),
    }
}

impl Held {
    /// What this sandbox's backend dumps it with, or why it is not dumped.
    fn dumpable(
        &self,
        sandbox: &Sandbox,
        criu: Option<&Path>,
        version: Option<&str>,
    ) -> Result<Option<berth_runtime::checkpoint::Criu>, String> {
        if self.pooled {
            return Err("a sandbox of the warm pool is not dumped".into());
        }
        needed_criu(sandbox.backend(), criu, version)
    }

    /// Write the sandbox's processes to `dir`, leaving them running: the image's size.
    fn checkpoint(
        &self,
        sandbox: &Sandbox,
        dir: &Path,
        criu: Option<&Path>,
        version: Option<&str>,
    ) -> Result<u64, String> {
        let criu = self.dumpable(sandbox, criu, version)?;
        let owner = berth_runtime::reservation_owner(&self.root, &self.record.id);
        let dump = berth_runtime::Dump { criu: criu.as_ref(), owner: &owner };
        sandbox.checkpoint(dir, &dump).map(|m| m.bytes).map_err(|e| berth_runtime::error_chain(&e))
    }
}

fn build(root: &Path, start: &ShimStart) -> Result<(Sandbox, berth_api::Sandbox), (String, bool)> {
    let mut mounts = Vec::new();
    for m in &start.mounts {
        let text = format!("{}:{}{}", m.host, m.target, if m.readonly { ":ro" } else { "" });
        mounts.push(berth_runtime::spec::parse_mount(&text).map_err(|e| (e.to_string(), true))?);
    }
    let spec = Spec {
        name: start.name.clone(),
        image: start.image.clone(),
        limits: berth_runtime::cgroup::Limits {
            memory_bytes: start.memory_bytes,
            pids: start.pids,
            cpu_millis: start.cpu_millis,
        },
        mounts,
        id: start.id.clone(),
        state: start.state.clone(),
        // Pooled, it may yet be claimed by a persistent sandbox.
        volatile: !start.record.persistent && !start.pooled,
        files: start.files.clone(),
        isolation: start.isolation,
        volumes: start
            .volumes
            .iter()
            .map(|(source, target, readonly)| berth_runtime::spec::VolumeMount {
                source: source.clone(),
                target: target.clone(),
                readonly: *readonly,
            })
            .collect(),
    };
    let runtime = Runtime::open(root).map_err(|e| (berth_runtime::error_chain(&e), false))?;
    let backend = berth_runtime::backend(start.isolation);
    let built = match &start.restore {
        Some(_) if start.fork && !backend.supports().checkpoint_running => {
            return Err((format!("a {} sandbox cannot be forked with its processes yet", backend.name()), true));
        }
        Some(dir) => {
            let criu =
                needed_criu(backend, start.criu.as_deref(), start.criu_version.as_deref()).map_err(|m| (m, false))?;
            // None for a fork, nor for a backend whose wake makes no pipes anew.
            let pipes = handed_pipes(&start.pipes).map_err(|m| (m, false))?;
            runtime.restore(&spec, dir, berth_runtime::Wake { criu: criu.as_ref(), pipes: &pipes, fork: start.fork })
        }
        None => runtime.create(&spec),
    };
    let sandbox = built.map_err(|e| {
        use berth_runtime::RuntimeError as E;
        let invalid = matches!(
            e,
            E::Spec(_)
                | E::MountSource { .. }
                | E::RootOwnedMount { .. }
                | E::UnknownImage { .. }
                | E::TooManyMounts { .. }
                | E::Running { .. }
                | E::ForeignState { .. }
                | E::IsolationCannot { .. }
        );
        (berth_runtime::error_chain(&e), invalid)
    })?;
    let mut record = start.record.clone();
    record.id = sandbox.id().to_string();
    record.pid = Some(sandbox.pid());
    record.landlock = Some(sandbox.landlock().to_string());
    crate::engine::lifecycle::built(&mut record);
    Ok((sandbox, record))
}

/// The pipes' ends the daemon handed over on descriptors 3, 4, …, each with the name CRIU gives the pipe it
/// stands in for.
fn handed_pipes(names: &[String]) -> Result<Vec<(String, OwnedFd)>, String> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let fd = berth_sys::fd::inherited(3 + i as i32)
            .ok_or_else(|| format!("the shim was not handed the pipe that stands in for {name}"))?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC).map_err(|e| format!("keep a pipe: {e}"))?;
        out.push((name.clone(), fd));
    }
    Ok(out)
}

/// Answer the daemon until the sandbox is destroyed (0), its init dies (1), or, while pooled, its daemon
/// goes (1).
fn serve(sandbox: &mut Sandbox, listener: &OwnedFd, held: &mut Held) -> i32 {
    let stdin = std::io::stdin();
    loop {
        let (conn_ready, init_gone, daemon_gone) = {
            let pidfd = sandbox.pidfd();
            let mut fds = vec![PollFd::new(listener, PollFlags::IN), PollFd::new(&pidfd, PollFlags::IN)];
            // A pooled sandbox's daemon holds its stdin open: end of file, or anything else on it, means the
            // daemon is gone and nobody will claim it.
            if held.pooled {
                fds.push(PollFd::new(&stdin, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return 1,
            }
            (
                !fds[0].revents().is_empty(),
                !fds[1].revents().is_empty(),
                fds.get(2).is_some_and(|f| !f.revents().is_empty()),
            )
        };
        if init_gone || daemon_gone {
            return 1;
        }
        if !conn_ready {
            continue;
        }
        let Ok(conn) = berth_sys::fd::accept(listener.as_fd()) else { continue };
        // One connection at a time, a few requests each: the daemon is the only client.
        while let Ok((req, _)) = berth_init::protocol::recv::<ShimRequest>(conn.as_fd()) {
            let send = |reply: &ShimReply, fds: &[std::os::fd::BorrowedFd<'_>]| {
                berth_init::protocol::send(conn.as_fd(), reply, fds)
            };
            let sent = match req {
                ShimRequest::Info => send(
                    &ShimReply::Info {
                        record: Box::new(held.record.clone()),
                        env: held.env.clone(),
                        authority: held.authority.clone(),
                    },
                    &[],
                ),
                ShimRequest::Control => send(&ShimReply::Control, &[sandbox.control()]),
                ShimRequest::Claim { record, env, authority } => match held.claim(sandbox, *record, env, authority) {
                    Ok(record) => send(&ShimReply::Claimed { record: Box::new(record) }, &[]),
                    Err(message) => send(&ShimReply::Error { message }, &[]),
                },
                ShimRequest::Hibernate { dir, criu, criu_version } => {
                    match held.hibernate(sandbox, &dir, criu.as_deref(), criu_version.as_deref()) {
                        Ok((bytes, teardown)) => {
                            let _ = std::fs::remove_file(&held.socket);
                            let _ = send(&ShimReply::Hibernated { bytes, teardown }, &[]);
                            return 0;
                        }
                        Err(message) => send(&ShimReply::Error { message }, &[]),
                    }
                }
                ShimRequest::Checkpoint { dir, criu, criu_version } => {
                    match held.checkpoint(sandbox, &dir, criu.as_deref(), criu_version.as_deref()) {
                        Ok(bytes) => send(&ShimReply::Checkpointed { bytes }, &[]),
                        Err(message) => send(&ShimReply::Error { message }, &[]),
                    }
                }
                ShimRequest::Destroy => {
                    let t = sandbox.teardown();
                    // Gone before the answer, so whoever asked finds nothing of it left.
                    let _ = std::fs::remove_file(&held.socket);
                    let teardown = berth_api::Teardown {
                        id: held.record.id.clone(),
                        steps: t.steps,
                        leftovers: t.leftovers,
                        ..Default::default()
                    };
                    let _ = send(&ShimReply::Destroyed { teardown }, &[]);
                    return 0;
                }
            };
            if sent.is_err() {
                break;
            }
        }
    }
}
