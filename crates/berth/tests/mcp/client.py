"""Drive berth's MCP server with the official MCP client (the `mcp` package), as a model's host would.

    client.py stdio BERTH SOCKET SCENARIO [MODE [SANDBOX]]    berth --socket SOCKET mcp, over stdio
    client.py http URL TOKEN SCENARIO [MODE [SANDBOX]]        streamable HTTP at URL, with TOKEN as the bearer token

SCENARIO is `session` (a whole session: create, exec, files, fork, diff, remove), `scoped` (a sandbox's
session token: only its tools, and the API's refusals), `tenant` (a tenant's token) or `desktop` (the desktop
tools on SANDBOX, a 1600x1000 desktop: screenshots decoded, a click in a screenshot's coordinates, an
off-screen point). MODE is the client's: `auto` (the default: the newest protocol, discovered) or `legacy`
(the initialize handshake of earlier protocol versions, which most MCP hosts still speak). Checks fail with
an AssertionError; what was seen is printed as one JSON object on stdout for the test to check against the
API.
"""

import asyncio
import base64
import json
import struct
import sys
import zlib

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ALL_TOOLS = {
    "sandbox_create", "sandbox_list", "sandbox_inspect", "sandbox_remove", "exec", "run_code", "file_read",
    "file_write", "file_list", "file_move", "file_watch", "snapshot", "restore", "fork", "diff", "net_allow", "net_deny", "net_log",
    "net_suggest", "sandbox_pause", "sandbox_resume", "sandbox_expose", "desktop_screenshot", "desktop_action",
    "desktop_info", "desktop_wait",
}
BEYOND_A_SESSION = {"snapshot", "restore", "fork", "net_allow", "net_deny", "net_suggest", "sandbox_expose"}


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(client, name, args, ok=True):
    result = await client.call_tool(name, args)
    if ok:
        assert not result.is_error, f"{name} {args} failed: {text(result)}"
    else:
        assert result.is_error, f"{name} {args} should have failed: {text(result)}"
    return result


async def session(client, report):
    tools = (await client.list_tools()).tools
    names = {t.name for t in tools}
    assert names == ALL_TOOLS, f"tools: {sorted(names)}"
    for t in tools:
        assert t.description and len(t.description) > 40, f"{t.name} has no real description"
        assert t.input_schema.get("type") == "object", f"{t.name}: {t.input_schema}"
    read_only = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"sandbox_list", "sandbox_inspect", "file_read", "file_list", "file_watch", "diff",
                         "net_log", "net_suggest", "desktop_screenshot", "desktop_info", "desktop_wait"}, read_only
    exec_props = next(t for t in tools if t.name == "exec").input_schema["properties"]
    assert {"sandbox", "argv", "command", "timeout_seconds", "max_output_bytes"} <= set(exec_props), exec_props

    made = (await call(client, "sandbox_create", {
        "name": "mcp-demo", "env": {"GREETING": "hi"}, "ttl_seconds": 600, "labels": {"by": "mcp"},
        "memory_bytes": 268435456,
    })).structured_content
    assert made["name"] == "mcp-demo" and made["state"] == "running", made
    assert made["memory_bytes"] == 268435456 and made["labels"] == {"by": "mcp"}, made
    sid = made["id"]

    r = (await call(client, "exec", {"sandbox": "mcp-demo", "command": "echo $GREETING; echo err >&2; exit 3"}))
    s = r.structured_content
    assert (s["exit_code"], s["stdout"], s["stderr"], s["truncated"]) == (3, "hi\n", "err\n", False), s
    assert text(r).startswith("exit code: 3"), text(r)

    s = (await call(client, "exec", {"sandbox": sid, "argv": ["seq", "1", "3000"], "max_output_bytes": 200}))
    s = s.structured_content
    assert s["exit_code"] == 0 and s["truncated"] and s["bytes_dropped"] > 10000, s
    assert s["stdout"].startswith("1\n2\n3\n") and s["stdout"].endswith("2999\n3000\n"), s["stdout"]
    assert "[... output cut here:" in s["stdout"], s["stdout"]

    content = "hello from mcp\nline two\n"
    entry = (await call(client, "file_write", {
        "sandbox": sid, "path": "/workspace/src/hello.txt", "content": content,
    })).structured_content
    assert entry["size"] == len(content), entry
    read = (await call(client, "file_read", {"sandbox": sid, "path": "/workspace/src/hello.txt"}))
    assert read.structured_content["content"] == content and text(read) == content, read
    listed = (await call(client, "file_list", {"sandbox": sid, "path": "/workspace/src"})).structured_content
    assert [e["name"] for e in listed["entries"]] == ["hello.txt"], listed
    seen = (await call(client, "exec", {"sandbox": sid, "argv": ["cat", "/workspace/src/hello.txt"]}))
    assert seen.structured_content["stdout"] == content, seen.structured_content
    # A move there and back; onto an existing file only with overwrite.
    moved = (await call(client, "file_move", {
        "sandbox": sid, "from": "/workspace/src/hello.txt", "to": "/workspace/hello-moved.txt",
    })).structured_content
    assert (moved["name"], moved["size"]) == ("hello-moved.txt", len(content)), moved
    assert (await call(client, "file_list", {"sandbox": sid, "path": "/workspace/src"})).structured_content[
        "entries"] == []
    await call(client, "file_write", {"sandbox": sid, "path": "/workspace/src/hello.txt", "content": "placeholder"})
    refused = await call(client, "file_move", {
        "sandbox": sid, "from": "/workspace/hello-moved.txt", "to": "/workspace/src/hello.txt",
    }, ok=False)
    assert "overwrite" in text(refused) and refused.structured_content["error"]["code"] == "conflict", refused
    await call(client, "file_move", {
        "sandbox": sid, "from": "/workspace/hello-moved.txt", "to": "/workspace/src/hello.txt", "overwrite": True,
    })
    back = (await call(client, "file_read", {"sandbox": sid, "path": "/workspace/src/hello.txt"}))
    assert back.structured_content["content"] == content, back
    # Waiting for changes: the tool answers once a burst of them is over.
    async def change_soon():
        await asyncio.sleep(1)
        await call(client, "exec", {"sandbox": sid, "command": "for i in 1 2 3; do echo $i > /workspace/src/w$i; done"})
    watched, _ = await asyncio.gather(
        call(client, "file_watch", {"sandbox": sid, "path": "/workspace/src", "quiet_seconds": 1, "timeout_seconds": 60}),
        change_soon(),
    )
    w = watched.structured_content
    created = {e["path"] for e in w["events"] if e["type"] == "create"}
    assert {"w1", "w2", "w3"} <= created and "quiet_seconds" in w["ended"], w
    assert "create   w1" in text(watched), text(watched)
    quiet = (await call(client, "file_watch", {"sandbox": sid, "path": "/workspace/src", "timeout_seconds": 0.5}))
    assert quiet.structured_content["events"] == [] and "timeout_seconds" in quiet.structured_content["ended"], quiet
    await call(client, "file_watch", {"sandbox": sid, "path": "/workspace/src/hello.txt"}, ok=False)

    # Snapshot, break, restore.
    # Snapshots outlive their sandboxes, and a test runs this session more than once on one daemon.
    snap = (await call(client, "snapshot", {"sandbox": sid, "name": f"before-{sid}"})).structured_content
    assert snap["name"] == f"before-{sid}" and snap["sandbox_id"] == sid, snap
    await call(client, "exec", {"sandbox": sid, "command": "rm -r /workspace/src"})
    gone = await call(client, "file_read", {"sandbox": sid, "path": "/workspace/src/hello.txt"}, ok=False)
    report["gone"] = text(gone)
    await call(client, "restore", {"sandbox": sid, "snapshot": f"before-{sid}"})
    back = (await call(client, "file_read", {"sandbox": sid, "path": "/workspace/src/hello.txt"}))
    assert back.structured_content["content"] == content, back

    # Egress: live rules, and the log of a refused attempt.
    policy = (await call(client, "net_allow", {"sandbox": sid, "rules": ["pypi.org:443"]})).structured_content
    assert policy["network"]["mode"] == "enforce" and policy["network"]["allow"] == ["pypi.org:443"], policy
    policy = (await call(client, "net_deny", {"sandbox": sid, "rules": ["example.com"]})).structured_content
    assert policy["network"]["deny"] == ["example.com"], policy
    refused = (await call(client, "exec", {"sandbox": sid, "command": "curl -fsS -o /dev/null http://example.com/"}))
    assert refused.structured_content["exit_code"] != 0, refused.structured_content
    log = (await call(client, "net_log", {"sandbox": sid})).structured_content["attempts"]
    assert [(a["host"], a["verdict"], a["rule"]) for a in log] == [("example.com", "denied", "example.com")], log
    assert (await call(client, "net_suggest", {"sandbox": sid})).structured_content == {"allow": []}
    # A preview URL: through the daemon's TCP listener when it has one (the HTTP session's), else refused in
    # a sentence that says what is missing (the stdio session's daemon has none).
    exposed = await client.call_tool("sandbox_expose", {"sandbox": sid, "port": 8000, "ttl_seconds": 60})
    if exposed.is_error:
        assert "berth daemon --listen" in text(exposed), text(exposed)
    else:
        preview = exposed.structured_content
        assert f"/preview/{preview['sandbox_id']}/8000/?berth_preview_token=" in preview["url"], preview

    # Code in a live context: state persists between runs, errors and figures come back.
    first = (await call(client, "run_code", {"sandbox": sid, "code": "x = 21\nprint('set')"})).structured_content
    assert first["stdout"] == "set\n" and first["error"] is None, first
    ctx = first["context"]
    second = await call(client, "run_code", {"sandbox": sid, "code": "x * 2"})
    s = second.structured_content
    assert s["context"] == ctx and s["results"] == [{"is_main": True, "data": {"text/plain": "42"}}], s
    assert text(second).startswith("result: 42\n"), text(second)
    raised = (await call(client, "run_code", {"sandbox": sid, "code": "1/0"})).structured_content
    assert raised["error"]["name"] == "ZeroDivisionError" and "Traceback" in raised["error"]["traceback"], raised
    drawn = await call(client, "run_code", {"sandbox": sid, "code": "import matplotlib.pyplot as plt\n_ = plt.plot([1, 2, 3])"})
    images = [c for c in drawn.content if c.type == "image"]
    assert drawn.structured_content["images"] == 1 and [i.mime_type for i in images] == ["image/png"], drawn
    fresh = (await call(client, "run_code", {"sandbox": sid, "code": "x", "new_context": True})).structured_content
    assert fresh["context"] != ctx and fresh["error"]["name"] == "NameError", fresh
    shell = (await call(client, "run_code", {"sandbox": sid, "code": "y=5; echo $((y*2))", "language": "bash"}))
    assert shell.structured_content["stdout"] == "10\n", shell.structured_content
    report["bad_language"] = text(await call(client, "run_code", {"sandbox": sid, "code": "1", "language": "cobol"},
                                             ok=False))

    forked = (await call(client, "fork", {"sandbox": sid})).structured_content
    assert forked["parent"] and len(forked["sandboxes"]) == 1, forked
    child = forked["sandboxes"][0]["id"]
    inherited = (await call(client, "file_read", {"sandbox": child, "path": "/workspace/src/hello.txt"}))
    assert inherited.structured_content["content"] == content
    await call(client, "file_write", {"sandbox": child, "path": "/workspace/src/new.py", "content": "print(1)\n"})
    changes = (await call(client, "diff", {"sandbox": child})).structured_content
    paths = {c["path"]: c["kind"] for c in changes["changes"]}
    assert paths == {"/workspace/src/new.py": "added"}, changes
    patch = (await call(client, "diff", {"sandbox": child, "patch": True})).structured_content["patch"]
    assert "+++ b/workspace/src/new.py" in patch and "+print(1)" in patch, patch
    assert sid in {s["id"] for s in (await call(client, "sandbox_list", {})).structured_content["sandboxes"]}
    # Paused between steps, woken by the next exec.
    paused = (await call(client, "sandbox_pause", {"sandbox": sid})).structured_content
    assert paused["state"] == "paused", paused
    woke = (await call(client, "exec", {"sandbox": sid, "command": "echo awake"})).structured_content
    assert woke["stdout"] == "awake\n", woke
    assert (await call(client, "sandbox_inspect", {"sandbox": sid})).structured_content["state"] == "running"
    await call(client, "sandbox_pause", {"sandbox": sid})
    resumed = (await call(client, "sandbox_resume", {"sandbox": sid})).structured_content
    assert resumed["state"] == "running", resumed

    # Errors: the API's own sentence, as a tool error.
    missing = await call(client, "sandbox_inspect", {"sandbox": "nope"}, ok=False)
    report["unknown_sandbox"] = {"text": text(missing), "structured": missing.structured_content}
    both = await call(client, "exec", {"sandbox": sid, "argv": ["true"], "command": "true"}, ok=False)
    assert "not both" in text(both), text(both)
    small = await call(client, "sandbox_create", {"memory_bytes": 1000}, ok=False)
    report["small_memory"] = text(small)
    wrong = await call(client, "exec", {"sandbox": sid, "argv": "not a list"}, ok=False)
    assert text(wrong), wrong

    for victim in (child, sid):
        receipt = (await call(client, "sandbox_remove", {"sandbox": victim})).structured_content
        assert receipt["id"] == victim and receipt["clean"] is True and receipt["reason"] == "remove", receipt
    report["removed"] = [child, sid]


async def scoped(client, report):
    """With the session token of sandbox `owner`: its own record and children of its own, nothing more."""
    names = {t.name for t in (await client.list_tools()).tools}
    assert names == ALL_TOOLS - BEYOND_A_SESSION, f"tools: {sorted(names)}"
    own = (await call(client, "sandbox_inspect", {"sandbox": "owner"})).structured_content
    assert own["name"] == "owner", own
    kid = (await call(client, "sandbox_create", {"name": "kid"})).structured_content
    assert kid["owner"] == own["id"], kid
    report["kid"] = kid["id"]
    out = (await call(client, "exec", {"sandbox": "kid", "command": "echo from kid"})).structured_content
    assert out["stdout"] == "from kid\n", out
    ran = (await call(client, "run_code", {"sandbox": "kid", "code": "6 * 7"})).structured_content
    assert ran["results"] == [{"is_main": True, "data": {"text/plain": "42"}}], ran
    await call(client, "file_write", {"sandbox": "kid", "path": "/workspace/k.txt", "content": "k"})
    await call(client, "file_move", {"sandbox": "kid", "from": "/workspace/k.txt", "to": "/workspace/k2.txt"})
    assert (await call(client, "file_read", {"sandbox": "kid", "path": "/workspace/k2.txt"})).structured_content[
        "content"] == "k"
    report["other"] = text(await call(client, "sandbox_inspect", {"sandbox": "other"}, ok=False))
    report["own_exec"] = text(await call(client, "exec", {"sandbox": "owner", "command": "true"}, ok=False))
    # The list is its own sandbox and its children.
    listed = (await call(client, "sandbox_list", {})).structured_content["sandboxes"]
    report["listed"] = sorted(s["id"] for s in listed)
    # Not listed, and refused by the API when called anyway.
    report["fork"] = text(await call(client, "fork", {"sandbox": "kid"}, ok=False))
    receipt = (await call(client, "sandbox_remove", {"sandbox": "kid"})).structured_content
    assert receipt["clean"] is True, receipt


async def tenant(client, report):
    """With a token of tenant `acme`: acme's sandboxes only; `theirs`, of another tenant, is as if it did not exist."""
    listed = (await call(client, "sandbox_list", {})).structured_content["sandboxes"]
    report["listed"] = sorted(s["name"] for s in listed)
    made = (await call(client, "sandbox_create", {"name": "made"})).structured_content
    assert made["tenant"] == "acme", made
    out = (await call(client, "exec", {"sandbox": "made", "command": "echo in acme"})).structured_content
    assert out["stdout"] == "in acme\n", out
    report["inspect"] = text(await call(client, "sandbox_inspect", {"sandbox": "theirs"}, ok=False))
    report["exec"] = text(await call(client, "exec", {"sandbox": "theirs", "command": "touch /workspace/x"}, ok=False))
    report["remove"] = text(await call(client, "sandbox_remove", {"sandbox": "theirs"}, ok=False))
    receipt = (await call(client, "sandbox_remove", {"sandbox": "made"})).structured_content
    assert receipt["clean"] is True, receipt


def png_rgb(data):
    """A PNG's width, height and rows of pixels (8-bit RGB, every row's filter undone)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    at, idat, head = 8, b"", None
    while at < len(data):
        (length,), kind = struct.unpack(">I", data[at:at + 4]), data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = head
    assert (depth, colour, interlace) == (8, 2, 0), head
    raw, stride, rows, prev = zlib.decompress(idat), width * 3, [], bytearray(width * 3)
    assert len(raw) == height * (stride + 1), (len(raw), width, height)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a, b, c = line[i - 3] if i >= 3 else 0, prev[i], prev[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, rows


async def desktop(client, report, sandbox):
    """The desktop tools on `sandbox` (a 1600x1000 screen): screenshot, act in its coordinates, see the pointer."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("desktop_screenshot", "desktop_action"):
        said = tools[name].description
        assert "screenshot first" in said and "pixels" in said and "coordinates_in" in said, (name, said)
    shot = await call(client, "desktop_screenshot", {"sandbox": sandbox})
    images = [c for c in shot.content if c.type == "image"]
    assert [i.mime_type for i in images] == ["image/png"], shot.content
    width, height, rows = png_rgb(base64.b64decode(images[0].data))
    assert (width, height, len(rows)) == (1280, 800, 800), (width, height)
    assert shot.structured_content == {"width": 1280, "height": 800, "screen": {"width": 1600, "height": 1000}}
    assert "screenshot 1280x800 of a 1600x1000 screen" in text(shot), text(shot)
    small = await call(client, "desktop_screenshot", {"sandbox": sandbox, "max_width": 640})
    width, height, _ = png_rgb(base64.b64decode(next(c for c in small.content if c.type == "image").data))
    assert (width, height) == (640, 400) and small.structured_content["width"] == 640, small.structured_content

    # A click at the small screenshot's centre is at the screen's.
    clicked = (await call(client, "desktop_action", {
        "sandbox": sandbox, "actions": [{"action": "move", "x": 10, "y": 10}, {"action": "click", "x": 320, "y": 200}],
        "coordinates_in": {"width": 640, "height": 400},
    }))
    done = clicked.structured_content
    assert done["done"] == 2 and done["cursor"] == {"x": 800, "y": 500}, done
    assert done["cursor_in"] == {"x": 320, "y": 200} and "(320, 200) in the 640x400" in text(clicked), text(clicked)
    info = (await call(client, "desktop_info", {"sandbox": sandbox})).structured_content
    assert (info["width"], info["height"], info["cursor"]) == (1600, 1000, {"x": 800, "y": 500}), info
    assert isinstance(info["windows"], list), info
    settled = (await call(client, "desktop_wait", {"sandbox": sandbox, "settle_ms": 200})).structured_content
    assert settled["settled"] is True, settled

    # Off the screenshot: the API's refusal, and the pointer stays where it was.
    off = await call(client, "desktop_action", {
        "sandbox": sandbox, "actions": [{"action": "click", "x": 700, "y": 10}],
        "coordinates_in": {"width": 640, "height": 400},
    }, ok=False)
    report["off_screen"] = {"text": text(off), "structured": off.structured_content}
    info = (await call(client, "desktop_info", {"sandbox": sandbox})).structured_content
    assert info["cursor"] == {"x": 800, "y": 500}, info


async def main():
    transport, where, secret, scenario = sys.argv[1:5]
    mode = sys.argv[5] if len(sys.argv) > 5 else "auto"
    if transport == "stdio":
        server = StdioServerParameters(command=where, args=["--socket", secret, "mcp"])
    else:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=httpx2.Timeout(30, read=300))
        server = streamable_http_client(where, http_client=http)
    report = {}
    async with Client(server, cache=None, mode=mode) as client:
        report["protocol"] = client.protocol_version
        if scenario == "desktop":
            await desktop(client, report, sys.argv[6])
        else:
            await {"session": session, "scoped": scoped, "tenant": tenant}[scenario](client, report)
    print(json.dumps(report))


asyncio.run(main())
