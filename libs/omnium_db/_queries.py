"""Named SQL statements loaded from .sql files (`-- name: <name>` headers), once per process.

A statement may mark optional parts:

    -- part: outbox
    outbox AS (INSERT INTO domain_event ... $11 ...),
    -- end part

`queries["write"]` is the whole statement; `queries.compose("write", {"outbox"})` is the
statement with only the parts named (text outside parts is always kept), its `$n` numbered
again from 1, and which of the whole statement's arguments it takes. A part may appear more
than once in a statement (a CTE and its line in the final SELECT); each place is kept or left
together. Leaving out the parts a command does not need spares PostgreSQL opening the tables
and indexes they write on every execution.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_PART = re.compile(r"^\s*--\s*part:\s*([a-z_][a-z0-9_]*)\s*$")
_END = re.compile(r"^\s*--\s*end part\s*$")
_PARAM = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class Composed:
    """A statement made of some parts: its text and which arguments (1-based) it takes."""

    text: str
    params: tuple[int, ...]

    def args(self, every: Sequence[Any]) -> list[Any]:
        """The arguments of this statement, picked from the whole statement's `every`."""
        return [every[n - 1] for n in self.params]


def _segments(name: str, body: str) -> list[tuple[str | None, str]]:
    """The statement as (part or None, text) runs, in order."""
    runs: list[tuple[str | None, list[str]]] = [(None, [])]
    current: str | None = None
    for line in body.splitlines():
        start, end = _PART.match(line), _END.match(line)
        if start:
            if current is not None:
                raise ValueError(f"query {name!r}: part {start[1]!r} starts inside {current!r}")
            current = start[1]
            runs.append((current, []))
        elif end:
            if current is None:
                raise ValueError(f"query {name!r}: '-- end part' outside a part")
            current = None
            runs.append((None, []))
        else:
            runs[-1][1].append(line)
    if current is not None:
        raise ValueError(f"query {name!r}: part {current!r} has no '-- end part'")
    return [(part, "\n".join(lines)) for part, lines in runs if lines]


class Queries:
    """Every statement of a folder's .sql files, by name: `queries["lock_units"]`."""

    def __init__(self, statements: dict[str, str]) -> None:
        self._statements = statements
        self._segments = {name: _segments(name, body) for name, body in statements.items()}
        self._composed: dict[tuple[str, frozenset[str]], Composed] = {}

    @classmethod
    def load(cls, folder: Path) -> Queries:
        statements: dict[str, str] = {}
        for path in sorted(folder.glob("*.sql")):
            text = path.read_text(encoding="utf-8")
            parts = _HEADER.split(text)
            # parts = [preamble, name1, body1, name2, body2, ...]
            for name, body in zip(parts[1::2], parts[2::2], strict=True):
                if name in statements:
                    raise ValueError(f"query {name!r} is defined twice (second time in {path})")
                statements[name] = body.strip().rstrip(";")
        return cls(statements)

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(f"no query named {name!r}; add it under '-- name: {name}'") from None

    def __contains__(self, name: object) -> bool:
        return name in self._statements

    def names(self) -> list[str]:
        return sorted(self._statements)

    def parts(self, name: str) -> frozenset[str]:
        """The optional parts a statement has."""
        self[name]
        return frozenset(part for part, _ in self._segments[name] if part is not None)

    def compose(self, name: str, parts: Iterable[str]) -> Composed:
        """The statement with only these optional parts; made once per set of parts."""
        wanted = frozenset(parts)
        key = (name, wanted)
        composed = self._composed.get(key)
        if composed is not None:
            return composed
        unknown = wanted - self.parts(name)
        if unknown:
            raise KeyError(f"query {name!r} has no part {', '.join(sorted(unknown))}")
        text = "\n".join(
            line
            for part, body in self._segments[name]
            if part is None or part in wanted
            for line in body.splitlines()
            if not line.lstrip().startswith("--")  # a comment's "$n" is no parameter
        )
        used = sorted({int(n) for n in _PARAM.findall(text)})
        number = {old: new for new, old in enumerate(used, start=1)}
        text = _PARAM.sub(lambda m: f"${number[int(m[1])]}", text).strip().rstrip(";")
        composed = self._composed[key] = Composed(text, tuple(used))
        return composed
