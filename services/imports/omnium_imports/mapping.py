"""The no-code mapping: an integration version's steps turn Scout's rows into ours, purely.

A mapping version is JSON kept per integration version:

    {"target": "unit", "key_fields": ["externalId"], "source": "Scout", "steps": [...]}

`MappingVersion.parse` checks it once and refuses a broken one with `MappingSpecError`, so no
row is ever mapped with it. `map_row` then gives every row an outcome, never an exception:
ok, problem (the reason says what is wrong), held (a question a person can act on) or skipped.

Each step is an object with an `op`; `path` reads Scout's row (dot paths, list indices as in
`competitors.0.name`), `field` and `to` are names in our output. The ops, their arguments and
what each does with a missing value are in services/imports/README-mapping.md:

    read        path, to, required?            copy a value from Scout's row
    rename      from, to                       move an output field
    map         field, table, unknown?, value?, case?   translate values through a table
    local_time  field                          wall-clock time in the event's zone -> ISO + offset
    lookup      path, kind, to, describe?, unknown?   Scout's id -> ours; unknown ids are held
    default     field, value                   set a field that is missing or null
    skip_if     path | field, equals | in | missing, reason?   skip the row
    template    to, template                   build text from "{name}" parts
    integer     field                          a whole number (rank, medal counts)
    set         to, value                      a constant
    each        path, to, steps                nested steps on each element of a list
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import re
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

Target: TypeAlias = Literal["unit", "medal_row"]
Outcome: TypeAlias = Literal["ok", "problem", "held", "skipped"]

Absent: TypeAlias = Literal["keep", "clear"]

TARGETS: tuple[Target, ...] = ("unit", "medal_row")
ABSENT: tuple[Absent, ...] = ("keep", "clear")
LOOKUP_KINDS = ("competitor", "unit")
DEFAULT_KEY_FIELDS = ("externalId",)
DEFAULT_SOURCE = "Scout"

_NOUNS: dict[Target, str] = {"unit": "unit", "medal_row": "medal row"}
_WHOLE = re.compile(r"^[+-]?[0-9]+(\.0*)?$")
_FORMATTER = string.Formatter()
# Built once: json.dumps with these arguments builds the same encoder on every call.
_HASH_JSON = json.JSONEncoder(sort_keys=True, default=str)
# The types JSON gives that hold nothing: safe to share, and never walked into.
_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


class MappingSpecError(ValueError):
    """A mapping version that cannot be used; the message names the step and what to fix."""


class _Missing(Enum):
    MISSING = "missing"


_MISSING = _Missing.MISSING


# A dot path split once when the step is parsed: each part, with its list index if it is one.
_Path: TypeAlias = tuple[tuple[str, int | None], ...]


def _split(path: str) -> _Path:
    return tuple(
        (part, int(part) if part.isascii() and part.isdigit() else None) for part in path.split(".")
    )


def _walk(value: Any, path: _Path) -> Any:
    """The value at a split dot path, or _MISSING; null stays None, so the two can be told apart."""
    for name, index in path:
        kind = type(value)
        # Rows come from JSON, so exact type checks settle almost every part; the abstract
        # Mapping check costs several times more and is left for other mappings and sequences.
        if kind is dict:
            value = value.get(name, _MISSING)
            if value is _MISSING:
                return _MISSING
        elif kind is list:
            if index is None or index >= len(value):
                return _MISSING
            value = value[index]
        elif kind in _SCALARS:
            return _MISSING
        elif isinstance(value, Mapping):
            if name not in value:
                return _MISSING
            value = value[name]
        elif isinstance(value, list | tuple) and index is not None and index < len(value):
            value = value[index]
        else:
            return _MISSING
    return value


def read_path(row: Any, path: str) -> Any:
    """The value at `path` ("competitors.0.name") in a row; None when it is missing or null."""
    value = _walk(row, _split(path))
    return None if value is _MISSING else value


def row_hash(value: Mapping[str, Any]) -> bytes:
    """sha256 of the mapped value as sorted-keys JSON: the same value always gives the same hash."""
    return hashlib.sha256(_HASH_JSON.encode(value).encode()).digest()


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _shown(value: Any) -> str:
    """A value as a person reads it in a reason: text quoted, long values cut."""
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _own(value: Any) -> Any:
    # Values go into rows that callers may change; Scout's rows and the spec must stay as they are.
    # Text, numbers and null cannot be changed, so they are shared rather than copied.
    if type(value) in _SCALARS:
        return value
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


# -- the context and the answer ---------------------------------------------------------------


@dataclass(frozen=True)
class MappingContext:
    """What mapping needs from outside the row: the event's time zone and our ids by theirs.

    `lookups` is by kind ("competitor", "unit"), then by Scout's id, giving our id.
    """

    time_zone: str
    lookups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A wrong zone would make every row a problem; saying so once, up front, is clearer.
        try:
            ZoneInfo(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"the event's time zone {self.time_zone!r} is not an IANA zone name; "
                "use one like 'Asia/Tokyo' in the event's settings"
            ) from None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)


@dataclass(frozen=True)
class MappedRow:
    """One row of a run after mapping. `reason` is empty for ok rows."""

    position: int  # the row's offset in the run's items
    key: str | None
    hash: bytes
    value: dict[str, Any]
    outcome: Outcome
    reason: str


# -- mapping one row --------------------------------------------------------------------------


class _Problem(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Skip(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Run:
    """What the rows of one map_rows call share, worked out once rather than once per step.

    Everything is filled in when first needed, so building it cannot fail outside a row.
    """

    __slots__ = ("_zone", "context", "ids", "source_name", "times")

    def __init__(self, context: MappingContext, source_name: str) -> None:
        self.context = context
        self.source_name = source_name
        self.ids: dict[str, Mapping[str, str]] = {}  # the context's lookups, by kind
        # local_time's answers by the text sent: a run has few distinct start times.
        self.times: dict[str, str] = {}
        self._zone: ZoneInfo | None = None

    def zone(self) -> ZoneInfo:
        if self._zone is None:
            self._zone = self.context.zone
        return self._zone


@dataclass(slots=True)
class _RowState:
    run: _Run
    noun: str
    label: str  # how a question names the row: its key, or "row 12" without one
    key: str | None
    questions: list[str] = field(default_factory=list)

    @property
    def context(self) -> MappingContext:
        return self.run.context

    @property
    def source_name(self) -> str:
        return self.run.source_name


@dataclass(slots=True)
class _Frame:
    """Steps work on one input object and one output dict: the row, or an element inside each."""

    source: Mapping[str, Any]
    out: dict[str, Any]
    row: _RowState
    outer: str = ""  # the list this is an element of ("competitors"), "" for the row itself
    index: int = 0  # which element of that list

    @property
    def where(self) -> str:
        # "competitors.1" for an element, "" for the row; built only when a message needs it.
        return f"{self.outer}.{self.index}" if self.outer else ""

    def at(self) -> str:
        return f"in {self.where}, " if self.where else ""

    def whose(self) -> str:
        return self.where or "the row"

    def read(self, path: _Path) -> Any:
        return _walk(self.source, path)

    def output(self, name: str) -> Any:
        return self.out.get(name, _MISSING)


class Step(ABC):
    """One parsed step. `apply` changes the frame's output, or raises _Problem or _Skip."""

    __slots__ = ()

    @abstractmethod
    def apply(self, frame: _Frame) -> None: ...


# A step's apply, bound once when the steps are parsed rather than looked up on every row.
_Apply: TypeAlias = Callable[[_Frame], None]


@dataclass(frozen=True, slots=True)
class Read(Step):
    path: str
    to: str
    required: bool = False
    _path: _Path = field(init=False, repr=False, compare=False)
    _name: str | None = field(init=False, repr=False, compare=False)  # a path of one part

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", _split(self.path))
        object.__setattr__(self, "_name", self.path if len(self._path) == 1 else None)

    def apply(self, frame: _Frame) -> None:
        source = frame.source
        # Most reads are one name from a plain dict: read it here, without the walk's loop.
        if self._name is not None and type(source) is dict:
            value = source.get(self._name, _MISSING)
        else:
            value = _walk(source, self._path)
        if value is _MISSING:
            if self.required:
                raise _Problem(
                    f"{frame.whose()} has no {self.path}, which this mapping needs; "
                    f"ask {frame.row.source_name} to send it, or drop 'required' from the step"
                )
            # Left out, not null: a field that is not sent is not compared, so nothing is cleared.
            frame.out.pop(self.to, None)
            return
        frame.out[self.to] = value if type(value) in _SCALARS else _own(value)


@dataclass(frozen=True, slots=True)
class Rename(Step):
    source: str
    to: str

    def apply(self, frame: _Frame) -> None:
        if self.source in frame.out:
            frame.out[self.to] = frame.out.pop(self.source)


MapUnknown: TypeAlias = Literal["keep", "use", "problem"]
MAP_UNKNOWN: tuple[MapUnknown, ...] = ("keep", "use", "problem")
# How a text is matched to the table's keys: "exact" (the default, as versions made before
# "case" had), or "any": "Scheduled", "scheduled" and "SCHEDULED" are one key.
MapCase: TypeAlias = Literal["exact", "any"]
MAP_CASES: tuple[MapCase, ...] = ("exact", "any")


def _table_key(value: Any) -> str:
    # JSON tables have text keys only, so other values are looked up by their JSON text (1 -> "1").
    return value if isinstance(value, str) else _HASH_JSON.encode(value)


@dataclass(frozen=True, slots=True)
class MapValues(Step):
    field: str
    table: Mapping[str, Any]
    unknown: MapUnknown = "problem"
    value: Any = None  # used for values not in the table when unknown is "use"
    case: MapCase = "exact"
    # With case "any": the table by its keys casefolded, built once (parse refuses two keys
    # that fold alike but mean different things).
    _folded: Mapping[str, Any] | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        folded = {key.casefold(): ours for key, ours in self.table.items()}
        object.__setattr__(self, "_folded", folded if self.case == "any" else None)

    def apply(self, frame: _Frame) -> None:
        current = frame.out.get(self.field)
        # Null means "none yet" (no medal, no rank), not a value to translate.
        if current is None:
            return
        key = current if type(current) is str else _table_key(current)
        folded = self._folded
        if folded is None:
            ours = self.table.get(key, _MISSING)
        else:
            ours = folded.get(key.casefold(), _MISSING)
        if ours is not _MISSING:
            frame.out[self.field] = _own(ours)
        elif self.unknown == "use":
            frame.out[self.field] = _own(self.value)
        elif self.unknown == "problem":
            known = ", ".join(sorted(self.table))
            if folded is not None:
                known += ", in any case"
            raise _Problem(
                f"{frame.at()}{self.field} {_shown(current)} is not in the mapping's table "
                f"(it knows {known}); add it to the table, or ask "
                f"{frame.row.source_name} what it means"
            )


@dataclass(frozen=True, slots=True)
class LocalTime(Step):
    field: str

    def apply(self, frame: _Frame) -> None:
        current = frame.out.get(self.field)
        if current is None:
            return
        times = frame.row.run.times
        # Only plain text is remembered: what a str subclass compares equal to is its own affair.
        if type(current) is str:
            known = times.get(current)
            if known is not None:
                frame.out[self.field] = known
                return
        text = current.strip() if isinstance(current, str) else None
        example = "like 2026-09-21T09:30:00"
        if text is None:
            raise _Problem(
                f"{frame.at()}{self.field} is {_json_kind(current)} ({_shown(current)}), "
                f"not a time {example}"
            )
        if len(text) <= 10:
            raise _Problem(
                f"{frame.at()}{self.field} {_shown(current)} has no time of day; "
                f"a start needs one, {example}"
            )
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise _Problem(
                f"{frame.at()}{self.field} {_shown(current)} is not a time {example}; "
                f"check what {frame.row.source_name} shows for it"
            ) from None
        if moment.tzinfo is None:
            zone = frame.row.run.zone()
            moment = moment.replace(tzinfo=zone)
            # A wall-clock time skipped when the clocks go forward comes back different.
            if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != moment.replace(
                tzinfo=None
            ):
                raise _Problem(
                    f"{frame.at()}{self.field} {_shown(current)} does not exist in "
                    f"{frame.row.context.time_zone}: the clocks go forward over it; "
                    f"ask {frame.row.source_name} for the right time"
                )
        written = moment.isoformat()
        if type(current) is str:
            times[current] = written
        frame.out[self.field] = written


LookupUnknown: TypeAlias = Literal["hold", "leave_out"]
LOOKUP_UNKNOWN: tuple[LookupUnknown, ...] = ("hold", "leave_out")
_NO_IDS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Lookup(Step):
    path: str
    kind: str
    to: str
    describe: tuple[str, ...] = ()
    unknown: LookupUnknown = "hold"
    _path: _Path = field(init=False, repr=False, compare=False)
    _name: str | None = field(init=False, repr=False, compare=False)  # a path of one part
    _describe: tuple[_Path, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", _split(self.path))
        object.__setattr__(self, "_name", self.path if len(self._path) == 1 else None)
        object.__setattr__(self, "_describe", tuple(_split(path) for path in self.describe))

    def apply(self, frame: _Frame) -> None:
        source = frame.source
        if self._name is not None and type(source) is dict:
            external = source.get(self._name, _MISSING)
        else:
            external = _walk(source, self._path)
        if type(external) is str and external:
            external_id = external
        elif external is _MISSING or external is None or external == "":
            if self.unknown == "leave_out":
                frame.out.pop(self.to, None)
                return
            raise _Problem(
                f"{frame.whose()} has no {self.path} to find the {self.kind} by; "
                f"ask {frame.row.source_name} to send it"
            )
        elif isinstance(external, bool) or not isinstance(external, str | int):
            raise _Problem(
                f"{frame.at()}{self.path} is {_json_kind(external)} ({_shown(external)}), "
                f"not a {self.kind} id"
            )
        else:
            external_id = str(external)
        row = frame.row
        known = row.run.ids
        ids = known.get(self.kind)
        if ids is None:
            ids = known[self.kind] = row.context.lookups.get(self.kind, _NO_IDS)
        ours = ids.get(external_id)
        if ours is not None:
            frame.out[self.to] = ours
            return
        frame.out.pop(self.to, None)
        if self.unknown == "leave_out":
            return
        question = self._question(frame, external_id)
        if question not in row.questions:
            row.questions.append(question)

    def _question(self, frame: _Frame, external_id: str) -> str:
        row = frame.row
        details = [
            str(value)
            for path in self._describe
            if (value := frame.read(path)) is not _MISSING and value is not None and value != ""
        ]
        named = f"{self.kind} {external_id}" + (f" ({', '.join(details)})" if details else "")
        fix = f"we have no such {self.kind}. Add it, or map {external_id} to one we have."
        if not frame.where and external_id == row.key:
            return f"{row.source_name} sends {named}; {fix}"
        return f"{row.source_name} names {named} in {row.noun} {row.label}; {fix}"


@dataclass(frozen=True, slots=True)
class Default(Step):
    field: str
    value: Any

    def apply(self, frame: _Frame) -> None:
        if frame.out.get(self.field) is None:
            frame.out[self.field] = _own(self.value)


SkipTest: TypeAlias = Literal["equals", "in", "missing"]


@dataclass(frozen=True, slots=True)
class SkipIf(Step):
    name: str  # the path or the output field, as `on` says
    on: Literal["path", "field"]
    test: SkipTest
    value: Any = None  # the value for "equals", the list for "in"
    reason: str = ""
    _path: _Path = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", _split(self.name) if self.on == "path" else ())

    def apply(self, frame: _Frame) -> None:
        current = frame.read(self._path) if self.on == "path" else frame.output(self.name)
        present = current is not _MISSING and current is not None
        if self.test == "missing":
            hit = not present
            why = f"{frame.whose()} has no {self.name}, and this mapping skips such rows"
        elif self.test == "equals":
            hit = present and current == self.value
            why = f"{frame.at()}{self.name} is {_shown(current)}, which this mapping skips"
        else:
            hit = present and current in self.value
            why = f"{frame.at()}{self.name} is {_shown(current)}, one of those this mapping skips"
        if hit:
            raise _Skip(self.reason or why)


@dataclass(frozen=True, slots=True)
class Template(Step):
    to: str
    template: str
    parts: tuple[tuple[str, str | None], ...]  # literal text, then a name or None
    _paths: tuple[_Path, ...] = field(init=False, repr=False, compare=False)  # one per part

    def __post_init__(self) -> None:
        paths = tuple(_split(name) if name is not None else () for _, name in self.parts)
        object.__setattr__(self, "_paths", paths)

    def apply(self, frame: _Frame) -> None:
        pieces: list[str] = []
        for (literal, name), path in zip(self.parts, self._paths, strict=True):
            pieces.append(literal)
            if name is None:
                continue
            value = frame.output(name)
            if value is _MISSING or value is None:
                value = frame.read(path)
            if value is _MISSING or value is None:
                raise _Problem(
                    f"{frame.at()}the template for {self.to} needs {{{name}}}, but "
                    f"{frame.whose()} has no {name}; ask {frame.row.source_name} to send it, "
                    "or give it a default first"
                )
            pieces.append(str(value))
        frame.out[self.to] = "".join(pieces)


def _whole_number(value: Any) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str) and _WHOLE.match(value.strip()):
        return int(value.strip().split(".")[0])
    return None


@dataclass(frozen=True, slots=True)
class Integer(Step):
    field: str

    def apply(self, frame: _Frame) -> None:
        current = frame.out.get(self.field)
        # A plain int is already whole: the usual case, settled without a call.
        if current is None or type(current) is int:
            return
        number = _whole_number(current)
        if number is None:
            raise _Problem(
                f"{frame.at()}{self.field} {_shown(current)} is not a whole number; "
                f"check what {frame.row.source_name} shows for it"
            )
        frame.out[self.field] = number


@dataclass(frozen=True, slots=True)
class SetValue(Step):
    to: str
    value: Any

    def apply(self, frame: _Frame) -> None:
        frame.out[self.to] = _own(self.value)


@dataclass(frozen=True, slots=True)
class Each(Step):
    path: str
    to: str
    steps: tuple[Step, ...]
    _path: _Path = field(init=False, repr=False, compare=False)
    _applies: tuple[_Apply, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", _split(self.path))
        object.__setattr__(self, "_applies", tuple(step.apply for step in self.steps))

    def apply(self, frame: _Frame) -> None:
        items = _walk(frame.source, self._path)
        if items is _MISSING or items is None:
            frame.out.pop(self.to, None)
            return
        if not isinstance(items, list | tuple):
            raise _Problem(
                f"{frame.at()}{self.path} is {_json_kind(items)}, not a list; "
                f"check what {frame.row.source_name} sends"
            )
        mapped: list[dict[str, Any]] = []
        where = frame.where
        # One frame serves every element in turn: steps never keep it, and building a frame
        # (and its "competitors.3" text) per element was a good part of each's time.
        inner = _Frame(frame.source, {}, frame.row, f"{where}.{self.path}" if where else self.path)
        applies = self._applies
        for index, item in enumerate(items):
            inner.index = index
            if type(item) is not dict and not isinstance(item, Mapping):
                raise _Problem(f"{inner.where} is {_json_kind(item)}, not an object")
            inner.source = item
            out: dict[str, Any] = {}
            inner.out = out
            try:
                for apply in applies:
                    apply(inner)
            except _Skip:
                # Inside each, skip_if leaves out the element, not the whole row.
                continue
            mapped.append(out)
        frame.out[self.to] = mapped


# -- the version ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MappingVersion:
    """A checked mapping version: build it with `parse`, then map rows with it."""

    target: Target
    key_fields: tuple[str, ...]
    steps: tuple[Step, ...]
    source: str = DEFAULT_SOURCE
    # The fields this integration answers for ("venue", "sides.medal"): None, every field its
    # steps write. An owned field that maps to null is cleared in our data (see README-mapping).
    owns: frozenset[str] | None = None
    # "clear": an owned field the row leaves out is cleared too; "keep": it is not compared.
    absent: Absent = "keep"
    _key_paths: tuple[tuple[str, _Path], ...] = field(init=False, repr=False, compare=False)
    _applies: tuple[_Apply, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = tuple((name, _split(name)) for name in self.key_fields)
        object.__setattr__(self, "_key_paths", keys)
        object.__setattr__(self, "_applies", tuple(step.apply for step in self.steps))

    @property
    def owned(self) -> frozenset[str]:
        """The output fields this mapping answers for: `owns`, else all its steps write."""
        return self.owns if self.owns is not None else written(self.steps)

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> MappingVersion:
        """Check a mapping version's JSON; raises MappingSpecError saying what to fix."""
        if not isinstance(obj, Mapping):
            raise MappingSpecError(
                f"a mapping is an object with target and steps, not {_json_kind(obj)}"
            )
        allowed = ("target", "key_fields", "source", "steps", "owns", "absent")
        unknown = [name for name in obj if name not in allowed]
        if unknown:
            raise MappingSpecError(
                f"the mapping has {_shown(unknown[0])}, which it does not know; "
                f"it takes {', '.join(allowed)}"
            )
        target = obj.get("target")
        if target not in TARGETS:
            raise MappingSpecError(
                f"the mapping's target must be {' or '.join(TARGETS)}, not {_shown(target)}"
            )
        key_fields = obj.get("key_fields", list(DEFAULT_KEY_FIELDS))
        if (
            not isinstance(key_fields, list)
            or not key_fields
            or not all(isinstance(f, str) and _is_path(f) for f in key_fields)
        ):
            raise MappingSpecError(
                "the mapping's key_fields must be a list of paths in the row, like "
                f'["externalId"], not {_shown(key_fields)}'
            )
        source = obj.get("source", DEFAULT_SOURCE)
        if not isinstance(source, str) or not source.strip():
            raise MappingSpecError(
                f'the mapping\'s source names where rows come from, like "Scout"; '
                f"it is {_shown(source)}"
            )
        steps = _parse_steps(obj.get("steps"), "")
        absent = obj.get("absent", "keep")
        if absent not in ABSENT:
            raise MappingSpecError(
                f"the mapping's absent says what a field the row leaves out means: "
                f'"keep" (not compared) or "clear" (cleared like a null), not {_shown(absent)}'
            )
        return cls(
            target=target,
            key_fields=tuple(key_fields),
            steps=steps,
            source=source.strip(),
            owns=_owns(obj["owns"], steps) if "owns" in obj else None,
            absent=absent,
        )

    def key_of(self, row: Any) -> str | None:
        """The row's key from Scout's row; None when a key field is missing, empty or not an id."""
        key, _ = self._key(row)
        return key

    def _key(self, row: Any) -> tuple[str | None, str | None]:
        """The row's key, or None and what is wrong with it."""
        parts: list[str] = []
        for name, path in self._key_paths:
            part = _walk(row, path)
            if part is _MISSING or part is None or part == "":
                return None, f"the row has no {name}"
            if type(part) is not str and (
                isinstance(part, bool) or not isinstance(part, str | int)
            ):
                return None, f"the row's {name} is {_json_kind(part)}, not an id"
            parts.append(str(part))
        return ":".join(parts), None

    def map_row(self, position: int, row: Any, context: MappingContext) -> MappedRow:
        """Map one row. Never raises: a bad row comes back as a problem with the reason."""
        return self._map_row_safely(position, row, _Run(context, self.source))

    def _map_row_safely(self, position: int, row: Any, run: _Run) -> MappedRow:
        try:
            return self._map_row(position, row, run)
        except Exception as exc:
            # One odd row must not stop a run of a thousand: it shows as a problem instead.
            return _answer(position, None, {}, "problem", _fault(exc))

    def _map_row(self, position: int, row: Any, run: _Run) -> MappedRow:
        if type(row) is not dict and not isinstance(row, Mapping):
            return _answer(
                position,
                None,
                {},
                "problem",
                f"row {position} is {_json_kind(row)}, not an object; "
                f"{self.source} sent something that is not a row",
            )
        key, key_problem = self._key(row)
        label = key if key is not None else f"row {position}"
        state = _RowState(run, _NOUNS[self.target], label, key, [])
        frame = _Frame(row, {}, state)
        problem: str | None = None
        try:
            for apply in self._applies:
                apply(frame)
        except _Skip as skip:
            # A skip wins over a missing key, so a skip_if can set aside rows that have none.
            return _answer(position, key, frame.out, "skipped", skip.reason)
        except _Problem as exc:
            problem = exc.reason
        except Exception as exc:
            # Caught here too, so the row keeps its key and can be followed to the fault.
            problem = _fault(exc)
        if key_problem is not None:
            problem = (
                f"{key_problem}: it cannot be followed from run to run; "
                f"ask {self.source} to send it, or skip such rows with a skip_if step"
            )
        if problem is not None:
            return _answer(position, key, frame.out, "problem", problem)
        if state.questions:
            return _answer(position, key, frame.out, "held", " ".join(state.questions))
        return _answer(position, key, frame.out, "ok", "")

    def map_rows(self, rows: Sequence[Any], context: MappingContext) -> list[MappedRow]:
        run = _Run(context, self.source)
        return [self._map_row_safely(position, row, run) for position, row in enumerate(rows)]


def written(steps: Sequence[Step], prefix: str = "") -> frozenset[str]:
    """The output fields the steps write: "venue", and "sides.medal" inside an each."""
    names: set[str] = set()
    for step in steps:
        if isinstance(step, Each):
            names.add(prefix + step.to)
            names |= written(step.steps, f"{prefix}{step.to}.")
            continue
        name = getattr(step, "to", None) or getattr(step, "field", None)
        if isinstance(name, str):
            names.add(prefix + name)
    return frozenset(names)


def _owns(raw: Any, steps: tuple[Step, ...]) -> frozenset[str]:
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise MappingSpecError(
            'the mapping\'s owns lists the fields it answers for, like ["venue", "sides.medal"], '
            f"not {_shown(raw)}"
        )
    writes = written(steps)
    for name in raw:
        if name not in writes:
            raise MappingSpecError(
                f"the mapping owns {_shown(name)}, but no step writes it; its steps write "
                f"{', '.join(sorted(writes))}"
            )
    return frozenset(raw)


def _fault(exc: Exception) -> str:
    return (
        f"mapping stopped on something it did not expect ({type(exc).__name__}: {exc}); "
        "this is a fault in omnium's mapping: report it with this row"
    )


def _answer(
    position: int, key: str | None, value: dict[str, Any], outcome: Outcome, reason: str
) -> MappedRow:
    return MappedRow(position, key, row_hash(value), value, outcome, reason)


def load_default(name: str) -> MappingVersion:
    """A default mapping shipped with the service: "scout_units" or "scout_medals"."""
    folder = resources.files(__package__ or "omnium_imports").joinpath("mappings")
    names = sorted(
        entry.name.removesuffix(".json")
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    )
    if name not in names:
        raise ValueError(f"there is no default mapping {name!r}; there are {', '.join(names)}")
    text = folder.joinpath(f"{name}.json").read_text(encoding="utf-8")
    try:
        return MappingVersion.parse(json.loads(text))
    except (MappingSpecError, json.JSONDecodeError) as exc:
        raise MappingSpecError(f"the default mapping {name!r} is broken: {exc}") from None


# -- checking steps ---------------------------------------------------------------------------


def _is_path(text: str) -> bool:
    return bool(text) and all(part for part in text.split("."))


_HINTS = {
    "path": 'a dot path into the row, like "competitors.0.name"',
    "to": 'the output field to write, like "start_at"',
    "field": 'an output field an earlier step wrote, like "status"',
    "from": "the output field to move",
    "table": 'an object from their values to ours, like {"FINISHED": "OFFICIAL"}',
    "value": "the value to use",
    "kind": f"what to look up: {' or '.join(LOOKUP_KINDS)}",
    "template": 'the text to build, naming fields in braces, like "{event} {phase}"',
    "steps": "the list of steps to run on each element",
}


_Choice = TypeVar("_Choice", bound=str)


class _Args:
    """One step's arguments, read with messages that name the step."""

    def __init__(self, raw: Mapping[str, Any], where: str, op: str) -> None:
        self.raw = raw
        self.where = where
        self.op = op

    def fail(self, message: str) -> MappingSpecError:
        return MappingSpecError(f"{self.where} ({self.op}): {message}")

    def only(self, *names: str) -> None:
        for name in self.raw:
            if name != "op" and name not in names:
                raise self.fail(
                    f"it does not take {_shown(name)}; {self.op} takes {', '.join(names)}"
                )

    def has(self, name: str) -> bool:
        return name in self.raw

    def value(self, name: str) -> Any:
        if name not in self.raw:
            raise self.fail(f"it needs {name!r}: {_HINTS.get(name, 'see the op table')}")
        return self.raw[name]

    def text(self, name: str) -> str:
        value = self.value(name)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(
                f"{name!r} must be a text: {_HINTS.get(name, 'not empty')}; "
                f"it is {_json_kind(value)} ({_shown(value)})"
            )
        return value.strip()

    def path(self, name: str) -> str:
        text = self.text(name)
        if not _is_path(text):
            raise self.fail(f"{name!r} {text!r} has an empty part; {_HINTS['path']}")
        return text

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(f"{name!r} must be true or false, not {_shown(value)}")
        return value

    def choice(self, name: str, choices: tuple[_Choice, ...], default: _Choice) -> _Choice:
        value = self.raw.get(name, default)
        for choice in choices:
            if value == choice:
                return choice
        raise self.fail(
            f"{name!r} must be {' or '.join(repr(c) for c in choices)}, not {_shown(value)}"
        )


def _read(args: _Args) -> Step:
    args.only("path", "to", "required")
    return Read(args.path("path"), args.text("to"), args.flag("required", False))


def _rename(args: _Args) -> Step:
    args.only("from", "to")
    source, to = args.text("from"), args.text("to")
    if source == to:
        raise args.fail(f"'from' and 'to' are both {source!r}; nothing would move")
    return Rename(source, to)


def _map(args: _Args) -> Step:
    args.only("field", "table", "unknown", "value", "case")
    table = args.value("table")
    if not isinstance(table, Mapping) or not table:
        raise args.fail(f"'table' must be {_HINTS['table']}; it is {_json_kind(table)}")
    if not all(isinstance(k, str) for k in table):
        raise args.fail("'table' keys must be texts, as in JSON")
    unknown = args.choice("unknown", MAP_UNKNOWN, "problem")
    if unknown == "use" and not args.has("value"):
        raise args.fail("with unknown 'use' it needs 'value': what values not in the table become")
    if unknown != "use" and args.has("value"):
        raise args.fail("'value' goes only with unknown 'use'; say unknown 'use', or drop value")
    case = args.choice("case", MAP_CASES, "exact")
    if case == "any":
        seen: dict[str, str] = {}
        for key, ours in table.items():
            other = seen.setdefault(key.casefold(), key)
            if other != key and table[other] != ours:
                raise args.fail(
                    f"with case 'any' the keys {other!r} and {key!r} are one, but the table "
                    f"gives {_shown(table[other])} and {_shown(ours)}; keep one of them"
                )
    return MapValues(args.text("field"), dict(table), unknown, args.raw.get("value"), case)


def _local_time(args: _Args) -> Step:
    args.only("field")
    return LocalTime(args.text("field"))


def _lookup(args: _Args) -> Step:
    args.only("path", "kind", "to", "describe", "unknown")
    kind = args.text("kind")
    if kind not in LOOKUP_KINDS:
        raise args.fail(f"'kind' {kind!r} is not one we look up; use {' or '.join(LOOKUP_KINDS)}")
    describe = args.raw.get("describe", [])
    if not isinstance(describe, list) or not all(
        isinstance(p, str) and _is_path(p) for p in describe
    ):
        raise args.fail(
            "'describe' must be a list of paths that name the thing for a person, "
            f'like ["name", "noc"]; it is {_shown(describe)}'
        )
    unknown = args.choice("unknown", LOOKUP_UNKNOWN, "hold")
    return Lookup(
        args.path("path"),
        kind,
        args.text("to"),
        tuple(describe),
        unknown,
    )


def _default(args: _Args) -> Step:
    args.only("field", "value")
    value = args.value("value")
    if value is None:
        raise args.fail("'value' is null, so the step would change nothing; give a value")
    return Default(args.text("field"), value)


def _skip_if(args: _Args) -> Step:
    args.only("path", "field", "equals", "in", "missing", "reason")
    if args.has("path") == args.has("field"):
        raise args.fail(
            "give exactly one of 'path' (a value in the row as sent) or 'field' "
            "(an output field an earlier step wrote)"
        )
    on: Literal["path", "field"] = "path" if args.has("path") else "field"
    name = args.path("path") if on == "path" else args.text("field")
    tests = [test for test in ("equals", "in", "missing") if args.has(test)]
    if len(tests) != 1:
        raise args.fail(
            "give exactly one test: 'equals' (a value), 'in' (a list of values) or 'missing' (true)"
        )
    reason = args.text("reason") if args.has("reason") else ""
    if tests[0] == "missing":
        if args.raw["missing"] is not True:
            raise args.fail("'missing' can only be true: skip the row when the value is absent")
        return SkipIf(name, on, "missing", None, reason)
    if tests[0] == "in":
        values = args.raw["in"]
        if not isinstance(values, list) or not values:
            raise args.fail(f"'in' must be a list of values to skip, not {_shown(values)}")
        return SkipIf(name, on, "in", tuple(values), reason)
    return SkipIf(name, on, "equals", args.raw["equals"], reason)


def _template(args: _Args) -> Step:
    args.only("to", "template")
    template = args.value("template")
    if not isinstance(template, str) or not template:
        raise args.fail(f"'template' must be {_HINTS['template']}")
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as exc:
        raise args.fail(
            f"'template' {template!r} has braces that do not pair ({exc}); "
            "write {name} for a field and {{ or }} for a brace itself"
        ) from None
    parts: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (not _is_path(name) or spec or conversion):
            raise args.fail(
                f"'template' {template!r} has {{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}}; write plain names like {{event}}"
            )
        parts.append((literal, name))
    if all(name is None for _, name in parts):
        raise args.fail(f"'template' {template!r} names no field; use 'set' for a fixed text")
    return Template(args.text("to"), template, tuple(parts))


def _integer(args: _Args) -> Step:
    args.only("field")
    return Integer(args.text("field"))


def _set(args: _Args) -> Step:
    args.only("to", "value")
    return SetValue(args.text("to"), args.value("value"))


def _each(args: _Args) -> Step:
    args.only("path", "to", "steps")
    steps = _parse_steps(args.value("steps"), f"{args.where} ({args.op})")
    return Each(args.path("path"), args.text("to"), steps)


_OPS: dict[str, Callable[[_Args], Step]] = {
    "read": _read,
    "rename": _rename,
    "map": _map,
    "local_time": _local_time,
    "lookup": _lookup,
    "default": _default,
    "skip_if": _skip_if,
    "template": _template,
    "integer": _integer,
    "set": _set,
    "each": _each,
}
OPS = tuple(_OPS)


def _parse_steps(raw: Any, outer: str) -> tuple[Step, ...]:
    owner = outer or "the mapping"
    if not isinstance(raw, list) or not raw:
        raise MappingSpecError(
            f"{owner} needs 'steps': a list of at least one step, like "
            f'[{{"op": "read", "path": "externalId", "to": "id"}}]; it is {_shown(raw)}'
        )
    steps: list[Step] = []
    for number, item in enumerate(raw, start=1):
        where = f"{outer}, inner step {number}" if outer else f"step {number}"
        if not isinstance(item, Mapping):
            raise MappingSpecError(
                f'{where} must be an object like {{"op": "read", ...}}, not {_json_kind(item)}'
            )
        op = item.get("op")
        if op is None:
            raise MappingSpecError(f"{where} has no 'op'; say which it is: {', '.join(OPS)}")
        parse = _OPS.get(op) if isinstance(op, str) else None
        if parse is None:
            raise MappingSpecError(
                f"{where} has op {_shown(op)}, which we do not know; the ops are {', '.join(OPS)}"
            )
        steps.append(parse(_Args(item, where, op)))
    return tuple(steps)


__all__ = [
    "DEFAULT_KEY_FIELDS",
    "LOOKUP_KINDS",
    "OPS",
    "TARGETS",
    "Default",
    "Each",
    "Integer",
    "LocalTime",
    "Lookup",
    "MapValues",
    "MappedRow",
    "MappingContext",
    "MappingSpecError",
    "MappingVersion",
    "Read",
    "Rename",
    "SetValue",
    "SkipIf",
    "Step",
    "Template",
    "load_default",
    "read_path",
    "row_hash",
]
