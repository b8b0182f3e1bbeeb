"""How the models are read from the API's JSON and written back: the base class of every model, and the
conversion of decoded JSON into a field's declared type (a model, a list, dict or Optional of them, a scalar).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    return _HINTS[cls]


def build(tp: Any, value: Any) -> Any:
    """Convert decoded JSON ``value`` into type ``tp`` (a model, a list/dict/Optional of them, or a scalar)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return build(args[0], value) if len(args) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp)
        return [build(item, v) for v in value]
    if origin is tuple:
        return tuple(build(a, v) for a, v in zip(typing.get_args(tp), value))
    if origin is dict:
        _, item = typing.get_args(tp)
        return {k: build(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return tp.from_dict(value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


class Model:
    """Shared behaviour of the models: reading from and writing to the API's JSON."""

    __schema__: str = ""

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        hints = _hints(cls)
        kwargs = {f.name: build(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data}  # type: ignore[arg-type]
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]
