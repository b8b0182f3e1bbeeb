"""The asynchronous client: the same surface as the sync one, awaited.

    async with AsyncSandbox.create(ttl=600) as sb:
        r = await sb.exec("echo hi", timeout=10)
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any, AsyncIterator, Callable

import httpx

from . import contexts, errors
from . import models as m
from ._api import ClientAPI, Files, Net, SandboxAPI
from ._core import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    Config,
    Op,
    argv_of,
    check,
    exec_body,
    finish,
    make_http_kwargs,
    model,
    retry_delay,
    retryable_status,
    seg,
    stream_timeout,
    transport_error,
    was_sent,
)
from .contexts import ContextAPI
from .desktop import DesktopControl
from .results import CommandResult, ExecGather, Execution, Frame, RunGather

_POLL = (0.02, 0.05, 0.1, 0.2, 0.5)


async def _maybe_await(value: Any) -> None:
    if inspect.isawaitable(value):
        await value


class AsyncClient(ClientAPI):
    """A connection to a berth daemon, for asyncio. Found and configured as :class:`berth.Client` is."""

    def __init__(self, socket: str | None = None, url: str | None = None, token: str | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES):  # fmt: skip
        self.config = Config.resolve(socket=socket, url=url, token=token)
        self.retries = retries
        if self.config.socket:
            transport = httpx.AsyncHTTPTransport(uds=self.config.socket)
        else:
            transport = httpx.AsyncHTTPTransport()
        self._http = httpx.AsyncClient(transport=transport, **make_http_kwargs(self.config, timeout))
        self._namespaces()

    def __repr__(self) -> str:
        return f"AsyncClient({self.config!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _send(self, op: Op, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            try:
                request = self._http.build_request(op.method, op.path, **op.request_kwargs())
                r = await self._http.send(request, stream=stream)
                if not stream:
                    await r.aread()
            except httpx.TransportError as exc:
                if attempt < self.retries and op.may_retry(exc, was_sent(exc)):
                    await asyncio.sleep(retry_delay(attempt))
                    attempt += 1
                    continue
                raise transport_error(exc, self.config) from exc
            if retryable_status(r) and attempt < self.retries:
                await r.aclose()
                await asyncio.sleep(retry_delay(attempt))
                attempt += 1
                continue
            return r

    async def _do(self, op: Op, then: Callable | None = None) -> Any:
        value = finish(op, await self._send(op))
        return then(value) if then else value

    async def _stream(self, op: Op) -> httpx.Response:
        r = await self._send(op, stream=True)
        if r.status_code >= 400:
            await r.aread()
            await r.aclose()
            check(r)
        return r

    async def _watch(self, op: Op) -> "AsyncDirWatch":
        w = AsyncDirWatch(await self._stream(op))
        first = await w._next_event()
        if first is None or first.type != "ready":
            await w.aclose()
            raise errors.TransportError("the watch's stream ended before the watch was in place")
        return w

    async def events(self, *, follow: bool = True) -> AsyncIterator[m.LifecycleEvent]:
        """Lifecycle events: the recent ones, then (``follow``) each new one as it happens."""
        if not follow:
            for event in await self.recent_events():
                yield event
            return
        r = await self._stream(Op("GET", "/v1/events", params={"follow": "true"}, timeout=None))
        try:
            data: list[str] = []
            async for line in r.aiter_lines():
                if line == "":
                    if data:
                        yield m.LifecycleEvent.from_dict(json.loads("\n".join(data)))
                    data = []
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
        finally:
            await r.aclose()


class AsyncDirWatch:
    """``await sb.files.watch(...)``: ``async for`` each change as it happens; ``aclose()`` or leaving
    ``async with`` ends the watch."""

    def __init__(self, r: httpx.Response):
        self._r = r
        self._lines = r.aiter_lines()
        self.ended: str | None = None

    async def _next_event(self) -> m.WatchEvent | None:
        try:
            async for line in self._lines:
                if line.strip():
                    return m.WatchEvent.from_dict(json.loads(line))
        except httpx.TransportError:
            pass
        return None

    def __aiter__(self) -> "AsyncDirWatch":
        return self

    async def __anext__(self) -> m.WatchEvent:
        ev = await self._next_event()
        if ev is None or ev.type == "end":
            self.ended = ev.reason if ev else "the watch's stream was closed"
            await self.aclose()
            raise StopAsyncIteration
        return ev

    async def aclose(self) -> None:
        await self._r.aclose()

    async def __aenter__(self) -> "AsyncDirWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class _Creating:
    """What ``AsyncSandbox.create`` returns: await it for the sandbox, or ``async with`` it."""

    def __init__(self, make: Any):
        self._make = make
        self._sandbox: AsyncSandbox | None = None

    def __await__(self) -> Any:
        return self._make().__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sandbox = await self._make()
        return self._sandbox

    async def __aexit__(self, *exc: Any) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(*exc)


_default: dict[tuple, AsyncClient] = {}


def default_async_client() -> AsyncClient:
    config = Config.resolve()
    key = (config.socket, config.url, config.token, id(asyncio.get_running_loop()))
    if key not in _default:
        _default[key] = AsyncClient(socket=config.socket, url=config.url, token=config.token)
    return _default[key]


class AsyncSandbox(SandboxAPI):
    """A sandbox, for asyncio: every call of :class:`berth.Sandbox`, awaited."""

    def __init__(self, info: m.SandboxInfo, client: AsyncClient):
        self.info = info
        self.id = info.id
        self._client = client
        self.files = Files(self)
        self.net = Net(self)
        self.desktop = DesktopControl(self)
        self._contexts: dict[str, AsyncCodeContext] = {}

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, name={self.name!r})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def client(self) -> AsyncClient:
        return self._client

    @classmethod
    def create(cls, *, client: AsyncClient | None = None, **options: Any) -> _Creating:
        """``sb = await AsyncSandbox.create(...)``, or ``async with AsyncSandbox.create(...) as sb``."""

        async def make() -> AsyncSandbox:
            c = client or default_async_client()
            return cls(await c.create_sandbox(**options), c)

        return _Creating(make)

    @classmethod
    async def connect(cls, sandbox: str, *, client: AsyncClient | None = None) -> "AsyncSandbox":
        client = client or default_async_client()
        return cls(await client.get_sandbox(sandbox), client)

    @classmethod
    async def list(cls, *, client: AsyncClient | None = None) -> list["AsyncSandbox"]:
        client = client or default_async_client()
        return [cls(info, client) for info in await client.list_sandboxes()]

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for attempt in range(5):
            try:
                await self.remove()
                return
            except errors.NotFound:
                return
            except errors.Conflict:  # busy with another operation: it ends soon
                if attempt == 4:
                    raise
                await asyncio.sleep(0.5 * (attempt + 1))

    async def remove(self) -> m.Receipt:
        return await self._client.remove_sandbox(self.id)

    async def fork(self, n: int = 1, *, with_processes: bool = False) -> list["AsyncSandbox"]:
        """As :meth:`berth.Sandbox.fork`."""
        body: dict[str, Any] = {"count": n}
        if with_processes:
            body["with_processes"] = True
        op = Op("POST", f"{self._base}/fork", json=body, parse=model(m.Forked), timeout=None)
        forked: m.Forked = await self._do(op)
        return [type(self)(info, self._client) for info in forked.sandboxes]

    async def exec(self, cmd: str | list[str], *, timeout: float | None = None, max_output: int | None = None,
                   max_log: int | None = None, env: dict[str, str] | None = None, cwd: str | None = None, user: str | None = None,
                   stdin: str | bytes | None = None, on_stdout: Callable[[str], Any] | None = None,
                   on_stderr: Callable[[str], Any] | None = None, background: bool = False, check: bool = False,
             idempotency_key: str | None = None) -> Any:  # fmt: skip
        """As :meth:`berth.Sandbox.exec`; callbacks may be plain functions or coroutines."""
        if background:
            body = exec_body(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env, cwd=cwd, user=user, stdin=stdin, detach=True)
            info = await self._do(Op("POST", f"{self._base}/execs", json=body, parse=model(m.ExecInfo), key=idempotency_key))
            return AsyncProcess(self, info)
        stream = await self.exec_stream(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env,
                                        cwd=cwd, user=user, stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, idempotency_key=idempotency_key)  # fmt: skip
        result = await stream.wait()
        return result.check() if check else result

    async def exec_stream(self, cmd: str | list[str], *, timeout: float | None = None, max_output: int | None = None,
                          max_log: int | None = None, env: dict[str, str] | None = None, cwd: str | None = None, user: str | None = None,
                          stdin: str | bytes | None = None, on_stdout: Callable[[str], Any] | None = None,
                          on_stderr: Callable[[str], Any] | None = None, idempotency_key: str | None = None) -> "AsyncExecStream":  # fmt: skip
        """Start a command; ``async for frame in stream`` reads its frames, ``await stream.wait()`` its end."""
        body = exec_body(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env, cwd=cwd, user=user, stdin=stdin)
        r = await self._client._stream(Op("POST", f"{self._base}/execs", json=body, timeout=stream_timeout(timeout), key=idempotency_key))
        return AsyncExecStream(self, r, ExecGather(argv_of(cmd), on_stdout, on_stderr))

    async def process(self, exec_id: str) -> "AsyncProcess":
        return AsyncProcess(self, _find_exec(await self.execs(), exec_id))

    async def create_code_context(self, language: str = "python", *, cwd: str | None = None, env: dict[str, str] | None = None) -> "AsyncCodeContext":
        return AsyncCodeContext(self, await self._do(contexts.create_op(self.id, language, cwd, env)))

    async def code_contexts(self) -> list["AsyncCodeContext"]:
        return [AsyncCodeContext(self, info) for info in await self._do(contexts.list_op(self.id))]

    async def code_context(self, context_id: str) -> "AsyncCodeContext":
        return AsyncCodeContext(self, await self._do(contexts.get_op(self.id, context_id)))

    async def run_code(self, code: str, *, language: str = "python", **options: Any) -> Execution:
        if language not in self._contexts:
            self._contexts[language] = await self.create_code_context(language)
        return await self._contexts[language].run_code(code, **options)


def _find_exec(execs: list[m.ExecInfo], exec_id: str) -> m.ExecInfo:
    for info in execs:
        if info.exec_id == exec_id:
            return info
    raise errors.NotFound(f"the daemon keeps no exec {exec_id!r} of this sandbox", status=404)


class AsyncExecStream:
    """A streamed exec, for asyncio (see :class:`berth.ExecStream`)."""

    def __init__(self, sandbox: AsyncSandbox, response: httpx.Response, gather: ExecGather):
        self.sandbox = sandbox
        self._response = response
        self._gather = gather
        self._frames = self._run()

    @property
    def exec_id(self) -> str | None:
        return self._gather.exec_id

    def __aiter__(self) -> AsyncIterator[Frame]:
        return self._frames

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._frames.aclose()
        await self._response.aclose()

    async def wait(self) -> CommandResult:
        async for _ in self._frames:
            pass
        result = self._gather.result()
        if result is None:
            raise errors.TransportError("the exec's stream was closed before it ended")
        return result

    async def _feed(self, d: dict[str, Any]) -> Frame | None:
        frame, called = self._gather.feed(d)
        await _maybe_await(called)
        return frame

    async def _run(self) -> AsyncIterator[Frame]:
        gather, r = self._gather, self._response
        try:
            if r.status_code == 201:  # a retried exec: its record, not a second stream
                await r.aread()
                gather.exec_id = m.ExecInfo.from_dict(r.json()).exec_id
            else:
                try:
                    async for line in r.aiter_lines():
                        if line.strip():
                            frame = await self._feed(json.loads(line))
                            if frame is not None:
                                yield frame
                except httpx.TransportError:
                    pass
        finally:
            await r.aclose()
        if gather.exit is None:
            if gather.exec_id is None:
                raise errors.TransportError("the exec's stream ended before the command started")
            proc = AsyncProcess(self.sandbox, _find_exec(await self.sandbox.execs(), gather.exec_id))
            info = await proc.wait_info()
            if not gather.out and not gather.err:
                log = await self.sandbox.exec_log(gather.exec_id)
                frame = await self._feed({"type": "output", "stream": "stdout", "seq": 0, "data": log})
                if frame is not None:
                    yield frame
            assert info.result is not None
            frame = await self._feed({"type": "exit", **info.result.to_dict()})
            if frame is not None:
                yield frame


class AsyncProcess:
    """A background exec, for asyncio (see :class:`berth.Process`)."""

    def __init__(self, sandbox: AsyncSandbox, info: m.ExecInfo):
        self.sandbox = sandbox
        self.info = info

    def __repr__(self) -> str:
        return f"AsyncProcess(exec_id={self.exec_id!r}, argv={self.argv!r}, running={self.info.running})"

    @property
    def exec_id(self) -> str:
        return self.info.exec_id

    @property
    def argv(self) -> list[str]:
        return self.info.argv

    async def refresh(self) -> m.ExecInfo:
        self.info = _find_exec(await self.sandbox.execs(), self.exec_id)
        return self.info

    async def wait_info(self, timeout: float | None = None) -> m.ExecInfo:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        step = 0
        while self.info.running or self.info.result is None:
            if deadline is not None and loop.time() >= deadline:
                raise errors.WaitTimeout(f"exec {self.exec_id} still runs after {timeout} s")
            await asyncio.sleep(_POLL[min(step, len(_POLL) - 1)])
            step += 1
            await self.refresh()
        return self.info

    async def wait(self, timeout: float | None = None) -> CommandResult:
        info = await self.wait_info(timeout)
        assert info.result is not None
        return CommandResult.of(info.argv, info.result, stdout=await self.logs())

    async def kill(self) -> m.ExecInfo:
        self.info = await self.sandbox.kill(self.exec_id)
        return self.info

    async def logs(self) -> str:
        return await self.sandbox.exec_log(self.exec_id)

    async def follow(self) -> AsyncIterator[str]:
        op = Op("GET", f"{self.sandbox._base}/execs/{seg(self.exec_id)}/log", params={"follow": "true"}, timeout=None)
        r = await self.sandbox._client._stream(op)
        try:
            async for chunk in r.aiter_text():
                if chunk:
                    yield chunk
        finally:
            await r.aclose()


class AsyncCodeContext(ContextAPI):
    """A code context of an :class:`AsyncSandbox`."""

    async def run_code(self, code: str, *, timeout: float | None = None, max_output: int | None = None,
                       env: dict[str, str] | None = None, on_stdout: Callable | None = None, on_stderr: Callable | None = None,
                       on_result: Callable | None = None, on_error: Callable | None = None) -> Execution:  # fmt: skip
        gather = RunGather(on_stdout, on_stderr, on_result, on_error)
        r = await self.sandbox._client._stream(self._run_op(code, timeout, max_output, env))
        try:
            async for line in r.aiter_lines():
                if line.strip():
                    await _maybe_await(gather.feed(json.loads(line)))
        finally:
            await r.aclose()
        if not gather.ended:
            raise errors.TransportError("the run's stream ended before its end frame")
        return gather.execution
