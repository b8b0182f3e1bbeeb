"""The files API: read, write, list, stat, remove, mkdir, move, and trees as tar."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

import berth


def test_write_read_stat_list(sandbox):
    entry = sandbox.files.write("/workspace/a/b/hello.txt", "hello\n", parents=True)
    assert (entry.name, entry.kind, entry.size, entry.mode) == ("hello.txt", "file", 6, 0o644)
    assert sandbox.files.read("/workspace/a/b/hello.txt") == b"hello\n"
    assert sandbox.files.read_text("/workspace/a/b/hello.txt") == "hello\n"
    st = sandbox.files.stat("/workspace/a")
    assert st.is_dir and st.name == "a"
    assert [e.name for e in sandbox.files.list("/workspace/a/b")] == ["hello.txt"]
    assert sandbox.files.exists("/workspace/a/b/hello.txt") and not sandbox.files.exists("/workspace/none")
    assert sandbox.exec("cat /workspace/a/b/hello.txt", timeout=10).stdout == "hello\n"


def test_binary_content_and_mode(sandbox):
    data = bytes(range(256)) * 10
    entry = sandbox.files.write("/workspace/run.sh", data, mode=0o755)
    assert entry.mode == 0o755 and entry.size == len(data)
    assert sandbox.files.read("/workspace/run.sh") == data
    sandbox.files.write("/workspace/go.sh", "#!/bin/sh\necho ran\n", mode="0700")
    assert sandbox.exec(["/workspace/go.sh"], timeout=10).stdout == "ran\n"


def test_missing_parent_and_missing_file_are_not_found(sandbox):
    with pytest.raises(berth.NotFound):
        sandbox.files.write("/workspace/no/such/dir/f", "x")
    with pytest.raises(berth.NotFound):
        sandbox.files.read("/workspace/nothing-here")


def test_bad_paths_are_invalid(sandbox):
    with pytest.raises(berth.InvalidRequest):
        sandbox.files.read("relative")
    with pytest.raises(berth.InvalidRequest):
        sandbox.files.read("/workspace/../etc/passwd")


def test_mkdir_and_remove(sandbox):
    d = sandbox.files.mkdir("/workspace/out/logs", parents=True, mode=0o750)
    assert d.is_dir and d.mode == 0o750
    with pytest.raises(berth.Conflict):
        sandbox.files.mkdir("/workspace/out/logs")
    sandbox.files.write("/workspace/out/logs/x.log", "x")
    with pytest.raises(berth.Conflict):
        sandbox.files.remove("/workspace/out")
    sandbox.files.remove("/workspace/out/logs/x.log")
    sandbox.files.remove("/workspace/out", recursive=True)
    assert not sandbox.files.exists("/workspace/out")


def test_move_renames_files_and_trees(sandbox):
    sandbox.files.write("/workspace/mv/a.txt", "one", parents=True)
    moved = sandbox.files.move("/workspace/mv/a.txt", "/workspace/mv/b.txt")
    assert (moved.name, moved.kind, moved.size) == ("b.txt", "file", 3)
    assert not sandbox.files.exists("/workspace/mv/a.txt") and sandbox.files.read_text("/workspace/mv/b.txt") == "one"
    sandbox.files.write("/workspace/mv/c.txt", "two")
    with pytest.raises(berth.Conflict):
        sandbox.files.move("/workspace/mv/c.txt", "/workspace/mv/b.txt")
    sandbox.files.move("/workspace/mv/c.txt", "/workspace/mv/b.txt", overwrite=True)
    assert sandbox.files.read_text("/workspace/mv/b.txt") == "two"
    tree = sandbox.files.move("/workspace/mv", "/workspace/moved")
    assert tree.is_dir and [e.name for e in sandbox.files.list("/workspace/moved")] == ["b.txt"]
    with pytest.raises(berth.NotFound):
        sandbox.files.move("/workspace/mv", "/workspace/again")
    with pytest.raises(berth.InvalidRequest):
        sandbox.files.move("/", "/workspace/root")


def test_watch_reports_changes_as_they_happen(sandbox):
    sandbox.files.mkdir("/workspace/w/old", parents=True)
    with sandbox.files.watch("/workspace/w", recursive=True) as w:
        sandbox.exec("cd /workspace/w && echo 1 > a.txt && mv old new && echo 2 > new/b && rm a.txt", timeout=30)
        seen = []
        for ev in w:
            seen.append(ev)
            if (ev.type, ev.path) == ("remove", "a.txt"):
                break
    kinds = [(e.type, e.path) for e in seen]
    assert kinds.index(("create", "a.txt")) < kinds.index(("remove", "a.txt"))
    rename = next(e for e in seen if e.type == "rename")
    assert (rename.from_, rename.path, rename.dir) == ("old", "new", True)
    assert ("create", "new/b") in kinds
    # The directory removed ends the iteration, with the reason.
    w = sandbox.files.watch("/workspace/w")
    sandbox.exec("rm -r /workspace/w", timeout=30)
    assert [e.type for e in w] and "was removed" in w.ended
    with pytest.raises(berth.Conflict):
        sandbox.files.watch("/etc/hostname")
    with pytest.raises(berth.NotFound):
        sandbox.files.watch("/workspace/none")


def test_upload_and_download_trees(sandbox, tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    (src / "README").write_text("readme\n")
    os.symlink("pkg/mod.py", src / "link")
    extracted = sandbox.files.upload(str(src), "/workspace/project")
    assert extracted.entries == 4
    assert sandbox.exec("cat /workspace/project/link; cat README", cwd="/workspace/project", timeout=10).stdout == "X = 1\nreadme\n"
    sandbox.exec("echo built > /workspace/project/pkg/out.txt", timeout=10).check()
    dst = tmp_path / "dst"
    names = sandbox.files.download("/workspace/project", str(dst))
    assert "pkg/out.txt" in names
    assert (dst / "pkg" / "out.txt").read_text() == "built\n" and os.readlink(dst / "link") == "pkg/mod.py"


def test_raw_tar_round_trip(sandbox):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("data/one.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"one"))
    assert sandbox.files.upload_tar("/workspace/t", buf.getvalue()).entries == 1
    with tarfile.open(fileobj=io.BytesIO(sandbox.files.download_tar("/workspace/t"))) as tar:
        assert tar.extractfile("data/one.txt").read() == b"one"
    with pytest.raises(berth.InvalidRequest):
        sandbox.files.upload_tar("/workspace/t", b"not a tar at all" * 64)
