//! berth-oci and the node's berth daemon. A pod that asks for berth's node features (an annotation under
//! `berth.dev/`, passed through by containerd's `pod_annotations`) is recorded by the daemon: its sandbox
//! container registers it (`POST /v1/pods`, which makes its workspace volume), each container's create,
//! start and execs are journaled before they happen, and the deletion of its sandbox container ends it with
//! a receipt. A pod without such an annotation never reaches the daemon.
//!
//! The daemon is found at `$BERTH_SOCKET`, else at berth's default socket. What cannot be recorded is not
//! done: a create, start or exec of a recorded pod fails when the daemon does not answer. Deletes go on
//! regardless (a pod must always be removable); what the daemon missed is said on stderr.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use berth_api::{Network, Pod, PodEvent, PodRequest};
use berth_client::Client;
use berth_runtime::oci::config::{Config, Want};
use berth_runtime::oci::{Oci, OciError};

/// The annotation naming the pod's workspace volume.
pub const WORKSPACE: &str = "berth.dev/workspace";
/// The pod's egress policy: allow rules (separated by commas or spaces), or one mode (`none`, `learn`,
/// `allow_all`).
pub const EGRESS: &str = "berth.dev/egress";
/// How its proxy resolves names: `NAME=IP`, comma-separated.
pub const EGRESS_HOSTS: &str = "berth.dev/egress-hosts";
/// The prefix of the annotations that make a pod the daemon's.
const PREFIX: &str = "berth.dev/";
const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
const SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";

fn socket() -> PathBuf {
    std::env::var_os("BERTH_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(berth_client::DEFAULT_SOCKET))
}

fn wanted(annotations: &BTreeMap<String, String>) -> bool {
    annotations.keys().any(|k| k.starts_with(PREFIX))
}

/// The egress policy the annotations give, if any.
fn egress_of(a: &BTreeMap<String, String>) -> Result<Option<Network>, OciError> {
    let Some(value) = a.get(EGRESS) else {
        if a.contains_key(EGRESS_HOSTS) {
            return Err(OciError::Config(format!("{EGRESS_HOSTS} is given without {EGRESS}")));
        }
        return Ok(None);
    };
    let words: Vec<String> =
        value.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()).map(String::from).collect();
    let mut net = Network::default();
    match words.as_slice() {
        [mode] if matches!(mode.as_str(), "none" | "learn" | "allow_all") => net.mode = Some(mode.clone()),
        [] => net.mode = Some("none".into()),
        _ => net.allow = words,
    }
    for pair in
        a.get(EGRESS_HOSTS).map(String::as_str).unwrap_or("").split(',').map(str::trim).filter(|p| !p.is_empty())
    {
        let Some((name, ip)) = pair.split_once('=') else {
            return Err(OciError::Config(format!("{EGRESS_HOSTS}: {pair:?} is not NAME=IP")));
        };
        net.add_hosts.insert(name.trim().to_string(), ip.trim().to_string());
    }
    Ok(Some(net))
}

/// The daemon, for pod `pod`.
pub struct Agent {
    client: Client,
    pub pod: String,
}

fn failed(what: &str, e: berth_client::ClientError) -> OciError {
    OciError::State(format!(
        "{what}: the pod asks for berth's node features (annotations {PREFIX}*) and the berth daemon at {} \
         answered: {e}",
        socket().display()
    ))
}

impl Agent {
    fn connect(pod: &str) -> Result<Agent, OciError> {
        // No token: the pod calls are the unix socket's own.
        let client =
            Client::connect_with_token(&socket(), None).map_err(|e| failed("cannot reach the node agent", e))?;
        Ok(Agent { client, pod: pod.to_string() })
    }

    /// The agent of container `id`'s pod, if the pod is one of the daemon's: by the pod's sandbox container's
    /// annotations (its state, or `own` for the sandbox container itself), else by the container's own.
    pub fn of(root: &Path, id: &str, own: &BTreeMap<String, String>) -> Result<Option<Agent>, OciError> {
        let pod = berth_runtime::oci::pod_key(id, own);
        let leader = if pod == id { None } else { Oci::new(root).state(&pod).ok().map(|s| s.annotations) };
        if !wanted(leader.as_ref().unwrap_or(own)) {
            return Ok(None);
        }
        Agent::connect(&pod).map(Some)
    }

    /// Before container `id` is created: register the pod (its sandbox container) or look it up (any
    /// other). The pod says where the workspace to mount is and what its processes' environment gets.
    pub fn before_create(&self, id: &str, config: &Config) -> Result<Pod, OciError> {
        let a = &config.annotations;
        let body = if self.pod == id {
            let netns = match config.namespaces()?.net {
                Want::Join(path) => Some(path.display().to_string()),
                _ => None,
            };
            let req = PodRequest {
                id: id.to_string(),
                name: a.get(SANDBOX_NAME).cloned(),
                namespace: a.get(SANDBOX_NAMESPACE).cloned(),
                uid: a.get(SANDBOX_UID).cloned(),
                workspace: a.get(WORKSPACE).cloned(),
                egress: egress_of(a)?,
                netns,
            };
            self.client.post_json("/v1/pods", &req).map_err(|e| failed("cannot register the pod", e))?.1
        } else {
            let path = format!("/v1/pods/{}", self.pod);
            self.client.get(&path).map_err(|e| failed("cannot find the container's pod", e))?.1
        };
        berth_client::decode(&body).map_err(|e| failed("cannot read the pod", e))
    }

    /// Journal an event of the pod's (before what it names is done, so that nothing is left unrecorded); the
    /// pod as it is then.
    pub fn event(&self, ev: &PodEvent) -> Result<Pod, OciError> {
        let path = format!("/v1/pods/{}/events", self.pod);
        let (_, body) =
            self.client.post_json(&path, ev).map_err(|e| failed(&format!("cannot journal {}", ev.kind), e))?;
        berth_client::decode(&body).map_err(|e| failed("cannot read the pod", e))
    }

    /// The container was created: journal it with its name, cgroup and program.
    pub fn created(&self, id: &str, config: &Config, cgroup: &Path) -> Result<Pod, OciError> {
        self.event(&PodEvent {
            kind: "container_created".into(),
            container: id.to_string(),
            name: Some(config.annotations.get(CONTAINER_NAME).cloned().unwrap_or_default()),
            cgroup: Some(cgroup.display().to_string()),
            args: config.process.as_ref().map(|p| p.args.clone()),
            pid: None,
        })
    }

    /// The container was deleted: journal it, and end the pod when it is the pod's sandbox container. Said
    /// on stderr, not failed: the container is gone whatever the daemon says.
    pub fn deleted(&self, id: &str) {
        if let Err(e) = self.event(&PodEvent::about("container_deleted", id)) {
            eprintln!("{}: {e}", crate::oci::NAME);
        }
        if self.pod == id
            && let Err(e) = self.client.delete(&format!("/v1/pods/{id}"))
        {
            eprintln!("{}: the pod {id} is gone but the berth daemon did not close it: {e}", crate::oci::NAME);
        }
    }

    /// A container of the pod was not made after all: a pod registered for it ends too.
    pub fn abandon(&self, id: &str) {
        if self.pod == id {
            let _ = self.client.delete(&format!("/v1/pods/{id}"));
        }
    }
}
