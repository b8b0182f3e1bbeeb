"""Typed models of a sandbox's virtual desktop: the screen it is made with, and what is read back from it.

They are models like those of :mod:`berth.models` (which imports them, so ``berth.models.DesktopInfo`` works),
in a module of their own because the desktop is a surface of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from ._model import Model


@dataclass
class Desktop(Model):
    """A desktop's screen, in pixels: create's ``desktop=berth.Desktop(1920, 1080)`` (each side 64 to 3840)."""

    __schema__ = "Desktop"
    width: int = 1280
    height: int = 800


@dataclass
class ScreenSize(Model):
    """A width and a height in pixels: the size of the screenshot that coordinates were read from."""

    __schema__ = "ScreenSize"
    width: int
    height: int


@dataclass
class Cursor(Model):
    """Where the pointer is, in the screen's pixels."""

    __schema__ = "Cursor"
    x: int
    y: int


@dataclass
class Window:
    """A window on a desktop: ``id`` (``0x…``) is what ``desktop.focus`` takes; ``class_`` its WM_CLASS
    (``instance.Class``); ``pid`` the program's, inside the sandbox, when it says. (The API's ``class`` is
    ``class_`` here.)"""

    __schema__ = "Window"
    id: str
    title: str = ""
    class_: str = ""
    pid: Optional[int] = None
    x: int = 0
    y: int = 0
    width: int = 0
    height: int = 0
    focused: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Window":
        names = [f.name for f in fields(cls)]
        return cls(**{n: data[n.rstrip("_")] for n in names if n.rstrip("_") in data})


@dataclass
class DesktopInfo(Model):
    """A desktop as it is: its screen's size, its X display (``:0``), the pointer, its windows bottom to top."""

    __schema__ = "DesktopInfo"
    width: int
    height: int
    display: str
    cursor: Cursor
    windows: list[Window] = field(default_factory=list)

    def window(self, title: str) -> Optional[Window]:
        """The topmost window whose title has ``title`` in it, if there is one."""
        return next((w for w in reversed(self.windows) if title in w.title), None)


@dataclass
class ActionsDone(Model):
    """What ``desktop.actions`` did: how many ran, and where the pointer is after them (the screen's pixels)."""

    __schema__ = "ActionsDone"
    done: int
    cursor: Cursor


@dataclass
class Settled(Model):
    """How ``desktop.wait`` ended: ``settled`` is false when it ran out of time with the screen still changing."""

    __schema__ = "Settled"
    settled: bool
    waited_ms: int

    def __bool__(self) -> bool:
        return self.settled
