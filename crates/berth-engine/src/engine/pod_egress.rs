//! A pod's egress: the pod's network namespace is the engine's (CNI made it), so berth does not route its
//! connections as it does a sandbox's. Instead the daemon listens on `127.0.0.1:1023` inside that namespace
//! (a socket bound there stays there) and serves each connection with a `berth_egress::Proxy` that holds the
//! pod's policy and connects from the daemon's own network; and it drops, with nftables rules in the pod's
//! namespace, every packet leaving by another interface than `lo` that is not a reply to a connection made
//! to the pod. Each attempt is journaled in the pod's journal (`egress`).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_sys::process::NamespaceKind;
use tokio::sync::mpsc;

use super::Engine;
use crate::EngineError;

/// The rules put in a pod's network namespace: out by `lo`, or as part of a connection made to the pod (and
/// IPv6's neighbour discovery, without which no reply finds its way); nothing is forwarded through it.
const RULES: &str = "add table inet berth_egress
flush table inet berth_egress
table inet berth_egress {
  chain output {
    type filter hook output priority 0; policy drop;
    oifname \"lo\" accept
    ct state established,related accept
    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept
  }
  chain forward {
    type filter hook forward priority 0; policy drop;
  }
}
";

/// The port the proxy listens on in the pod's namespace: below 1024, which the pod's processes cannot bind
/// there (the namespace is the host user namespace's, where they have no capability; berth-oci refuses
/// `linux.sysctl`, so `ip_unprivileged_port_start` stays as it is). A restarted daemon finds it free.
pub(crate) const PROXY_PORT: u16 = 1023;

/// Bind the proxy's listener inside the network namespace at `netns` and put the rules there, from a thread
/// of its own (the namespace is the thread's; the thread ends with it).
fn listen_in(netns: &Path) -> Result<std::net::TcpListener, String> {
    let ns = std::fs::File::open(netns)
        .map_err(|e| format!("cannot open the pod's network namespace {}: {e}", netns.display()))?;
    let theirs = rustix::fs::fstat(&ns).map_err(|e| e.to_string())?;
    // The daemon's own, and the host's (the daemon may run in a pod of its own, with the host's pids).
    let hosts = ["/proc/self/ns/net", "/proc/1/ns/net"].into_iter().filter_map(|p| rustix::fs::stat(p).ok());
    if hosts.into_iter().any(|h| (theirs.st_dev, theirs.st_ino) == (h.st_dev, h.st_ino)) {
        return Err(format!(
            "{} is the host's network namespace (a hostNetwork pod): berth's egress policy needs the pod's own",
            netns.display()
        ));
    }
    let netns = netns.to_path_buf();
    std::thread::spawn(move || -> Result<std::net::TcpListener, String> {
        berth_sys::process::join_namespace(ns.as_fd(), NamespaceKind::Net)
            .map_err(|e| format!("{} is not a network namespace berth can enter: {e}", netns.display()))?;
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT))
            .map_err(|e| format!("cannot listen on 127.0.0.1:{PROXY_PORT} in the pod's network namespace: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        // nft is started from this thread, so in the pod's namespace.
        let mut nft = std::process::Command::new("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run nft (berth's egress policy for pods needs nftables): {e}"))?;
        if let Some(mut input) = nft.stdin.take() {
            std::io::Write::write_all(&mut input, RULES.as_bytes()).map_err(|e| e.to_string())?;
        }
        let out = nft.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("nft refused the pod's egress rules: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(listener)
    })
    .join()
    .map_err(|_| "the thread that enters the pod's network namespace failed".to_string())?
}

impl Engine {
    /// Start pod `id`'s proxy in its network namespace `netns`, with `net` as its policy.
    pub(super) async fn attach_pod_egress(
        &self,
        id: &str,
        netns: &str,
        net: &berth_api::Network,
    ) -> Result<(), EngineError> {
        let policy = super::network::policy_of(net)?;
        let path = PathBuf::from(netns);
        let listener = tokio::task::spawn_blocking(move || listen_in(&path))
            .await
            .map_err(|e| EngineError::Storage(e.to_string()))?
            .map_err(EngineError::Conflict)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(EngineError::Log)?;
        let (tx, mut attempts) = mpsc::unbounded_channel();
        let limits = berth_egress::Limits {
            max_connections: self.bounds.max_proxy_connections,
            max_pending: self.bounds.max_proxy_pending,
            max_lookups: self.bounds.max_lookups,
            ..berth_egress::Limits::default()
        };
        let proxy = Arc::new(
            berth_egress::Proxy::new(policy)
                .with_limits(limits)
                .with_lookup_share(berth_egress::lookup_share(self.bounds.max_lookups))
                .with_events(tx),
        );
        // The connections are the accept task's: stopping it (the pod's removal) ends them too.
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let proxy = Arc::clone(&proxy);
                            connections.spawn(async move { proxy.serve(stream).await });
                        }
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                    },
                    Some(_) = connections.join_next() => {}
                }
            }
        });
        // Within the egress records' share of the pod's journal, through its one handle; nothing once the
        // pod's removal closed it. Ends once the proxy and its connections are gone.
        let journal = self.pod_journal_of(id)?;
        let pod = id.to_string();
        tokio::spawn(async move {
            while let Some(a) = attempts.recv().await {
                let record = super::network::egress_record(&a, pod.clone(), None);
                let args = serde_json::json!({"host": record.host, "port": record.port, "method": record.method});
                let result = serde_json::to_value(&record).unwrap_or_default();
                let mut j = journal.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if j.closed {
                    return;
                }
                if let Err(e) = j.journal.append_egress("pod", args, result) {
                    crate::log::warn(
                        "cannot journal a pod's egress",
                        serde_json::json!({"pod": pod, "error": e.to_string()}),
                    );
                }
            }
        });
        if let Some(old) = self
            .pod_state
            .proxies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.to_string(), accept)
        {
            old.abort();
        }
        Ok(())
    }

    /// Stop pod `id`'s proxy from taking connections.
    pub(super) fn detach_pod_egress(&self, id: &str) {
        if let Some(task) = self.pod_state.proxies.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id)
        {
            task.abort();
        }
    }

    /// At start: the proxies of the live pods with an egress policy, back in their namespaces (a previous
    /// daemon's went with it; meanwhile the rules kept the pods from getting out another way).
    pub(super) async fn reattach_pods(&self) {
        for pod in self.store.live_pods().unwrap_or_default() {
            let (Some(net), Some(netns)) = (&pod.egress, &pod.netns) else { continue };
            // Its namespace is gone: the pod ended while no daemon heard of it. It is closed with a receipt.
            if !Path::new(netns).exists() {
                if let Err(e) = self.remove_pod(&pod.id).await {
                    crate::log::warn(
                        "cannot close a gone pod",
                        serde_json::json!({"pod": pod.id, "error": e.to_string()}),
                    );
                }
                continue;
            }
            if let Err(e) = self.attach_pod_egress(&pod.id, netns, net).await {
                crate::log::warn(
                    "cannot take up a pod's egress proxy again",
                    serde_json::json!({"pod": pod.id, "error": e.to_string()}),
                );
            }
        }
    }
}
