"""The API's plain calls, written once for both clients.

Each method describes its call as an :class:`Op` and hands it to ``_do``: the sync client carries it out and
returns the value; the async client returns a coroutine of it. So every method here is awaited on an
``AsyncClient``/``AsyncSandbox`` and called plainly on a ``Client``/``Sandbox``.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import Any, Callable, Iterable

from . import models as m
from ._core import Op, as_bytes, as_json, as_text, drop_none, flag, model, models, ndjson_lines, octal, seg
from .errors import ApiError, from_response

# Fields of POST /v1/sandboxes (the conformance test holds this to the spec's CreateSandbox).
CREATE_FIELDS = (
    "name", "image", "memory_bytes", "pids", "cpus", "ttl_seconds", "idle_timeout_seconds", "idle_pause_seconds",
    "idle_hibernate_seconds", "ttl_active_only", "ttl_action", "budget", "env", "labels",
    "mounts", "persistent", "disk_bytes", "volumes", "from_snapshot", "outputs", "network", "secrets",
    "isolation", "tenant", "desktop",
)  # fmt: skip
# Friendly names accepted by Sandbox.create, and the field each stands for.
CREATE_ALIASES = {
    "memory": "memory_bytes",
    "disk": "disk_bytes",
    "ttl": "ttl_seconds",
    "idle_timeout": "idle_timeout_seconds",
    "idle_pause": "idle_pause_seconds",
    "idle_hibernate": "idle_hibernate_seconds",
}

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
          "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}  # fmt: skip


def size(value: int | str) -> int:
    """Bytes from an int or a string such as ``512M``, ``1GiB`` (powers of 1024)."""
    if isinstance(value, int):
        return value
    text = value.strip().lower()
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(num) :].strip()
    if unit not in _UNITS or not num:
        raise ValueError(f"not a size: {value!r}")
    return int(float(num) * _UNITS[unit])


def create_body(options: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a create from ``Sandbox.create``'s keyword options."""
    body: dict[str, Any] = {}
    for key, value in options.items():
        key = CREATE_ALIASES.get(key, key)
        if key not in CREATE_FIELDS:
            raise TypeError(f"unknown sandbox option {key!r}; known: {', '.join(CREATE_FIELDS + tuple(CREATE_ALIASES))}")
        if value is None:
            continue
        if key in ("memory_bytes", "disk_bytes"):
            value = size(value)
        elif key == "network" and isinstance(value, m.Network):
            value = drop_none(value.to_dict())
        elif key in ("mounts", "volumes"):
            value = [v.to_dict() if isinstance(v, m.Model) else v for v in value]
        elif key == "desktop":
            from .desktop import create_option

            value = create_option(value)
            if value is None:
                continue
        body[key] = value
    return body


def _tar_of(local: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if os.path.isdir(local):
            for name in sorted(os.listdir(local)):
                tar.add(os.path.join(local, name), arcname=name)
        else:
            tar.add(local, arcname=os.path.basename(local))
    return buf.getvalue()


def _untar(data: bytes, local: str) -> list[str]:
    os.makedirs(local, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        names = tar.getnames()
        tar.extractall(local, filter="data")
    return names


def _import_parse(r: Any) -> m.Image:
    frames = ndjson_lines(r.content.decode())
    for f in frames:
        if f.get("type") == "done":
            return m.Image.from_dict(f["image"])
        if f.get("type") == "error":
            import json

            raise from_response(400 if f["error"].get("code") == "invalid_request" else 500, json.dumps(f).encode())
    raise ApiError("the image import ended without a result", code="internal", status=r.status_code)


class _Namespace:
    def __init__(self, client: Any):
        self._c = client

    def _do(self, op: Op, then: Callable | None = None) -> Any:
        return self._c._do(op, then)


class Snapshots(_Namespace):
    """``client.snapshots``: every snapshot of the daemon (make one with ``sandbox.snapshot()``)."""

    def list(self) -> list[m.Snapshot]:
        return self._do(Op("GET", "/v1/snapshots", parse=models(m.Snapshot)))

    def get(self, snapshot: str) -> m.Snapshot:
        return self._do(Op("GET", f"/v1/snapshots/{seg(snapshot)}", parse=model(m.Snapshot)))

    def remove(self, snapshot: str) -> m.Snapshot:
        return self._do(Op("DELETE", f"/v1/snapshots/{seg(snapshot)}", parse=model(m.Snapshot)))


class Volumes(_Namespace):
    """``client.volumes``: named volumes that sandboxes mount (``volumes=[VolumeMount(...)]``)."""

    def list(self) -> list[m.Volume]:
        return self._do(Op("GET", "/v1/volumes", parse=models(m.Volume)))

    def create(self, name: str) -> m.Volume:
        return self._do(Op("POST", "/v1/volumes", json={"name": name}, parse=model(m.Volume)))

    def remove(self, name: str) -> m.Volume:
        return self._do(Op("DELETE", f"/v1/volumes/{seg(name)}", parse=model(m.Volume)))


class Images(_Namespace):
    """``client.images``: the images sandboxes are built from."""

    def list(self) -> list[m.Image]:
        return self._do(Op("GET", "/v1/images", parse=models(m.Image)))

    def import_(self, name: str, source: str, *, tenant: str | None = None) -> m.Image:
        """Import ``source`` (a path on the daemon's host: a directory, rootfs tarball, OCI layout or
        ``docker save`` archive), for ``tenant``'s sandboxes only if given. Unix socket only."""
        body = drop_none({"name": name, "source": source, "tenant": tenant})
        return self._do(Op("POST", "/v1/images", json=body, parse=_import_parse, timeout=None))

    def remove(self, name: str) -> m.Image:
        return self._do(Op("DELETE", f"/v1/images/{seg(name)}", parse=model(m.Image)))


class Tokens(_Namespace):
    """``client.tokens``: API tokens for the TCP listener (unix socket only)."""

    def create(self, name: str = "", *, tenant: str | None = None, read_only: bool = False,
               selector: dict[str, str] | None = None) -> m.MintedToken:
        """Mint a token; ``tenant``, ``read_only`` and ``selector`` each narrow what it reaches."""
        body: dict[str, Any] = {"name": name, "tenant": tenant, "read_only": read_only or None, "selector": selector or None}
        return self._do(Op("POST", "/v1/tokens", json=drop_none(body), parse=model(m.MintedToken)))

    def list(self) -> list[m.TokenInfo]:
        return self._do(Op("GET", "/v1/tokens", parse=models(m.TokenInfo)))

    def revoke(self, token_id: str) -> None:
        return self._do(Op("DELETE", f"/v1/tokens/{seg(token_id)}"))


class Secrets(_Namespace):
    """``client.secrets``: values sealed in the daemon's vault, given to sandboxes by ``secrets=[...]``."""

    def set(self, name: str, value: str | bytes, *, tenant: str | None = None) -> m.SecretInfo:
        """Set a secret for the sandboxes of ``tenant`` (without: of no tenant). Unix socket only."""
        data = value.encode() if isinstance(value, str) else value
        return self._do(Op("PUT", f"/v1/secrets/{seg(name)}", params={"tenant": tenant}, content=data, content_type="application/octet-stream", parse=model(m.SecretInfo)))

    def list(self, *, tenant: str | None = None) -> list[m.SecretInfo]:
        return self._do(Op("GET", "/v1/secrets", params={"tenant": tenant}, parse=models(m.SecretInfo)))

    def remove(self, name: str, *, tenant: str | None = None) -> None:
        return self._do(Op("DELETE", f"/v1/secrets/{seg(name)}", params={"tenant": tenant}))


class Tenants(_Namespace):
    """``client.tenants``: teams sharing the daemon, each with a quota (made and removed on the unix socket)."""

    def create(self, name: str, quota: m.Quota | dict[str, Any] | None = None) -> m.Tenant:
        """Make a tenant, or give an existing one ``quota`` (replacing its whole quota)."""
        q = quota.to_dict() if isinstance(quota, m.Model) else (quota or {})
        if "memory_bytes" in q and q["memory_bytes"] is not None:
            q["memory_bytes"] = size(q["memory_bytes"])
        if "disk_bytes" in q and q["disk_bytes"] is not None:
            q["disk_bytes"] = size(q["disk_bytes"])
        return self._do(Op("POST", "/v1/tenants", json={"name": name, "quota": drop_none(q)}, parse=model(m.Tenant)))

    def list(self) -> list[m.Tenant]:
        return self._do(Op("GET", "/v1/tenants", parse=models(m.Tenant)))

    def get(self, name: str) -> m.Tenant:
        return self._do(Op("GET", f"/v1/tenants/{seg(name)}", parse=model(m.Tenant)))

    def remove(self, name: str) -> None:
        """Remove a tenant that holds nothing: its tokens are revoked and its secrets removed."""
        return self._do(Op("DELETE", f"/v1/tenants/{seg(name)}"))


class ClientAPI:
    """The daemon-wide calls of :class:`berth.Client` and :class:`berth.AsyncClient`."""

    _do: Callable[..., Any]

    def _namespaces(self) -> None:
        self.snapshots = Snapshots(self)
        self.volumes = Volumes(self)
        self.images = Images(self)
        self.tokens = Tokens(self)
        self.secrets = Secrets(self)
        self.tenants = Tenants(self)

    def health(self) -> m.Health:
        return self._do(Op("GET", "/healthz", parse=model(m.Health)))

    def info(self) -> m.DaemonInfo:
        return self._do(Op("GET", "/v1/info", parse=model(m.DaemonInfo)))

    def openapi(self) -> dict[str, Any]:
        return self._do(Op("GET", "/v1/openapi.json", parse=as_json))

    def storage(self) -> m.StorageInfo:
        return self._do(Op("GET", "/v1/storage", parse=model(m.StorageInfo)))

    def init_storage(self, size_bytes: int | str | None = None) -> m.StorageInfo:
        body = {} if size_bytes is None else {"size_bytes": size(size_bytes)}
        return self._do(Op("POST", "/v1/storage", json=body, parse=model(m.StorageInfo), timeout=None))

    def list_sandboxes(self) -> list[m.SandboxInfo]:
        return self._do(Op("GET", "/v1/sandboxes", parse=models(m.SandboxInfo)))

    def create_sandbox(self, *, idempotency_key: str | None = None, **options: Any) -> m.SandboxInfo:
        """The low-level create: answers the record. ``Sandbox.create`` wraps it. A second create with the
        same ``idempotency_key`` answers the first one's record instead of making another sandbox."""
        op = Op("POST", "/v1/sandboxes", json=create_body(options), parse=model(m.SandboxInfo), key=idempotency_key)
        return self._do(op)

    def get_sandbox(self, sandbox: str) -> m.SandboxInfo:
        return self._do(Op("GET", f"/v1/sandboxes/{seg(sandbox)}", parse=model(m.SandboxInfo)))

    def remove_sandbox(self, sandbox: str) -> m.Receipt:
        return self._do(Op("DELETE", f"/v1/sandboxes/{seg(sandbox)}", parse=model(m.Receipt)))

    def receipt(self, sandbox_id: str) -> m.Receipt:
        """A removed sandbox's receipt, by id."""
        return self._do(Op("GET", f"/v1/sandboxes/{seg(sandbox_id)}/receipt", parse=model(m.Receipt)))

    def journal(self, sandbox: str) -> list[m.JournalRecord]:
        """A sandbox's journal (by id after it was removed)."""
        return self._do(Op("GET", f"/v1/sandboxes/{seg(sandbox)}/journal", parse=models(m.JournalRecord)))

    def verify_journal(self, sandbox: str) -> m.JournalVerdict:
        return self._do(Op("GET", f"/v1/sandboxes/{seg(sandbox)}/journal", params={"verify": "true"}, parse=model(m.JournalVerdict)))

    def recent_events(self) -> list[m.LifecycleEvent]:
        """The daemon's most recent lifecycle events (up to 1000), oldest first. ``events()`` follows them."""
        return self._do(Op("GET", "/v1/events", parse=models(m.LifecycleEvent)))


class Files(_Namespace):
    """``sandbox.files``: read and write inside a running sandbox. Paths are absolute paths inside it.

    ``user`` (on each call): work as that user of the sandbox (a name of its ``/etc/passwd``, or ``"UID[:GID]"``)
    instead of root: the sandbox's permissions apply as to that user's processes, and what is made is theirs."""

    def __init__(self, sandbox: Any):
        super().__init__(sandbox._client)
        self._base = f"/v1/sandboxes/{seg(sandbox.id)}"

    def read(self, path: str, *, user: str | None = None) -> bytes:
        return self._do(Op("GET", f"{self._base}/files", params={"path": path, "user": user}, parse=as_bytes))

    def read_text(self, path: str, encoding: str = "utf-8", *, user: str | None = None) -> str:
        params = {"path": path, "user": user}
        return self._do(Op("GET", f"{self._base}/files", params=params, parse=lambda r: r.content.decode(encoding)))

    def write(self, path: str, data: str | bytes, *, mode: int | str | None = None, parents: bool = False,
              user: str | None = None) -> m.FileEntry:  # fmt: skip
        """Write a whole file (created or truncated). ``mode`` as an int (``0o755``) or octal text."""
        body = data.encode() if isinstance(data, str) else bytes(data)
        params = {"path": path, "mode": octal(mode), "parents": flag(True) if parents else None, "user": user}
        return self._do(Op("PUT", f"{self._base}/files", params=params, content=body, content_type="application/octet-stream", parse=model(m.FileEntry)))

    def list(self, path: str = "/workspace", *, user: str | None = None) -> list[m.FileEntry]:
        return self._do(Op("GET", f"{self._base}/files", params={"path": path, "user": user}, parse=models(m.FileEntry)))

    def stat(self, path: str, *, user: str | None = None) -> m.FileEntry:
        return self._do(Op("GET", f"{self._base}/stat", params={"path": path, "user": user}, parse=model(m.FileEntry)))

    def exists(self, path: str, *, user: str | None = None) -> bool:
        params = {"path": path, "user": user}
        op = Op("GET", f"{self._base}/stat", params=params, parse=model(m.FileEntry), none_on_404=True)
        return self._do(op, lambda e: e is not None)

    def remove(self, path: str, *, recursive: bool = False, user: str | None = None) -> None:
        params = {"path": path, "recursive": flag(True) if recursive else None, "user": user}
        return self._do(Op("DELETE", f"{self._base}/files", params=params))

    def mkdir(self, path: str, *, mode: int | str | None = None, parents: bool = False,
              user: str | None = None) -> m.FileEntry:  # fmt: skip
        params = {"path": path, "mode": octal(mode), "parents": flag(True) if parents else None, "user": user}
        return self._do(Op("POST", f"{self._base}/mkdir", params=params, parse=model(m.FileEntry)))

    def move(self, src: str, dst: str, *, overwrite: bool = False, user: str | None = None) -> m.FileEntry:
        """Rename or move a file, a link or a directory tree to ``dst``, whose parent must exist; returns its
        entry there. An existing ``dst`` is a :class:`berth.Conflict` unless ``overwrite``."""
        body = drop_none({"from": src, "to": dst, "overwrite": overwrite, "user": user})
        return self._do(Op("POST", f"{self._base}/move", json=body, parse=model(m.FileEntry)))

    def watch(self, path: str, *, recursive: bool = False, user: str | None = None) -> Any:
        """Watch the directory ``path`` (and with ``recursive`` every directory under it): returns once the watch
        is in place, an iterator (``async for`` on an ``AsyncSandbox``) of :class:`berth.models.WatchEvent`, each
        change as it happens. Use it in a ``with`` (``async with``) block or ``close()`` it to end the watch;
        the iteration ends by itself when the sandbox's side ends it (``ended`` then says why)."""
        params = {"path": path, "recursive": flag(True) if recursive else None, "user": user}
        return self._c._watch(Op("GET", f"{self._base}/watch", params=params, timeout=None))

    def upload_tar(self, path: str, data: bytes, *, parents: bool = False) -> m.Extracted:
        """Unpack a tar into the directory ``path`` (made when missing)."""
        params = {"path": path, "parents": flag(True) if parents else None}
        return self._do(Op("PUT", f"{self._base}/archive", params=params, content=data, content_type="application/x-tar", parse=model(m.Extracted), timeout=None))

    def download_tar(self, path: str) -> bytes:
        """The directory ``path`` as a tar, paths relative to it."""
        return self._do(Op("GET", f"{self._base}/archive", params={"path": path}, parse=as_bytes, timeout=None))

    def upload(self, local: str, path: str, *, parents: bool = True) -> m.Extracted:
        """Copy a local directory's contents (or one local file) into the directory ``path``."""
        return self.upload_tar(path, _tar_of(local), parents=parents)

    def download(self, path: str, local: str) -> list[str]:
        """Copy the directory ``path``'s contents into the local directory ``local``; returns the names."""
        op = Op("GET", f"{self._base}/archive", params={"path": path}, parse=as_bytes, timeout=None)
        return self._do(op, lambda data: _untar(data, local))


class Net(_Namespace):
    """``sandbox.net``: the sandbox's egress policy, its log, and a suggested allowlist."""

    def __init__(self, sandbox: Any):
        super().__init__(sandbox._client)
        self._base = f"/v1/sandboxes/{seg(sandbox.id)}/net"

    def change(self, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> m.NetChanged:
        body = {"allow": list(allow), "deny": list(deny)}
        return self._do(Op("POST", self._base, json=body, parse=model(m.NetChanged)))

    def allow(self, *rules: str) -> m.NetChanged:
        return self.change(allow=rules)

    def deny(self, *rules: str) -> m.NetChanged:
        return self.change(deny=rules)

    def log(self) -> list[m.EgressRecord]:
        return self._do(Op("GET", f"{self._base}/log", parse=models(m.EgressRecord)))

    def suggest(self) -> m.NetSuggestion:
        return self._do(Op("GET", f"{self._base}/suggest", parse=model(m.NetSuggestion)))


class SandboxAPI:
    """The plain calls on one sandbox, shared by :class:`berth.Sandbox` and :class:`berth.AsyncSandbox`."""

    id: str
    info: m.SandboxInfo
    _client: Any

    def _do(self, op: Op, then: Callable | None = None) -> Any:
        return self._client._do(op, then)

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{seg(self.id)}"

    def _record(self, info: m.SandboxInfo) -> m.SandboxInfo:
        self.info = info
        return info

    def _lifecycle(self, action: str, body: dict[str, Any] | None = None) -> m.SandboxInfo:
        op = Op("POST", f"{self._base}/{action}", json=body, parse=model(m.SandboxInfo), timeout=None)
        return self._do(op, self._record)

    def refresh(self) -> m.SandboxInfo:
        """Read the sandbox's record again (``info`` is updated)."""
        return self._do(Op("GET", self._base, parse=model(m.SandboxInfo)), self._record)

    def stop(self) -> m.SandboxInfo:
        """End every process, keep the files."""
        return self._lifecycle("stop")

    def start(self) -> m.SandboxInfo:
        return self._lifecycle("start")

    def set_ttl(self, seconds: float | None) -> m.SandboxInfo:
        """Give it ``seconds`` more to live from now (sooner or later than before), or with None no TTL."""
        return self._lifecycle("ttl", {"ttl_seconds": seconds})

    def pause(self) -> m.SandboxInfo:
        """Freeze every process, keeping its memory; ``resume`` (or any exec, context run or file call) wakes it."""
        return self._lifecycle("pause")

    def resume(self) -> m.SandboxInfo:
        return self._lifecycle("resume")

    def hibernate(self) -> m.SandboxInfo:
        """Write every process and its memory to disk and release the RAM; ``wake`` (or any exec, context run or
        file call) brings them back where they were. Needs CRIU on the daemon's host."""
        return self._lifecycle("hibernate")

    def wake(self) -> m.SandboxInfo:
        return self._lifecycle("wake")

    def expose(self, port: int, *, public: bool = False, ttl: float | None = None) -> m.Preview:
        """A URL through the daemon's TCP listener that reaches what this sandbox serves on its own
        ``127.0.0.1:port`` (HTTP and WebSockets), its token in it unless ``public``; it works until ``ttl``
        seconds have passed, it is removed (``unexpose``), or the sandbox is."""
        body = drop_none({"port": port, "public": public, "ttl_seconds": ttl})
        return self._do(Op("POST", f"{self._base}/previews", json=body, parse=model(m.Preview)))

    def previews(self) -> list[m.Preview]:
        """Its previews, their URLs without tokens."""
        return self._do(Op("GET", f"{self._base}/previews", parse=models(m.Preview)))

    def unexpose(self, preview_id: str) -> None:
        """Remove a preview: its URL stops working at once."""
        return self._do(Op("DELETE", f"{self._base}/previews/{seg(preview_id)}", parse=lambda r: None))

    def rebuild(self) -> m.SandboxInfo:
        return self._lifecycle("rebuild")

    def restore(self, snapshot: str) -> m.SandboxInfo:
        """Replace the files with a copy of the snapshot's (id or name)."""
        return self._lifecycle("restore", {"snapshot": snapshot})

    def reset(self, *, keep_workspace: bool = False) -> m.SandboxInfo:
        """Back to the image's clean state (``keep_workspace``: only the root file system)."""
        return self._lifecycle("reset", {"keep_workspace": keep_workspace})

    def snapshot(self, name: str | None = None, *, with_processes: bool = False) -> m.Snapshot:
        """The sandbox's files at this instant; ``with_processes=True``: its running processes too (a sandbox
        created from the snapshot continues them)."""
        body: dict[str, Any] = {"name": name} if name else {}
        if with_processes:
            body["with_processes"] = True
        return self._do(Op("POST", f"{self._base}/snapshots", json=body, parse=model(m.Snapshot), timeout=None))

    def diff(self, against: str | None = None) -> m.Diff:
        """What changed, against ``parent``, ``image`` or a snapshot (default: parent if any, else image)."""
        return self._do(Op("GET", f"{self._base}/diff", params={"against": against}, parse=model(m.Diff), timeout=None))

    def patch(self, against: str | None = None) -> str:
        """The same as a git-style patch (paths relative to the sandbox's root)."""
        params = {"against": against, "format": "patch"}
        return self._do(Op("GET", f"{self._base}/diff", params=params, parse=as_text, timeout=None))

    def export(self, repo: str, branch: str, *, base: str | None = None, against: str | None = None,
               message: str | None = None, author_name: str | None = None, author_email: str | None = None) -> m.Exported:  # fmt: skip
        """Commit the changes under /workspace onto a new branch of a git repository on the daemon's host."""
        body = drop_none({"repo": repo, "branch": branch, "base": base, "against": against, "message": message,
                          "author_name": author_name, "author_email": author_email})  # fmt: skip
        return self._do(Op("POST", f"{self._base}/export", json=body, parse=model(m.Exported), timeout=None))

    def journal(self) -> list[m.JournalRecord]:
        return self._do(Op("GET", f"/v1/sandboxes/{seg(self.id)}/journal", parse=models(m.JournalRecord)))

    def verify_journal(self) -> m.JournalVerdict:
        op = Op("GET", f"{self._base}/journal", params={"verify": "true"}, parse=model(m.JournalVerdict))
        return self._do(op)

    def usage(self) -> m.Usage:
        """What it has used so far: CPU seconds, memory, disk, egress each way, and its budget."""
        return self._do(Op("GET", f"{self._base}/usage", parse=model(m.Usage)))

    def usage_history(self, *, since_ms: int | None = None, until_ms: int | None = None) -> list[m.UsagePoint]:
        """Its recent usage, a point every 5 s for the last hour it ran, oldest first (CPU as a running total)."""
        params = {"since_ms": since_ms, "until_ms": until_ms}
        return self._do(Op("GET", f"{self._base}/usage/history", params=params, parse=models(m.UsagePoint)))

    def set_budget(self, *, cpu_seconds: float | None = None, egress_bytes: int | None = None,
                   wall_seconds: float | None = None) -> m.Usage:  # fmt: skip
        """Change its budget live; the limits not given stay as they are."""
        body = drop_none({"cpu_seconds": cpu_seconds, "egress_bytes": egress_bytes, "wall_seconds": wall_seconds})
        return self._do(Op("POST", f"{self._base}/budget", json=body, parse=model(m.Usage)))

    def receipt(self) -> m.Receipt:
        """The receipt, once the sandbox has been removed."""
        return self._do(Op("GET", f"{self._base}/receipt", parse=model(m.Receipt)))

    def execs(self) -> list[m.ExecInfo]:
        """Every exec the daemon keeps for this sandbox."""
        return self._do(Op("GET", f"{self._base}/execs", parse=models(m.ExecInfo)))

    def exec_log(self, exec_id: str) -> str:
        return self._do(Op("GET", f"{self._base}/execs/{seg(exec_id)}/log", parse=as_text, timeout=None))

    def kill(self, exec_id: str) -> m.ExecInfo:
        return self._do(Op("DELETE", f"{self._base}/execs/{seg(exec_id)}", parse=model(m.ExecInfo)))
