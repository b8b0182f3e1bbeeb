"""Sandboxes' lives, errors, receipts, journal, events, and the daemon-wide calls."""

from __future__ import annotations

import threading
import uuid

import pytest

import berth
from berth._core import Op


def test_context_manager_removes_even_when_the_body_raises(client):
    with pytest.raises(RuntimeError):
        with berth.Sandbox.create(client=client, ttl=300) as sb:
            sid = sb.id
            assert sb.exec("true", timeout=10).ok
            raise RuntimeError("the body failed")
    with pytest.raises(berth.NotFound):
        client.get_sandbox(sid)
    receipt = client.receipt(sid)
    assert receipt.id == sid and receipt.reason == "remove" and receipt.clean


def test_create_options_and_record(client):
    name = f"sdk-{uuid.uuid4().hex[:8]}"
    with berth.Sandbox.create(client=client, name=name, memory="256M", ttl=300, idle_timeout=120,
                              env={"GREETING": "hi"}, labels={"team": "core"}, cpus=0.5) as sb:  # fmt: skip
        assert len(sb.id) == 12 and sb.name == name
        info = sb.info
        assert info.memory_bytes == 256 * 1024 * 1024 and info.cpus == 0.5 and info.labels == {"team": "core"}
        assert info.state == "running" and info.expires_at_ms and info.idle_timeout_seconds == 120.0
        assert sb.exec("echo $GREETING", timeout=10).stdout == "hi\n"
        same = berth.Sandbox.connect(name, client=client)
        assert same.id == sb.id
        assert sb.id in [s.id for s in berth.Sandbox.list(client=client)]
        assert sb.refresh().last_activity_ms >= info.created_at_ms


def test_a_sandbox_behind_gvisor(client):
    offered = {i.isolation: i.available for i in client.info().isolations}
    assert offered == {"namespaces": True, "gvisor": True}, "scripts/setup installs runsc"
    with berth.Sandbox.create(client=client, isolation="gvisor", ttl=300) as sb:
        assert sb.info.isolation == "gvisor"
        host = open("/proc/sys/kernel/osrelease").read().strip()
        seen = sb.exec("uname -r", timeout=30).stdout.strip()
        assert seen and seen != host, "a gVisor sandbox sees gVisor's kernel, not the host's"
    with pytest.raises(berth.InvalidRequest):
        berth.Sandbox.create(client=client, isolation="firecracker")


def test_unknown_sandbox_is_not_found_with_the_sentence(client):
    with pytest.raises(berth.NotFound) as info:
        berth.Sandbox.connect("nope", client=client)
    e = info.value
    assert (e.code, e.status, e.message) == ("not_found", 404, 'there is no sandbox "nope"')
    assert 'there is no sandbox "nope"' in str(e)
    assert isinstance(e, berth.BerthError) and isinstance(e, berth.ApiError)


def test_a_taken_name_is_a_conflict(sandbox, client):
    with pytest.raises(berth.Conflict) as info:
        berth.Sandbox.create(client=client, name=sandbox.name)
    assert info.value.status == 409 and sandbox.name in info.value.message


def test_a_limit_out_of_range_is_invalid(client):
    with pytest.raises(berth.InvalidRequest) as info:
        berth.Sandbox.create(client=client, memory_bytes=1024)
    assert info.value.status == 400


def test_unknown_option_is_refused_before_sending(client):
    with pytest.raises(TypeError, match="memroy"):
        berth.Sandbox.create(client=client, memroy="1G")
    with pytest.raises(ValueError):
        berth.Sandbox.create(client=client, memory="lots")


def test_remove_returns_the_receipt(client):
    sb = berth.Sandbox.create(client=client, ttl=300, outputs=["/workspace/out/*.txt"])
    sb.files.write("/workspace/out/a.txt", "artifact", parents=True)
    receipt = sb.remove()
    assert receipt.id == sb.id and receipt.clean and receipt.leftovers == []
    assert [o.path for o in receipt.outputs] == ["/workspace/out/a.txt"] and receipt.outputs[0].bytes == 8
    assert receipt.patch is not None and receipt.steps
    assert sb.receipt() == receipt
    with pytest.raises(berth.NotFound):
        sb.remove()


def test_journal_and_its_verification(sandbox):
    sandbox.exec("true", timeout=10)
    records = sandbox.journal()
    assert [r.action for r in records[:2]] == ["create", "exec"]
    assert records[0].prev == "0" * 64 and all(b.prev == a.hash for a, b in zip(records, records[1:]))
    verdict = sandbox.verify_journal()
    assert verdict.ok and verdict.records >= len(records) and verdict.first_bad is None


def test_events_list_and_follow(client):
    got: list[berth.models.LifecycleEvent] = []
    ready = threading.Event()

    def follow():
        with berth.Client(socket=client.config.socket) as c:
            for ev in c.events():
                ready.set()
                got.append(ev)
                if ev.kind == "removed" and ev.sandbox == target[0]:
                    return

    target: list[str] = [""]
    sb = berth.Sandbox.create(client=client, ttl=300)
    target[0] = sb.id
    t = threading.Thread(target=follow, daemon=True)
    t.start()
    ready.wait(10)
    sb.exec("true", timeout=10)
    sb.remove()
    t.join(30)
    kinds = [e.kind for e in got if e.sandbox == sb.id]
    assert kinds[0] == "created" and "exec_finished" in kinds and kinds[-1] == "removed"
    recent = client.recent_events()
    assert any(e.sandbox == sb.id and e.kind == "removed" for e in recent)


def test_health_info_and_storage(client):
    assert client.health().status == "ok"
    info = client.info()
    assert info.version and info.bounds and all(b.resource and b.set_by for b in info.bounds)
    st = client.storage()
    assert st.mode in ("btrfs", "reflink", "copy") and st.size_bytes > 0
    if st.mode == "btrfs":  # a pool exists already: making one is refused
        with pytest.raises(berth.Conflict):
            client.init_storage("1G")
    with pytest.raises((berth.InvalidRequest, berth.Conflict)):
        client.init_storage(1024)


def test_idempotency_key_returns_the_first_result(client):
    key = f"sdk-test-{uuid.uuid4()}"
    first = berth.Sandbox.create(client=client, ttl=300, idempotency_key=key)
    try:
        second = berth.Sandbox.create(client=client, ttl=300, idempotency_key=key)
        assert first.id == second.id
    finally:
        first.remove()
    assert Op("POST", "/v1/sandboxes").key and Op("POST", "/v1/sandboxes").key != Op("POST", "/v1/sandboxes").key
    assert Op("GET", "/v1/sandboxes").key is None
    assert Op("POST", "/v1/sandboxes/x/execs").key and Op("POST", "/v1/sandboxes/x/fork").key
    assert Op("DELETE", "/v1/sandboxes/x").key and Op("DELETE", "/v1/sandboxes/x/execs/x1").key
    assert Op("POST", "/v1/sandboxes/x/net").key is None and Op("PUT", "/v1/sandboxes/x/files").key is None


def test_a_retried_exec_is_not_run_twice(sandbox):
    """The same key again: the daemon answers the first exec's record, and the SDK follows it to its end."""
    key = f"exec-{uuid.uuid4()}"
    cmd = "echo ran >> /workspace/count; sleep 0.3; echo out; echo err >&2; exit 6"
    first = sandbox.exec(cmd, timeout=30, idempotency_key=key)
    again = sandbox.exec(cmd, timeout=30, idempotency_key=key)
    assert (first.exit_code, first.stdout, first.stderr) == (6, "out\n", "err\n")
    assert again.exec_id == first.exec_id and again.exit_code == 6
    assert sorted(again.stdout.splitlines()) == ["err", "out"]
    assert sandbox.files.read_text("/workspace/count") == "ran\n"
    proc = sandbox.exec("sleep 0.2; echo bg", background=True, idempotency_key=key + "-bg")
    same = sandbox.exec("sleep 0.2; echo bg", background=True, idempotency_key=key + "-bg")
    assert same.exec_id == proc.exec_id and same.wait(timeout=30).stdout == "bg\n"


def test_retries_reuse_the_idempotency_key(daemon):
    """A call that cannot get through is sent again with the same key, then raised as TransportError."""
    keys: list[str] = []
    c = berth.Client(socket=str(daemon.dir / "no-daemon-here.sock"), retries=2)
    c._http.event_hooks["request"].append(lambda req: keys.append(req.headers.get("Idempotency-Key")))
    with pytest.raises(berth.TransportError) as info:
        c.create_sandbox(ttl=60)
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]
    assert info.value.code == "transport" and info.value.status is None


def test_environment_picks_the_transport(monkeypatch, daemon):
    monkeypatch.setenv("BERTH_SOCKET", daemon.socket)
    monkeypatch.delenv("BERTH_API", raising=False)
    assert berth.Client().config.socket == daemon.socket
    monkeypatch.setenv("BERTH_API", daemon.url)
    monkeypatch.setenv("BERTH_TOKEN", daemon.token)
    c = berth.Client()
    assert c.config.url == daemon.url and c.config.token == daemon.token
    assert c.health().status == "ok"
    assert daemon.token not in repr(c)
    assert berth.Client(socket=daemon.socket).config.socket == daemon.socket


def test_default_client_from_the_environment(monkeypatch, daemon):
    monkeypatch.setenv("BERTH_SOCKET", daemon.socket)
    with berth.Sandbox.create(ttl=300) as sb:
        assert sb.exec("echo via default", timeout=10).stdout == "via default\n"


def test_pause_keeps_state_and_any_call_wakes_it(client):
    with berth.Sandbox.create(client=client, ttl=300, idle_pause=60) as sb:
        assert sb.info.idle_pause_seconds == 60.0
        ctx = sb.create_code_context("python")
        ctx.run_code("kept = 41", timeout=30)
        paused = sb.pause()
        assert paused.state == "paused" and paused.paused_at_ms
        assert sb.refresh().state == "paused"
        assert ctx.run_code("kept + 1", timeout=30).text == "42"
        woken = sb.refresh()
        assert woken.state == "running" and woken.last_activity == "context"
        sb.pause()
        assert sb.resume().state == "running"


def test_usage_and_a_budget_that_ends_the_sandbox(client):
    import time

    sb = berth.Sandbox.create(client=client, ttl=300, budget={"cpu_seconds": 600})
    try:
        sb.exec("python3 -c 'sum(range(3 * 10**6))'", timeout=60)
        used = sb.usage()
        assert used.cpu_seconds > 0 and used.budget.cpu_seconds == 600.0 and used.execs >= 1
        # A budget is kept to the nanosecond; a limit in whole milliseconds comes back as it was sent.
        limit = round(used.cpu_seconds + 0.3, 3)
        assert sb.set_budget(cpu_seconds=limit).budget.cpu_seconds == limit
        try:
            sb.exec("python3 -c 'sum(range(10**9))'", timeout=60)
        except berth.BerthError:
            pass  # ended under it by the budget
        deadline = time.time() + 30
        while True:
            try:
                client.get_sandbox(sb.id)
            except berth.NotFound:
                break
            assert time.time() < deadline, "the budget did not end the sandbox"
            time.sleep(0.2)
    finally:
        try:
            sb.remove()
        except berth.BerthError:
            pass
    receipt = client.receipt(sb.id)
    assert receipt.reason.startswith("budget: cpu"), receipt.reason
    assert receipt.usage and receipt.usage.cpu_seconds >= limit


def test_a_ttl_is_changed_from_now(client):
    import time

    sb = berth.Sandbox.create(client=client, ttl=3600)
    try:
        assert sb.set_ttl(None).expires_at_ms is None
        with pytest.raises(berth.InvalidRequest):
            sb.set_ttl(-1)
        soon = sb.set_ttl(1).expires_at_ms
        assert soon is not None and soon - time.time() * 1000 < 5000
        deadline = time.time() + 30
        while sb.id in [s.id for s in client.list_sandboxes()]:
            assert time.time() < deadline, "the new TTL was not enforced"
            time.sleep(0.1)
        assert sb.receipt().reason == "reaped"
    finally:
        try:
            sb.remove()
        except berth.NotFound:
            pass


def test_usage_history_is_a_point_every_few_seconds(client):
    import time

    sb = berth.Sandbox.create(client=client, ttl=120)
    try:
        sb.exec("timeout 8 sh -c 'while :; do :; done' &", timeout=10)
        deadline = time.time() + 30
        while len(points := sb.usage_history()) < 2:
            assert time.time() < deadline, "no second point"
            time.sleep(0.5)
        assert points[1].at_ms - points[0].at_ms >= 5000 and points[1].cpu_seconds > points[0].cpu_seconds
        assert sb.usage_history(since_ms=points[1].at_ms)[0] == points[1]
        assert sb.usage_history(until_ms=points[0].at_ms) == [points[0]]
        with pytest.raises(berth.InvalidRequest):
            client._do(Op("GET", f"/v1/sandboxes/{sb.id}/usage/history", params={"since_ms": "soon"}))
    finally:
        sb.remove()
