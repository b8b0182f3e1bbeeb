"""An OCI image layout tar made from the host's busybox (static, from Debian's busybox-static): one layer with
busybox and its applets, /etc/passwd and /etc/group, entrypoint `sleep 3600`. Usage: image.py OUT.tar NAME..."""

import hashlib, io, json, os, sys, tarfile, time
out = sys.argv[1]
def blob(data):
    d = hashlib.sha256(data).hexdigest()
    return d, data
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w") as t:
    def add_dir(name, mode=0o755):
        ti = tarfile.TarInfo(name); ti.type = tarfile.DIRTYPE; ti.mode = mode; t.addfile(ti)
    for d in ["bin", "etc", "proc", "sys", "dev", "tmp", "root", "home", "home/user"]:
        add_dir(d, 0o1777 if d == "tmp" else 0o755)
    data = open("/bin/busybox", "rb").read()
    ti = tarfile.TarInfo("bin/busybox"); ti.size = len(data); ti.mode = 0o755
    t.addfile(ti, io.BytesIO(data))
    for app in ["sh", "echo", "cat", "id", "ls", "sleep", "ps", "hostname", "mount", "touch", "grep", "wc", "kill", "head", "true", "false", "stat", "mknod", "chown", "chmod"]:
        ti = tarfile.TarInfo("bin/" + app); ti.type = tarfile.SYMTYPE; ti.linkname = "busybox"; t.addfile(ti)
    for name, text in [("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), ("etc/group", "root:x:0:\nuser:x:1000:\n")]:
        b = text.encode(); ti = tarfile.TarInfo(name); ti.size = len(b); ti.mode = 0o644; t.addfile(ti, io.BytesIO(b))
layer_bytes = layer.getvalue()
ld, _ = blob(layer_bytes)
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["sleep"], "Cmd": ["3600"], "Env": ["PATH=/bin"]},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + ld]}}).encode()
cd, _ = blob(config)
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + cd, "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + ld, "size": len(layer_bytes)}]}).encode()
md, _ = blob(manifest)
names = sys.argv[2:]
index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + md,
    "size": len(manifest), "annotations": {"io.containerd.image.name": n, "org.opencontainers.image.ref.name": n.rsplit(":",1)[-1]}} for n in names]}).encode()
with tarfile.open(out, "w") as t:
    def add(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); ti.mode = 0o644; t.addfile(ti, io.BytesIO(data))
    add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    add("index.json", index)
    for d, data in [(ld, layer_bytes), (cd, config), (md, manifest)]:
        add("blobs/sha256/" + d, data)
