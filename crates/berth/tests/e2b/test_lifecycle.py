"""E2B's snapshots, forks and auto-pause through the unmodified `e2b` SDK, on berth's snapshots, forks and a
TTL that hibernates instead of removing."""
import time

import pytest
from e2b import Sandbox, SandboxState

from conftest import wait_for

# A counter that runs on by itself (not an E2B command: it is left behind by one that ends at once).
COUNTER = "(python3 -c 'import time\nn = 0\nwhile True:\n    n += 1\n    open(\"/tmp/count\", \"w\").write(str(n))\n    time.sleep(0.05)' >/dev/null 2>&1 &)"


def count(sb):
    return int(sb.files.read("/tmp/count") or 0)


def counting(sb):
    """The counter moves on in `sb`."""
    first = count(sb)
    wait_for("the counter's progress", lambda: count(sb) > first, 10)
    return True


def with_state(sb, state):
    """Write `state` to state.txt and start the counter in `sb`."""
    sb.files.write("state.txt", state)
    sb.commands.run(COUNTER)
    wait_for("the counter's start", lambda: sb.files.exists("/tmp/count"))


def test_a_snapshot_is_a_template_with_its_files_and_processes(test_id):
    name = f"{test_id}-snap".replace("_", "-")
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id})
    children = []
    try:
        with_state(sb, "at the snapshot")
        snap = sb.create_snapshot(name=name)
        assert snap.snapshot_id and snap.names == [name]
        assert [s.snapshot_id for s in sb.list_snapshots().next_items()] == [snap.snapshot_id]
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name=name).next_items()] == [snap.snapshot_id]
        assert Sandbox.list_snapshots(sandbox_id="nosuchsandbox").next_items() == []
        sb.files.write("state.txt", "later")

        child = Sandbox.create(snap.snapshot_id, metadata={"sandbox_test_id": test_id})
        children.append(child)
        assert child.sandbox_id != sb.sandbox_id
        assert child.files.read("state.txt") == "at the snapshot"
        assert child.commands.run("whoami").stdout == "user\n"
        assert counting(child), "the snapshot's processes go on in a sandbox made from it"
        assert sb.files.read("state.txt") == "later"
        child.kill()
        children.remove(child)

        # The name again: the new snapshot takes it, as E2B gives a name a new build.
        again = sb.create_snapshot(name=name)
        assert again.snapshot_id != snap.snapshot_id and again.names == [name]
        assert [s.snapshot_id for s in Sandbox.list_snapshots(name=name).next_items()] == [again.snapshot_id]
        files_only = sb.create_snapshot(mode="filesystem")
        assert files_only.names == []
        paged = Sandbox.list_snapshots(sandbox_id=sb.sandbox_id, limit=1)
        seen = paged.next_items() + paged.next_items()
        assert {s.snapshot_id for s in seen} == {again.snapshot_id, files_only.snapshot_id} and not paged.has_next
    finally:
        for c in children:
            c.kill()
        sb.kill()
    # Snapshots outlive their sandbox, until deleted.
    assert Sandbox.delete_snapshot(again.snapshot_id) is True
    assert Sandbox.delete_snapshot(again.snapshot_id) is False
    assert Sandbox.delete_snapshot(files_only.snapshot_id) is True


def test_forks_carry_on_from_the_instant_of_the_fork(test_id):
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id})
    forks = []
    try:
        with_state(sb, "before the fork")
        forks = sb.fork(count=2, timeout=120)
        assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks), forks
        assert len({f.sandbox_id for f in forks} | {sb.sandbox_id}) == 3
        for f in forks:
            assert f.files.read("state.txt") == "before the fork"
            assert counting(f)
            end = f.get_info().end_at.timestamp()
            assert 60 < end - time.time() <= 121
        forks[0].files.write("state.txt", "fork 0")
        assert forks[1].files.read("state.txt") == "before the fork"
        assert sb.files.read("state.txt") == "before the fork" and counting(sb)
        with pytest.raises(Exception, match="count"):
            sb.fork(count=0)
    finally:
        for f in forks:
            f.kill()
        sb.kill()


def test_auto_pause_sleeps_at_the_timeout_and_connect_wakes_it(test_id):
    sb = Sandbox.create(
        "base", timeout=3, metadata={"sandbox_test_id": test_id}, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    try:
        assert sb.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
        with_state(sb, "kept")
        wait_for("the pause at the timeout", lambda: Sandbox.get_info(sb.sandbox_id).state == SandboxState.PAUSED, 30)
        assert not sb.is_running()
        asleep = Sandbox.get_info(sb.sandbox_id)
        assert asleep.state == SandboxState.PAUSED
        back = Sandbox.connect(sb.sandbox_id, timeout=60)
        assert back.is_running()
        assert back.files.read("state.txt") == "kept"
        assert counting(back), "its processes go on where they were"
        assert 30 < back.get_info().end_at.timestamp() - time.time() <= 61
    finally:
        sb.kill()
