"""The async client: the same surface, awaited, against the same daemon."""

from __future__ import annotations

import asyncio

import pytest

import berth
from berth.models import ExecExit, ExecOutput


def run(coro):
    return asyncio.run(coro)


def test_async_create_exec_and_remove(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                sid = sb.id
                r = await sb.exec("echo out; echo err >&2; exit 3", timeout=10)
                assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
                r = await sb.exec("sleep 30", timeout=0.5)
                assert r.exit_code == 124 and r.timed_out
                r = await sb.exec(["seq", "1", "3000"], max_output=200)
                assert r.truncated and r.stdout.endswith("3000\n")
            with pytest.raises(berth.NotFound):
                await client.get_sandbox(sid)
            assert (await client.receipt(sid)).clean

    run(main())


def test_async_context_manager_removes_when_the_body_raises(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            sid = None
            with pytest.raises(KeyError):
                async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                    sid = sb.id
                    raise KeyError("boom")
            with pytest.raises(berth.NotFound):
                await client.get_sandbox(sid)
            sb = await berth.AsyncSandbox.create(client=client, ttl=300)
            assert (await sb.remove()).id == sb.id

    run(main())


def test_async_streaming_callbacks_and_background(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                stream = await sb.exec_stream("echo a; sleep 0.1; echo b >&2", timeout=10)
                frames = [f async for f in stream]
                assert [f.data for f in frames if isinstance(f, ExecOutput)] == ["a\n", "b\n"]
                assert isinstance(frames[-1], ExecExit)

                seen: list[str] = []

                async def on_out(data: str) -> None:
                    seen.append(data)

                r = await sb.exec("echo 1; echo 2", on_stdout=on_out, on_stderr=seen.append, timeout=10)
                assert "".join(seen) == r.stdout == "1\n2\n"

                proc = await sb.exec("sleep 0.3; echo done", background=True, timeout=30)
                with pytest.raises(berth.WaitTimeout):
                    await proc.wait(timeout=0.01)
                assert (await proc.wait(timeout=30)).stdout == "done\n"
                slow = await sb.exec("sleep 60", background=True)
                assert (await slow.kill()).result.killed
                assert "".join([c async for c in (await sb.exec("echo f", background=True)).follow()]) == "f\n"

    run(main())


def test_async_files_projects_and_daemon_calls(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            assert (await client.health()).status == "ok"
            assert (await client.info()).version
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                await sb.files.write("/workspace/x.txt", "x1", parents=True)
                assert await sb.files.read_text("/workspace/x.txt") == "x1"
                assert [e.name for e in await sb.files.list("/workspace")] == ["x.txt"]
                assert await sb.files.exists("/workspace/x.txt")
                snap = await sb.snapshot()
                await sb.files.write("/workspace/x.txt", "x2")
                await sb.restore(snap.id)
                assert await sb.files.read_text("/workspace/x.txt") == "x1"
                assert any(c.path == "/workspace/x.txt" for c in (await sb.diff(against="image")).changes)
                kids = await sb.fork(2)
                assert len(kids) == 2 and all(isinstance(k, berth.AsyncSandbox) for k in kids)
                for k in kids:
                    assert await k.files.read_text("/workspace/x.txt") == "x1"
                    await k.remove()
                assert (await sb.verify_journal()).ok
                assert (await sb.stop()).state == "stopped" and (await sb.start()).state == "running"
                with pytest.raises(berth.NotFound):
                    await sb.files.read("/workspace/none")
                await client.snapshots.remove(snap.id)
            with pytest.raises(berth.NotFound) as info:
                await berth.AsyncSandbox.connect("nope", client=client)
            assert info.value.message == 'there is no sandbox "nope"'

    run(main())


def test_async_watch(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                await sb.files.mkdir("/workspace/w", parents=True)
                async with await sb.files.watch("/workspace/w") as w:
                    await sb.files.write("/workspace/w/a.txt", "a")
                    async for ev in w:
                        if (ev.type, ev.path) == ("create", "a.txt"):
                            return ev
        return None

    assert run(asyncio.wait_for(main(), 60)) is not None


def test_async_events_follow(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            sb = await berth.AsyncSandbox.create(client=client, ttl=300)
            await sb.remove()
            async for ev in client.events():
                if ev.sandbox == sb.id and ev.kind == "removed":
                    return ev
        return None

    assert run(asyncio.wait_for(main(), 30)) is not None


def test_async_over_tcp(daemon):
    async def main():
        async with berth.AsyncClient(url=daemon.url, token=daemon.token) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                assert (await sb.exec("echo tcp", timeout=10)).stdout == "tcp\n"
        async with berth.AsyncClient(url=daemon.url) as anonymous:
            with pytest.raises(berth.Unauthorized):
                await anonymous.health()

    run(main())


def test_async_retried_exec_follows_the_first(daemon):
    import uuid

    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300, idempotency_key=f"a-{uuid.uuid4()}") as sb:
                key = f"exec-{uuid.uuid4()}"
                first = await sb.exec("echo once >> /workspace/n; echo out", timeout=30, idempotency_key=key)
                again = await sb.exec("echo once >> /workspace/n; echo out", timeout=30, idempotency_key=key)
                assert again.exec_id == first.exec_id and again.stdout == first.stdout == "out\n"
                assert await sb.files.read_text("/workspace/n") == "once\n"

    run(main())
