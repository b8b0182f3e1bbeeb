"""Egress, secrets, tokens, the TCP listener, and the SDK used from inside a sandbox with its session token."""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from pathlib import Path

import pytest

import berth
from conftest import SDK


def test_network_policy_changes_and_log(client):
    with berth.Sandbox.create(client=client, ttl=300, network={"allow": ["example.com:443"], "deny": ["gist.github.com"]}) as sb:
        assert sb.info.network.mode == "enforce" and sb.info.network.allow == ["example.com:443"]
        changed = sb.net.deny("*.example.org")
        assert "*.example.org" in changed.network.deny and changed.closed == 0
        changed = sb.net.allow("pypi.org:443")
        assert "pypi.org:443" in changed.network.allow
        assert sb.refresh().network.allow == changed.network.allow
        r = sb.exec("curl -sS -o /dev/null -w '%{http_code}' http://denied.example.org/ || true", timeout=30)
        assert "403" in r.stdout
        log = sb.net.log()
        assert any(rec.host == "denied.example.org" and rec.verdict == "denied" for rec in log)
        assert sb.net.suggest().allow == []
        with pytest.raises(berth.InvalidRequest):
            sb.net.allow("*")


def test_network_model_is_accepted(client):
    with berth.Sandbox.create(client=client, ttl=300, network=berth.Network(mode="learn")) as sb:
        assert sb.info.network.mode == "learn"


def test_secrets_set_list_use_remove(client):
    name = f"SDK_SECRET_{uuid.uuid4().hex[:6].upper()}"
    info = client.secrets.set(name, "s3cret-value")
    assert info.name == name and info.bytes == len("s3cret-value")
    try:
        assert name in [s.name for s in client.secrets.list()]
        with berth.Sandbox.create(client=client, ttl=300, secrets=[name]) as sb:
            r = sb.exec(f'test "${name}" = s3cret-value && echo "${name}"', timeout=10)
            assert r.exit_code == 0 and "s3cret-value" not in r.stdout and f"[redacted:{name}]" in r.stdout
    finally:
        client.secrets.remove(name)
    with pytest.raises(berth.NotFound):
        client.secrets.remove(name)
    with pytest.raises(berth.InvalidRequest):
        client.secrets.set("bad name", "x")


def test_tokens_mint_list_revoke(client, daemon):
    minted = client.tokens.create("sdk-temp")
    assert minted.token.startswith("berth_") and minted.name == "sdk-temp"
    assert minted.id in [t.id for t in client.tokens.list()]
    with berth.Client(url=daemon.url, token=minted.token) as c:
        assert c.health().status == "ok"
        client.tokens.revoke(minted.id)
        with pytest.raises(berth.Unauthorized):
            c.health()
    with pytest.raises(berth.NotFound):
        client.tokens.revoke(minted.id)


def test_a_tenants_token_reaches_its_own_and_its_quota_holds(client, daemon):
    name = f"sdk-{uuid.uuid4().hex[:6]}"
    made = client.tenants.create(name, berth.Quota(sandboxes=1, memory_bytes="256M"))
    assert made.name == name and made.quota.sandboxes == 1 and made.quota.memory_bytes == 256 << 20
    minted = client.tokens.create("sdk-tenant", tenant=name)
    assert {t.id: t.tenant for t in client.tokens.list()}[minted.id] == name
    read_only = client.tokens.create("sdk-looker", tenant=name, read_only=True)
    with berth.Sandbox.create(client=client, ttl=300) as theirs, berth.Client(url=daemon.url, token=minted.token) as c:
        with berth.Sandbox.create(client=c, ttl=300) as mine:
            assert mine.info.tenant == name and mine.info.memory_bytes == 256 << 20
            assert mine.exec("echo in tenant", timeout=10).stdout == "in tenant\n"
            with pytest.raises(berth.QuotaExceeded) as full:
                berth.Sandbox.create(client=c, ttl=300)
            assert full.value.status == 429 and "quota" in str(full.value)
            assert [s.id for s in c.list_sandboxes()] == [mine.id]
            with pytest.raises(berth.NotFound):
                berth.Sandbox.connect(theirs.id, client=c)
            assert [t.name for t in c.tenants.list()] == [name] and c.tenants.get(name).used.sandboxes == 1
            with berth.Client(url=daemon.url, token=read_only.token) as looker:
                assert [s.id for s in looker.list_sandboxes()] == [mine.id]
                with pytest.raises(berth.Forbidden):
                    berth.Sandbox.connect(mine.id, client=looker).exec("true", timeout=10)
        c.volumes.create(f"{name}-vol")
        with pytest.raises(berth.Conflict) as held:
            client.tenants.remove(name)  # it still holds a volume
        assert "1 volume(s)" in str(held.value)
        c.volumes.remove(f"{name}-vol")
    client.tenants.remove(name)
    with berth.Client(url=daemon.url, token=minted.token) as gone:
        with pytest.raises(berth.Unauthorized):
            gone.list_sandboxes()


def test_tcp_needs_a_token(tcp_client, daemon):
    with berth.Client(url=daemon.url) as anonymous:
        with pytest.raises(berth.Unauthorized) as info:
            anonymous.list_sandboxes()
        assert info.value.status == 401
    with berth.Client(url=daemon.url, token="berth_wrong") as wrong:
        with pytest.raises(berth.Unauthorized):
            wrong.health()
    with berth.Sandbox.create(client=tcp_client, ttl=300) as sb:
        assert sb.exec("echo over tcp", timeout=10).stdout == "over tcp\n"
    with pytest.raises(berth.NotFound):
        tcp_client.tokens.list()


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec and spec.origin
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


INSIDE = r"""
import json
from berth import Sandbox, Client, Unauthorized
out = {"transport": repr(Client().config)}
me = Sandbox.connect(__import__("os").environ["BERTH_SANDBOX_ID"])
out["me"] = me.id
with Sandbox.create(ttl=120, name="child") as kid:
    r = kid.exec("echo from the child", timeout=10)
    out["child_stdout"] = r.stdout
    out["owner"] = kid.info.owner
    kid.files.write("/workspace/f", "x")
    out["file"] = kid.files.read_text("/workspace/f")
out["list"] = sorted(s.id for s in Sandbox.list())
print(json.dumps(out))
"""


def test_inside_a_sandbox_the_sdk_uses_berth_api_and_its_session_token(sandbox):
    """No arguments: BERTH_API and BERTH_TOKEN, which every exec has, drive the sandbox's own children."""
    for module in ("berth", "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio"):
        if importlib.util.find_spec(module) is None:
            continue
        src = _package_dir(module) if module != "berth" else SDK / "berth"
        sandbox.files.upload(str(src), f"/opt/sdk/{module}" if src.is_dir() else "/opt/sdk")
    sandbox.files.write("/workspace/inside.py", INSIDE)
    r = sandbox.exec(["python3", "/workspace/inside.py"], env={"PYTHONPATH": "/opt/sdk"}, timeout=120)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert "http://127.0.0.1:3129" in out["transport"] and "token=set" in out["transport"]
    assert out["me"] == sandbox.id and out["owner"] == sandbox.id
    assert out["child_stdout"] == "from the child\n" and out["file"] == "x"
    assert out["list"] == [sandbox.id], out
    assert os.environ.get("BERTH_API") is None


def test_a_port_is_previewed_through_the_listener_with_its_own_token(client):
    import urllib.error
    import urllib.request

    with berth.Sandbox.create(client=client, ttl=300) as sb:
        sb.exec(["sh", "-c", "cd /workspace && echo previewed > index.html && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"])
        sb.exec(["python3", "-c", "import socket, time\nfor _ in range(300):\n    try:\n        socket.create_connection(('127.0.0.1', 8000)).close(); break\n    except OSError:\n        time.sleep(0.1)"])
        preview = sb.expose(8000, ttl=600)
        assert preview.port == 8000 and not preview.public and preview.token and preview.token in preview.url
        assert preview.expires_at_ms and preview.expires_at_ms > preview.created_at_ms
        with urllib.request.urlopen(preview.url, timeout=30) as r:
            assert r.read() == b"previewed\n"
        listed = sb.previews()
        assert [p.id for p in listed] == [preview.id] and listed[0].token is None
        bare = preview.url.split("?")[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bare, timeout=30)
        assert refused.value.code == 401
        sb.unexpose(preview.id)
        assert sb.previews() == []
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(preview.url, timeout=30)
        assert gone.value.code == 404
        with pytest.raises(berth.NotFound):
            sb.unexpose(preview.id)
