"""The agent-workspace pattern: one sandbox per task, a live code context on top, a timeout on every call,
and the teardown in ``finally`` so nothing outlives the task.

Run it with a daemon reachable the usual way (``BERTH_SOCKET``, or ``BERTH_API``/``BERTH_TOKEN`` inside a
sandbox): ``python examples/agent_workspace.py``.
"""

from __future__ import annotations

import json
import sys

from berth import BerthError, Sandbox

CALL_TIMEOUT = 30  # seconds, for every command and every code run


class LinePrinter:
    """Prints streamed output as it comes, a whole line at a time, with a prefix."""

    def __init__(self, prefix: str):
        self.prefix, self.pending = prefix, ""

    def __call__(self, text: str) -> None:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            print(f"{self.prefix}{line}", flush=True)


def main() -> int:
    echo = LinePrinter("[context] ")
    sb = Sandbox.create(memory="512M", ttl=900, idle_timeout=300, labels={"task": "csv-summary"})
    try:
        # 1. Lay out the task's inputs with the files API.
        sb.files.write("/workspace/data/sales.csv", "region,amount\nnorth,120\nsouth,80\nnorth,30\neast,55\n", parents=True)

        # 2. Shell commands for what the shell does best.
        listing = sb.exec("ls -l /workspace/data && wc -l /workspace/data/sales.csv", timeout=CALL_TIMEOUT)
        listing.check()
        print(listing.stdout.strip())

        # 3. A live Python context: state carries over from one step to the next, as in a notebook.
        ctx = sb.create_code_context("python")
        step = ctx.run_code("import csv\nrows = list(csv.DictReader(open('data/sales.csv')))\nlen(rows)", timeout=CALL_TIMEOUT)
        step.check()
        print(f"rows loaded: {step.text}")

        totals = ctx.run_code(
            "totals = {}\n"
            "for r in rows:\n"
            "    totals[r['region']] = totals.get(r['region'], 0) + int(r['amount'])\n"
            "print('computed', len(totals), 'regions')\n"
            "totals",
            timeout=CALL_TIMEOUT,
            on_stdout=echo,
        ).check()
        summary = totals.main.json if totals.main and totals.main.json is not None else json.loads(totals.text.replace("'", '"'))

        # 4. A mistake in a step is data for the agent, not a crash of the harness.
        oops = ctx.run_code("totals['west']", timeout=CALL_TIMEOUT)
        print(f"expected error: {oops.error.name}: {oops.error.value}")

        # 5. Write the result where the next step (or a human) can find it, and read it back.
        ctx.run_code("import json\njson.dump(totals, open('summary.json', 'w'), sort_keys=True)", timeout=CALL_TIMEOUT).check()
        saved = json.loads(sb.files.read_text("/workspace/summary.json"))
        assert saved == summary, (saved, summary)
        print("summary:", json.dumps(saved, sort_keys=True))
        return 0
    except BerthError as e:
        print(f"berth refused: {e}", file=sys.stderr)
        return 1
    finally:
        receipt = sb.remove()
        print(f"removed {receipt.id}: clean={receipt.clean}")


if __name__ == "__main__":
    sys.exit(main())
