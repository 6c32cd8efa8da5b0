"""Reading one setting's text as its field's type: numbers, true/false words, lists, choices."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from omnium_settings._errors import SettingsError


def parse_value(name: str, raw: str, hint: Any) -> Any:
    """One variable's text as its field's type (the type hint, maybe a string); SettingsError
    naming the variable when it is not one."""
    target = _resolve(hint)
    origin = typing.get_origin(target)
    args = typing.get_args(target)
    optional = origin in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        if raw == "":
            return None
        target = next(a for a in args if a is not type(None))
        origin = typing.get_origin(target)
        args = typing.get_args(target)
    try:
        return _convert(raw, target, origin, args)
    except ValueError:
        kind = getattr(target, "__name__", str(target))
        raise SettingsError(f"{name}={raw!r} is not a valid {kind}.") from None


def _convert(raw: str, target: object, origin: object, args: tuple[object, ...]) -> object:
    """raw as the (non-optional) type target; ValueError when it is not one."""
    if target is bool:
        return _boolean(raw)
    if target is int:
        return int(raw.replace("_", ""))
    if target is float:
        return float(raw)
    if origin is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if origin is Literal and raw not in args:
        raise ValueError(raw)
    return raw


def _boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _resolve(hint: Any) -> Any:
    if isinstance(hint, str):
        return eval(hint, {**vars(typing), "Literal": Literal}, {})
    return hint
