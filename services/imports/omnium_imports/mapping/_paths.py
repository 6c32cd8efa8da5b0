"""Reading Scout's rows by dot path, hashing what mapping makes, and naming values in messages."""

from __future__ import annotations

import copy
import hashlib
import json
import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeAlias

# Built once: json.dumps with these arguments builds the same encoder on every call.
HASH_JSON = json.JSONEncoder(sort_keys=True, default=str)
# The types JSON gives that hold nothing: safe to share, and never walked into.
SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


class _Missing(Enum):
    MISSING = "missing"


MISSING = _Missing.MISSING


# A dot path split once when the step is parsed: each part, with its list index if it is one.
SplitPath: TypeAlias = tuple[tuple[str, int | None], ...]


def split(path: str) -> SplitPath:
    return tuple(
        (part, int(part) if part.isascii() and part.isdigit() else None) for part in path.split(".")
    )


def walk(value: Any, path: SplitPath) -> Any:
    """The value at a split dot path, or MISSING; null stays None, so the two can be told apart."""
    for name, index in path:
        kind = type(value)
        # Rows come from JSON, so exact type checks settle almost every part; the abstract
        # Mapping check costs several times more and is left for other mappings and sequences.
        if kind is dict:
            value = value.get(name, MISSING)
            if value is MISSING:
                return MISSING
        elif kind is list:
            if index is None or index >= len(value):
                return MISSING
            value = value[index]
        elif kind in SCALARS:
            return MISSING
        elif isinstance(value, Mapping):
            if name not in value:
                return MISSING
            value = value[name]
        elif isinstance(value, list | tuple) and index is not None and index < len(value):
            value = value[index]
        else:
            return MISSING
    return value


def is_path(text: str) -> bool:
    return bool(text) and all(part for part in text.split("."))


def read_path(row: Any, path: str) -> Any:
    """The value at `path` ("competitors.0.name") in a row; None when it is missing or null."""
    value = walk(row, split(path))
    return None if value is MISSING else value


def row_hash(value: Mapping[str, Any]) -> bytes:
    """sha256 of the mapped value as sorted-keys JSON: the same value always gives the same hash."""
    return hashlib.sha256(HASH_JSON.encode(value).encode()).digest()


# In order: a bool is an int to isinstance, so it is named first.
_JSON_KINDS: tuple[tuple[type | types.UnionType, str], ...] = (
    (type(None), "null"),
    (bool, "true/false"),
    (int | float, "a number"),
    (str, "a text"),
    (Mapping, "an object"),
    (list | tuple, "a list"),
)


def json_kind(value: object) -> str:
    for kinds, kind in _JSON_KINDS:
        if isinstance(value, kinds):
            return kind
    return f"a {type(value).__name__}"


def shown(value: object) -> str:
    """A value as a person reads it in a reason: text quoted, long values cut."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def own(value: Any) -> Any:
    # Values go into rows that callers may change; Scout's rows and the spec must stay as they are.
    # Text, numbers and null cannot be changed, so they are shared rather than copied.
    if type(value) in SCALARS:
        return value
    return copy.deepcopy(value) if isinstance(value, dict | list) else value
