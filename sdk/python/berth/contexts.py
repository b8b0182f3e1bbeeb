"""Code contexts: an interpreter (python, javascript, bash) kept alive in a sandbox, whose state carries over
from one ``run_code`` to the next. The plain calls are shared by both clients; runs stream."""

from __future__ import annotations

import json
from typing import Any, Callable

from . import errors
from . import models as m
from ._core import Op, drop_none, model, seg, stream_timeout
from .results import Execution, RunGather

LANGUAGES = ("python", "javascript", "bash")


def create_op(sandbox_id: str, language: str, cwd: str | None, env: dict[str, str] | None) -> Op:
    body = drop_none({"language": language, "cwd": cwd, "env": dict(env) if env else None})
    return Op("POST", f"/v1/sandboxes/{seg(sandbox_id)}/contexts", json=body, parse=model(m.ContextInfo), timeout=None)


def list_op(sandbox_id: str) -> Op:
    return Op("GET", f"/v1/sandboxes/{seg(sandbox_id)}/contexts", parse=lambda r: [m.ContextInfo.from_dict(x) for x in r.json()])


def get_op(sandbox_id: str, ctx: str) -> Op:
    return Op("GET", f"/v1/sandboxes/{seg(sandbox_id)}/contexts/{seg(ctx)}", parse=model(m.ContextInfo))


def run_body(code: str, timeout: float | None, max_output: int | None, env: dict[str, str] | None = None) -> dict[str, Any]:
    return drop_none({"code": code, "timeout_seconds": timeout, "max_output_bytes": max_output, "env": dict(env) if env else None})


class ContextAPI:
    """The plain calls on one code context."""

    sandbox: Any
    info: m.ContextInfo

    def __init__(self, sandbox: Any, info: m.ContextInfo):
        self.sandbox = sandbox
        self.info = info

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, language={self.language!r}, sandbox={self.sandbox.id!r})"

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def language(self) -> str:
        return self.info.language

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{seg(self.sandbox.id)}/contexts/{seg(self.id)}"

    def _do(self, op: Op, then: Callable | None = None) -> Any:
        return self.sandbox._client._do(op, then)

    def _record(self, info: m.ContextInfo) -> m.ContextInfo:
        self.info = info
        return info

    def refresh(self) -> m.ContextInfo:
        return self._do(get_op(self.sandbox.id, self.id), self._record)

    def restart(self) -> m.ContextInfo:
        """Start the interpreter afresh: its state is gone, ``execution_count`` is 0 again."""
        return self._do(Op("POST", f"{self._base}/restart", parse=model(m.ContextInfo), timeout=None), self._record)

    def interrupt(self) -> bool:
        """Interrupt the run under way; False when nothing was running."""
        return self._do(Op("POST", f"{self._base}/interrupt", parse=lambda r: bool(r.json().get("interrupted"))))

    def remove(self) -> None:
        return self._do(Op("DELETE", self._base))

    def _run_op(self, code: str, timeout: float | None, max_output: int | None, env: dict[str, str] | None = None) -> Op:
        return Op("POST", f"{self._base}/run", json=run_body(code, timeout, max_output, env), timeout=stream_timeout(timeout))


class CodeContext(ContextAPI):
    """A code context of a :class:`berth.Sandbox`."""

    def run_code(self, code: str, *, timeout: float | None = None, max_output: int | None = None,
                 env: dict[str, str] | None = None, on_stdout: Callable[[str], Any] | None = None, on_stderr: Callable[[str], Any] | None = None,
                 on_result: Callable[[Any], Any] | None = None, on_error: Callable[[Any], Any] | None = None) -> Execution:  # fmt: skip
        """Run ``code`` in this context and gather what it printed, the values it produced and its error.

        ``timeout`` (seconds) interrupts the run when it runs out. ``env``: variables for this run only. The callbacks are called as the output,
        results and error arrive."""
        gather = RunGather(on_stdout, on_stderr, on_result, on_error)
        r = self.sandbox._client._stream(self._run_op(code, timeout, max_output, env))
        try:
            for line in r.iter_lines():
                if line.strip():
                    gather.feed(json.loads(line))
        finally:
            r.close()
        if not gather.ended:
            raise errors.TransportError("the run's stream ended before its end frame")
        return gather.execution
