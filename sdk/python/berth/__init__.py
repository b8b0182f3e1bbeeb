"""berth: the Python SDK of berth, a self-hostable sandbox platform for AI coding agents.

    from berth import Sandbox

    with Sandbox.create(memory="512M", ttl=600) as sb:
        print(sb.exec("echo hello; uname -r", timeout=10).stdout)
"""

from . import models
from ._api import size
from .aio import AsyncClient, AsyncCodeContext, AsyncExecStream, AsyncProcess, AsyncSandbox
from .client import Client
from .contexts import CodeContext
from .errors import (
    ApiError,
    BerthError,
    CodeError,
    CommandFailed,
    Conflict,
    Forbidden,
    HeadersTooLarge,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    RequestTimeout,
    TransportError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from .desktop import Screenshot
from .models import Desktop, Mount, Network, Quota, VolumeMount
from .results import CommandResult, Execution, ExecutionError, Result
from .sandbox import ExecStream, Process, Sandbox

__version__ = "0.1.0"

__all__ = [
    "ApiError", "AsyncClient", "AsyncCodeContext", "AsyncExecStream", "AsyncProcess", "AsyncSandbox",
    "BerthError", "Client", "CodeContext", "CodeError", "CommandFailed", "CommandResult", "Conflict",
    "Desktop", "ExecStream", "Forbidden", "Execution", "ExecutionError", "HeadersTooLarge", "InternalError", "InvalidRequest",
    "MethodNotAllowed", "Mount", "Network", "NotFound", "PayloadTooLarge", "Process", "Quota", "QuotaExceeded", "RequestTimeout",
    "Result", "Sandbox", "Screenshot", "TransportError", "Unauthorized", "Unavailable", "VolumeMount", "WaitTimeout",
    "models", "size",
]  # fmt: skip
