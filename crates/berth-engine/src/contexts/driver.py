# berth's context driver: one long-lived interpreter inside a sandbox (Python, or a bash it drives).
#
# It serves two unix sockets in its directory: <id>.sock takes one run per connection (a JSON line
# {"code": ...}; the answer is JSON lines of frames ending with an "end" frame), <id>.ctl answers control
# requests even while code runs ({"op": "interrupt"}, {"op": "info"}, {"op": "exit"}). Everything the code
# and its children write to fds 1 and 2 is captured and sent as stdout and stderr frames.
import ast
import base64
import codecs
import io
import json
import linecache
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

SOCK_DIR = os.environ.pop("BERTH_CONTEXT_DIR")
CTX = os.environ.pop("BERTH_CONTEXT_ID")
LANG = os.environ.pop("BERTH_CONTEXT_LANGUAGE", "python")
os.environ.pop("BERTH_DRIVER", None)
SYNC = b"\x00\x1bberth-sync\x00"
HELD_MAX = 64 * 1024

lock = threading.Lock()
state = {"sink": None, "busy": False, "count": 0, "held": []}
synced = {1: threading.Event(), 2: threading.Event()}


def block_sigint():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def send(frame):
    line = (json.dumps(frame) + "\n").encode()
    with lock:
        sink = state["sink"]
        if sink is None:
            if frame["type"] in ("stdout", "stderr") and sum(len(h) for h in state["held"]) < HELD_MAX:
                state["held"].append(line)
            return
        try:
            sink.sendall(line)
        except OSError:
            state["sink"] = None


def reader(fd, rfd, kind):
    block_sigint()
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = b""
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            return
        pending += chunk
        while True:
            at = pending.find(SYNC)
            if at < 0:
                break
            text = dec.decode(pending[:at], final=True)
            if text:
                send({"type": kind, "data": text})
            pending = pending[at + len(SYNC):]
            synced[fd].set()
        # Keep what could be the start of a marker for the next read.
        keep = 0
        for n in range(min(len(SYNC) - 1, len(pending)), 0, -1):
            if SYNC.startswith(pending[-n:]):
                keep = n
                break
        out, pending = (pending[:-keep], pending[-keep:]) if keep else (pending, b"")
        text = dec.decode(out)
        if text:
            send({"type": kind, "data": text})


def capture(fd, kind):
    r, w = os.pipe()
    os.dup2(w, fd)
    os.close(w)
    threading.Thread(target=reader, args=(fd, r, kind), daemon=True).start()


def sync_output():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    for fd in (1, 2):
        synced[fd].clear()
        os.write(fd, SYNC)
    for fd in (1, 2):
        synced[fd].wait(5)


def listen(name):
    path = os.path.join(SOCK_DIR, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o600)
    s.listen(16)
    return s


def read_line(conn, limit=64 << 20):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError("request too large")
    return json.loads(data or b"{}")


# ---- Python -------------------------------------------------------------------------------------------

namespace = {"__name__": "__main__", "__builtins__": __builtins__}
loop = None
REPRS = [
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
]


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def bundle(value):
    data = {"text/plain": repr(value)}
    if not isinstance(value, type):
        for method, mime in REPRS:
            f = getattr(value, method, None)
            if not callable(f):
                continue
            try:
                r = f()
            except Exception:
                continue
            if isinstance(r, tuple):
                r = r[0]
            if r is None:
                continue
            if isinstance(r, bytes):
                r = base64.b64encode(r).decode()
            data[mime] = r
    mod = type(value).__module__ or ""
    if mod.startswith("matplotlib") and hasattr(value, "savefig"):
        data["image/png"] = figure_png(value)
    elif mod.startswith("matplotlib") and hasattr(value, "get_figure") and value.get_figure() is not None:
        data["image/png"] = figure_png(value.get_figure())
    if isinstance(value, (dict, list)) and "application/json" not in data:
        try:
            text = json.dumps(value)
            if len(text) <= 1 << 20:
                data["application/json"] = json.loads(text)
        except (TypeError, ValueError):
            pass
    return data


def emit(frame):
    """Send a frame after everything written to fds 1 and 2 so far, so that output and results keep their order."""
    sync_output()
    send(frame)


def display(*values):
    for v in values:
        emit({"type": "result", "is_main": False, "data": bundle(v)})


def show_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        fig = plt.figure(num)
        emit({"type": "result", "is_main": False, "data": {"text/plain": repr(fig), "image/png": figure_png(fig)}})
    plt.close("all")


def error_frame(e, skip):
    tb = e.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    return {"type": "error", "name": type(e).__name__, "value": str(e), "traceback": text}


def run_python(code, count):
    global loop
    name = f"<cell {count}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = ast.parse(code, name, "exec")
    except SyntaxError as e:
        emit(error_frame(e, 99))
        return False
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    interrupted = False
    try:
        for node, mode in ((tree, "exec"), (last, "eval")):
            if node is None:
                continue
            obj = compile(node, name, mode, flags=flags)
            value = eval(obj, namespace)
            if obj.co_flags & 0x80:  # CO_COROUTINE: the code awaits
                if loop is None:
                    import asyncio

                    loop = asyncio.new_event_loop()
                value = loop.run_until_complete(value)
            if mode == "eval" and value is not None:
                namespace["_"] = value
                emit({"type": "result", "is_main": True, "data": bundle(value)})
        show_figures()
    except KeyboardInterrupt as e:
        interrupted = True
        emit(error_frame(e, 1))
    except BaseException as e:
        emit(error_frame(e, 1))
    return interrupted


# ---- bash ---------------------------------------------------------------------------------------------

shell = {"proc": None, "status": None}


def start_bash():
    r, w = os.pipe()
    env = dict(os.environ)
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc"],
        stdin=subprocess.PIPE,
        pass_fds=(w,),
        start_new_session=True,
        env=env,
    )
    os.close(w)
    shell["proc"], shell["status"] = proc, os.fdopen(r, "rb", buffering=0)
    # An interrupt ends the code being sourced, not the shell.
    proc.stdin.write(f"exec 3>&{w}; trap 'return 130 2>/dev/null' INT\n".encode())
    proc.stdin.flush()


def bash_env(env):
    """The shell lines that export `env` for one run, and those (run after it, however it ended) that put each
    variable's value, export flag, or absence back."""
    if not env:
        return "", ""
    q = lambda v: "'" + v.replace("'", "'\\''") + "'"
    before, after = [], []
    for i, (k, v) in enumerate(env.items()):
        before.append(f"__berth_set{i}=${{{k}+x}}; __berth_was{i}=${{{k}-}}; __berth_attr{i}=${{{k}@a}}; export {k}={q(v)}")
        after.append(
            f'if [ -n "$__berth_set{i}" ]; then {k}=$__berth_was{i}; case "$__berth_attr{i}" in *x*) ;; *) export -n {k};; esac; '
            f"else unset {k}; fi; unset __berth_set{i} __berth_was{i} __berth_attr{i}; "
        )
    return "\n".join(before) + "\n", "".join(after)


def run_bash(code, count, env=None):
    if shell["proc"] is None or shell["proc"].poll() is not None:
        start_bash()
    before, after = bash_env(env)
    cell = os.path.join(SOCK_DIR, f"{CTX}.cell")
    with open(cell, "w") as f:
        f.write(before + code)
        if not code.endswith("\n"):
            f.write("\n")
    proc = shell["proc"]
    try:
        proc.stdin.write(f"source {cell}; __berth_status=$?; {after}printf '%d\\n' $__berth_status >&3; unset __berth_status\n".encode())
        proc.stdin.flush()
    except BrokenPipeError:
        pass
    line = b""
    while not line.endswith(b"\n"):
        chunk = shell["status"].read(1)
        if not chunk:
            break
        line += chunk
    if not line:
        proc.wait()
        emit({"type": "error", "name": "ShellExited",
              "value": f"the shell exited (status {proc.returncode}); the next run starts a new one",
              "traceback": ""})
        shell["proc"] = None
        return False
    status = int(line.strip() or 0)
    if status == 130:
        emit({"type": "error", "name": "Interrupted", "value": "the run was interrupted", "traceback": ""})
        return True
    if status != 0:
        emit({"type": "error", "name": "ExitStatus", "value": f"the last command exited with status {status}",
              "traceback": ""})
    return False


# ---- serving ------------------------------------------------------------------------------------------


def control(server):
    block_sigint()
    while True:
        conn, _ = server.accept()
        with conn:
            try:
                req = read_line(conn, 1 << 16)
            except (OSError, ValueError):
                continue
            op = req.get("op")
            if op == "interrupt":
                busy = state["busy"]
                if busy:
                    if LANG == "bash" and shell["proc"] is not None:
                        try:
                            os.killpg(shell["proc"].pid, signal.SIGINT)
                        except ProcessLookupError:
                            pass
                    else:
                        os.kill(os.getpid(), signal.SIGINT)
                reply = {"interrupted": busy}
            elif op == "exit":
                for suffix in (".sock", ".ctl", ".cell"):
                    try:
                        os.unlink(os.path.join(SOCK_DIR, CTX + suffix))
                    except OSError:
                        pass
                if shell["proc"] is not None:
                    try:
                        os.killpg(shell["proc"].pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os._exit(0)
            else:
                reply = {"busy": state["busy"], "execution_count": state["count"], "pid": os.getpid()}
            try:
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError:
                pass


def serve_one(conn):
    req = read_line(conn)
    code = req.get("code", "")
    with lock:
        held, state["held"] = state["held"], []
        state["sink"] = conn
        for line in held:
            conn.sendall(line)
    state["count"] += 1
    count = state["count"]
    state["busy"] = True
    interrupted = False
    env = req.get("env") or {}
    try:
        if LANG == "bash":
            interrupted = run_bash(code, count, env)
        else:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                interrupted = run_python(code, count)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    except KeyboardInterrupt:
        interrupted = True
    state["busy"] = False
    sync_output()
    send({"type": "end", "execution_count": count, "interrupted": interrupted})
    with lock:
        state["sink"] = None


def matplotlib_rc():
    """An image whose matplotlib lacks its rc file (Debian keeps it in /etc, which an image may not have)
    still draws, with matplotlib's defaults."""
    if "MATPLOTLIBRC" in os.environ or os.path.exists("/etc/matplotlibrc"):
        return
    try:
        import importlib.util

        spec = importlib.util.find_spec("matplotlib")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.origin:
        return
    if os.path.exists(os.path.join(os.path.dirname(spec.origin), "mpl-data", "matplotlibrc")):
        return
    path = os.path.join(os.path.dirname(SOCK_DIR), "matplotlibrc")
    open(path, "a").close()
    os.environ["MATPLOTLIBRC"] = path


def main():
    # Ctrl-C semantics whatever this process was started with (an ignored SIGINT is inherited otherwise).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.makedirs(SOCK_DIR, mode=0o700, exist_ok=True)
    matplotlib_rc()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    capture(1, "stdout")
    capture(2, "stderr")
    import builtins

    builtins.display = display
    # The run socket first: the daemon takes an answer on the control socket to mean both are served.
    runs = listen(f"{CTX}.sock")
    ctl = listen(f"{CTX}.ctl")
    threading.Thread(target=control, args=(ctl,), daemon=True).start()
    while True:
        try:
            conn, _ = runs.accept()
        except KeyboardInterrupt:
            continue
        try:
            with conn:
                serve_one(conn)
        except KeyboardInterrupt:
            state["busy"] = False
        except (OSError, ValueError):
            state["busy"] = False
            with lock:
                state["sink"] = None


main()
