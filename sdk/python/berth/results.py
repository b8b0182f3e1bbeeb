"""The outcomes of commands and of code runs, and how their streams are gathered (shared by sync and async)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import errors
from .models import ExecExit, ExecOutput, ExecResult, ExecStarted, ExecTruncated


@dataclass
class CommandResult:
    """A finished command: its exit code, its output, and what the daemon said about it.

    ``stdout`` and ``stderr`` hold what the answer carried: the head and the tail of the output when it was
    larger than ``max_output`` (``truncated`` is then true and ``bytes_dropped`` counts the middle). A
    background exec's output comes from its log, which interleaves both streams: it is all in ``stdout``.
    """

    argv: list[str]
    exec_id: str
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    signal: Optional[int] = None
    duration_ms: int = 0
    timed_out: bool = False
    killed: bool = False
    bytes_dropped: int = 0
    output_bytes: int = 0
    log_bytes_dropped: int = 0
    oom_killed: bool = False
    error: Optional[str] = None

    @property
    def truncated(self) -> bool:
        """Output was dropped from the middle (the head and the most recent tail were kept)."""
        return self.bytes_dropped > 0

    @property
    def duration(self) -> float:
        """Seconds from the start to the end of the exec."""
        return self.duration_ms / 1000.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> "CommandResult":
        """Raise :class:`berth.CommandFailed` unless the exit code is 0; return self otherwise."""
        if self.exit_code != 0:
            raise errors.CommandFailed(self)
        return self

    @classmethod
    def of(cls, argv: list[str], result: ExecResult, stdout: str = "", stderr: str = "") -> "CommandResult":
        return cls(
            argv=argv,
            exec_id=result.exec_id,
            exit_code=result.exit_code,
            stdout=stdout,
            stderr=stderr,
            signal=result.signal,
            duration_ms=result.duration_ms,
            timed_out=result.timed_out,
            killed=result.killed,
            bytes_dropped=result.bytes_dropped,
            output_bytes=result.output_bytes,
            log_bytes_dropped=result.log_bytes_dropped,
            oom_killed=result.oom_killed,
            error=result.error,
        )


Frame = ExecStarted | ExecOutput | ExecTruncated | ExecExit


def exec_frame(d: dict[str, Any]) -> Frame | None:
    kind = d.get("type")
    cls = {"started": ExecStarted, "output": ExecOutput, "truncated": ExecTruncated, "exit": ExecExit}.get(kind or "")
    return cls.from_dict(d) if cls else None  # type: ignore[attr-defined]


class ExecGather:
    """Gathers an exec's NDJSON frames into a :class:`CommandResult`, calling the output callbacks."""

    def __init__(self, argv: list[str], on_stdout: Callable | None = None, on_stderr: Callable | None = None):
        self.argv = argv
        self.on_stdout, self.on_stderr = on_stdout, on_stderr
        self.exec_id: str | None = None
        self.out: list[str] = []
        self.err: list[str] = []
        self.exit: ExecExit | None = None

    def feed(self, d: dict[str, Any]) -> tuple[Frame | None, Any]:
        """Take one frame; returns it typed, and what its callback returned (an awaitable for async ones)."""
        frame = exec_frame(d)
        called = None
        if isinstance(frame, ExecStarted):
            self.exec_id = frame.exec_id
        elif isinstance(frame, ExecOutput):
            if frame.stream == "stderr":
                self.err.append(frame.data)
                called = self.on_stderr(frame.data) if self.on_stderr else None
            else:
                self.out.append(frame.data)
                called = self.on_stdout(frame.data) if self.on_stdout else None
        elif isinstance(frame, ExecExit):
            self.exit = frame
            self.exec_id = frame.exec_id
        return frame, called

    def result(self) -> CommandResult | None:
        if self.exit is None:
            return None
        return CommandResult.of(self.argv, self.exit, "".join(self.out), "".join(self.err))


# ---- Code contexts ----


@dataclass
class Result:
    """One value a run produced, in every MIME type it was rendered as (``data``). ``is_main`` marks the value
    of the code's last expression; ``display()``ed values and figures are not main."""

    data: dict[str, Any]
    is_main: bool = False

    def get(self, mime: str) -> Any:
        return self.data.get(mime)

    @property
    def formats(self) -> list[str]:
        return list(self.data)

    @property
    def text(self) -> Optional[str]:
        return self.data.get("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self.data.get("text/html")

    @property
    def markdown(self) -> Optional[str]:
        return self.data.get("text/markdown")

    @property
    def png(self) -> Optional[str]:
        """Base64, as the daemon sends it."""
        return self.data.get("image/png")

    @property
    def jpeg(self) -> Optional[str]:
        return self.data.get("image/jpeg")

    @property
    def svg(self) -> Optional[str]:
        return self.data.get("image/svg+xml")

    @property
    def json(self) -> Any:
        return self.data.get("application/json")


@dataclass
class ExecutionError:
    """An error the code raised: its class ``name``, its ``value`` (message) and its ``traceback``."""

    name: str
    value: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.value}"


@dataclass
class Execution:
    """The outcome of ``run_code``."""

    results: list[Result] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    duration_ms: int = 0
    interrupted: bool = False
    timed_out: bool = False
    killed: bool = False
    output_bytes: int = 0
    bytes_dropped: int = 0

    @property
    def text(self) -> Optional[str]:
        """The main result's text/plain, or None when the code ended with no value."""
        for r in self.results:
            if r.is_main:
                return r.text
        return None

    @property
    def main(self) -> Optional[Result]:
        return next((r for r in self.results if r.is_main), None)

    @property
    def truncated(self) -> bool:
        return self.bytes_dropped > 0

    @property
    def duration(self) -> float:
        return self.duration_ms / 1000.0

    def check(self) -> "Execution":
        """Raise :class:`berth.CodeError` when the code raised; return self otherwise."""
        if self.error is not None:
            raise errors.CodeError(self)
        return self


class RunGather:
    """Gathers a code run's NDJSON frames into an :class:`Execution`, calling the callbacks."""

    def __init__(self, on_stdout=None, on_stderr=None, on_result=None, on_error=None):
        self.cb = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "error": on_error}
        self.out: list[str] = []
        self.err: list[str] = []
        self.execution = Execution()
        self.ended = False

    def feed(self, d: dict[str, Any]) -> Any:
        kind = d.get("type")
        ex = self.execution
        arg: Any = None
        if kind == "stdout":
            self.out.append(d.get("data", ""))
            arg = d.get("data", "")
        elif kind == "stderr":
            self.err.append(d.get("data", ""))
            arg = d.get("data", "")
        elif kind == "result":
            arg = Result(data=dict(d.get("data") or {}), is_main=bool(d.get("is_main")))
            ex.results.append(arg)
        elif kind == "error":
            arg = ExecutionError(name=d.get("name", ""), value=d.get("value", ""), traceback=d.get("traceback", ""))
            ex.error = arg
        elif kind == "truncated":
            ex.bytes_dropped = max(ex.bytes_dropped, int(d.get("dropped_bytes", 0)))
        elif kind == "end":
            self.ended = True
            ex.execution_count = d.get("execution_count")
            for name in ("duration_ms", "output_bytes"):
                setattr(ex, name, int(d.get(name) or 0))
            ex.bytes_dropped = int(d.get("bytes_dropped") or ex.bytes_dropped)
            for name in ("interrupted", "timed_out", "killed"):
                setattr(ex, name, bool(d.get(name)))
        ex.stdout, ex.stderr = "".join(self.out), "".join(self.err)
        fn = self.cb.get(kind or "")
        return fn(arg) if fn and arg is not None else None
