//! One host id block per pod: the containers of a Kubernetes pod (its pause container and the workloads,
//! which share volumes and namespaces) all map root inside to the same unprivileged host ids, so what one
//! writes to a shared volume is the others' too. A container outside any pod is a pod of its own.
//!
//! The block is claimed from berth's host-wide id claims and kept with a reservation (no process of
//! berth's lives as long as the pod to hold a lock), which the pod's last container gives back.

use std::fs::File;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use super::OciError;
use crate::ids::{self, CLAIMS_DIR, IdBlock};

/// The annotation containerd's CRI plugin puts on a pod's every container (its pause container's id).
pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// The file in a container's directory that names its pod.
const MEMBER_FILE: &str = "pod";

/// The pod a container belongs to: its CRI sandbox, else itself.
pub fn key(id: &str, annotations: &std::collections::BTreeMap<String, String>) -> String {
    annotations.get(SANDBOX_ID).filter(|s| super::check_id(s).is_ok()).cloned().unwrap_or_else(|| id.to_string())
}

/// Held while a pod's membership changes.
struct Lock(#[allow(dead_code)] File);

fn lock(root: &Path) -> Result<Lock, OciError> {
    // Names starting with `.` are never containers' (see `check_id`).
    let path = root.join(".pods.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(OciError::io(format!("open {}", path.display())))?;
    rustix::fs::flock(&file, FlockOperation::LockExclusive)
        .map_err(|e| OciError::io(format!("lock {}", path.display()))(e.into()))?;
    Ok(Lock(file))
}

fn record(root: &Path, pod: &str) -> PathBuf {
    root.join(".pods").join(pod)
}

fn owner(root: &Path, pod: &str) -> String {
    format!("oci-pod:{}/{pod}", root.display())
}

/// Make container `dir` a member of `pod` and return the host id that is root inside the pod's containers.
pub fn join(root: &Path, dir: &Path, pod: &str) -> Result<u32, OciError> {
    let _lock = lock(root)?;
    let claims = Path::new(CLAIMS_DIR);
    let owner = owner(root, pod);
    let rec = record(root, pod);
    let kept = std::fs::read_to_string(&rec)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|slot| ids::reserved_by(claims, *slot).as_deref() == Some(owner.as_str()));
    let slot = match kept {
        Some(slot) => slot,
        None => {
            let block = IdBlock::claim(claims)?;
            block.reserve_for(claims, &owner)?;
            let slot = block.slot();
            drop(block);
            std::fs::create_dir_all(root.join(".pods")).map_err(OciError::io("create the pods directory"))?;
            std::fs::write(&rec, format!("{slot}\n")).map_err(OciError::io(format!("write {}", rec.display())))?;
            slot
        }
    };
    std::fs::write(dir.join(MEMBER_FILE), pod).map_err(OciError::io("record the container's pod"))?;
    Ok(ids::HOST_ID_BASE + slot * ids::IDS_PER_SANDBOX)
}

/// Take container `dir` out of its pod; the pod's last container gives its id block back.
pub fn leave(root: &Path, dir: &Path) -> Result<(), OciError> {
    let Ok(pod) = std::fs::read_to_string(dir.join(MEMBER_FILE)) else { return Ok(()) };
    let _lock = lock(root)?;
    let _ = std::fs::remove_file(dir.join(MEMBER_FILE));
    let others = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join(MEMBER_FILE)).is_ok_and(|p| p == pod));
    if others {
        return Ok(());
    }
    let rec = record(root, &pod);
    if let Some(slot) = std::fs::read_to_string(&rec).ok().and_then(|s| s.trim().parse::<u32>().ok()) {
        ids::unreserve(Path::new(CLAIMS_DIR), slot, &owner(root, &pod));
    }
    let _ = std::fs::remove_file(rec);
    Ok(())
}
