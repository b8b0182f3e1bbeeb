//! Pods: on a Kubernetes node, berth-oci builds each container itself (its first process must be the shim's
//! descendant) and tells this daemon what it did, so that a pod still gets what berth keeps for a sandbox: a
//! workspace volume from the pool (made at the pod's first start, kept after it), a hash-chained journal of
//! its containers and execs, a copy of the workspace taken with the pod frozen (`fork`), and a receipt.
//!
//! A pod is recorded in the store and journaled under `<root>/pods/<id>.jsonl`; its receipt is
//! `<root>/pods/<id>.receipt.json`. These calls are the node's own (the unix socket only): they name host
//! paths and cgroups.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use berth_api::{Pod, PodContainer, PodEvent, PodFork, PodReceipt, PodRequest, Volume};

use super::{Engine, now_ms};
use crate::EngineError;
use crate::journal::{self, Journal};

/// Pod and container ids: berth-oci's container ids (what containerd gives).
fn check_pod_id(id: &str) -> Result<(), EngineError> {
    berth_runtime::oci::check_id(id).map_err(|e| EngineError::invalid(format!("as a pod or container id, {e}")))
}

/// A container's cgroup as berth-oci reports it: a relative path without `..`, outside berth's own tree.
fn check_cgroup(path: &str) -> Result<(), EngineError> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.is_relative()
        && p.components().all(|c| matches!(c, std::path::Component::Normal(_)))
        && !p.starts_with("berth");
    match ok {
        true => Ok(()),
        false => Err(EngineError::invalid(format!(
            "{path:?} is not a container's cgroup (a relative path below the hierarchy's root, outside berth/)"
        ))),
    }
}

/// What the daemon holds of live pods besides their records.
#[derive(Default)]
pub(super) struct PodState {
    /// Serialises pods' registrations and forks with the making and removal of volumes.
    pub(super) lock: tokio::sync::Mutex<()>,
    /// Each live pod's own lock, for the changes to its record and journal.
    pub(super) locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each live pod's journal, written through one handle.
    pub(super) journals: Mutex<HashMap<String, Arc<Mutex<PodJournal>>>>,
    /// The task taking each egress proxy's connections (see `pod_egress`).
    pub(super) proxies: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
    /// Pods' records on their way to the cluster's database, in order (see `cluster`).
    pub(super) shares: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<super::cluster::Share>>,
}

/// A live pod's journal, and whether the pod's removal closed it (then its proxy's last attempts are not
/// written after the receipt's last record).
pub(super) struct PodJournal {
    pub(super) journal: Journal,
    pub(super) closed: bool,
}

/// Who owns a pod's workspace volumes: the pods of its Kubernetes namespace.
fn owner_of(namespace: Option<&str>) -> String {
    format!("pods/{}", namespace.unwrap_or_default())
}

impl Engine {
    fn pods_dir(&self) -> PathBuf {
        self.root.join("pods")
    }

    pub(super) fn pod_journal_path(&self, id: &str) -> PathBuf {
        self.pods_dir().join(format!("{id}.jsonl"))
    }

    fn pod_receipt_path(&self, id: &str) -> PathBuf {
        self.pods_dir().join(format!("{id}.receipt.json"))
    }

    /// The lock of live pod `id`'s changes (its record and journal; taken only once the pod is known live,
    /// and forgotten at its removal, so that no lock is kept for a pod that is not); `PodState::lock` is taken before it where volumes
    /// are made.
    fn pod_lock_of(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.pod_state.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(id.to_string()).or_default())
    }

    /// Pod `id`'s journal, open while the pod lives: its calls and its proxy write through this one handle.
    pub(super) fn pod_journal_of(&self, id: &str) -> Result<Arc<Mutex<PodJournal>>, EngineError> {
        let mut open = self.pod_state.journals.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(j) = open.get(id) {
            return Ok(Arc::clone(j));
        }
        let journal = Journal::open_bounded(&self.pod_journal_path(id), self.bounds.max_journal_bytes / 2)
            .map_err(EngineError::Log)?;
        let j = Arc::new(Mutex::new(PodJournal { journal, closed: false }));
        open.insert(id.to_string(), Arc::clone(&j));
        Ok(j)
    }

    /// Record an action of pod `id`'s. What cannot be recorded is not done: a journal that cannot be written,
    /// is full, or was closed is an error, and the caller does nothing.
    fn pod_journal(
        &self,
        id: &str,
        action: &str,
        args: serde_json::Value,
        result: serde_json::Value,
    ) -> Result<(), EngineError> {
        let j = self.pod_journal_of(id)?;
        let mut j = j.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if j.closed {
            return Err(EngineError::Conflict(format!("pod {id} was removed: see GET /v1/pods/{id}/receipt")));
        }
        if j.journal.bytes() >= self.bounds.max_journal_bytes {
            return Err(EngineError::Conflict(format!(
                "pod {id}'s journal is full ({} bytes, berth daemon --max-journal-bytes): it is not {action}",
                self.bounds.max_journal_bytes
            )));
        }
        j.journal.flush_dropped("pod").map_err(EngineError::Log)?;
        j.journal.append(&super::actor(), action, args, result).map_err(EngineError::Log)?;
        Ok(())
    }

    /// The pod `id` as recorded, live or removed.
    pub fn pod(&self, id: &str) -> Result<Pod, EngineError> {
        check_pod_id(id)?;
        self.store.pod(id)?.ok_or_else(|| EngineError::NoPod(id.to_string()))
    }

    fn live_pod(&self, id: &str) -> Result<Pod, EngineError> {
        let pod = self.pod(id)?;
        match pod.removed_at_ms {
            None => Ok(pod),
            Some(_) => Err(EngineError::Conflict(format!("pod {id} was removed: see GET /v1/pods/{id}/receipt"))),
        }
    }

    /// Every pod recorded: live ones first.
    pub fn pods(&self) -> Result<Vec<Pod>, EngineError> {
        Ok(self.store.pods()?)
    }

    /// The volumes live pods mount, as (volume, pod) pairs.
    pub(crate) fn pod_volume_users(&self) -> Result<Vec<(String, String)>, EngineError> {
        Ok(self.store.live_pods()?.into_iter().filter_map(|p| Some((p.workspace?, format!("pod:{}", p.id)))).collect())
    }

    /// Record a pod whose sandbox container is being created, with its workspace volume (made if there is
    /// none of that name). Asked again for the same live pod, the same record is the answer.
    pub async fn register_pod(&self, req: PodRequest) -> Result<Pod, EngineError> {
        check_pod_id(&req.id)?;
        // Registrations are one at a time: no event of this pod can come before its record.
        let _one = self.pod_state.lock.lock().await;
        if let Some(pod) = self.store.pod(&req.id)? {
            return match pod.removed_at_ms {
                None if pod.workspace == req.workspace => Ok(pod),
                None => Err(EngineError::Conflict(format!(
                    "pod {} is already recorded with the workspace {:?}",
                    req.id, pod.workspace
                ))),
                Some(_) => Err(EngineError::Conflict(format!("pod {} was removed; a pod id is used once", req.id))),
            };
        }
        // The policy as the proxy will hold it (a rule berth cannot use is a 400 before anything is done).
        let egress = match &req.egress {
            Some(net) => {
                let policy = super::network::policy_of(net)?;
                if req.netns.is_none() {
                    return Err(EngineError::invalid(
                        "an egress policy needs the pod's network namespace (netns): a pod on the host's network \
                         (hostNetwork) cannot have one",
                    ));
                }
                self.check_pod_policy(&policy)?;
                Some(super::network::network_of(&policy))
            }
            None => None,
        };
        let owner = owner_of(req.namespace.as_deref());
        let mut made = false;
        if let Some(name) = &req.workspace {
            berth_runtime::spec::check_name(name)
                .map_err(|e| EngineError::invalid(format!("the workspace volume's name: {e}")))?;
            match self.store.volume_owner(name)? {
                // A pod names only its own namespace's workspaces, never a sandbox's volume.
                Some(theirs) if theirs.as_deref() != Some(owner.as_str()) => {
                    return Err(EngineError::Conflict(format!(
                        "the volume {name:?} is not a workspace of the pods of namespace {:?}: a pod may name only \
                         its own namespace's workspaces",
                        req.namespace.as_deref().unwrap_or_default()
                    )));
                }
                // Already this namespace's: claimed again (where there is a cluster, it may be another node's).
                Some(_) => self.claim_volume(name).await?,
                None => {
                    self.create_volume_locked(name, Some(&owner)).await?;
                    made = true;
                }
            }
        }
        let env = match egress {
            Some(_) => super::network::proxy_env(super::pod_egress::PROXY_PORT)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
            None => Vec::new(),
        };
        let pod = Pod {
            id: req.id.clone(),
            name: req.name,
            namespace: req.namespace,
            uid: req.uid,
            workspace_path: req.workspace.as_ref().map(|w| self.volume_dir(w).display().to_string()),
            workspace: req.workspace,
            egress,
            netns: req.netns,
            env,
            created_at_ms: now_ms(),
            removed_at_ms: None,
            containers: Vec::new(),
        };
        if let (Some(net), Some(netns)) = (&pod.egress, &pod.netns) {
            self.attach_pod_egress(&pod.id, netns, net).await?;
        }
        let recorded = self
            .pod_journal(
                &pod.id,
                "pod_created",
                serde_json::json!({
                    "name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "workspace": pod.workspace,
                    "egress": pod.egress, "netns": pod.netns,
                }),
                serde_json::json!({"workspace_made": made}),
            )
            .and_then(|()| Ok(self.store.put_pod(&pod)?));
        if let Err(e) = recorded {
            self.detach_pod_egress(&pod.id);
            return Err(e);
        }
        self.share_pod(&pod);
        Ok(pod)
    }

    /// Record what berth-oci did to one of a live pod's containers.
    pub async fn pod_event(&self, id: &str, ev: PodEvent) -> Result<Pod, EngineError> {
        check_pod_id(&ev.container)?;
        // One pod's events wait for that pod only, not for another's registration (which may wait on the
        // cluster's database).
        self.live_pod(id)?;
        let _this = self.pod_lock_of(id).lock_owned().await;
        let mut pod = self.live_pod(id)?;
        let known = pod.containers.iter().position(|c| c.id == ev.container);
        let unknown = || EngineError::Conflict(format!("pod {id} has no container {}", ev.container));
        match (ev.kind.as_str(), known) {
            ("container_created", None) => {
                let cgroup = ev.cgroup.clone().unwrap_or_default();
                check_cgroup(&cgroup)?;
                let name = ev.name.clone().unwrap_or_default();
                pod.containers.push(PodContainer {
                    id: ev.container.clone(),
                    name,
                    cgroup,
                    state: "created".into(),
                    execs: 0,
                });
            }
            ("container_created", Some(_)) => {
                return Err(EngineError::Conflict(format!("pod {id} already has a container {}", ev.container)));
            }
            ("container_started", Some(i)) => pod.containers[i].state = "running".into(),
            ("exec", Some(i)) => pod.containers[i].execs += 1,
            ("container_deleted", Some(i)) => pod.containers[i].state = "deleted".into(),
            ("container_started" | "exec" | "container_deleted", None) => return Err(unknown()),
            (other, _) => {
                return Err(EngineError::invalid(format!(
                    "{other:?} is not a pod event (container_created, container_started, exec, container_deleted)"
                )));
            }
        }
        self.pod_journal(
            id,
            &ev.kind,
            serde_json::json!({"container": ev.container, "name": ev.name, "cgroup": ev.cgroup, "args": ev.args}),
            serde_json::json!({"pid": ev.pid}),
        )?;
        self.store.put_pod(&pod)?;
        self.share_pod(&pod);
        Ok(pod)
    }

    /// Copy a live pod's workspace, as it is at one instant, into a new volume: the pod's containers are
    /// frozen for the clone (those already frozen stay so), so no write of theirs is half in the copy.
    pub async fn fork_pod(&self, id: &str, req: PodFork) -> Result<Volume, EngineError> {
        let _one = self.pod_state.lock.lock().await;
        self.live_pod(id)?;
        let _this = self.pod_lock_of(id).lock_owned().await;
        let pod = self.live_pod(id)?;
        let Some(from) = pod.workspace.clone() else {
            return Err(EngineError::Conflict(format!("pod {id} has no workspace (annotation berth.dev/workspace)")));
        };
        berth_runtime::spec::check_name(&req.workspace)
            .map_err(|e| EngineError::invalid(format!("the new workspace volume's name: {e}")))?;
        let now = now_ms();
        let hierarchy = berth_runtime::cgroup::Hierarchy::detect().map_err(|e| EngineError::Storage(e.to_string()))?;
        if self.store.volumes()?.iter().any(|(v, _)| *v == req.workspace) {
            return Err(EngineError::Conflict(format!("a volume named {:?} already exists", req.workspace)));
        }
        self.claim_volume(&req.workspace).await?;
        let owner = owner_of(pod.namespace.as_deref());
        if !self.store.add_volume_owned(&req.workspace, now, Some(&owner))? {
            return Err(EngineError::Conflict(format!("a volume named {:?} already exists", req.workspace)));
        }
        // Every live pod that writes to the workspace is still for the instant, not only this one.
        let writers: Vec<PodContainer> = self
            .store
            .live_pods()?
            .into_iter()
            .filter(|p| p.workspace.as_deref() == Some(from.as_str()))
            .flat_map(|p| p.containers)
            .collect();
        let mut frozen = Vec::new();
        let mut froze_all = Ok(());
        for c in writers.iter().filter(|c| c.state != "deleted") {
            let path = Path::new(&c.cgroup);
            let (parent, name) = (path.parent().unwrap_or(Path::new("")), path.file_name().unwrap_or_default());
            let cg = match hierarchy.nested(parent) {
                Ok(h) => h.open(&name.to_string_lossy()),
                Err(e) => {
                    froze_all = Err(e.to_string());
                    break;
                }
            };
            if !cg.exists() || cg.is_frozen().unwrap_or(false) {
                continue;
            }
            if let Err(e) = cg.freeze() {
                froze_all = Err(e.to_string());
                break;
            }
            frozen.push((c.id.clone(), cg));
        }
        let started = std::time::Instant::now();
        let cloned = match froze_all {
            Ok(()) => {
                let (src, dst) = (self.volume_dir(&from), self.volume_dir(&req.workspace));
                self.pool_op(move |pool| pool.clone_many(&src, &[dst])).await
            }
            Err(e) => Err(EngineError::Conflict(format!("pod {id}'s containers could not be frozen: {e}"))),
        };
        // Whole microseconds: a float would not hash the same once read back from the journal.
        let frozen_us = started.elapsed().as_micros() as u64;
        for (_, cg) in &frozen {
            let _ = cg.thaw();
        }
        if let Err(e) = cloned {
            let _ = self.store.remove_volume(&req.workspace);
            self.release_volume(&req.workspace).await;
            return Err(e);
        }
        let ids: Vec<&String> = frozen.iter().map(|(c, _)| c).collect();
        let noted = self.pod_journal(
            id,
            "fork",
            serde_json::json!({"workspace": req.workspace}),
            serde_json::json!({"from": from, "frozen": ids, "frozen_us": frozen_us}),
        );
        if let Err(e) = noted {
            // Not recorded, not kept.
            let dir = self.volume_dir(&req.workspace);
            let _ = self.pool_op(move |pool| pool.remove(&dir)).await;
            let _ = self.store.remove_volume(&req.workspace);
            self.release_volume(&req.workspace).await;
            return Err(e);
        }
        Ok(Volume { name: req.workspace, created_at_ms: now, used_by: vec![], tenant: None })
    }

    /// The pod's sandbox container was deleted: the pod is gone. Its record and journal are closed, and its
    /// receipt kept; its workspace volume stays. Asked again, the receipt is the answer.
    pub async fn remove_pod(&self, id: &str) -> Result<PodReceipt, EngineError> {
        if self.pod(id)?.removed_at_ms.is_some() {
            return self.pod_receipt(id);
        }
        let _this = self.pod_lock_of(id).lock_owned().await;
        let mut pod = self.pod(id)?;
        if pod.removed_at_ms.is_some() {
            return self.pod_receipt(id);
        }
        self.detach_pod_egress(id);
        pod.removed_at_ms = Some(now_ms());
        for c in &mut pod.containers {
            c.state = "deleted".into();
        }
        // The pod is gone whatever follows: its record says so first, then its journal is closed (the last
        // attempts its proxy counted go in before the closing record).
        self.store.put_pod(&pod)?;
        self.share_pod(&pod);
        let j = self.pod_journal_of(id)?;
        {
            let mut j = j.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = j.journal.flush_dropped("pod");
            let closing = j.journal.append(
                &super::actor(),
                "pod_removed",
                serde_json::json!({}),
                serde_json::json!({"workspace_kept": pod.workspace}),
            );
            j.closed = true;
            closing.map_err(EngineError::Log)?;
        }
        self.pod_state.journals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        self.pod_state.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        let path = self.pod_journal_path(id);
        let verdict = journal::verify(&path).map_err(EngineError::Log)?;
        let head = journal::read(&path).map_err(EngineError::Log)?.last().map(|r| r.hash.clone()).unwrap_or_default();
        let receipt = PodReceipt {
            workspace_kept: pod.workspace.clone(),
            pod: pod.clone(),
            journal_records: verdict.records,
            journal_head: head,
            journal_verified: verdict.ok,
        };
        let text = serde_json::to_vec_pretty(&receipt).map_err(|e| EngineError::Storage(e.to_string()))?;
        let fresh = self.pod_receipt_path(id).with_extension("new");
        std::fs::write(&fresh, text)
            .and_then(|()| std::fs::rename(&fresh, self.pod_receipt_path(id)))
            .map_err(EngineError::Log)?;
        // Past --keep-removed, the oldest removed pods' records, journals and receipts go, as sandboxes' do.
        for old in self.store.forget_removed_pods_beyond(self.bounds.keep_removed).unwrap_or_default() {
            let _ = std::fs::remove_file(self.pod_journal_path(&old));
            let _ = std::fs::remove_file(self.pod_receipt_path(&old));
        }
        Ok(receipt)
    }

    /// Whether `policy` may be a pod's: without `--pod-egress-special`, it names no special address (an exact
    /// IP rule, or a name `egress-hosts` maps to one), since the pod's author is not the node's operator.
    fn check_pod_policy(&self, policy: &berth_egress::Policy) -> Result<(), EngineError> {
        if self.bounds.pod_egress_special {
            return Ok(());
        }
        let ips = policy.allow.iter().filter_map(|r| match r.target {
            berth_egress::Target::Ip(ip) => Some((r.to_string(), ip)),
            _ => None,
        });
        let mapped = policy.add_hosts.iter().map(|(name, ip)| (format!("{name}={ip}"), *ip));
        for (what, ip) in ips.chain(mapped) {
            if let Some(kind) = berth_egress::special_kind(ip) {
                return Err(EngineError::invalid(format!(
                    "the pod's egress policy reaches {what}, a {kind} address: pods' policies may name such \
                     addresses only on a node whose daemon runs with --pod-egress-special"
                )));
            }
        }
        Ok(())
    }

    /// A removed pod's receipt.
    pub fn pod_receipt(&self, id: &str) -> Result<PodReceipt, EngineError> {
        let pod = self.pod(id)?;
        if pod.removed_at_ms.is_none() {
            return Err(EngineError::Conflict(format!("pod {id} is live: its receipt is made when it is removed")));
        }
        let text = std::fs::read(self.pod_receipt_path(id)).map_err(EngineError::Log)?;
        serde_json::from_slice(&text).map_err(|e| EngineError::Storage(format!("pod {id}'s receipt: {e}")))
    }

    /// A pod's journal, every record.
    pub fn pod_records(&self, id: &str) -> Result<Vec<journal::Record>, EngineError> {
        self.pod(id)?;
        journal::read(&self.pod_journal_path(id)).map_err(EngineError::Log)
    }
}
