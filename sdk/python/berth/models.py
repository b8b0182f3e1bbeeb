"""Typed models of the API's objects, as plain dataclasses.

Each model names the OpenAPI schema it mirrors in ``__schema__``; the SDK's tests hold every model to
``crates/berth-api/openapi.json`` (same properties, compatible types). Answers are read with ``from_dict``,
which ignores fields a newer daemon adds, so an older SDK keeps working against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ._model import Model
from .models_access import MintedToken, Quota, SecretInfo, Tenant, TenantUse, TokenInfo  # noqa: F401 (models of this module too)
from .models_desktop import ActionsDone, Cursor, Desktop, DesktopInfo, ScreenSize, Settled, Window  # noqa: F401 (likewise)


# ---- Sandboxes ----


@dataclass
class Network(Model):
    """An egress policy: ``mode`` (none, enforce, learn, allow_all), ``allow`` and ``deny`` rules, ``add_hosts``."""

    __schema__ = "Network"
    mode: Optional[str] = None
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    add_hosts: dict[str, str] = field(default_factory=dict)


@dataclass
class Mount(Model):
    """A host path brought into a sandbox (create's ``mounts``)."""

    __schema__ = "Mount"
    host: str
    target: str
    readonly: bool = False


@dataclass
class VolumeMount(Model):
    """A named volume brought into a sandbox (create's ``volumes``)."""

    __schema__ = "VolumeMount"
    name: str
    target: str
    readonly: bool = False


@dataclass
class Budget(Model):
    """Limits on what a sandbox may use: at 80 % of one a warning, at 100 % it is removed."""

    __schema__ = "Budget"
    cpu_seconds: Optional[float] = None
    egress_bytes: Optional[int] = None
    wall_seconds: Optional[float] = None


@dataclass
class Charged(Model):
    """What counts against a budget: the sandbox's own use and that of the sandboxes it made."""

    __schema__ = "Charged"
    cpu_seconds: float = 0.0
    egress_bytes: int = 0
    wall_seconds: float = 0.0


@dataclass
class Usage(Model):
    """What a sandbox has used, as the kernel and its proxy counted it."""

    __schema__ = "Usage"
    id: str
    name: str = ""
    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    memory_gib_seconds: float = 0.0
    peak_memory_bytes: int = 0
    disk_bytes: int = 0
    egress_bytes_out: int = 0
    egress_bytes_in: int = 0
    execs: int = 0
    running_seconds: float = 0.0
    paused_seconds: float = 0.0
    hibernated_seconds: float = 0.0
    budget: Budget = field(default_factory=Budget)
    charged: Charged = field(default_factory=Charged)
    sampled_at_ms: int = 0


@dataclass
class UsagePoint(Model):
    """One point of a sandbox's recent usage."""

    __schema__ = "UsagePoint"
    at_ms: int = 0
    cpu_seconds: float = 0.0
    memory_bytes: int = 0
    disk_bytes: int = 0


@dataclass
class SandboxInfo(Model):
    """A sandbox's record, as ``GET /v1/sandboxes/{id}`` shows it."""

    __schema__ = "Sandbox"
    id: str
    name: str
    image: str
    state: str
    created_at_ms: int
    last_activity_ms: int
    expires_at_ms: Optional[int] = None
    idle_timeout_seconds: Optional[float] = None
    last_activity: Optional[str] = None
    idle_pause_seconds: Optional[float] = None
    ttl_active_only: bool = False
    ttl_action: str = "remove"
    paused_at_ms: Optional[int] = None
    hibernated_at_ms: Optional[int] = None
    idle_hibernate_seconds: Optional[float] = None
    memory_bytes: Optional[int] = None
    pids: Optional[int] = None
    cpus: Optional[float] = None
    labels: dict[str, str] = field(default_factory=dict)
    pid: Optional[int] = None
    landlock: Optional[str] = None
    persistent: bool = False
    disk_bytes: Optional[int] = None
    parent: Optional[str] = None
    network: Network = field(default_factory=Network)
    owner: Optional[str] = None
    usage: Optional[Usage] = None
    isolation: str = "namespaces"
    tenant: Optional[str] = None
    desktop: Optional[Desktop] = None


@dataclass
class OutputFile(Model):
    """A file copied out of a sandbox at teardown."""

    __schema__ = "OutputFile"
    path: str
    saved_as: str
    bytes: int
    sha256: str


@dataclass
class Receipt(Model):
    """What removing a sandbox did (its teardown receipt)."""

    __schema__ = "Teardown"
    id: str
    steps: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    name: str = ""
    reason: str = ""
    outputs: list[OutputFile] = field(default_factory=list)
    patch: Optional[OutputFile] = None
    revoked: list[str] = field(default_factory=list)
    flushed: dict[str, int] = field(default_factory=dict)
    clean: bool = False
    started_at_ms: int = 0
    finished_at_ms: int = 0
    usage: Optional[Usage] = None


# ---- Execs ----


@dataclass
class ExecResult(Model):
    """How an exec ended (the ``exit`` frame's fields)."""

    __schema__ = "ExecResult"
    exec_id: str
    exit_code: int
    signal: Optional[int] = None
    duration_ms: int = 0
    timed_out: bool = False
    killed: bool = False
    bytes_dropped: int = 0
    output_bytes: int = 0
    log_bytes_dropped: int = 0
    oom_killed: bool = False
    error: Optional[str] = None


@dataclass
class ExecInfo(Model):
    """An exec as the exec list shows it: ``result`` is None while it runs."""

    __schema__ = "ExecInfo"
    exec_id: str
    argv: list[str]
    started_at_ms: int
    running: bool
    result: Optional[ExecResult] = None


@dataclass
class ExecStarted(Model):
    """Stream frame: the command is running (``pid`` inside the sandbox)."""

    __schema__ = "ExecFrameStarted"
    type: str
    exec_id: str
    pid: int


@dataclass
class ExecOutput(Model):
    """Stream frame: a piece of stdout or stderr."""

    __schema__ = "ExecFrameOutput"
    type: str
    stream: str
    seq: int
    data: str


@dataclass
class ExecTruncated(Model):
    """Stream frame: ``dropped_bytes`` from the middle of the output were not sent (the tail follows)."""

    __schema__ = "ExecFrameTruncated"
    type: str
    dropped_bytes: int


@dataclass
class ExecExit(ExecResult):
    """Stream frame: the last one, with the exec's result."""

    __schema__ = "ExecFrameExit"
    type: str = "exit"


# ---- Journal, events, info, tokens ----


@dataclass
class JournalRecord(Model):
    """One action in a sandbox's hash-chained journal."""

    __schema__ = "JournalRecord"
    seq: int
    time_ms: int
    actor: str
    action: str
    args: Any
    result: Any
    prev: str
    hash: str


@dataclass
class JournalVerdict(Model):
    """The outcome of checking a journal's chain: ``first_bad`` is (line, why) or None."""

    __schema__ = "JournalVerdict"
    ok: bool
    records: int
    first_bad: Optional[tuple[int, str]] = None


@dataclass
class LifecycleEvent(Model):
    """A daemon lifecycle event (created, exec_finished, removed...)."""

    __schema__ = "LifecycleEvent"
    seq: int
    time_ms: int
    sandbox: str
    kind: str
    exec_id: Optional[str] = None
    exit_code: Optional[int] = None


@dataclass
class Health(Model):
    __schema__ = "Health"
    status: str


@dataclass
class Bound(Model):
    """One bound the daemon holds sandboxes to, and what sets it."""

    __schema__ = "Bound"
    resource: str
    bound: str
    set_by: str
    note: str


@dataclass
class WarmPool(Model):
    """The daemon's warm pool: sandboxes built ahead for creates that ask for the defaults."""

    __schema__ = "WarmPool"
    size: int = 0
    ready: int = 0
    served: int = 0
    missed: int = 0


@dataclass
class IsolationInfo(Model):
    """One isolation and whether this host offers it (``detail`` says what provides it, or why not)."""

    __schema__ = "IsolationInfo"
    isolation: str
    available: bool
    detail: str


@dataclass
class DaemonInfo(Model):
    __schema__ = "DaemonInfo"
    version: str
    bounds: list[Bound] = field(default_factory=list)
    warm: WarmPool = field(default_factory=WarmPool)
    isolation: str = "namespaces"
    isolations: list[IsolationInfo] = field(default_factory=list)


@dataclass
class Preview(Model):
    """A preview URL of one port of a sandbox (``Sandbox.expose``): ``token`` is shown only when it is made."""

    __schema__ = "Preview"
    id: str
    sandbox_id: str
    port: int
    public: bool
    url: str
    host_url: Optional[str]
    token: Optional[str]
    created_at_ms: int
    expires_at_ms: Optional[int]


# ---- Files ----


@dataclass
class FileEntry(Model):
    """A file inside a sandbox: ``kind`` is file, directory, symlink, fifo, socket, char_device or block_device."""

    __schema__ = "FileEntry"
    name: str
    kind: str
    size: int
    mode: int
    mtime_ms: int
    uid: int
    gid: int
    link_target: Optional[str] = None

    @property
    def is_dir(self) -> bool:
        return self.kind == "directory"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"


@dataclass
class Extracted(Model):
    __schema__ = "Extracted"
    entries: int


@dataclass
class WatchEvent:
    """One change ``files.watch`` reports. ``type`` is ``create``, ``write``, ``remove``, ``rename`` (``from_``
    is the old path), ``chmod`` or ``overflow`` (changes were missed: look again); ``path`` is relative to the
    watched directory, and ``dir`` says it names a directory. (The API's ``from`` is ``from_`` here.)"""

    type: str
    path: Optional[str] = None
    from_: Optional[str] = None
    dir: bool = False
    reason: Optional[str] = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WatchEvent":
        return cls(data["type"], data.get("path"), data.get("from"), bool(data.get("dir")), data.get("reason"))


# ---- Durable projects ----


@dataclass
class Snapshot(Model):
    """A read-only copy of a sandbox's files; ``origin`` is ``snapshot`` or ``fork``."""

    __schema__ = "Snapshot"
    id: str
    sandbox_id: str
    image: str
    created_at_ms: int
    origin: str
    name: Optional[str] = None
    with_processes: bool = False
    tenant: Optional[str] = None


@dataclass
class Forked(Model):
    __schema__ = "Forked"
    parent: str
    sandboxes: list[SandboxInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class PathState(Model):
    """One side of a change: ``type`` is file, dir, symlink or other."""

    __schema__ = "PathState"
    type: str
    mode: int
    size: int
    symlink_target: Optional[str] = None


@dataclass
class Change(Model):
    """A changed path: ``kind`` is added, modified or deleted."""

    __schema__ = "Change"
    path: str
    kind: str
    old: Optional[PathState] = None
    new: Optional[PathState] = None


@dataclass
class Diff(Model):
    __schema__ = "Diff"
    against: str
    changes: list[Change] = field(default_factory=list)


@dataclass
class Exported(Model):
    __schema__ = "Exported"
    branch: str
    commit: str
    files: int


@dataclass
class Volume(Model):
    __schema__ = "Volume"
    name: str
    created_at_ms: int
    used_by: list[str] = field(default_factory=list)
    tenant: Optional[str] = None


@dataclass
class StorageInfo(Model):
    """The storage pool: ``mode`` is btrfs, reflink or copy."""

    __schema__ = "StorageInfo"
    mode: str
    size_bytes: int
    free_bytes: int
    quotas: bool
    bounded: bool
    default_disk_bytes: Optional[int] = None
    unbounded: Optional[str] = None


@dataclass
class RejectedEntry(Model):
    __schema__ = "RejectedEntry"
    path: str
    reason: str


@dataclass
class Image(Model):
    """An image sandboxes are built from: ``kind`` is host, directory, tarball, oci or docker."""

    __schema__ = "Image"
    name: str
    kind: str
    created_at_ms: int
    layers: int = 0
    files: int = 0
    bytes: int = 0
    rejected: list[RejectedEntry] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: Optional[str] = None
    used_by: list[str] = field(default_factory=list)
    tenant: Optional[str] = None


@dataclass
class ImportProgress(Model):
    """An image import's progress frame."""

    __schema__ = "ImportFrameProgress"
    type: str
    layer: int
    layers: int
    bytes_done: int
    bytes_total: int


# ---- Egress ----


@dataclass
class NetChanged(Model):
    """The policy after a live change, and how many open connections it closed."""

    __schema__ = "NetChanged"
    network: Network
    closed: int


@dataclass
class EgressRecord(Model):
    """One egress attempt: ``verdict`` is allowed, denied or error."""

    __schema__ = "EgressRecord"
    time_ms: int
    sandbox: str
    host: str
    port: int
    method: str
    verdict: str
    reason: str
    bytes_up: int
    bytes_down: int
    duration_ms: int
    rule: Optional[str] = None
    exec: Optional[str] = None


@dataclass
class NetSuggestion(Model):
    __schema__ = "NetSuggestion"
    allow: list[str] = field(default_factory=list)


# ---- Code contexts ----


@dataclass
class ContextInfo(Model):
    """A live code context (an interpreter kept running in a sandbox): ``state`` is idle or busy."""

    __schema__ = "Context"
    id: str
    sandbox_id: str
    language: str
    cwd: str
    state: str
    execution_count: int
    created_at_ms: int
    last_run_at_ms: Optional[int] = None
    #: The exec that is the context's interpreter (listed with the sandbox's execs while it runs).
    exec_id: str = ""


@dataclass
class RunEnd(Model):
    """How a code run ended (its ``end`` frame); :class:`berth.Execution` carries the same fields."""

    __schema__ = "RunEnd"
    execution_count: int
    duration_ms: int = 0
    interrupted: bool = False
    timed_out: bool = False
    killed: bool = False
    output_bytes: int = 0
    bytes_dropped: int = 0


#: Every model, for the conformance test and for readers.
MODELS: list[type[Model]] = [
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, Model) and cls.__schema__
]
