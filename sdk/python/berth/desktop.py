"""``sandbox.desktop``: see and use a sandbox's virtual desktop (one created with ``desktop=``).

Written once for both clients, as the other namespaces are: every method is awaited on an ``AsyncSandbox`` and
called plainly on a ``Sandbox``.

    with Sandbox.create(desktop=(1280, 800)) as sb:
        sb.desktop.open("https://example.com")
        sb.desktop.wait()
        shot = sb.desktop.screenshot(max_width=640)      # PNG bytes, with .width, .height and .screen
        sb.desktop.click(320, 200, coordinates_in=shot.size)
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable, Sequence, Union

import httpx

from . import models as m
from ._api import _Namespace
from ._core import Op, model, seg

#: What ``coordinates_in=`` takes: a screenshot's size as a model, a ``(width, height)`` pair or a dict.
SizeLike = Union[m.ScreenSize, Sequence[int], dict]


class Screenshot(bytes):
    """A screenshot: the PNG's bytes, with its size (``width``, ``height``, ``size``) and the screen's
    (``screen``). Pass ``size`` as ``coordinates_in=`` with coordinates read from it."""

    width: int
    height: int
    screen: m.ScreenSize

    @classmethod
    def of(cls, r: httpx.Response) -> "Screenshot":
        shot = cls(r.content)
        shot.width, shot.height = _dimensions(r.headers.get("x-berth-size"), _png_size(r.content))
        shot.screen = m.ScreenSize(*_dimensions(r.headers.get("x-berth-screen"), (shot.width, shot.height)))
        return shot

    @property
    def size(self) -> m.ScreenSize:
        return m.ScreenSize(self.width, self.height)

    def __repr__(self) -> str:
        screen = f"{self.screen.width}x{self.screen.height}"
        return f"Screenshot({self.width}x{self.height} of a {screen} screen, {len(self)} bytes)"


def _png_size(data: bytes) -> tuple[int, int]:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return (0, 0)
    return (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))


def _dimensions(header: str | None, fallback: tuple[int, int]) -> tuple[int, int]:
    """``WxH`` as a pair of ints, or ``fallback``."""
    try:
        w, h = (header or "").lower().split("x")
        return (int(w), int(h))
    except ValueError:
        return fallback


def _size(value: SizeLike | None) -> dict[str, int] | None:
    if value is None:
        return None
    if isinstance(value, m.ScreenSize):
        return {"width": value.width, "height": value.height}
    if isinstance(value, dict):
        return {"width": int(value["width"]), "height": int(value["height"])}
    width, height = value
    return {"width": int(width), "height": int(height)}


def create_option(value: Any) -> dict[str, int] | None:
    """Create's ``desktop=``: ``True`` (the default screen, 1280x800), a :class:`berth.Desktop`, a
    ``(width, height)`` pair or a dict; ``False`` or ``None`` for none."""
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, m.Desktop):
        return value.to_dict()
    if isinstance(value, dict):
        return dict(value)
    width, height = value
    return {"width": int(width), "height": int(height)}


def _point(action: str, x: int | None, y: int | None, **rest: Any) -> dict[str, Any]:
    a: dict[str, Any] = {"action": action, **{k: v for k, v in rest.items() if v is not None}}
    if x is not None or y is not None:
        a["x"], a["y"] = x, y
    return a


class DesktopControl(_Namespace):
    """``sandbox.desktop``: screenshots, the window list, and the mouse and keyboard of the sandbox's desktop.

    Coordinates are pixels from the screen's top left; with ``coordinates_in=`` (a screenshot's size, such as
    ``shot.size``) they are read in that screenshot's space and scaled to the screen's. A point off the screen,
    an unknown key name or a sandbox without a desktop is refused (:class:`berth.InvalidRequest`,
    :class:`berth.Conflict`) and nothing is done."""

    def __init__(self, sandbox: Any):
        super().__init__(sandbox._client)
        self._base = f"/v1/sandboxes/{seg(sandbox.id)}/desktop"

    def screenshot(self, max_width: int | None = None, max_height: int | None = None) -> Screenshot:
        """The screen as a PNG (:class:`Screenshot`, which is ``bytes``), made smaller to fit within
        ``max_width`` and ``max_height`` when given (its proportions kept, never larger than the screen)."""
        params = {"max_width": max_width, "max_height": max_height}
        return self._do(Op("GET", f"{self._base}/screenshot", params=params, parse=Screenshot.of))

    def info(self) -> m.DesktopInfo:
        """Its screen's size, the pointer, and its windows bottom to top."""
        return self._do(Op("GET", self._base, parse=model(m.DesktopInfo)))

    def actions(self, actions: Iterable[dict[str, Any]], *, coordinates_in: SizeLike | None = None) -> m.ActionsDone:
        """Do ``actions`` (the API's shape: ``{"action": "click", "x": 10, "y": 20}``, ...) in order; every one
        is checked before the first is done, and the first that fails stops the rest."""
        body: dict[str, Any] = {"actions": list(actions)}
        if coordinates_in is not None:
            body["coordinates_in"] = _size(coordinates_in)
        # Keyed, so that a retried request does not click twice.
        op = Op("POST", f"{self._base}/actions", json=body, parse=model(m.ActionsDone), key=str(uuid.uuid4()))
        return self._do(op)

    def move(self, x: int, y: int, *, coordinates_in: SizeLike | None = None) -> m.ActionsDone:
        return self.actions([{"action": "move", "x": x, "y": y}], coordinates_in=coordinates_in)

    def click(self, x: int | None = None, y: int | None = None, button: str = "left", double: bool = False, *,
              coordinates_in: SizeLike | None = None) -> m.ActionsDone:  # fmt: skip
        """Click ``button`` (``left``, ``middle``, ``right``) at ``x``, ``y``, or where the pointer is."""
        action = _point("click", x, y, button=button, count=2 if double else None)
        return self.actions([action], coordinates_in=coordinates_in)

    def drag(self, start: Sequence[int], end: Sequence[int], *, button: str = "left",
             coordinates_in: SizeLike | None = None) -> m.ActionsDone:  # fmt: skip
        """Press ``button`` at ``start`` (``(x, y)``), move to ``end`` holding it, release it there."""
        action = {"action": "drag", "from": list(start), "to": list(end), "button": button}
        return self.actions([action], coordinates_in=coordinates_in)

    def mouse_down(self, button: str = "left") -> m.ActionsDone:
        return self.actions([{"action": "mouse_down", "button": button}])

    def mouse_up(self, button: str = "left") -> m.ActionsDone:
        return self.actions([{"action": "mouse_up", "button": button}])

    def scroll(self, dy: int = 0, dx: int = 0, *, x: int | None = None, y: int | None = None,
               coordinates_in: SizeLike | None = None) -> m.ActionsDone:  # fmt: skip
        """Turn the wheel ``dy`` notches down (negative: up) and ``dx`` right, at ``x``, ``y`` if given."""
        return self.actions([_point("scroll", x, y, dx=dx, dy=dy)], coordinates_in=coordinates_in)

    def type(self, text: str) -> m.ActionsDone:
        """Type ``text`` as the keyboard would (any Unicode)."""
        return self.actions([{"action": "type", "text": text}])

    def press(self, *keys: str) -> m.ActionsDone:
        """Press each key or chord in turn: X key names joined by ``+`` (``"Return"``, ``"ctrl+a"``,
        ``"alt+F4"``; ``"enter"``, ``"esc"``, ``"cmd"`` are taken too)."""
        return self.actions([{"action": "key", "keys": k} for k in keys])

    def open(self, target: str) -> m.ActionsDone:
        """Open a file inside the sandbox or a URL with its default program (the browser for a URL)."""
        return self.actions([{"action": "open", "target": target}])

    def launch(self, *argv: str) -> m.ActionsDone:
        """Start a program on the desktop, in the background: ``launch("xterm")``."""
        return self.actions([{"action": "launch", "argv": [str(a) for a in argv]}])

    def focus(self, window: str | m.Window) -> m.ActionsDone:
        """Raise and focus a window (a :class:`berth.models.Window` or its id)."""
        wid = window.id if isinstance(window, m.Window) else window
        return self.actions([{"action": "focus", "window": wid}])

    def wait(self, settle_ms: int = 500, timeout_ms: int = 10000) -> m.Settled:
        """Wait until the screen has not changed for ``settle_ms``, at most ``timeout_ms`` (a :class:`Settled`,
        false when it ran out of time)."""
        body = {"settle_ms": settle_ms, "timeout_ms": timeout_ms}
        op = Op("POST", f"{self._base}/wait", json=body, parse=model(m.Settled), timeout=timeout_ms / 1000 + 60)
        return self._do(op)
