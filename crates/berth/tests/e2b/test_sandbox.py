"""The control plane and envd through the unmodified `e2b` SDK: create, commands, files, timeouts, list,
pause and connect, metrics, kill, and the errors an E2B user would meet."""
import gzip
import io
import os
import time

import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    Sandbox,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b.exceptions import SandboxException

from conftest import domain, get_port, wait_for


def test_create_run_exact_output_env_and_home(test_id):
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id}, envs={"GREETING": "hej"})
    try:
        assert sb.sandbox_id.isalnum() and sb.sandbox_id == sb.sandbox_id.lower()
        r = sb.commands.run("echo 'Hello, World!'")
        assert (r.stdout, r.stderr, r.exit_code) == ("Hello, World!\n", "", 0)
        r = sb.commands.run("echo $GREETING; echo oops >&2; pwd; echo $HOME", envs={"EXTRA": "x"})
        assert r.stdout == "hej\n/home/user\n/home/user\n" and r.stderr == "oops\n"
        assert sb.commands.run("echo $EXTRA", envs={"EXTRA": "per call"}).stdout == "per call\n"
        assert sb.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
        assert sb.commands.run("printf 'héllo ✓'").stdout == "héllo ✓"
        seen = []
        sb.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=seen.append)
        assert "".join(seen) == "1\n2\n3\n"
        with pytest.raises(CommandExitException) as failed:
            sb.commands.run("echo bad >&2; exit 3")
        assert failed.value.exit_code == 3 and failed.value.stderr == "bad\n"
        assert sb.is_running()
    finally:
        assert sb.kill() is True
    assert Sandbox.kill(sb.sandbox_id) is False
    assert not sb.is_running()


def test_commands_and_files_are_the_users_unless_root_is_asked_for(sandbox):
    r = sandbox.commands.run("whoami; id -u; id -g; echo $HOME $USER $LOGNAME; pwd")
    assert r.stdout == "user\n1000\n1000\n/home/user user user\n/home/user\n"
    r = sandbox.commands.run("whoami; echo $HOME; pwd", user="root")
    assert r.stdout == "root\n/root\n/root\n"
    # What the user writes is theirs: a command of theirs may change it, and it shows as theirs.
    sandbox.files.write("mine/notes.txt", "one\n")
    sandbox.commands.run("echo two >> mine/notes.txt")
    assert sandbox.files.read("mine/notes.txt") == "one\ntwo\n"
    info = sandbox.files.get_info("mine/notes.txt")
    assert (info.owner, info.group) == ("user", "user")
    assert sandbox.files.get_info("/home/user/mine").owner == "user"
    # The user cannot write where root's files are; root can, and relative paths are then in /root.
    with pytest.raises(CommandExitException) as refused:
        sandbox.commands.run("touch /etc/by-user")
    assert "Permission denied" in refused.value.stderr
    with pytest.raises(SandboxException):
        sandbox.files.write("/etc/by-user", "x")
    with pytest.raises(SandboxException):
        sandbox.files.make_dir("/etc/by-user.d")
    with pytest.raises(SandboxException):
        sandbox.files.read("/root/.profile-or-nothing")
    assert not sandbox.files.exists("/etc/by-user", user="root")
    sandbox.files.write("/etc/by-root", "x", user="root")
    assert sandbox.files.get_info("/etc/by-root").owner == "root"
    sandbox.files.write("rel.txt", "r", user="root")
    assert sandbox.commands.run("cat /root/rel.txt", user="root").stdout == "r"
    with pytest.raises(SandboxException):
        sandbox.files.remove("/etc/by-root")
    assert sandbox.files.exists("/etc/by-root")
    sandbox.files.remove("/etc/by-root", user="root")
    assert not sandbox.files.exists("/etc/by-root")


def test_background_commands_are_listed_connected_to_and_killed(sandbox):
    h = sandbox.commands.run("echo started; sleep 60", background=True)
    assert h.pid > 0
    assert h.pid in [p.pid for p in sandbox.commands.list()]
    again = sandbox.commands.connect(h.pid)
    assert again.pid == h.pid
    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    # The whole tree is gone, and so is the process from the list.
    wait_for("the killed command's end", lambda: "sleep 60" not in sandbox.commands.run("ps -eo args").stdout)
    assert h.pid not in [p.pid for p in sandbox.commands.list()]
    assert sandbox.commands.kill(h.pid) is False
    with pytest.raises(Exception):
        sandbox.commands.connect(999999)


def test_a_timeout_is_the_servers_and_kills_the_process(sandbox):
    started = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30; echo never", timeout=2)
    assert time.monotonic() - started < 20
    # The server's deadline is the same as the client's: the process is killed there, not left running.
    wait_for("the timed-out command's end", lambda: "sleep 30" not in sandbox.commands.run("ps -eo args").stdout, 15)


def test_files_write_read_list_stat_mkdir_rename_remove(sandbox):
    info = sandbox.files.write("notes/a.txt", "hello file")
    assert info.path == "/home/user/notes/a.txt" and info.name == "a.txt"
    assert sandbox.files.read("notes/a.txt") == "hello file"
    assert sandbox.files.read("/home/user/notes/a.txt", format="bytes") == b"hello file"
    assert sandbox.commands.run("cat /home/user/notes/a.txt").stdout == "hello file"
    sandbox.files.write("empty", "")
    assert sandbox.files.read("empty") == ""
    many = sandbox.files.write_files([
        {"path": "many/one", "data": "1"},
        {"path": "/tmp/two", "data": b"\x00\x01\x02"},
    ])
    assert [w.path for w in many] == ["/home/user/many/one", "/tmp/two"]
    assert sandbox.files.read("/tmp/two", format="bytes") == b"\x00\x01\x02"
    # A file object goes up as octet-stream; gzip=True compressed.
    sandbox.files.write("stream.bin", io.BytesIO(b"streamed" * 1000))
    assert sandbox.files.read("stream.bin", format="bytes") == b"streamed" * 1000
    sandbox.files.write("zipped.txt", "squeezed " * 500, gzip=True)
    assert sandbox.files.read("zipped.txt") == "squeezed " * 500
    names = sorted(e.name for e in sandbox.files.list("notes"))
    assert names == ["a.txt"]
    deep = {e.path for e in sandbox.files.list("/home/user", depth=2)}
    assert "/home/user/notes/a.txt" in deep and "/home/user/notes" in deep
    entry = sandbox.files.get_info("notes/a.txt")
    assert entry.size == 10 and entry.type.value == "file" and entry.permissions.startswith("-rw")
    assert sandbox.files.exists("notes/a.txt") and not sandbox.files.exists("nope")
    assert sandbox.files.make_dir("made/deeper") is True
    assert sandbox.files.make_dir("made/deeper") is False
    moved = sandbox.files.rename("notes/a.txt", "notes/b.txt")
    assert moved.path == "/home/user/notes/b.txt" and not sandbox.files.exists("notes/a.txt")
    sandbox.files.remove("notes")
    assert not sandbox.files.exists("notes")
    sandbox.files.remove("never-there")
    with pytest.raises(Exception) as missing:
        sandbox.files.read("nope")
    assert "nope" in str(missing.value)


def test_set_timeout_is_berths_ttl(test_id):
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id}, timeout=600)
    first_end = sb.get_info().end_at
    sb.set_timeout(1200)
    assert (sb.get_info().end_at - first_end).total_seconds() > 500
    sb.set_timeout(2)
    wait_for("the sandbox's end at its new timeout", lambda: not sb.is_running())
    with pytest.raises(NotFoundException):
        sb.get_info()
    assert Sandbox.kill(sb.sandbox_id) is False


def test_pause_then_connect_resumes_with_state(sandbox):
    sandbox.commands.run("echo kept > /home/user/state")
    assert sandbox.pause() is True
    assert not sandbox.is_running()
    assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
    assert sandbox.pause() is False
    back = Sandbox.connect(sandbox.sandbox_id, timeout=900)
    assert back.is_running()
    assert back.commands.run("cat /home/user/state").stdout == "kept\n"
    assert Sandbox.get_info(sandbox.sandbox_id).state.value == "running"


def test_list_filters_and_pages(test_id):
    made = [Sandbox.create("base", metadata={"sandbox_test_id": test_id, "n": str(i)}) for i in range(3)]
    try:
        mine = SandboxQuery(metadata={"sandbox_test_id": test_id})
        found = Sandbox.list(query=mine).next_items()
        assert sorted(s.sandbox_id for s in found) == sorted(s.sandbox_id for s in made)
        assert all(s.metadata["sandbox_test_id"] == test_id and s.template_id == "base" for s in found)
        one = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id, "n": "1"})).next_items()
        assert [s.sandbox_id for s in one] == [made[1].sandbox_id]
        pages = Sandbox.list(query=mine, limit=2)
        first = pages.next_items()
        assert len(first) == 2 and pages.has_next
        rest = pages.next_items()
        assert len(rest) == 1 and not pages.has_next
        assert {s.sandbox_id for s in first + rest} == {s.sandbox_id for s in made}
        made[0].pause()
        running = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id}, state=[SandboxState.RUNNING])).next_items()
        assert sorted(s.sandbox_id for s in running) == sorted(s.sandbox_id for s in made[1:])
    finally:
        for sb in made:
            sb.kill()


def test_info_and_metrics(sandbox, test_id):
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id and info.metadata["sandbox_test_id"] == test_id
    assert info.template_id == "base" and info.state.value == "running" and info.memory_mb > 0
    metrics = sandbox.get_metrics()
    assert metrics and metrics[-1].mem_used > 0 and metrics[-1].cpu_count >= 1
    # A series: a point every 5 s, CPU as the share used since the point before (a busy loop shows).
    sandbox.commands.run("timeout 12 sh -c 'while :; do :; done'", background=True)
    wait_for("three points", lambda: len(sandbox.get_metrics()) >= 3, 30)
    series = sandbox.get_metrics()
    times = [m.timestamp for m in series]
    assert times == sorted(times) and all((b - a).total_seconds() >= 4.9 for a, b in zip(times, times[1:]))
    assert max(m.cpu_used_pct for m in series[1:]) > 10, series
    import datetime

    late = sandbox.get_metrics(start=series[-1].timestamp - datetime.timedelta(seconds=1))
    assert late[0].timestamp == series[-1].timestamp and len(late) < len(series)
    assert sandbox.get_metrics(end=datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)) == []


def test_errors_say_what_is_wrong():
    with pytest.raises(AuthenticationException):
        Sandbox.create("base", api_key=os.environ["BERTH_E2B_BAD_KEY"])
    with pytest.raises(SandboxException) as unknown:
        Sandbox.create("no-such-template")
    assert "no-such-template" in str(unknown.value)
    with pytest.raises(SandboxException) as refused:
        Sandbox.create("base", network={"mask_request_host": "example.com"})
    assert "network.maskRequestHost" in str(refused.value)
    with pytest.raises(NotFoundException):
        Sandbox.connect("000000000000")


@pytest.mark.anyio
async def test_the_async_sdk(test_id):
    from e2b import AsyncSandbox

    sb = await AsyncSandbox.create("base", metadata={"sandbox_test_id": test_id})
    try:
        r = await sb.commands.run("echo async")
        assert r.stdout == "async\n"
        await sb.files.write("a.txt", "from async")
        assert await sb.files.read("a.txt") == "from async"
        assert await sb.files.exists("a.txt")
        h = await sb.commands.run("sleep 60", background=True)
        assert await sb.commands.kill(h.pid)
        assert await sb.is_running()
    finally:
        assert await sb.kill() is True


def test_get_host_reaches_a_server_in_the_sandbox(sandbox):
    sandbox.files.write("site/index.html", "served from the sandbox")
    sandbox.commands.run("cd /home/user/site && python3 -m http.server 8000 --bind 127.0.0.1", background=True)
    host = sandbox.get_host(8000)
    assert host == f"8000-{sandbox.sandbox_id}.{domain()}"

    # By its host (what a wildcard DNS name for the domain gives), and by E2B's routing headers.
    up = lambda: (r := get_port(host, "/index.html")) is not None and r.status_code == 200
    wait_for("the server's start", up)
    assert get_port(host, "/index.html").text == "served from the sandbox"
    routed = get_port(host, "/index.html", routed_by=(sandbox.sandbox_id, 8000))
    assert routed.status_code == 200 and routed.text == "served from the sandbox"
    closed = get_port(sandbox.get_host(8001))
    assert closed.status_code == 502 and "port is not open" in closed.text


def test_private_traffic_needs_the_traffic_token(test_id):
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id}, network={"allow_public_traffic": False})
    try:
        sb.commands.run("cd /tmp && python3 -m http.server 8000 --bind 127.0.0.1", background=True)
        host = sb.get_host(8000)
        refused = get_port(host)
        assert refused.status_code == 403 and "traffic access token" in refused.text
        token = sb.traffic_access_token
        assert token
        ok = lambda: (r := get_port(host, headers={"e2b-traffic-access-token": token})) is not None and r.status_code == 200
        wait_for("the server's answer with the token", ok)
    finally:
        sb.kill()


def test_egress_is_berths_policy(test_id):
    # No egress unless asked for: the proxy refuses, and says so.
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id})
    try:
        r = sb.commands.run("curl -sS -o /dev/null -w '%{http_code}' http://blocked.example/ || true")
        assert r.stdout == "403", r
    finally:
        sb.kill()
    # allowOut names what may be reached; everything else stays refused.
    sb = Sandbox.create("base", metadata={"sandbox_test_id": test_id}, network={"allow_out": ["pypi.org:443"]})
    try:
        r = sb.commands.run("curl -sS -i http://blocked.example/ || true")
        assert "no allow rule matches blocked.example:80" in r.stdout, r
        # update_network replaces the lists: blocked.example is allowed now (and so no rule refuses it), pypi.org not.
        sb.update_network({"allow_out": ["blocked.example:80"]})
        r = sb.commands.run("curl -sS -i http://blocked.example/ || true")
        assert "error=dns_error" in r.stdout and "denied" not in r.stdout, r
        r = sb.commands.run("curl -sS -i https://pypi.org/ || true")
        assert "pypi.org:443 is denied by rule pypi.org:443" in r.stdout, r
        assert Sandbox.get_info(sb.sandbox_id).allow_internet_access is False
        # The same update again is fine, and a destination in both lists is denied.
        sb.update_network({"allow_out": ["blocked.example:80"]})
        sb.update_network({"allow_out": ["blocked.example:80"], "deny_out": ["blocked.example:80"]})
        r = sb.commands.run("curl -sS -i http://blocked.example/ || true")
        assert "denied by rule blocked.example:80" in r.stdout, r
        with pytest.raises(SandboxException, match="allow_internet_access"):
            sb.update_network({"allow_internet_access": True})
    finally:
        sb.kill()
    with pytest.raises(SandboxException) as refused:
        Sandbox.create("base", network={"mask_request_host": "x"})
    assert "maskRequestHost" in str(refused.value)


def test_input_to_a_running_command(sandbox):
    h = sandbox.commands.run("read a; echo got:$a; cat; echo end", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "first\n")
    sandbox.commands.send_stdin(h.pid, "more input\n")
    sandbox.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "got:first\nmore input\nend\n", r
    # A command started without stdin takes none, and says so.
    quiet = sandbox.commands.run("sleep 30", background=True)
    with pytest.raises(Exception) as refused:
        sandbox.commands.send_stdin(quiet.pid, "x")
    assert "stdin_open" in str(refused.value) or "without" in str(refused.value)
    quiet.kill()


def test_watching_a_directory(sandbox):
    from e2b import FilesystemEventType

    sandbox.files.make_dir("watched/sub")
    sandbox.files.write("watched/old.txt", "old")
    w = sandbox.files.watch_dir("watched", recursive=True)
    try:
        sandbox.files.write("watched/new.txt", "new")
        sandbox.files.write("watched/sub/deep.txt", "deep")
        sandbox.files.write("watched/old.txt", "changed, longer")
        sandbox.files.remove("watched/old.txt")
        events = {(e.name, e.type) for e in w.get_new_events()}
        assert ("new.txt", FilesystemEventType.CREATE) in events
        assert ("sub/deep.txt", FilesystemEventType.CREATE) in events
        assert ("old.txt", FilesystemEventType.REMOVE) in events
        assert w.get_new_events() == []
        sandbox.commands.run("chmod 600 /home/user/watched/new.txt; echo more >> /home/user/watched/new.txt")
        later = {(e.name, e.type) for e in w.get_new_events()}
        assert later == {("new.txt", FilesystemEventType.CHMOD), ("new.txt", FilesystemEventType.WRITE)}
    finally:
        w.stop()
    with pytest.raises(Exception):
        sandbox.files.watch_dir("watched/new.txt")


@pytest.mark.anyio
async def test_the_async_watch_stream(test_id):
    import asyncio

    from e2b import AsyncSandbox, FilesystemEventType

    sb = await AsyncSandbox.create("base", metadata={"sandbox_test_id": test_id})
    try:
        await sb.files.make_dir("w")
        seen = []
        handle = await sb.files.watch_dir("w", on_event=lambda e: seen.append((e.name, e.type)))
        await sb.files.write("w/a.txt", "a")
        for _ in range(100):
            if ("a.txt", FilesystemEventType.CREATE) in seen:
                break
            await asyncio.sleep(0.1)
        assert ("a.txt", FilesystemEventType.CREATE) in seen, seen
        await handle.stop()
    finally:
        await sb.kill()


def test_a_pty(sandbox):
    import threading

    from e2b import CommandExitException, PtySize

    got, ended = [], {}
    term = sandbox.pty.create(PtySize(rows=30, cols=100))

    def read():
        try:
            ended["result"] = term.wait(on_pty=got.append)
        except CommandExitException as e:
            ended["result"] = e

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        sandbox.pty.send_stdin(term.pid, b"stty size; tty; echo answer=$((6*7))\n")
        wait_for("the terminal's answer", lambda: b"answer=42" in b"".join(got))
        text = b"".join(got).decode(errors="replace")
        assert "30 100" in text and "/dev/pts/" in text, text
        sandbox.pty.resize(term.pid, PtySize(rows=40, cols=120))
        sandbox.pty.send_stdin(term.pid, b"stty size\n")
        wait_for("the new size", lambda: b"40 120" in b"".join(got))
        sandbox.pty.send_stdin(term.pid, b"exit 5\n")
        reader.join(30)
        assert ended["result"].exit_code == 5
    finally:
        if reader.is_alive():
            term.kill()

    # Disconnected, a terminal runs on; connected again, what it shows (from its log) comes to the new handle.
    other = sandbox.pty.create(PtySize(rows=24, cols=80))
    other.disconnect()
    sandbox.pty.send_stdin(other.pid, b"echo again=$((7*7))\n")
    back, again = sandbox.pty.connect(other.pid), []

    def reread():
        try:
            ended["again"] = back.wait(on_pty=again.append)
        except CommandExitException as e:
            ended["again"] = e

    reader = threading.Thread(target=reread, daemon=True)
    reader.start()
    try:
        wait_for("the output after connecting again", lambda: b"again=49" in b"".join(again))
        sandbox.pty.send_stdin(other.pid, b"exit 3\n")
        reader.join(30)
        assert ended["again"].exit_code == 3
    finally:
        if reader.is_alive():
            back.kill()
