"""Fork and explore: set a project with a failing test up once, fork it four times, try a different candidate
patch in each fork, keep the one whose tests pass, export it to a git branch, and remove the rest.

    python examples/fork_and_explore.py [REPO]

REPO is a git repository on the daemon's host to export to (export is served on the unix socket only); by
default a fresh one is made in a temporary directory, holding the same project as the sandbox starts with.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid

from berth import Sandbox

PROJECT = {
    "calc.py": "def mean(values):\n    return sum(values) / len(values) + 1\n",
    "test_calc.py": (
        "import unittest\n"
        "from calc import mean\n\n"
        "class MeanTest(unittest.TestCase):\n"
        "    def test_mean(self):\n"
        "        self.assertEqual(mean([1, 2, 3, 6]), 3)\n\n"
        "    def test_empty(self):\n"
        "        self.assertEqual(mean([]), 0)\n"
    ),
}

# Four candidate fixes an agent might come up with; only one handles both tests.
CANDIDATES = {
    "drop-the-offset": "def mean(values):\n    return sum(values) / len(values)\n",
    "integer-division": "def mean(values):\n    return sum(values) // len(values) + 1\n",
    "guard-empty": "def mean(values):\n    if not values:\n        return 0\n    return sum(values) / len(values)\n",
    "guard-but-offset": "def mean(values):\n    if not values:\n        return 0\n    return sum(values) / len(values) + 1\n",
}

TIMEOUT = 60


def make_repo() -> str:
    repo = tempfile.mkdtemp(prefix="fork-and-explore-")
    git = ["git", "-C", repo, "-c", "user.name=example", "-c", "user.email=example@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    for name, text in PROJECT.items():
        with open(os.path.join(repo, name), "w") as f:
            f.write(text)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the project, with a failing test"], check=True)
    return repo


def main(argv: list[str]) -> int:
    repo = argv[1] if len(argv) > 1 else make_repo()
    # No .pyc files: the diff, and so the commit, should hold the source change only.
    base = Sandbox.create(ttl=900, env={"PYTHONDONTWRITEBYTECODE": "1"})
    forks: list[Sandbox] = []
    try:
        for name, text in PROJECT.items():
            base.files.write(f"/workspace/{name}", text)
        first = base.exec("python3 -m unittest -q 2>&1", timeout=TIMEOUT)
        print(f"before: tests exit {first.exit_code}")
        assert first.exit_code != 0, "the project's test should fail before a fix"

        forks = base.fork(len(CANDIDATES))
        outcomes: dict[str, tuple[Sandbox, int]] = {}
        for (label, patch), fork in zip(CANDIDATES.items(), forks):
            fork.files.write("/workspace/calc.py", patch)
            r = fork.exec("python3 -m unittest -q 2>&1", timeout=TIMEOUT)
            outcomes[label] = (fork, r.exit_code)
            print(f"{label:>18}: {'pass' if r.ok else 'fail'} (exit {r.exit_code}) in {fork.name}")

        winners = [label for label, (_, code) in outcomes.items() if code == 0]
        if not winners:
            print("no candidate passed", file=sys.stderr)
            return 1
        label = winners[0]
        winner = outcomes[label][0]
        changes = winner.diff()  # against the fork's parent: exactly the candidate patch
        print(f"winner: {label}, changing {[c.path for c in changes.changes]}")

        branch = f"fix/{label}-{uuid.uuid4().hex[:6]}"
        exported = winner.export(repo, branch, message=f"Fix mean(): {label}", author_name="fork-and-explore",
                                 author_email="agent@localhost")  # fmt: skip
        print(f"exported {exported.files} file(s) to {repo} branch {exported.branch} at {exported.commit[:12]}")
        return 0
    finally:
        for fork in forks:
            fork.remove()
        base.remove()
        print(f"removed {len(forks) + 1} sandboxes")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
