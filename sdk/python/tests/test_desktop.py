"""A sandbox's virtual desktop through the SDK: the browser opens a page, a screenshot (made smaller, decoded
here) shows its button, a click in the screenshot's coordinates changes the page, and the next screenshot
shows the change; the other actions, the window list, the async client, and bad input refused."""

from __future__ import annotations

import asyncio
import struct
import time
import zlib

import pytest

import berth
from berth import _api
from berth.models import ScreenSize

# A page whose one button, green, turns the page red when it is clicked.
PAGE = (
    "<html><head><title>berth sdk desktop</title></head><body style='margin:0;background:#ffffff'>"
    "<button id='b' style='position:absolute;left:260px;top:180px;width:180px;height:90px;border:0;"
    "background:#00c000' onclick=\"document.body.style.background='#c00000'\">go</button></body></html>"
)
GREEN, RED = (0, 192, 0), (192, 0, 0)


class Image:
    """A PNG (8-bit RGB, not interlaced) decoded: its size and its rows of pixels."""

    def __init__(self, data: bytes):
        assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
        at, idat, head = 8, b"", None
        while at < len(data):
            (length,), kind = struct.unpack(">I", data[at : at + 4]), data[at + 4 : at + 8]
            body = data[at + 8 : at + 8 + length]
            if kind == b"IHDR":
                head = struct.unpack(">IIBBBBB", body)
            elif kind == b"IDAT":
                idat += body
            at += 12 + length
        assert head is not None
        self.width, self.height, depth, colour, _, _, interlace = head
        assert (depth, colour, interlace) == (8, 2, 0), head
        stride = self.width * 3
        raw = zlib.decompress(idat)
        assert len(raw) == self.height * (stride + 1)
        self.rows: list[bytearray] = []
        prev = bytearray(stride)
        for y in range(self.height):
            kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
            _unfilter(kind, line, prev)
            self.rows.append(line)
            prev = line

    def pixels(self):
        for y, row in enumerate(self.rows):
            for x in range(self.width):
                yield x, y, (row[3 * x], row[3 * x + 1], row[3 * x + 2])

    def near(self, colour: tuple[int, int, int]) -> list[tuple[int, int]]:
        return [(x, y) for x, y, p in self.pixels() if all(abs(a - b) < 24 for a, b in zip(p, colour))]

    def share(self, colour: tuple[int, int, int]) -> float:
        return len(self.near(colour)) / (self.width * self.height)

    def centre(self, colour: tuple[int, int, int]) -> tuple[int, int] | None:
        points = self.near(colour)
        if len(points) < 20:
            return None
        return (sum(x for x, _ in points) // len(points), sum(y for _, y in points) // len(points))


def _unfilter(kind: int, line: bytearray, prev: bytearray) -> None:
    """Undo one row's PNG filter in place (three bytes a pixel)."""
    for i in range(len(line)):
        a = line[i - 3] if i >= 3 else 0
        b = prev[i]
        c = prev[i - 3] if i >= 3 else 0
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


def window_titled(sb: berth.Sandbox, title: str, timeout: float = 60) -> berth.models.Window:
    deadline = time.monotonic() + timeout
    while True:
        info = sb.desktop.info()
        window = info.window(title)
        if window is not None:
            return window
        assert time.monotonic() < deadline, f"no window titled {title!r}: {info}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def desktop_sandbox(client):
    with berth.Sandbox.create(client=client, ttl=900, memory="2G", desktop=berth.Desktop(1024, 640)) as sb:
        yield sb


def test_a_page_is_seen_clicked_and_changed(desktop_sandbox):
    sb = desktop_sandbox
    assert sb.info.desktop == berth.Desktop(1024, 640)
    # Readable by the sandbox's `user`, who runs the browser.
    sb.files.write("/workspace/x.html", PAGE, mode=0o644)
    assert sb.desktop.open("file:///workspace/x.html").done == 1
    window = window_titled(sb, "berth sdk desktop")
    assert window.pid and window.class_ and window.id.startswith("0x"), window
    time.sleep(0.5)
    assert sb.desktop.wait(settle_ms=700)

    shot = sb.desktop.screenshot(max_width=512)
    assert isinstance(shot, bytes) and (shot.width, shot.height) == (512, 320), shot
    assert shot.screen == ScreenSize(1024, 640) and shot.size == ScreenSize(512, 320)
    image = Image(shot)
    assert (image.width, image.height) == (512, 320)
    button = image.centre(GREEN)
    assert button is not None, "the green button is on the screen"
    assert image.share(RED) < 0.01, "not red before the click"

    done = sb.desktop.click(*button, coordinates_in=shot.size)
    assert done.done == 1
    assert abs(done.cursor.x - button[0] * 2) <= 2 and abs(done.cursor.y - button[1] * 2) <= 2, done
    sb.desktop.wait(settle_ms=700)
    after = Image(sb.desktop.screenshot(max_width=512))
    assert after.share(RED) > 0.3, f"the page turned red: {after.share(RED)}"
    full = sb.desktop.screenshot()
    assert (full.width, full.height) == (1024, 640) and full.screen == ScreenSize(1024, 640)


def test_the_other_actions(desktop_sandbox):
    sb = desktop_sandbox
    if sb.desktop.info().window("berth sdk desktop") is None:
        sb.files.write("/workspace/x.html", PAGE, mode=0o644)
        sb.desktop.open("file:///workspace/x.html")
    assert sb.desktop.move(100, 50).cursor == berth.models.Cursor(100, 50)
    assert sb.desktop.info().cursor == berth.models.Cursor(100, 50)
    # A (width, height) pair says the screenshot's size as well as a model does.
    assert sb.desktop.move(100, 50, coordinates_in=(512, 320)).cursor == berth.models.Cursor(200, 100)
    assert sb.desktop.scroll(dy=1, x=500, y=300).cursor == berth.models.Cursor(500, 300)
    assert sb.desktop.drag((500, 300), (520, 310)).cursor == berth.models.Cursor(520, 310)
    assert sb.desktop.mouse_down().done == 1 and sb.desktop.mouse_up().done == 1
    assert sb.desktop.press("Escape", "shift").done == 2
    done = sb.desktop.actions([{"action": "move", "x": 700, "y": 500}, {"action": "click"}])
    assert (done.done, done.cursor) == (2, berth.models.Cursor(700, 500))
    # Keys and typing reach the focused program: the address bar takes a new address.
    sb.files.write("/workspace/y.html", "<title>second page</title>", mode=0o644)
    focused = sb.desktop.focus(window_titled(sb, "berth sdk desktop"))
    assert focused.done == 1
    sb.desktop.press("ctrl+l")
    sb.desktop.type("file:///workspace/y.html")
    sb.desktop.press("Return")
    window_titled(sb, "second page")
    launched = sb.desktop.launch("sh", "-c", "exit 0")
    assert launched.done == 1


def test_bad_input_is_refused(client, desktop_sandbox, sandbox):
    with pytest.raises(berth.InvalidRequest, match="off the 512x320 screen"):
        desktop_sandbox.desktop.click(600, 10, coordinates_in=ScreenSize(512, 320))
    with pytest.raises(berth.InvalidRequest, match="No such key name"):
        desktop_sandbox.desktop.press("nosuchkey")
    with pytest.raises(berth.InvalidRequest):
        desktop_sandbox.desktop.screenshot(max_width=0)
    with pytest.raises(berth.Conflict, match="has no desktop"):
        sandbox.desktop.screenshot()
    with pytest.raises(berth.InvalidRequest, match="64 to 3840"):
        berth.Sandbox.create(client=client, ttl=60, desktop=(10, 10))


def test_the_create_option():
    assert _api.create_body({"desktop": True}) == {"desktop": {}}
    assert _api.create_body({"desktop": (800, 600)}) == {"desktop": {"width": 800, "height": 600}}
    assert _api.create_body({"desktop": berth.Desktop(640, 480)}) == {"desktop": {"width": 640, "height": 480}}
    assert _api.create_body({"desktop": False}) == {} and _api.create_body({"desktop": None}) == {}


def test_async_desktop(daemon):
    async def main():
        async with berth.AsyncClient(socket=daemon.socket) as client:
            async with berth.AsyncSandbox.create(client=client, ttl=300, desktop=True) as sb:
                assert sb.info.desktop == berth.Desktop(1280, 800)
                shot = await sb.desktop.screenshot(max_width=640)
                assert (shot.width, shot.height) == (640, 400) and Image(shot).width == 640
                done = await sb.desktop.click(320, 200, coordinates_in=shot.size)
                assert done.cursor == berth.models.Cursor(640, 400)
                info = await sb.desktop.info()
                assert (info.width, info.height, info.display) == (1280, 800, ":0")
                assert isinstance(await sb.desktop.wait(settle_ms=200), berth.models.Settled)
                with pytest.raises(berth.InvalidRequest, match="off the 1280x800 screen"):
                    await sb.desktop.move(2000, 0)

    asyncio.run(main())
