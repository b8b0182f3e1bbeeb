"""Exceptions raised by the berth SDK.

Every error the daemon reports has the body ``{"error": {"code": ..., "message": ...}}``; the SDK raises it as
the subclass of :class:`BerthError` for its code, carrying ``code``, ``status`` and the daemon's sentence as
``message``. Branch on the class (or ``code``), never on the message.
"""

from __future__ import annotations

from typing import Any


class BerthError(Exception):
    """Base class of every error the SDK raises."""

    #: The API's error code (``not_found``, ``conflict``...), or ``transport`` / ``client`` for errors that did
    #: not come from the daemon.
    code: str = "unknown"
    #: The HTTP status, or None when no answer arrived.
    status: int | None = None

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.body = body

    def __str__(self) -> str:
        where = f"HTTP {self.status}, " if self.status is not None else ""
        return f"{self.message} ({where}{self.code})"


class ApiError(BerthError):
    """An error answer from the daemon. Subclassed per code."""


class InvalidRequest(ApiError):
    code, status = "invalid_request", 400


class Unauthorized(ApiError):
    code, status = "unauthorized", 401


class Forbidden(ApiError):
    """The token may not do this: it is read-only, or the call is an operator's."""

    code, status = "forbidden", 403


class NotFound(ApiError):
    code, status = "not_found", 404


class RequestTimeout(ApiError):
    code, status = "request_timeout", 408


class Conflict(ApiError):
    code, status = "conflict", 409


class PayloadTooLarge(ApiError):
    code, status = "payload_too_large", 413


class HeadersTooLarge(ApiError):
    code, status = "headers_too_large", 431


class QuotaExceeded(ApiError):
    """The tenant's quota has no room for this (a create, a fork)."""

    code, status = "quota_exceeded", 429


class InternalError(ApiError):
    code, status = "internal", 500


class Unavailable(ApiError):
    code, status = "unavailable", 503


class MethodNotAllowed(ApiError):
    """A method the path does not serve (the daemon answers 405 with no body)."""

    code, status = "method_not_allowed", 405


class TransportError(BerthError):
    """The daemon could not be reached, or the connection broke before an answer."""

    code = "transport"


class WaitTimeout(BerthError):
    """A client-side wait (a background exec's ``wait(timeout=...)``) ran out; the command goes on."""

    code = "wait_timeout"


class CommandFailed(BerthError):
    """Raised by ``CommandResult.check()`` (or ``exec(..., check=True)``) for a non-zero exit code."""

    code = "command_failed"

    def __init__(self, result: Any):
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-5:]
        super().__init__(f"command {result.argv!r} exited with {result.exit_code}" + (": " + " / ".join(tail) if tail else ""))
        self.result = result


class CodeError(BerthError):
    """Raised by ``Execution.check()`` when the code raised an error in its context."""

    code = "code_error"

    def __init__(self, execution: Any):
        err = execution.error
        super().__init__(f"{err.name}: {err.value}")
        self.execution = execution


BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        RequestTimeout,
        Conflict,
        PayloadTooLarge,
        HeadersTooLarge,
        QuotaExceeded,
        InternalError,
        Unavailable,
        MethodNotAllowed,
    )
}
BY_STATUS: dict[int, type[ApiError]] = {cls.status: cls for cls in BY_CODE.values() if cls.status}


def from_response(status: int, body: bytes) -> ApiError:
    """The exception for an error answer: its code from the body, else from the status."""
    import json

    code = message = None
    parsed: Any = None
    try:
        parsed = json.loads(body)
        code = parsed["error"]["code"]
        message = parsed["error"]["message"]
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()
        message = text or f"HTTP {status} with no error body"
    cls = BY_CODE.get(code or "") or BY_STATUS.get(status) or ApiError
    err_code = code or (cls.code if cls is not ApiError else f"http_{status}")
    return cls(message or "", code=err_code, status=status, body=parsed)
