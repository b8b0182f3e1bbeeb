"""Durable projects: stop/start/rebuild, snapshots, restore, reset, fork, diff and patch, export, volumes."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import berth
from berth import VolumeMount


def test_stop_start_rebuild_keep_the_files(client):
    with berth.Sandbox.create(client=client, ttl=600, persistent=True) as sb:
        sb.files.write("/workspace/kept.txt", "kept")
        assert sb.stop().state == "stopped" and sb.info.pid is None
        with pytest.raises(berth.Conflict):
            sb.stop()
        with pytest.raises(berth.Conflict):
            sb.exec("true")
        assert sb.start().state == "running"
        assert sb.exec("cat /workspace/kept.txt", timeout=10).stdout == "kept"
        assert sb.rebuild().state == "running"
        assert sb.files.read_text("/workspace/kept.txt") == "kept"


def test_snapshot_restore_reset(client):
    with berth.Sandbox.create(client=client, ttl=600) as sb:
        sb.files.write("/workspace/v.txt", "one")
        name = f"snap-{uuid.uuid4().hex[:8]}"
        snap = sb.snapshot(name)
        assert snap.name == name and snap.sandbox_id == sb.id and snap.origin == "snapshot"
        assert client.snapshots.get(name).id == snap.id
        assert snap.id in [s.id for s in client.snapshots.list()]
        sb.files.write("/workspace/v.txt", "two")
        sb.restore(name)
        assert sb.files.read_text("/workspace/v.txt") == "one"
        sb.reset()
        assert not sb.files.exists("/workspace/v.txt")
        with pytest.raises(berth.NotFound):
            sb.restore("no-such-snapshot")
        assert client.snapshots.remove(snap.id).id == snap.id
        with pytest.raises(berth.NotFound):
            client.snapshots.get(snap.id)


def test_diff_and_patch(sandbox):
    sandbox.files.write("/workspace/app.py", "print('hi')\n")
    diff = sandbox.diff()
    assert diff.against == "image"
    change = next(c for c in diff.changes if c.path == "/workspace/app.py")
    assert change.kind == "added" and change.old is None and change.new.type == "file" and change.new.size == 12
    patch = sandbox.patch()
    assert "b/workspace/app.py" in patch and "+print('hi')" in patch


def test_fork_gives_independent_copies(client):
    with berth.Sandbox.create(client=client, ttl=600) as sb:
        sb.files.write("/workspace/base.txt", "base")
        kids = sb.fork(2)
        try:
            assert len(kids) == 2 and all(isinstance(k, berth.Sandbox) for k in kids)
            assert len({k.id for k in kids} | {sb.id}) == 3
            assert all(k.info.parent for k in kids)
            kids[0].files.write("/workspace/base.txt", "changed")
            assert kids[1].files.read_text("/workspace/base.txt") == "base"
            assert sb.files.read_text("/workspace/base.txt") == "base"
            diff = kids[0].diff()
            assert [c.path for c in diff.changes] == ["/workspace/base.txt"]
        finally:
            for k in kids:
                k.remove()


def test_fork_with_processes_continues_the_running_program(client):
    counter = "i=0; while true; do i=$((i+1)); echo $i > /tmp/n; sleep 0.1; done"
    with berth.Sandbox.create(client=client, ttl=600) as sb:
        sb.exec(f"({counter}) >/dev/null 2>&1 &", check=True)
        sb.exec("sleep 0.5", check=True)
        kids = sb.fork(with_processes=True)
        try:
            assert len(kids) == 1 and kids[0].id != sb.id
            first = int(kids[0].files.read_text("/tmp/n"))
            kids[0].exec("sleep 0.5", check=True)
            assert int(kids[0].files.read_text("/tmp/n")) > first, "the child's loop goes on"
            assert int(sb.files.read_text("/tmp/n")) >= first, "so does the parent's"
            sb.exec("sleep 60", background=True)
            with pytest.raises(berth.Conflict, match="execs or shells are running"):
                sb.fork(with_processes=True)
        finally:
            for k in kids:
                k.remove()


def test_export_to_a_git_branch(sandbox, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README").write_text("base\n")
    subprocess.run(git + ["add", "README"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "base"], check=True)
    sandbox.files.write("/workspace/new.txt", "from the sandbox\n")
    out = sandbox.export(str(repo), "berth/test", message="sandbox work", author_name="Agent", author_email="a@example.com")
    assert out.branch == "berth/test" and out.files == 1 and len(out.commit) >= 40
    shown = subprocess.run(git + ["show", "berth/test:new.txt"], capture_output=True, text=True, check=True)
    assert shown.stdout == "from the sandbox\n"
    with pytest.raises(berth.Conflict):
        sandbox.export(str(repo), "berth/test")
    with pytest.raises(berth.InvalidRequest):
        sandbox.export(str(tmp_path / "not-a-repo"), "x")


def test_export_is_refused_over_tcp(tcp_client, client):
    with berth.Sandbox.create(client=tcp_client, ttl=300) as sb:
        with pytest.raises(berth.Unauthorized):
            sb.export("/tmp", "b")


def test_volumes_are_shared_and_outlive_sandboxes(client):
    name = f"vol-{uuid.uuid4().hex[:8]}"
    vol = client.volumes.create(name)
    assert vol.name == name and vol.used_by == []
    try:
        with berth.Sandbox.create(client=client, ttl=300, volumes=[VolumeMount(name, "/cache")]) as a:
            a.exec("echo cached > /cache/x", timeout=10).check()
            assert a.id in next(v for v in client.volumes.list() if v.name == name).used_by
            with pytest.raises(berth.Conflict):
                client.volumes.remove(name)
        with berth.Sandbox.create(client=client, ttl=300, volumes=[{"name": name, "target": "/c", "readonly": True}]) as b:
            assert b.exec("cat /c/x", timeout=10).stdout == "cached\n"
    finally:
        client.volumes.remove(name)
    assert name not in [v.name for v in client.volumes.list()]


def test_images_list_and_host_cannot_be_removed(client):
    images = client.images.list()
    assert "host" in [i.name for i in images]
    with pytest.raises(berth.Conflict):
        client.images.remove("host")
    with pytest.raises(berth.InvalidRequest):
        client.images.import_("x-bad", "relative/path")


def test_image_import_from_a_directory(client, tmp_path):
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "marker").write_text("imported\n")
    name = f"img-{uuid.uuid4().hex[:8]}"
    image = client.images.import_(name, str(root))
    try:
        assert image.name == name and image.kind == "directory" and image.files >= 1
        assert name in [i.name for i in client.images.list()]
    finally:
        client.images.remove(name)
