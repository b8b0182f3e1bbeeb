"""The synchronous :class:`Sandbox`, its streamed execs and its background processes."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterator

import httpx

from . import contexts, errors
from . import models as m
from ._api import Files, Net, SandboxAPI
from ._core import Op, argv_of, exec_body, model, seg, stream_timeout
from .client import Client, default_client
from .contexts import CodeContext
from .desktop import DesktopControl
from .results import CommandResult, ExecGather, Frame

_POLL = (0.02, 0.05, 0.1, 0.2, 0.5)


class Sandbox(SandboxAPI):
    """A sandbox of a berth daemon.

    ``Sandbox.create(...)`` makes one; used as a context manager it is removed on exit, also when the body
    raises. ``Sandbox.connect(id_or_name)`` takes an existing one. Files are under ``sb.files``, egress under
    ``sb.net``, the virtual desktop (``desktop=`` on create) under ``sb.desktop``."""

    def __init__(self, info: m.SandboxInfo, client: Client):
        self.info = info
        self.id = info.id
        self._client = client
        self.files = Files(self)
        self.net = Net(self)
        self.desktop = DesktopControl(self)
        self._contexts: dict[str, CodeContext] = {}

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def client(self) -> Client:
        return self._client

    # ---- life ----

    @classmethod
    def create(cls, *, client: Client | None = None, **options: Any) -> "Sandbox":
        """Create a sandbox. Options are the API's create fields (``name``, ``image``, ``memory_bytes``,
        ``cpus``, ``ttl_seconds``, ``env``, ``mounts``, ``network``, ``persistent``, ``secrets``...), with
        ``memory``/``disk`` (``"512M"``), ``ttl`` and ``idle_timeout`` as shorter names. ``desktop=``: a
        virtual desktop, ``True`` (1280x800), a :class:`berth.Desktop` or a ``(width, height)`` pair."""
        client = client or default_client()
        return cls(client.create_sandbox(**options), client)

    @classmethod
    def connect(cls, sandbox: str, *, client: Client | None = None) -> "Sandbox":
        client = client or default_client()
        return cls(client.get_sandbox(sandbox), client)

    @classmethod
    def list(cls, *, client: Client | None = None) -> list["Sandbox"]:
        client = client or default_client()
        return [cls(info, client) for info in client.list_sandboxes()]

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        for attempt in range(5):
            try:
                self.remove()
                return
            except errors.NotFound:
                return
            except errors.Conflict:  # busy with another operation: it ends soon
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def remove(self) -> m.Receipt:
        """Tear the sandbox down; answers its receipt."""
        return self._client.remove_sandbox(self.id)

    def fork(self, n: int = 1, *, with_processes: bool = False) -> list["Sandbox"]:
        """``n`` copy-on-write copies of this sandbox's files, each a running sandbox of its own.

        ``with_processes=True``: each copy also continues this sandbox's running programs from the instant of
        the fork (a checkpoint with CRIU; this sandbox runs on). Refused with :class:`berth.errors.Conflict` while
        execs, shells or code contexts run, and wherever hibernation is refused."""
        body: dict[str, Any] = {"count": n}
        if with_processes:
            body["with_processes"] = True
        op = Op("POST", f"{self._base}/fork", json=body, parse=model(m.Forked), timeout=None)
        forked: m.Forked = self._do(op)
        return [type(self)(info, self._client) for info in forked.sandboxes]

    # ---- execs ----

    def exec(self, cmd: str | list[str], *, timeout: float | None = None, max_output: int | None = None,
             max_log: int | None = None, env: dict[str, str] | None = None, cwd: str | None = None, user: str | None = None,
             stdin: str | bytes | None = None, on_stdout: Callable[[str], Any] | None = None,
             on_stderr: Callable[[str], Any] | None = None, background: bool = False, check: bool = False,
             idempotency_key: str | None = None, stdin_open: bool = False) -> Any:  # fmt: skip
        """Run a command (a string under ``sh -c``, a list as argv) and answer its :class:`CommandResult`.

        ``timeout`` is the daemon's: the whole process tree is killed when it runs out (exit code 124).
        ``max_output`` is the answer's output budget (head and tail kept). ``on_stdout``/``on_stderr`` get the
        output as it arrives. ``background=True`` answers at once with a :class:`Process`.

        ``idempotency_key``: a key of your own (a fresh one is made otherwise). A second call with the same key
        does not run the command again: it follows the first one's exec and answers its result, with its log
        (stdout and stderr interleaved) as ``stdout``.

        ``stdin_open=True`` (with ``background=True``) keeps its stdin open for :meth:`Process.write_stdin`.

        ``user``: who it runs as, a user of the sandbox's ``/etc/passwd`` by name or ``"UID[:GID]"`` (default
        root); a named user's ``HOME``, ``USER`` and ``LOGNAME`` are set and ``cwd`` defaults to its home."""
        if background:
            body = exec_body(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env, cwd=cwd, user=user, stdin=stdin,
                             detach=True, stdin_open=stdin_open)  # fmt: skip
            info = self._do(Op("POST", f"{self._base}/execs", json=body, parse=model(m.ExecInfo), key=idempotency_key))
            return Process(self, info)
        stream = self.exec_stream(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env, cwd=cwd, user=user,
                                  stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr, idempotency_key=idempotency_key)  # fmt: skip
        result = stream.wait()
        return result.check() if check else result

    def exec_stream(self, cmd: str | list[str], *, timeout: float | None = None, max_output: int | None = None,
                    max_log: int | None = None, env: dict[str, str] | None = None, cwd: str | None = None, user: str | None = None,
                    stdin: str | bytes | None = None, on_stdout: Callable[[str], Any] | None = None,
                    on_stderr: Callable[[str], Any] | None = None, idempotency_key: str | None = None) -> "ExecStream":  # fmt: skip
        """Run a command and iterate over its frames as they come (:class:`berth.models.ExecStarted`,
        ``ExecOutput``, ``ExecTruncated``, ``ExecExit``); ``.result`` once it has ended."""
        body = exec_body(cmd, timeout=timeout, max_output=max_output, max_log=max_log, env=env, cwd=cwd, user=user, stdin=stdin)
        return ExecStream(self, body, ExecGather(argv_of(cmd), on_stdout, on_stderr), idempotency_key)

    def process(self, exec_id: str) -> "Process":
        """A handle on an exec of this sandbox, by id."""
        return Process(self, _find_exec(self.execs(), exec_id))

    # ---- code contexts ----

    def create_code_context(self, language: str = "python", *, cwd: str | None = None, env: dict[str, str] | None = None) -> CodeContext:
        """A live interpreter in this sandbox (``python``, ``javascript`` or ``bash``)."""
        return CodeContext(self, self._do(contexts.create_op(self.id, language, cwd, env)))

    def code_contexts(self) -> list[CodeContext]:
        return [CodeContext(self, info) for info in self._do(contexts.list_op(self.id))]

    def code_context(self, context_id: str) -> CodeContext:
        return CodeContext(self, self._do(contexts.get_op(self.id, context_id)))

    def run_code(self, code: str, *, language: str = "python", **options: Any) -> Any:
        """Run code in this sandbox's default context for ``language`` (made on first use)."""
        if language not in self._contexts:
            self._contexts[language] = self.create_code_context(language)
        return self._contexts[language].run_code(code, **options)


def _find_exec(execs: list[m.ExecInfo], exec_id: str) -> m.ExecInfo:
    for info in execs:
        if info.exec_id == exec_id:
            return info
    raise errors.NotFound(f"the daemon keeps no exec {exec_id!r} of this sandbox", status=404)


class ExecStream:
    """An exec whose output is read as it comes. Iterate for the frames; ``wait()`` or ``result`` for the end.

    When the stream breaks (or a retried call gets the exec's record instead of its stream), the result is
    read from the exec list and, when nothing was streamed, the output from the exec's log."""

    def __init__(self, sandbox: Sandbox, body: dict[str, Any], gather: ExecGather, key: str | None = None):
        self.sandbox = sandbox
        self._gather = gather
        # The request is sent now, so the command starts now; the frames are read as the caller iterates.
        self._response = sandbox._client._stream(Op("POST", f"{sandbox._base}/execs", json=body, timeout=stream_timeout(body.get("timeout_seconds")), key=key))
        self._frames = self._run(self._response)

    @property
    def exec_id(self) -> str | None:
        return self._gather.exec_id

    def __iter__(self) -> Iterator[Frame]:
        return self._frames

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading (the command goes on; its log keeps its output)."""
        self._frames.close()
        self._response.close()

    def wait(self) -> CommandResult:
        for _ in self._frames:
            pass
        result = self._gather.result()
        if result is None:
            raise errors.TransportError("the exec's stream was closed before it ended")
        return result

    @property
    def result(self) -> CommandResult:
        return self.wait()

    def _run(self, r: httpx.Response) -> Iterator[Frame]:
        gather = self._gather
        try:
            if r.status_code == 201:  # a retried exec: its record, not a second stream
                r.read()
                gather.exec_id = m.ExecInfo.from_dict(r.json()).exec_id
            else:
                try:
                    for line in r.iter_lines():
                        if line.strip():
                            frame, _ = gather.feed(json.loads(line))
                            if frame is not None:
                                yield frame
                except httpx.TransportError:
                    pass
        finally:
            r.close()
        if gather.exit is None:
            if gather.exec_id is None:
                raise errors.TransportError("the exec's stream ended before the command started")
            yield from self._recover(gather.exec_id)

    def _recover(self, exec_id: str) -> Iterator[Frame]:
        gather = self._gather
        info = Process(self.sandbox, _find_exec(self.sandbox.execs(), exec_id)).wait_info()
        if not gather.out and not gather.err:
            frame, _ = gather.feed({"type": "output", "stream": "stdout", "seq": 0, "data": self.sandbox.exec_log(exec_id)})
            if frame is not None:
                yield frame
        assert info.result is not None
        frame, _ = gather.feed({"type": "exit", **info.result.to_dict()})
        if frame is not None:
            yield frame


class Process:
    """A background exec (``exec(..., background=True)``): wait for it, kill it, read its log."""

    def __init__(self, sandbox: Sandbox, info: m.ExecInfo):
        self.sandbox = sandbox
        self.info = info

    def __repr__(self) -> str:
        return f"Process(exec_id={self.exec_id!r}, argv={self.argv!r}, running={self.info.running})"

    @property
    def exec_id(self) -> str:
        return self.info.exec_id

    @property
    def argv(self) -> list[str]:
        return self.info.argv

    def refresh(self) -> m.ExecInfo:
        self.info = _find_exec(self.sandbox.execs(), self.exec_id)
        return self.info

    @property
    def running(self) -> bool:
        return self.refresh().running

    def wait_info(self, timeout: float | None = None) -> m.ExecInfo:
        deadline = None if timeout is None else time.monotonic() + timeout
        step = 0
        while self.info.running or self.info.result is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.WaitTimeout(f"exec {self.exec_id} still runs after {timeout} s")
            time.sleep(_POLL[min(step, len(_POLL) - 1)])
            step += 1
            self.refresh()
        return self.info

    def wait(self, timeout: float | None = None) -> CommandResult:
        """Wait until it has ended (``timeout``: at most this many seconds, else :class:`WaitTimeout`); its
        result, with the log (stdout and stderr interleaved) as ``stdout``."""
        info = self.wait_info(timeout)
        assert info.result is not None
        return CommandResult.of(info.argv, info.result, stdout=self.logs())

    def kill(self) -> m.ExecInfo:
        """Kill it (its process group and cgroup); answers its record (``result.killed``)."""
        self.info = self.sandbox.kill(self.exec_id)
        return self.info

    def write_stdin(self, data: str | bytes, *, close: bool = False) -> None:
        """Write to its stdin (it was started with ``stdin_open=True``); ``close`` closes it after."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        path = f"{self.sandbox._base}/execs/{self.exec_id}/stdin"
        params = {"close": "true"} if close else {}
        self.sandbox._do(Op("POST", path, params=params, content=raw, content_type="application/octet-stream"))

    def logs(self) -> str:
        """What its log holds so far."""
        return self.sandbox.exec_log(self.exec_id)

    def follow(self) -> Iterator[str]:
        """Its output as it is written, until it ends."""
        op = Op("GET", f"{self.sandbox._base}/execs/{seg(self.exec_id)}/log", params={"follow": "true"}, timeout=None)
        r = self.sandbox._client._stream(op)
        try:
            for chunk in r.iter_text():
                if chunk:
                    yield chunk
        finally:
            r.close()
