"""Files a person gives (JSON, CSV or a URL), read so each problem names its line and field."""

from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

import httpx

Where: TypeAlias = tuple[str | int, ...]  # ("competitors", 12, "noc")

_SHOWN = 20  # problems listed before "... and N more"


def place(where: Where) -> str:
    """`("competitors", 12, "noc")` as `competitors[12].noc`."""
    text = ""
    for part in where:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with what a person gave: where, and what to do about it."""

    where: Where
    message: str
    line: int | None = None
    source: str | None = None  # the file or URL, when it is not the one being read

    def __str__(self) -> str:
        head = ", ".join(
            part for part in (self.source or "", f"line {self.line}" if self.line else "") if part
        )
        spot = place(self.where)
        if head and spot:
            return f"{head} ({spot}): {self.message}"
        return f"{head or spot}: {self.message}" if head or spot else self.message


class SetupError(ValueError):
    """What a person gave cannot be used; nothing was written. Each problem says where."""

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        self.problems: tuple[Problem, ...] = (
            (Problem((), problems),) if isinstance(problems, str) else tuple(problems)
        )
        super().__init__(self.describe())

    def describe(self, shown: int = _SHOWN) -> str:
        lines = [str(p) for p in self.problems[:shown]]
        if len(self.problems) > shown:
            lines.append(f"... and {len(self.problems) - shown} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class Document:
    """A file's text, or a URL's, with where relative paths inside it start from."""

    name: str
    text: str
    folder: Path
    _tree: list[Any] = field(default_factory=list, repr=False, compare=False)

    def json(self) -> Any:
        """The parsed JSON; a syntax error is a SetupError naming its line and column."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as exc:
            raise SetupError(
                [
                    Problem(
                        (),
                        f"this is not JSON: {exc.msg} (column {exc.colno}); "
                        "a JSON checker such as `python -m json.tool FILE` shows the spot",
                        line=exc.lineno,
                        source=self.name,
                    )
                ]
            ) from None

    def located(self, problems: Iterable[Problem]) -> list[Problem]:
        """The problems with this document's name and, for a JSON one, the line of each field."""
        out = []
        for problem in problems:
            if problem.source is not None and problem.source != self.name:
                out.append(problem)
                continue
            line = problem.line if problem.line is not None else self.line_of(problem.where)
            out.append(replace(problem, line=line, source=self.name))
        return out

    def fail(self, problems: Sequence[Problem]) -> SetupError:
        return SetupError(self.located(problems))

    def line_of(self, where: Where) -> int | None:
        """The line of the field at `where`: its key's line, or the line its object starts on."""
        if not self._tree:
            try:
                self._tree.append(_located(self.text))
            except (ValueError, RecursionError):
                self._tree.append(None)
        tree = self._tree[0]
        if tree is None:
            return None
        lines = _Lines(self.text)
        node: Any = tree
        best = lines.at(getattr(node, "start", 0))
        for part in where:
            if isinstance(node, _Obj) and isinstance(part, str):
                if part not in node:
                    break
                best = lines.at(node.key_at(self.text, part))
            elif isinstance(node, _Arr) and isinstance(part, int) and 0 <= part < len(node):
                child = node[part]
                if isinstance(child, _Obj | _Arr):
                    best = lines.at(child.start)
            else:
                break
            node = node[part]
            if not isinstance(node, _Obj | _Arr):
                break
        return best


def read_document(given: str, *, timeout: float = 20.0) -> Document:
    """A file, or an http(s) URL, as text. Anything that cannot be read is a SetupError."""
    if re.match(r"^https?://", given):
        try:
            response = httpx.get(given, timeout=timeout, follow_redirects=True)
        except httpx.HTTPError as exc:
            raise SetupError([Problem((), f"could not be read: {exc}", source=given)]) from None
        if response.status_code != 200:
            raise SetupError(
                [Problem((), f"answered HTTP {response.status_code}, not 200", source=given)]
            )
        return Document(given, response.text, Path.cwd())
    path = Path(given)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SetupError([Problem((), "there is no such file", source=given)]) from None
    except IsADirectoryError:
        raise SetupError([Problem((), "this is a folder, not a file", source=given)]) from None
    except UnicodeDecodeError as exc:
        raise SetupError(
            [Problem((), f"this is not UTF-8 text ({exc.reason})", source=given)]
        ) from None
    except OSError as exc:
        raise SetupError(
            [Problem((), f"could not be read: {exc.strerror}", source=given)]
        ) from None
    return Document(given, text, path.parent)


# -- JSON with places ---------------------------------------------------------------------------


class _Lines:
    def __init__(self, text: str) -> None:
        self._breaks = [m.start() for m in re.finditer("\n", text)]

    def at(self, index: int) -> int:
        return bisect.bisect_left(self._breaks, index) + 1


class _Obj(dict[str, Any]):
    """A JSON object that knows where it is in its text."""

    __slots__ = ("end", "start")

    def __init__(self, pairs: Mapping[str, object], start: int, end: int) -> None:
        super().__init__(pairs)
        self.start, self.end = start, end

    def key_at(self, text: str, key: str) -> int:
        """Where `"key":` is written in this object itself, not in an object inside it."""
        inner = [(v.start, v.end) for v in self.values() if isinstance(v, _Obj | _Arr)]
        pattern = re.compile(re.escape(json.dumps(key)) + r"\s*:")
        for found in pattern.finditer(text, self.start, self.end):
            if not any(a <= found.start() < b for a, b in inner):
                return found.start()
        return self.start


class _Arr(list[Any]):
    __slots__ = ("end", "start")

    def __init__(self, items: Iterable[Any], start: int, end: int) -> None:
        super().__init__(items)
        self.start, self.end = start, end


def _located(text: str) -> Any:
    """The JSON parsed into objects and lists that know their place (for messages only)."""
    # The pure-Python scanner calls the decoder's parse_object and parse_array, so wrapping
    # them gives each object and list its span; the C scanner would not call them.
    pure: Any = json.decoder
    scanner: Any = json.scanner
    decoder: Any = json.JSONDecoder()

    def parse_object(s_and_end: tuple[str, int], *args: object) -> tuple[_Obj, int]:
        start = s_and_end[1] - 1
        value, end = pure.JSONObject(s_and_end, *args)
        return _Obj(value, start, end), end

    def parse_array(s_and_end: tuple[str, int], *args: object) -> tuple[_Arr, int]:
        start = s_and_end[1] - 1
        value, end = pure.JSONArray(s_and_end, *args)
        return _Arr(value, start, end), end

    decoder.parse_object = parse_object
    decoder.parse_array = parse_array
    decoder.scan_once = scanner.py_make_scanner(decoder)
    return decoder.decode(text)


# -- reading fields -----------------------------------------------------------------------------


def shown(value: object) -> str:
    """A value as a message quotes it: short, and its JSON kind clear."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57] + "...")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return str(value)


def unknown_fields(obj: Mapping[str, object], known: Sequence[str], where: Where) -> list[Problem]:
    """A field not in `known` is refused, so a typo never passes as a default quietly."""
    return [
        Problem(
            (*where, name),
            f"there is no field {name!r} here; the fields are {', '.join(known)}",
        )
        for name in obj
        if name not in known
    ]
