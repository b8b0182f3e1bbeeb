"""The calls a kubelet makes for a pod whose RuntimeClass is berth, through containerd's CRI plugin, with the
CRI v1 stubs from PyPI (container-runtime-interface-api). Prints one JSON object of what was seen; the Rust
test that runs this asserts on it. Usage: cri_pod.py SOCKET IMAGE HANDLER LOGDIR"""

import json
import sys
import time

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

sock, image, handler, logdir = sys.argv[1:5]
channel = grpc.insecure_channel("unix://" + sock)
rt = cri_grpc.RuntimeServiceStub(channel)
seen = {"version": rt.Version(cri.VersionRequest()).runtime_name}

pod_config = cri.PodSandboxConfig(
    metadata=cri.PodSandboxMetadata(name="agent", uid="uid-agent-1", namespace="default", attempt=0),
    hostname="agent-pod",
    log_directory=logdir,
    labels={"app": "agent"},
    linux=cri.LinuxPodSandboxConfig(
        security_context=cri.LinuxSandboxSecurityContext(
            namespace_options=cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER, ipc=cri.POD)
        )
    ),
)
pod = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod_config, runtime_handler=handler)).pod_sandbox_id
status = rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=pod)).status
seen["pod_state"] = cri.PodSandboxState.Name(status.state)
seen["pod_handler"] = status.runtime_handler


def container(name, command, pid=cri.CONTAINER, memory=0):
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=name, attempt=0),
        image=cri.ImageSpec(image=image),
        command=command,
        log_path=name + ".log",
        # As a kubelet fills it in for a pod without shareProcessNamespace.
        linux=cri.LinuxContainerConfig(
            resources=cri.LinuxContainerResources(memory_limit_in_bytes=memory),
            security_context=cri.LinuxContainerSecurityContext(
                namespace_options=cri.NamespaceOption(network=cri.NODE, pid=pid, ipc=cri.POD)
            )
        ),
    )
    req = cri.CreateContainerRequest(pod_sandbox_id=pod, config=config, sandbox_config=pod_config)
    cid = rt.CreateContainer(req).container_id
    rt.StartContainer(cri.StartContainerRequest(container_id=cid))
    return cid


def state(cid):
    return cri.ContainerState.Name(rt.ContainerStatus(cri.ContainerStatusRequest(container_id=cid)).status.state)


def sh(cid, script, timeout=20):
    r = rt.ExecSync(cri.ExecSyncRequest(container_id=cid, cmd=["sh", "-c", script], timeout=timeout))
    return {"code": r.exit_code, "stdout": r.stdout.decode(), "stderr": r.stderr.decode()}


app = container("app", ["sleep", "3600"], memory=256 * 1024 * 1024)
seen["app_state"] = state(app)
seen["hello"] = sh(app, "echo hello from $(hostname); exit 3")
seen["ids"] = sh(app, "id -u; cat /proc/self/uid_map; grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status")
seen["host_files"] = sh(
    app, "ls /; echo --; if [ -z \"$(head -c 1 /proc/kcore 2>/dev/null)\" ]; then echo 'kcore: empty or absent'; fi"
)
# The container's own cgroup, as its /sys/fs/cgroup shows it (v2: the cgroup2 tree; v1: its directories).
seen["cgroup_limit"] = sh(app, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
# And as a kubelet changes it in place.
rt.UpdateContainerResources(
    cri.UpdateContainerResourcesRequest(
        container_id=app, linux=cri.LinuxContainerResources(memory_limit_in_bytes=512 * 1024 * 1024)
    )
)
seen["cgroup_updated"] = sh(app, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
seen["write"] = sh(app, "echo kept > /root/note && cat /root/note && ls -ln /root/note")
# A second container of the pod shares its id block, so the first one's files are its own.
peer = container("peer", ["sleep", "3600"])
seen["peer_ids"] = sh(peer, "cat /proc/self/uid_map")
seen["peer_sees_app"] = sh(peer, "ps -o pid,comm | grep -c sleep")
# With shareProcessNamespace, a container sees the pod's other processes (pid=POD).
shared = container("shared", ["sleep", "3600"], pid=cri.POD)
seen["shared_ps"] = sh(shared, "ps -o pid,comm; cat /proc/self/uid_map; grep -c . /proc/mounts")
# A container whose process ends is reported as exited, with its code.
done = container("done", ["sh", "-c", "exit 5"])
deadline = time.time() + 20
while state(done) != "CONTAINER_EXITED" and time.time() < deadline:
    time.sleep(0.1)
st = rt.ContainerStatus(cri.ContainerStatusRequest(container_id=done)).status
seen["done"] = {"state": cri.ContainerState.Name(st.state), "exit_code": st.exit_code}
listed = rt.ListContainers(cri.ListContainersRequest()).containers
seen["listed"] = sorted(c.metadata.name for c in listed if c.pod_sandbox_id == pod)

for cid in (app, peer, shared):
    rt.StopContainer(cri.StopContainerRequest(container_id=cid, timeout=2))
    seen.setdefault("stopped", []).append(state(cid))
for cid in (app, peer, shared, done):
    rt.RemoveContainer(cri.RemoveContainerRequest(container_id=cid))
rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod))
rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=pod))
seen["made"] = [pod, app, peer, shared, done]
seen["pods_left"] = len(rt.ListPodSandbox(cri.ListPodSandboxRequest()).items)
print(json.dumps(seen))
