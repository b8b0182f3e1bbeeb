"""The code interpreter through the unmodified `e2b-code-interpreter` SDK, on berth's live contexts."""
import pytest
from e2b_code_interpreter import AsyncSandbox, Sandbox


@pytest.fixture
def ci(test_id):
    sb = Sandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        yield sb
    finally:
        sb.kill()


def test_state_persists_between_runs(ci):
    assert ci.get_info().template_id == "code-interpreter-v1"
    first = ci.run_code("x = 1")
    assert first.error is None and first.text is None
    second = ci.run_code("x + 1")
    assert second.text == "2" and second.execution_count == 2


def test_output_results_and_errors(ci):
    e = ci.run_code("import sys; print('out'); print('err', file=sys.stderr); 'abc'")
    assert e.logs.stdout == ["out\n"] and e.logs.stderr == ["err\n"] and e.text == "abc"
    seen = []
    ci.run_code("for i in range(3): print(i)", on_stdout=lambda m: seen.append(m.line))
    assert "".join(seen) == "0\n1\n2\n"
    failed = ci.run_code("1 / 0")
    assert failed.error.name == "ZeroDivisionError" and failed.error.value == "division by zero"
    assert "ZeroDivisionError" in failed.error.traceback
    assert ci.run_code("{'a': 1}").text == "{'a': 1}"


def test_javascript_and_contexts(ci):
    js = ci.run_code("const y = 6 * 7; y", language="javascript")
    assert js.text == "42"
    assert ci.run_code("y + 1", language="js").text == "43"
    ctx = ci.create_code_context(language="python", cwd="/tmp")
    assert ctx.language == "python" and ctx.cwd == "/tmp"
    ci.run_code("z = 5", context=ctx)
    assert ci.run_code("z", context=ctx).text == "5"
    assert ci.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
    # The default context does not see the other's state.
    assert ci.run_code("z").error.name == "NameError"
    languages = [c.language for c in ci.list_code_contexts()]
    assert "python" in languages and "javascript" in languages
    ci.restart_code_context(ctx)
    assert ci.run_code("z", context=ctx).error.name == "NameError"
    ci.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in ci.list_code_contexts()]
    with pytest.raises(Exception):
        ci.run_code("1", language="cobol")


@pytest.mark.anyio
async def test_the_async_interpreter(test_id):
    sb = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        await sb.run_code("a = 20")
        assert (await sb.run_code("a + 1")).text == "21"
    finally:
        await sb.kill()


def test_rich_results_and_per_run_env_vars(ci):
    import base64

    chart = ci.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
    pngs = [r.png for r in chart.results if r.png]
    assert chart.error is None and len(pngs) == 1, chart
    assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
    html = ci.run_code("class Bold:\n    def _repr_html_(self):\n        return '<b>hi</b>'\nBold()")
    assert html.results[0].html == "<b>hi</b>" and html.results[0].is_main_result
    # envs (sent as env_vars) hold for the run they are given to, and are gone after it.
    run = ci.run_code("import os; os.environ.get('GREETING')", envs={"GREETING": "hej"})
    assert run.text == "hej"
    assert ci.run_code("import os; repr(os.environ.get('GREETING'))").text == "None"
    js = ci.run_code("process.env.GREETING", language="javascript", envs={"GREETING": "js"})
    assert js.text == "js"
    assert ci.run_code("String(process.env.GREETING)", language="javascript").text == "undefined"
    sh = ci.run_code("echo \"$GREETING\"", language="bash", envs={"GREETING": "it's sh"})
    assert sh.logs.stdout == ["it's sh\n"], sh
    assert ci.run_code("echo \"[${GREETING-unset}]\"", language="bash").logs.stdout == ["[unset]\n"]
