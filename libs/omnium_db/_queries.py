"""Named SQL statements loaded from .sql files (`-- name: <name>` headers), once per process.

A statement takes its arguments by position (`$1`, `$2`, as asyncpg does) or by name
(`:unit_ids`), never both. Names are turned into `$n` once, when the file is loaded, numbered
in the order they first appear; a name used twice is one argument. A `::type` cast, `:=`, and
a colon inside a string, a quoted name or a comment are no parameters. Neither is an array
slice's bound (`x[lo:hi]`): a name straight after a letter, digit or `_` is part of the SQL.

    send = queries.statement("record_send")
    await conn.fetchval(send.text, *send.args({"feed_id": feed.id, ...}))
    await conn.fetchval(*queries.bind("record_send", feed_id=feed.id, ...))  # the same

A statement may mark optional parts:

    -- part: outbox
    outbox AS (INSERT INTO domain_event ... :outbox ...),
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_PART = re.compile(r"^\s*--\s*part:\s*([a-z_][a-z0-9_]*)\s*$")
_END = re.compile(r"^\s*--\s*end part\s*$")
_PARAM = re.compile(r"\$(\d+)")
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# What is SQL text but no code: comments, strings, quoted names, dollar-quoted bodies.
_NOT_CODE = re.compile(
    r"""
      --[^\n]*
    | /\*.*?\*/
    | (?<![\w$])[Ee]'(?:[^'\\]|\\.|'')*'
    | '(?:[^']|'')*'
    | "(?:[^"]|"")*"
    | \$\$.*?\$\$
    | \$(?P<tag>[A-Za-z_]\w*)\$.*?\$(?P=tag)\$
    """,
    re.VERBOSE | re.DOTALL,
)


def _in_code(text: str, pattern: re.Pattern[str], change: Callable[[re.Match[str]], str]) -> str:
    """`text` with `pattern` replaced by `change` in its code only (not in comments, strings,
    quoted names or dollar-quoted bodies)."""
    out: list[str] = []
    start = 0
    for skipped in _NOT_CODE.finditer(text):
        out.append(pattern.sub(change, text[start : skipped.start()]))
        out.append(skipped[0])
        start = skipped.end()
    out.append(pattern.sub(change, text[start:]))
    return "".join(out)


def _found(text: str, pattern: re.Pattern[str]) -> list[str]:
    """The first group of each match of `pattern` in the code of `text`, in order."""
    found: list[str] = []

    def keep(match: re.Match[str]) -> str:
        found.append(match[1])
        return match[0]

    _in_code(text, pattern, keep)
    return found


def _numbered(name: str, body: str) -> tuple[str, tuple[str, ...]]:
    """The statement with its named parameters as `$n`, and the name of each `$n` in order
    (none for a statement that takes its arguments by position)."""
    names = tuple(dict.fromkeys(_found(body, _NAMED)))
    if not names:
        return body, ()
    if _found(body, _PARAM):
        raise ValueError(
            f"query {name!r} mixes named parameters (:{names[0]}) with numbered ones ($n); "
            "write them all by name"
        )
    number = {n: f"${i}" for i, n in enumerate(names, start=1)}
    return _in_code(body, _NAMED, lambda m: number[m[1]]), names


@dataclass(frozen=True, slots=True)
class Composed:
    """A statement made of some parts: its text and which arguments (1-based) it takes; for a
    statement written with names, the name of each of its `$n` and every name of the whole."""

    text: str
    params: tuple[int, ...]
    names: tuple[str, ...] = ()
    every_name: frozenset[str] = frozenset()

    def args(self, every: Sequence[Any] | Mapping[str, object]) -> list[Any]:
        """The arguments of this statement, in order: picked by name from a mapping for a
        statement written with names, else by position from the whole statement's `every`."""
        if not self.names:
            if isinstance(every, Mapping):
                raise TypeError("this statement takes its arguments by position ($n), not by name")
            return [every[n - 1] for n in self.params]
        if not isinstance(every, Mapping):
            raise TypeError("this statement takes its arguments by name: pass a mapping")
        unknown = every.keys() - self.every_name
        missing = [n for n in self.names if n not in every]
        if unknown or missing:
            raise KeyError(
                "the arguments do not match the statement's names: "
                + "; ".join(
                    f"{what} {', '.join(':' + n for n in sorted(names))}"
                    for what, names in (("no such name", unknown), ("missing", missing))
                    if names
                )
            )
        return [every[n] for n in self.names]


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


def _without_leading_comments(body: str) -> str:
    """The statement without the comment lines that open it: they document it in its file, and
    sent along they would name its trace span ("--" rather than "SELECT"). Part markers stay."""
    lines = body.splitlines()
    while lines and lines[0].lstrip().startswith("--") and not _PART.match(lines[0]):
        lines.pop(0)
    return "\n".join(lines).strip()


class Queries:
    """Every statement of a folder's .sql files, by name: `queries["lock_units"]`."""

    def __init__(self, statements: dict[str, str]) -> None:
        numbered = {name: _numbered(name, body) for name, body in statements.items()}
        self._statements = {name: text for name, (text, _) in numbered.items()}
        self._names = {name: names for name, (_, names) in numbered.items()}
        self._segments = {name: _segments(name, text) for name, text in self._statements.items()}
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
                statements[name] = _without_leading_comments(body.strip().rstrip(";"))
        return cls(statements)

    def __getitem__(self, name: str) -> str:
        """The whole statement, as PostgreSQL takes it (named parameters made `$n`)."""
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(f"no query named {name!r}; add it under '-- name: {name}'") from None

    def __contains__(self, name: object) -> bool:
        return name in self._statements

    def names(self) -> list[str]:
        return sorted(self._statements)

    def names_of(self, name: str) -> tuple[str, ...]:
        """The names a statement takes, in the order of its `$n`; none: it takes positions."""
        self[name]
        return self._names[name]

    def bind(self, query: str, /, **values: object) -> tuple[Any, ...]:
        """A statement written with names, and its arguments in order, ready to spread:
        `await conn.fetch(*QUERIES.bind("units_named", event_id=..., codes=..., limit=...))`."""
        statement = self.statement(query)
        return (statement.text, *statement.args(values))

    def statement(self, name: str) -> Composed:
        """The whole statement, every part kept, with the arguments it takes."""
        return self.compose(name, self.parts(name))

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
        used = sorted({int(n) for n in _found(text, _PARAM)})
        number = {old: new for new, old in enumerate(used, start=1)}
        text = _in_code(text, _PARAM, lambda m: f"${number[int(m[1])]}").strip().rstrip(";")
        every_name = self._names[name]
        names = tuple(every_name[n - 1] for n in used) if every_name else ()
        composed = self._composed[key] = Composed(text, tuple(used), names, frozenset(every_name))
        return composed
