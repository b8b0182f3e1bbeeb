"""What the sync and async clients share: where the daemon is, how a call is described, how answers are read."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional
from urllib.parse import quote

import httpx

from . import errors

DEFAULT_SOCKET = "/run/berth/berth.sock"
#: Seconds a non-streaming call may take (a create builds a sandbox; a fork copies files).
DEFAULT_TIMEOUT = 300.0
#: How many times the SDK itself retries a call that did not get through (same idempotency key each time).
DEFAULT_RETRIES = 3
_BACKOFF = (0.2, 0.5, 1.0, 2.0)

# Routes that honour an Idempotency-Key (docs/api.md, "Idempotency keys").
_KEYED_SUFFIXES = ("/stop", "/start", "/rebuild", "/snapshots", "/restore", "/reset", "/fork")


@dataclass
class Config:
    """Where the daemon is: a unix socket, or a base URL with a bearer token."""

    socket: Optional[str] = None
    url: Optional[str] = None
    token: Optional[str] = None

    @classmethod
    def resolve(cls, socket: str | None = None, url: str | None = None, token: str | None = None) -> "Config":
        """Explicit arguments first; then ``BERTH_API`` with ``BERTH_TOKEN`` (set in every exec of a sandbox);
        then ``BERTH_SOCKET``; then the default socket."""
        if socket and url:
            raise ValueError("give either socket= or url=, not both")
        if url:
            return cls(url=url.rstrip("/"), token=token if token is not None else os.environ.get("BERTH_TOKEN"))
        if socket:
            return cls(socket=socket, token=token)
        api = os.environ.get("BERTH_API")
        if api:
            return cls(url=api.rstrip("/"), token=token if token is not None else os.environ.get("BERTH_TOKEN"))
        return cls(socket=os.environ.get("BERTH_SOCKET") or DEFAULT_SOCKET, token=token)

    @property
    def base_url(self) -> str:
        return self.url or "http://berth"

    def headers(self) -> dict[str, str]:
        h = {"User-Agent": "berth-python"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    def __repr__(self) -> str:  # never show the token
        where = f"socket={self.socket!r}" if self.socket else f"url={self.url!r}"
        return f"Config({where}, token={'set' if self.token else None})"


def seg(value: str) -> str:
    """A path segment, percent-encoded."""
    return quote(str(value), safe="")


def flag(value: bool) -> str:
    return "true" if value else "false"


def octal(mode: int | str | None) -> str | None:
    if mode is None:
        return None
    return format(mode, "o") if isinstance(mode, int) else str(mode)


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def is_keyed(method: str, path: str) -> bool:
    """Whether the route takes an Idempotency-Key."""
    parts = path.split("?")[0].rstrip("/").split("/")
    if method == "POST" and path.rstrip("/") == "/v1/sandboxes":
        return True
    if len(parts) == 4 and parts[:3] == ["", "v1", "sandboxes"] and method == "DELETE":
        return True
    if len(parts) >= 5 and parts[:3] == ["", "v1", "sandboxes"]:
        if parts[4] == "execs" and ((method == "POST" and len(parts) == 5) or (method == "DELETE" and len(parts) == 6)):
            return True
        if method == "POST" and len(parts) == 5 and ("/" + parts[4]) in _KEYED_SUFFIXES:
            return True
    return False


@dataclass
class Op:
    """One API call: what to send, how to read the answer."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    content_type: str | None = None
    parse: Callable[[httpx.Response], Any] = lambda r: None
    none_on_404: bool = False
    timeout: Any = "default"
    key: str | None = None

    def __post_init__(self) -> None:
        self.params = {k: v for k, v in self.params.items() if v is not None}
        if self.key is None and is_keyed(self.method, self.path):
            self.key = str(uuid.uuid4())

    def headers(self) -> dict[str, str]:
        h: dict[str, str] = {}
        if self.key:
            h["Idempotency-Key"] = self.key
        if self.content_type:
            h["Content-Type"] = self.content_type
        return h

    def request_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"params": self.params, "headers": self.headers()}
        if self.json is not None:
            kw["json"] = self.json
        elif self.content is not None:
            kw["content"] = self.content
        if self.timeout != "default":
            kw["timeout"] = self.timeout
        return kw

    def may_retry(self, exc: Exception, sent: bool) -> bool:
        """A call may be sent again when it cannot have been carried out twice: it never reached the daemon,
        or it is keyed, or it is a read or an idempotent write."""
        if not sent:
            return True
        return bool(self.key) or self.method in ("GET", "PUT", "HEAD")


def retry_delay(attempt: int) -> float:
    return _BACKOFF[min(attempt, len(_BACKOFF) - 1)]


def transport_error(exc: Exception, config: Config) -> errors.TransportError:
    where = config.socket or config.url
    return errors.TransportError(f"cannot reach the berth daemon at {where}: {exc}")


def was_sent(exc: Exception) -> bool:
    """Whether the request may have reached the daemon before the failure."""
    return not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def check(r: httpx.Response) -> None:
    """Raise the error an answer carries (its body must have been read)."""
    if r.status_code >= 400:
        raise errors.from_response(r.status_code, r.content)


def retryable_status(r: httpx.Response) -> bool:
    """503 with the connection limit hit: the daemon closes the connection, try again."""
    return r.status_code == 503


def finish(op: Op, r: httpx.Response) -> Any:
    if op.none_on_404 and r.status_code == 404:
        return None
    check(r)
    return op.parse(r)


# ---- parsers ----


def as_json(r: httpx.Response) -> Any:
    return r.json()


def model(cls: Any) -> Callable[[httpx.Response], Any]:
    return lambda r: cls.from_dict(r.json())


def models(cls: Any) -> Callable[[httpx.Response], Any]:
    return lambda r: [cls.from_dict(x) for x in r.json()]


def as_bytes(r: httpx.Response) -> bytes:
    return r.content


def as_text(r: httpx.Response) -> str:
    return r.content.decode("utf-8", "replace")


def ndjson_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def make_http_kwargs(config: Config, timeout: float | None) -> dict[str, Any]:
    return {
        "base_url": config.base_url,
        "headers": config.headers(),
        "timeout": httpx.Timeout(timeout, connect=min(timeout or 30.0, 30.0)),
    }


def argv_of(cmd: str | list[str] | tuple[str, ...]) -> list[str]:
    """A string runs under ``sh -c``; a list is the argv itself."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise ValueError("an empty command")
    return argv


def exec_body(
    cmd: str | list[str],
    *,
    timeout: float | None = None,
    max_output: int | None = None,
    max_log: int | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | bytes | None = None,
    detach: bool = False,
    stdin_open: bool = False,
    user: str | None = None,
) -> dict[str, Any]:
    if isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8")
    body: dict[str, Any] = {
        "argv": argv_of(cmd),
        "env": dict(env) if env else None,
        "workdir": cwd,
        "timeout_seconds": timeout,
        "max_output_bytes": max_output,
        "max_log_bytes": max_log,
        "stdin": stdin,
        "user": user,
    }
    if detach:
        body["detach"] = True
    if stdin_open:
        body["stdin_open"] = True
    return drop_none(body)


def stream_timeout(timeout: float | None) -> httpx.Timeout | None:
    """The HTTP timeout of a streamed exec or run: none when the command has none; else the command's own
    plus a minute between two reads, so a daemon that stops answering is noticed."""
    if timeout is None:
        return None
    return httpx.Timeout(30.0, read=float(timeout) + 60.0)


def is_route_missing(exc: errors.BerthError) -> bool:
    """A 404 because the daemon does not serve the route at all (an older daemon), not a missing resource."""
    return isinstance(exc, errors.NotFound) and exc.message == "no such route"
