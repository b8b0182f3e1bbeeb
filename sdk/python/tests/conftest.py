"""The suite's own berth daemon: a private data root, unix socket and TCP port, started once per test run.

Every sandbox the suite makes is removed when the run ends (the daemon is the suite's alone, so all of
its sandboxes are), then the daemon is stopped and its data root removed. Nothing is shared with other
daemons on the host, so the suite can run beside other suites."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import berth
from berth._core import is_route_missing

REPO = Path(__file__).resolve().parents[3]
SDK = Path(__file__).resolve().parents[1]
DEFAULT_BIN = REPO / "target" / "x86_64-unknown-linux-gnu" / "debug" / "berth"

# The suite finds its daemon by the arguments it is given; a BERTH_API of the environment must not win.
for _name in ("BERTH_API", "BERTH_TOKEN", "BERTH_SOCKET"):
    os.environ.pop(_name, None)


@dataclass
class Daemon:
    bin: str
    dir: Path
    socket: str
    url: str
    token: str
    proc: subprocess.Popen

    @property
    def root(self) -> Path:
        return self.dir / "root"

    def env(self) -> dict[str, str]:
        """The environment for a program that should find this daemon by itself."""
        env = {k: v for k, v in os.environ.items() if k not in ("BERTH_API", "BERTH_TOKEN")}
        env["BERTH_SOCKET"] = self.socket
        return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mounted_under(path: Path) -> list[str]:
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return sorted((p for p in points if p.startswith(str(path) + "/")), reverse=True)


def _start(binary: str, tmp: Path, sock: str, *extra: str, log_name: str = "daemon.log") -> subprocess.Popen:
    log = open(tmp / log_name, "ab")
    proc = subprocess.Popen(
        [binary, "--root", str(tmp / "root"), "daemon", "--socket", sock, *extra],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    client = berth.Client(socket=sock, retries=0, timeout=10)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                client.health()
                return proc
            except berth.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    _stop(proc)
                    text = (tmp / log_name).read_text(errors="replace")[-2000:]
                    pytest.exit(f"the daemon did not come up: {text}", returncode=2)
                time.sleep(0.05)
    finally:
        client.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _remove_all(sock: str) -> bool:
    """Remove every sandbox of the daemon; False when the daemon did not answer."""
    try:
        with berth.Client(socket=sock, retries=1, timeout=60) as c:
            for info in c.list_sandboxes():
                try:
                    c.remove_sandbox(info.id)
                except berth.ApiError:
                    pass
            return c.list_sandboxes() == []
    except berth.TransportError:
        return False


@pytest.fixture(scope="session")
def daemon():
    binary = os.environ.get("BERTH_BIN") or str(DEFAULT_BIN)
    if not os.access(binary, os.X_OK):
        pytest.exit(f"no berth binary at {binary} (build it, or set BERTH_BIN)", returncode=2)
    tmp = Path(tempfile.mkdtemp(prefix="berth-sdk-python-"))
    sock = str(tmp / "berth.sock")
    port = _free_port()
    proc = _start(binary, tmp, sock, "--listen", f"127.0.0.1:{port}")
    try:
        with berth.Client(socket=sock, timeout=30) as c:
            token = c.tokens.create("sdk-tests").token
        yield Daemon(bin=binary, dir=tmp, socket=sock, url=f"http://127.0.0.1:{port}", token=token, proc=proc)
    finally:
        removed = _remove_all(sock)
        _stop(proc)
        if not removed:
            # A daemon that stopped answering leaves its sandboxes running (they outlive it): a fresh daemon on
            # the same data root takes them over, and removes them.
            again = _start(binary, tmp, str(tmp / "cleanup.sock"), log_name="cleanup.log")
            _remove_all(str(tmp / "cleanup.sock"))
            _stop(again)
        for point in _mounted_under(tmp):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def client(daemon):
    with berth.Client(socket=daemon.socket, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def tcp_client(daemon):
    with berth.Client(url=daemon.url, token=daemon.token) as c:
        yield c


@pytest.fixture
def sandbox(client):
    """A fresh sandbox for one test, removed after it."""
    with berth.Sandbox.create(client=client, ttl=900, labels={"suite": "sdk-python"}) as sb:
        yield sb


@pytest.fixture(scope="session")
def contexts_served(client):
    """Whether the daemon serves the code-context routes (they are newer than some daemons)."""
    with berth.Sandbox.create(client=client, ttl=120) as sb:
        try:
            sb.code_contexts()
            return True
        except berth.NotFound as e:
            if is_route_missing(e):
                return False
            raise


@pytest.fixture
def need_contexts(contexts_served):
    if not contexts_served:
        pytest.skip("this daemon does not serve /v1/sandboxes/{id}/contexts yet (404 no such route)")
