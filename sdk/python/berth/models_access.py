"""Typed models of who reaches what: API tokens, secrets, and tenants with their quotas.

They are models like those of :mod:`berth.models` (which imports them, so ``berth.models.Tenant`` works), in a
module of their own because they are about access rather than about sandboxes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ._model import Model


@dataclass
class MintedToken(Model):
    """A freshly minted API token: the only time ``token`` is shown."""

    __schema__ = "MintedToken"
    id: str
    name: str
    token: str


@dataclass
class TokenInfo(Model):
    """A token as listed (never its secret); ``tenant``, ``read_only`` and ``selector`` when they narrow it."""

    __schema__ = "TokenInfo"
    id: str
    name: str
    created_at_ms: int
    tenant: Optional[str] = None
    read_only: bool = False
    selector: dict[str, str] = field(default_factory=dict)


@dataclass
class SecretInfo(Model):
    """A secret's name, size and times (never its value)."""

    __schema__ = "SecretInfo"
    name: str
    created_at_ms: int
    updated_at_ms: int
    bytes: int


@dataclass
class Quota(Model):
    """What a tenant's sandboxes may hold together; a limit that is ``None`` is not bounded."""

    __schema__ = "Quota"
    sandboxes: Optional[int] = None
    cpus: Optional[float] = None
    memory_bytes: Optional[int] = None
    disk_bytes: Optional[int] = None
    egress_bytes: Optional[int] = None


@dataclass
class TenantUse(Model):
    """What a tenant's sandboxes hold now, counted as its quota counts it."""

    __schema__ = "TenantUse"
    sandboxes: int = 0
    cpus: float = 0.0
    memory_bytes: int = 0
    disk_bytes: int = 0
    egress_bytes: int = 0


@dataclass
class Tenant(Model):
    """A team sharing the daemon: its ``quota`` and what it ``used`` now."""

    __schema__ = "Tenant"
    name: str
    created_at_ms: int
    quota: Quota = field(default_factory=Quota)
    used: TenantUse = field(default_factory=TenantUse)
