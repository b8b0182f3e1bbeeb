"""The unmodified E2B SDKs against a berth daemon's --e2b-listen, as crates/berth/tests/e2b.rs starts it.

The environment says where, in either of the SDK's two ways: E2B_API_URL and E2B_SANDBOX_URL (the listener,
plain HTTP), or E2B_DOMAIN alone (TLS, names under it resolved to the listener, berth's authority trusted
through SSL_CERT_FILE). E2B_API_KEY is a berth token; BERTH_E2B_BAD_KEY is a key berth does not know.
"""
import os
import time
import uuid

import pytest
from e2b import Sandbox


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def test_id():
    return f"test_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def sandbox(test_id):
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id})
    try:
        yield sb
    finally:
        sb.kill()


def domain():
    """The domain sandbox hosts are under (`<port>-<id>.<domain>`)."""
    return os.environ.get("E2B_DOMAIN") or os.environ["BERTH_E2B_DOMAIN"]


def get_port(host, path="/", headers=None, routed_by=None):
    """GET `path` of a sandbox port whose host (`sandbox.get_host(port)`) is `host`: by that host's name over
    TLS when the SDK is pointed by E2B_DOMAIN, else from E2B_SANDBOX_URL with `Host` set to it; or, with
    `routed_by=(id, port)`, by E2B's routing headers. None when the connection fails."""
    import httpx

    headers = dict(headers or {})
    if routed_by:
        headers.update({"E2b-Sandbox-Id": routed_by[0], "E2b-Sandbox-Port": str(routed_by[1])})
    try:
        if "E2B_SANDBOX_URL" in os.environ:
            if not routed_by:
                headers["Host"] = host
            return httpx.get(os.environ["E2B_SANDBOX_URL"] + path, headers=headers, timeout=10)
        base = f"https://api.{domain()}" if routed_by else f"https://{host}"
        return httpx.get(base + path, headers=headers, timeout=10, verify=os.environ["SSL_CERT_FILE"])
    except httpx.HTTPError:
        return None


def wait_for(what, check, seconds=30.0):
    """Poll `check` until it is true, or fail saying `what` did not happen."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {seconds} s")
        time.sleep(0.1)
