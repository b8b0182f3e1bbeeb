#!/usr/bin/env python3
"""A CNI plugin for the node tests, so that a pod gets a network namespace of its own without touching the
host's network: ADD gives the pod's namespace an eth0 whose veth peer is in a namespace the test made (the
config's "outside", with 10.213.0.1 there), and 10.213.0.2/24 with a default route; DEL removes it. Named
`loopback` (which containerd always runs too), it sets the pod's lo up."""

import json
import os
import subprocess
import sys

conf = json.load(sys.stdin)
command = os.environ.get("CNI_COMMAND", "")
version = conf.get("cniVersion", "0.4.0")


def ip(*args):
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL)


if command == "VERSION":
    print(json.dumps({"cniVersion": version, "supportedVersions": ["0.3.0", "0.3.1", "0.4.0"]}))
elif command == "ADD" and conf.get("type") == "loopback":
    ip("-n", os.path.basename(os.environ["CNI_NETNS"]), "link", "set", "lo", "up")
    print(json.dumps({"cniVersion": version, "interfaces": [{"name": "lo", "sandbox": os.environ["CNI_NETNS"]}]}))
elif command == "DEL" and conf.get("type") == "loopback":
    pass
elif command == "ADD":
    netns, ifname, outside = os.environ["CNI_NETNS"], os.environ["CNI_IFNAME"], conf["outside"]
    pod = os.path.basename(netns)
    ip("-n", pod, "link", "set", "lo", "up")
    ip("-n", pod, "link", "add", ifname, "type", "veth", "peer", "name", "p" + pod[-10:], "netns", outside)
    ip("-n", outside, "addr", "add", "10.213.0.1/24", "dev", "p" + pod[-10:])
    ip("-n", outside, "link", "set", "p" + pod[-10:], "up")
    ip("-n", pod, "addr", "add", "10.213.0.2/24", "dev", ifname)
    ip("-n", pod, "link", "set", ifname, "up")
    ip("-n", pod, "route", "add", "default", "via", "10.213.0.1")
    print(json.dumps({
        "cniVersion": version,
        "interfaces": [{"name": ifname, "sandbox": netns}],
        "ips": [{"version": "4", "address": "10.213.0.2/24", "gateway": "10.213.0.1", "interface": 0}],
        "dns": {},
    }))
elif command == "DEL":
    netns = os.environ.get("CNI_NETNS", "")
    if netns and os.path.exists(netns):
        subprocess.run(["ip", "-n", os.path.basename(netns), "link", "del", os.environ.get("CNI_IFNAME", "eth0")],
                       stderr=subprocess.DEVNULL)
elif command == "CHECK":
    pass
else:
    print(json.dumps({"cniVersion": version, "code": 4, "msg": "unknown CNI_COMMAND " + command}))
    sys.exit(1)
