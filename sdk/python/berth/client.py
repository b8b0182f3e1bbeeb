"""The synchronous client: one connection pool to one daemon."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Iterator

import httpx

from . import models as m
from .errors import TransportError
from ._api import ClientAPI
from ._core import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    Config,
    Op,
    check,
    finish,
    make_http_kwargs,
    retry_delay,
    retryable_status,
    transport_error,
    was_sent,
)


class Client(ClientAPI):
    """A connection to a berth daemon.

    ``Client()`` finds the daemon by itself: ``BERTH_API`` and ``BERTH_TOKEN`` when set (as they are in every
    exec of a sandbox), else the unix socket at ``BERTH_SOCKET`` or ``/run/berth/berth.sock``. Or say where:
    ``Client(socket="/path/berth.sock")``, ``Client(url="http://127.0.0.1:7070", token="berth_...")``.

    ``timeout`` bounds each non-streaming call (seconds); ``retries`` is how many times a call that did not get
    through is sent again (mutating calls keep their idempotency key, so a retry is never carried out twice).
    """

    def __init__(self, socket: str | None = None, url: str | None = None, token: str | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES):  # fmt: skip
        self.config = Config.resolve(socket=socket, url=url, token=token)
        self.retries = retries
        transport = httpx.HTTPTransport(uds=self.config.socket) if self.config.socket else httpx.HTTPTransport()
        self._http = httpx.Client(transport=transport, **make_http_kwargs(self.config, timeout))
        self._namespaces()

    def __repr__(self) -> str:
        return f"Client({self.config!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- carrying out calls ----

    def _send(self, op: Op, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            try:
                request = self._http.build_request(op.method, op.path, **op.request_kwargs())
                r = self._http.send(request, stream=stream)
                if not stream:
                    r.read()
            except httpx.TransportError as exc:
                if attempt < self.retries and op.may_retry(exc, was_sent(exc)):
                    time.sleep(retry_delay(attempt))
                    attempt += 1
                    continue
                raise transport_error(exc, self.config) from exc
            if retryable_status(r) and attempt < self.retries:
                r.close()
                time.sleep(retry_delay(attempt))
                attempt += 1
                continue
            return r

    def _do(self, op: Op, then: Callable | None = None) -> Any:
        value = finish(op, self._send(op))
        return then(value) if then else value

    def _stream(self, op: Op) -> httpx.Response:
        """Open a streamed answer; an error answer is raised. The caller closes it."""
        r = self._send(op, stream=True)
        if r.status_code >= 400:
            r.read()
            r.close()
            check(r)
        return r

    # ---- streams ----

    def _watch(self, op: Op) -> "DirWatch":
        return DirWatch(self._stream(op))

    def events(self, *, follow: bool = True) -> Iterator[m.LifecycleEvent]:
        """Lifecycle events: the recent ones, then (``follow``) each new one as it happens. Break to stop."""
        if not follow:
            yield from self.recent_events()
            return
        r = self._stream(Op("GET", "/v1/events", params={"follow": "true"}, timeout=None))
        try:
            for data in sse_data(r.iter_lines()):
                yield m.LifecycleEvent.from_dict(json.loads(data))
        finally:
            r.close()


class DirWatch:
    """``files.watch``: each change as it happens (iterate); ``close()`` or leaving ``with`` ends the watch."""

    def __init__(self, r: httpx.Response):
        self._r = r
        self._lines = r.iter_lines()
        self.ended: str | None = None
        first = self._next_event()
        if first is None or first.type != "ready":
            self.close()
            raise TransportError("the watch's stream ended before the watch was in place")

    def _next_event(self) -> m.WatchEvent | None:
        try:
            for line in self._lines:
                if line.strip():
                    return m.WatchEvent.from_dict(json.loads(line))
        except httpx.TransportError:
            pass
        return None

    def __iter__(self) -> "DirWatch":
        return self

    def __next__(self) -> m.WatchEvent:
        ev = self._next_event()
        if ev is None or ev.type == "end":
            self.ended = ev.reason if ev else "the watch's stream was closed"
            self.close()
            raise StopIteration
        return ev

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> "DirWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sse_data(lines: Any) -> Iterator[str]:
    """The ``data`` of each server-sent event."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


_default_lock = threading.Lock()
_defaults: dict[tuple, Client] = {}


def default_client() -> Client:
    """The client ``Sandbox.create()`` uses when none is given: one per place the environment names."""
    config = Config.resolve()
    key = (config.socket, config.url, config.token)
    with _default_lock:
        if key not in _defaults:
            _defaults[key] = Client(socket=config.socket, url=config.url, token=config.token)
        return _defaults[key]
