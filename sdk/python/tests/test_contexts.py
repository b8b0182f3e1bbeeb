"""Code contexts: live interpreters whose state carries over between runs. Skipped (not passed) on a daemon
that does not serve the routes yet."""

from __future__ import annotations

import asyncio
import base64
import threading
import time

import pytest

import berth

pytestmark = pytest.mark.usefixtures("need_contexts")

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


def test_state_carries_over_and_the_main_result_is_text(sandbox):
    ctx = sandbox.create_code_context("python")
    assert ctx.language == "python" and ctx.info.state == "idle" and ctx.info.execution_count == 0
    assert ctx.info.cwd == "/workspace" and ctx.info.sandbox_id == sandbox.id and ctx.id.startswith("c")
    first = ctx.run_code("x = 1 + 1", timeout=30)
    assert first.text is None and first.error is None and first.execution_count == 1
    second = ctx.run_code("x * 3", timeout=30)
    assert second.text == "6" and second.execution_count == 2
    assert second.main is not None and second.main.is_main
    assert ctx.refresh().execution_count == 2


def test_stdout_stderr_and_rich_results(sandbox):
    ctx = sandbox.create_code_context("python")
    code = (
        "import sys\n"
        "print('to out'); print('to err', file=sys.stderr)\n"
        "class Page:\n"
        "    def _repr_html_(self): return '<b>bold</b>'\n"
        f"    def _repr_png_(self): return __import__('base64').b64decode('{PNG}')\n"
        "display(Page())\n"
        "{'a': [1, 2]}\n"
    )
    ex = ctx.run_code(code, timeout=30)
    assert ex.error is None, ex.error
    assert ex.stdout == "to out\n" and ex.stderr == "to err\n"
    shown = [r for r in ex.results if not r.is_main]
    assert shown and shown[0].html == "<b>bold</b>" and shown[0].png == PNG
    assert set(shown[0].formats) >= {"text/plain", "text/html", "image/png"}
    assert ex.main.json == {"a": [1, 2]} and ex.text == "{'a': [1, 2]}"


def test_env_holds_for_one_run(sandbox):
    ctx = sandbox.create_code_context("python", env={"KEPT": "context"})
    assert ctx.run_code("import os; os.environ['KEPT'] + os.environ['ONCE']", env={"ONCE": "-run", "KEPT": "over"}).text == "'over-run'"
    assert ctx.run_code("os.environ['KEPT'], os.environ.get('ONCE')").text == "('context', None)"
    sh = sandbox.create_code_context("bash")
    assert sh.run_code("echo \"$A|${B-none}\"", env={"A": "a b", "B": "it's"}).stdout == "a b|it's\n"
    assert sh.run_code("echo \"${A-gone}|${B-gone}\"").stdout == "gone|gone\n"
    # Put back however the run ended (a `return` from the run's code), and a plain variable stays unexported.
    sh.run_code("PLAIN=p")
    sh.run_code("echo \"$PLAIN\"; return 3", env={"PLAIN": "x", "A": "r"})
    assert sh.run_code("echo \"$PLAIN|${A-gone}\"; env | grep -c '^PLAIN=' || true").stdout == "p|gone\n0\n"
    with pytest.raises(berth.InvalidRequest):
        ctx.run_code("1", env={"BAD=NAME": "x"})


def test_an_error_has_name_value_and_traceback(sandbox):
    ctx = sandbox.create_code_context("python")
    ex = ctx.run_code("def f():\n    return 1 / 0\nf()", timeout=30)
    assert ex.error is not None and ex.text is None
    assert (ex.error.name, ex.error.value) == ("ZeroDivisionError", "division by zero")
    assert "ZeroDivisionError" in ex.error.traceback and "f()" in ex.error.traceback
    with pytest.raises(berth.CodeError, match="ZeroDivisionError"):
        ex.check()
    assert ctx.run_code("1", timeout=30).check().text == "1"


def test_streaming_callbacks(sandbox):
    ctx = sandbox.create_code_context("python")
    got: dict[str, list] = {"out": [], "err": [], "result": [], "error": []}
    ex = ctx.run_code(
        "import sys, time\nprint('a', flush=True)\ntime.sleep(0.1)\nprint('b', file=sys.stderr)\n42",
        on_stdout=got["out"].append, on_stderr=got["err"].append,
        on_result=got["result"].append, on_error=got["error"].append, timeout=30,
    )  # fmt: skip
    assert "".join(got["out"]) == "a\n" and "".join(got["err"]) == "b\n"
    assert [r.text for r in got["result"]] == ["42"] == [ex.text] and got["error"] == []
    ctx.run_code("raise ValueError('bad')", on_error=got["error"].append, timeout=30)
    assert [e.name for e in got["error"]] == ["ValueError"]


def test_timeout_interrupts_the_run(sandbox):
    ctx = sandbox.create_code_context("python")
    ctx.run_code("kept = 'yes'", timeout=30)
    started = time.monotonic()
    ex = ctx.run_code("import time\nwhile True: time.sleep(0.05)", timeout=1)
    assert ex.timed_out and ex.error is not None and time.monotonic() - started < 30
    if not ex.killed:
        assert ctx.run_code("kept", timeout=30).text == "'yes'"


def test_interrupt_restart_list_remove(sandbox):
    ctx = sandbox.create_code_context("python")
    assert ctx.interrupt() is False
    done: list[berth.Execution] = []
    t = threading.Thread(target=lambda: done.append(ctx.run_code("import time\ntime.sleep(60)", timeout=120)))
    t.start()
    deadline = time.monotonic() + 20
    while ctx.refresh().state != "busy" and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(berth.Conflict):
        ctx.run_code("1")
    assert ctx.interrupt() is True
    t.join(30)
    assert done and done[0].interrupted and done[0].error is not None
    ctx.run_code("y = 5", timeout=30)
    info = ctx.restart()
    assert info.execution_count == 0
    ex = ctx.run_code("y", timeout=30)
    assert ex.error is not None and ex.error.name == "NameError"
    other = sandbox.create_code_context("bash")
    assert {c.id for c in sandbox.code_contexts()} >= {ctx.id, other.id}
    assert sandbox.code_context(ctx.id).id == ctx.id
    other.remove()
    with pytest.raises(berth.NotFound):
        sandbox.code_context(other.id)


def test_bash_and_javascript_contexts(sandbox):
    bash = sandbox.create_code_context("bash")
    bash.run_code("export KEPT=across-runs; cd /tmp", timeout=30)
    ex = bash.run_code("echo $KEPT; pwd", timeout=30)
    assert ex.stdout == "across-runs\n/tmp\n"
    if sandbox.exec("command -v node", timeout=10).ok:
        js = sandbox.create_code_context("javascript")
        js.run_code("var n = 20", timeout=30)
        assert js.run_code("n + 22", timeout=30).text == "42"


def test_unknown_language_and_context(sandbox):
    with pytest.raises(berth.InvalidRequest):
        sandbox.create_code_context("cobol")
    with pytest.raises(berth.NotFound):
        sandbox.code_context("c-000000000000")


def test_run_code_on_the_sandbox_uses_a_default_context(sandbox):
    sandbox.run_code("z = 7", timeout=30)
    assert sandbox.run_code("z * 6", timeout=30).text == "42"


def test_async_contexts(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300) as sb:
                ctx = await sb.create_code_context("python")
                await ctx.run_code("a = 2", timeout=30)
                seen: list[str] = []
                ex = await ctx.run_code("print('hi')\na ** 5", on_stdout=seen.append, timeout=30)
                assert ex.text == "32" and "".join(seen) == "hi\n"
                assert (await ctx.restart()).execution_count == 0
                assert [c.id for c in await sb.code_contexts()] == [ctx.id]
                await ctx.remove()

    asyncio.run(main())
