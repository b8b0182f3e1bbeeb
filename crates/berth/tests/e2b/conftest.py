"""The unmodified E2B SDKs against a berth daemon's --e2b-listen, as crates/berth/tests/e2b.rs starts it.

The environment says where: E2B_API_URL and E2B_SANDBOX_URL (the listener), E2B_API_KEY (a berth token);
BERTH_E2B_BAD_KEY is a key berth does not know.
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


def wait_for(what, check, seconds=30.0):
    """Poll `check` until it is true, or fail saying `what` did not happen."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {seconds} s")
        time.sleep(0.1)
