"""Every example runs, as a user would run it, against the suite's daemon (found through BERTH_SOCKET)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import SDK

EXAMPLES = SDK / "examples"


def run_example(daemon, name: str, *args: str) -> subprocess.CompletedProcess:
    env = daemon.env()
    env["PYTHONPATH"] = str(SDK) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], env=env, capture_output=True, text=True, timeout=300)


def test_every_example_has_a_test():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["agent_workspace.py", "fork_and_explore.py"]


@pytest.mark.usefixtures("need_contexts")
def test_agent_workspace(daemon, client):
    before = {s.id for s in client.list_sandboxes()}
    out = run_example(daemon, "agent_workspace.py")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rows loaded: 4" in out.stdout
    assert '[context] computed 3 regions' in out.stdout
    assert "expected error: KeyError: 'west'" in out.stdout
    assert 'summary: {"east": 55, "north": 150, "south": 80}' in out.stdout
    assert "clean=True" in out.stdout
    assert {s.id for s in client.list_sandboxes()} == before


def test_fork_and_explore(daemon, client, tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    sys.path.insert(0, str(EXAMPLES))
    try:
        import fork_and_explore as ex
    finally:
        sys.path.pop(0)
    for name, text in ex.PROJECT.items():
        (repo / name).write_text(text)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "base"], check=True)

    before = {s.id for s in client.list_sandboxes()}
    out = run_example(daemon, "fork_and_explore.py", str(repo))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "winner: guard-empty, changing ['/workspace/calc.py']" in out.stdout
    assert out.stdout.count(": fail (exit") == 3 and "removed 5 sandboxes" in out.stdout
    branch = next(line.split(" branch ")[1].split(" at ")[0] for line in out.stdout.splitlines() if line.startswith("exported"))
    shown = subprocess.run(git + ["show", f"{branch}:calc.py"], capture_output=True, text=True, check=True).stdout
    assert shown == ex.CANDIDATES["guard-empty"]
    files = subprocess.run(git + ["diff", "--name-only", "main", branch], capture_output=True, text=True, check=True).stdout
    assert files.split() == ["calc.py"]
    # The fixed project passes its tests on the host too.
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", "-b", branch, str(repo), str(work)], check=True)
    assert subprocess.run([sys.executable, "-m", "unittest", "-q"], cwd=work, capture_output=True).returncode == 0
    assert {s.id for s in client.list_sandboxes()} == before


def test_fork_and_explore_makes_its_own_repo(daemon):
    out = run_example(daemon, "fork_and_explore.py")
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("exported 1 file(s) to "))
    repo = line.split(" to ")[1].split(" branch ")[0]
    try:
        assert subprocess.run(["git", "-C", repo, "branch", "--list", "fix/*"], capture_output=True, text=True).stdout.strip()
    finally:
        shutil.rmtree(repo)
