"""Execs against the real daemon: results, options, streaming, limits, background execs."""

from __future__ import annotations

import pytest

import berth
from berth.models import ExecExit, ExecOutput, ExecStarted, ExecTruncated


def test_a_string_runs_under_sh_and_streams_stay_apart(sandbox):
    r = sandbox.exec("echo out; echo err >&2; exit 3", timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert r.argv == ["sh", "-c", "echo out; echo err >&2; exit 3"]
    assert not r.ok and not r.truncated and not r.timed_out and r.bytes_dropped == 0
    assert r.exec_id.startswith("x") and r.duration >= 0 and r.duration_ms == int(r.duration * 1000)


def test_a_list_is_the_argv_itself(sandbox):
    r = sandbox.exec(["printf", "%s|", "a b", "$HOME", ";"], timeout=10)
    assert r.stdout == "a b|$HOME|;|"


def test_env_cwd_and_stdin(sandbox):
    r = sandbox.exec("echo $GREETING; pwd; cat", env={"GREETING": "hi"}, cwd="/tmp/work", stdin="from stdin", timeout=10)
    assert r.stdout == "hi\n/tmp/work\nfrom stdin"
    assert sandbox.exec("cat", stdin=b"bytes too", timeout=10).stdout == "bytes too"


def test_a_command_runs_as_the_user_asked_for_and_files_are_theirs(sandbox):
    r = sandbox.exec("id -u; id -g; echo $HOME $USER; pwd", user="user", timeout=10)
    assert r.stdout == "1000\n1000\n/home/user user\n/home/user\n"
    assert sandbox.exec("id -u; id -g", user="4242:100", timeout=10).stdout == "4242\n100\n"
    assert sandbox.exec("id -u", timeout=10).stdout == "0\n"
    denied = sandbox.exec("touch /etc/by-user", user="user", timeout=10)
    assert denied.exit_code == 1 and "Permission denied" in denied.stderr
    with pytest.raises(berth.InvalidRequest, match="no user named ghost"):
        sandbox.exec("true", user="ghost", timeout=10)
    with pytest.raises(berth.InvalidRequest, match="neither a user name"):
        sandbox.exec("true", user="70000", timeout=10)
    entry = sandbox.files.write("/home/user/made.txt", "theirs", user="user")
    assert (entry.uid, entry.gid) == (1000, 1000)
    assert sandbox.exec("echo more >> made.txt && cat made.txt", user="user", timeout=10).stdout == "theirsmore\n"
    with pytest.raises(berth.Conflict, match="Permission denied"):
        sandbox.files.write("/etc/by-user", "x", user="user")
    with pytest.raises(berth.Conflict, match="Permission denied"):
        sandbox.files.read("/root/.bashrc-or-not", user="user")
    assert sandbox.files.mkdir("/home/user/d", user="user").uid == 1000
    assert sandbox.files.stat("/etc/hostname").uid == 0


def test_state_persists_between_execs(sandbox):
    sandbox.exec("echo kept > /workspace/note", timeout=10).check()
    assert sandbox.exec("cat /workspace/note", timeout=10).stdout == "kept\n"


def test_timeout_is_exit_code_124(sandbox):
    r = sandbox.exec("echo started; sleep 30", timeout=0.5)
    assert r.exit_code == 124 and r.timed_out
    assert r.stdout == "started\n"
    assert r.duration < 10


def test_truncation_keeps_the_head_and_the_tail(sandbox):
    r = sandbox.exec(["seq", "1", "3000"], max_output=200, timeout=10)
    assert r.exit_code == 0
    assert r.truncated and r.bytes_dropped > 13000
    assert r.stdout.startswith("1\n2\n3\n")
    assert r.stdout.endswith("2999\n3000\n")
    assert len(r.stdout.encode()) == 200
    assert r.output_bytes == len(r.stdout.encode()) + r.bytes_dropped


def test_a_missing_command_is_127_with_the_reason(sandbox):
    r = sandbox.exec(["no-such-command-here"], timeout=10)
    assert r.exit_code == 127 and r.error


def test_check_raises_command_failed(sandbox):
    with pytest.raises(berth.CommandFailed) as info:
        sandbox.exec("echo boom >&2; exit 2", check=True, timeout=10)
    assert info.value.result.exit_code == 2 and "boom" in str(info.value)
    assert sandbox.exec("true", check=True, timeout=10).ok


def test_bad_input_is_invalid_request_with_the_sentence(sandbox):
    with pytest.raises(berth.InvalidRequest) as info:
        sandbox.exec("true", cwd="relative/dir")
    assert info.value.status == 400 and info.value.code == "invalid_request"
    assert "absolute" in info.value.message
    with pytest.raises(berth.InvalidRequest):
        sandbox.exec("true", max_output=1)
    with pytest.raises(ValueError):
        sandbox.exec([])


def test_streaming_by_iterator(sandbox):
    stream = sandbox.exec_stream("echo one; sleep 0.2; echo two >&2; exit 4", timeout=10)
    frames = list(stream)
    assert isinstance(frames[0], ExecStarted) and isinstance(frames[-1], ExecExit)
    outputs = [(f.stream, f.data) for f in frames if isinstance(f, ExecOutput)]
    assert outputs == [("stdout", "one\n"), ("stderr", "two\n")]
    assert stream.result.exit_code == 4 and stream.exec_id == frames[0].exec_id


def test_streaming_shows_truncation_as_a_frame(sandbox):
    frames = list(sandbox.exec_stream(["seq", "1", "3000"], max_output=200, timeout=10))
    kinds = [f.type for f in frames]
    assert "truncated" in kinds
    trunc = next(f for f in frames if isinstance(f, ExecTruncated))
    assert trunc.dropped_bytes == frames[-1].bytes_dropped


def test_streaming_by_callbacks_in_order(sandbox):
    seen: list[tuple[str, str]] = []
    r = sandbox.exec(
        "for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; done",
        on_stdout=lambda d: seen.append(("out", d)), on_stderr=lambda d: seen.append(("err", d)), timeout=10,
    )  # fmt: skip
    assert "".join(d for k, d in seen if k == "out") == r.stdout == "o1\no2\no3\n"
    assert "".join(d for k, d in seen if k == "err") == r.stderr == "e1\ne2\ne3\n"
    # Called as the output came (the loop sleeps between lines), not once at the end.
    assert len([k for k, _ in seen if k == "out"]) >= 2


def test_background_exec_wait_and_logs(sandbox):
    proc = sandbox.exec("echo begin; sleep 0.5; echo end; exit 5", background=True, timeout=30)
    assert isinstance(proc, berth.Process) and proc.exec_id.startswith("x")
    assert proc.running
    with pytest.raises(berth.WaitTimeout):
        proc.wait(timeout=0.05)
    r = proc.wait(timeout=30)
    assert r.exit_code == 5 and r.stdout == "begin\nend\n"
    assert proc.logs() == "begin\nend\n"
    assert not proc.running
    assert sandbox.process(proc.exec_id).info.result.exit_code == 5


def test_background_exec_kill(sandbox):
    proc = sandbox.exec("sleep 60", background=True)
    info = proc.kill()
    assert info.result is not None and info.result.killed and info.result.exit_code == 137
    assert proc.wait(timeout=10).killed


def test_background_exec_follow(sandbox):
    proc = sandbox.exec("for i in 1 2 3; do echo line$i; sleep 0.1; done", background=True, timeout=30)
    assert "".join(proc.follow()) == "line1\nline2\nline3\n"


def test_unknown_exec_is_not_found(sandbox):
    with pytest.raises(berth.NotFound):
        sandbox.process("x999")
    with pytest.raises(berth.NotFound):
        sandbox.exec_log("x999")


def test_exec_list(sandbox):
    sandbox.exec("true", timeout=10)
    execs = sandbox.execs()
    assert execs and execs[-1].argv == ["sh", "-c", "true"] and execs[-1].result.exit_code == 0


def test_input_to_a_running_exec(sandbox):
    p = sandbox.exec("read a; echo got:$a; cat; echo end", background=True, stdin_open=True)
    p.write_stdin("first\n")
    p.write_stdin(b"more\n", close=True)
    info = p.wait_info(timeout=30)
    assert info.result.exit_code == 0 and p.logs() == "got:first\nmore\nend\n"
    with pytest.raises(berth.Conflict):
        p.write_stdin("late")
    quiet = sandbox.exec("sleep 30", background=True)
    with pytest.raises(berth.Conflict) as refused:
        quiet.write_stdin("x")
    assert "stdin_open" in str(refused.value)
    quiet.kill()
