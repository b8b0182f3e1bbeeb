"""A pod on the berth handler whose annotations ask for berth's node agent, driven in steps through containerd's
CRI plugin with the CRI v1 stubs from PyPI. Each step prints one JSON object.

  cri_workspace.py SOCKET IMAGE HANDLER LOGDIR up NAME WORKSPACE   a pod (with berth.dev/workspace) and a container
  cri_workspace.py SOCKET IMAGE HANDLER LOGDIR up-net NAME ANNOTATIONS
                                                                   the same on a network of its own (CNI's), with
                                                                   the annotations given (JSON)
  cri_workspace.py SOCKET IMAGE HANDLER LOGDIR sh CONTAINER SCRIPT ExecSync of sh -c SCRIPT
  cri_workspace.py SOCKET IMAGE HANDLER LOGDIR down POD            stop and remove the pod and its containers
"""

import json
import sys

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

sock, image, handler, logdir, step = sys.argv[1:6]
rest = sys.argv[6:]
rt = cri_grpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + sock))
ns = cri.NamespaceOption(network=cri.NODE, pid=cri.CONTAINER, ipc=cri.POD)

if step in ("up", "up-net"):
    if step == "up":
        name, workspace = rest
        annotations = {"berth.dev/workspace": workspace}
    else:
        name, annotations = rest[0], json.loads(rest[1])
        ns = cri.NamespaceOption(network=cri.POD, pid=cri.CONTAINER, ipc=cri.POD)
    pod_config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=name, uid="uid-" + name, namespace="agents", attempt=0),
        hostname=name,
        log_directory=logdir,
        annotations=annotations,
        linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(namespace_options=ns)),
    )
    try:
        pod = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod_config, runtime_handler=handler)).pod_sandbox_id
    except grpc.RpcError as e:
        print(json.dumps({"error": e.details()}))
        sys.exit(0)
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app", attempt=0),
        image=cri.ImageSpec(image=image),
        command=["sleep", "3600"],
        log_path=name + "-app.log",
        linux=cri.LinuxContainerConfig(security_context=cri.LinuxContainerSecurityContext(namespace_options=ns)),
    )
    req = cri.CreateContainerRequest(pod_sandbox_id=pod, config=config, sandbox_config=pod_config)
    app = rt.CreateContainer(req).container_id
    rt.StartContainer(cri.StartContainerRequest(container_id=app))
    print(json.dumps({"pod": pod, "app": app}))
elif step == "sh":
    cid, script = rest
    r = rt.ExecSync(cri.ExecSyncRequest(container_id=cid, cmd=["sh", "-c", script], timeout=20))
    print(json.dumps({"code": r.exit_code, "stdout": r.stdout.decode(), "stderr": r.stderr.decode()}))
elif step == "down":
    (pod,) = rest
    for c in rt.ListContainers(cri.ListContainersRequest()).containers:
        if c.pod_sandbox_id == pod:
            rt.StopContainer(cri.StopContainerRequest(container_id=c.id, timeout=2))
            rt.RemoveContainer(cri.RemoveContainerRequest(container_id=c.id))
    rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=pod))
    rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=pod))
    print(json.dumps({"pods_left": len(rt.ListPodSandbox(cri.ListPodSandboxRequest()).items)}))
else:
    sys.exit("unknown step " + step)
