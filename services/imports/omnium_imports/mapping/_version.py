"""A mapping version: its ops by name, its JSON checked once, and every row given an outcome."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, TypeAlias

from omnium_imports.mapping._fields import Default, Integer, Read, Rename, SetValue, Template
from omnium_imports.mapping._flow import Each, SkipIf
from omnium_imports.mapping._paths import (
    MISSING,
    SplitPath,
    is_path,
    json_kind,
    row_hash,
    shown,
    split,
    walk,
)
from omnium_imports.mapping._step import (
    Apply,
    Frame,
    MappingContext,
    MappingSpecError,
    Problem,
    RowState,
    RunShared,
    Skip,
    Step,
    parse_steps,
)
from omnium_imports.mapping._translate import LocalTime, Lookup, MapValues

Target: TypeAlias = Literal["unit", "medal_row"]
Outcome: TypeAlias = Literal["ok", "problem", "held", "skipped"]

Absent: TypeAlias = Literal["keep", "clear"]

TARGETS: tuple[Target, ...] = ("unit", "medal_row")
ABSENT: tuple[Absent, ...] = ("keep", "clear")
DEFAULT_KEY_FIELDS = ("externalId",)
DEFAULT_SOURCE = "Scout"

_NOUNS: dict[Target, str] = {"unit": "unit", "medal_row": "medal row"}

# Every op by its name, in the order the ops are listed to a person.
_OPS: dict[str, type[Step]] = {
    step.op: step
    for step in (
        Read,
        Rename,
        MapValues,
        LocalTime,
        Lookup,
        Default,
        SkipIf,
        Template,
        Integer,
        SetValue,
        Each,
    )
}
OPS = tuple(_OPS)


@dataclass(frozen=True)
class MappedRow:
    """One row of a run after mapping. `reason` is empty for ok rows."""

    position: int  # the row's offset in the run's items
    key: str | None
    hash: bytes
    value: dict[str, Any]
    outcome: Outcome
    reason: str


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
    _key_paths: tuple[tuple[str, SplitPath], ...] = field(init=False, repr=False, compare=False)
    _applies: tuple[Apply, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = tuple((name, split(name)) for name in self.key_fields)
        object.__setattr__(self, "_key_paths", keys)
        object.__setattr__(self, "_applies", tuple(step.apply for step in self.steps))

    @property
    def owned(self) -> frozenset[str]:
        """The output fields this mapping answers for: `owns`, else all its steps write."""
        return self.owns if self.owns is not None else written(self.steps)

    @classmethod
    def parse(cls, obj: object) -> MappingVersion:
        """Check a mapping version's JSON; raises MappingSpecError saying what to fix."""
        if not isinstance(obj, Mapping):
            raise MappingSpecError(
                f"a mapping is an object with target and steps, not {json_kind(obj)}"
            )
        allowed = ("target", "key_fields", "source", "steps", "owns", "absent")
        unknown = [name for name in obj if name not in allowed]
        if unknown:
            raise MappingSpecError(
                f"the mapping has {shown(unknown[0])}, which it does not know; "
                f"it takes {', '.join(allowed)}"
            )
        target = obj.get("target")
        if target not in TARGETS:
            raise MappingSpecError(
                f"the mapping's target must be {' or '.join(TARGETS)}, not {shown(target)}"
            )
        key_fields = obj.get("key_fields", list(DEFAULT_KEY_FIELDS))
        if (
            not isinstance(key_fields, list)
            or not key_fields
            or not all(isinstance(f, str) and is_path(f) for f in key_fields)
        ):
            raise MappingSpecError(
                "the mapping's key_fields must be a list of paths in the row, like "
                f'["externalId"], not {shown(key_fields)}'
            )
        source = obj.get("source", DEFAULT_SOURCE)
        if not isinstance(source, str) or not source.strip():
            raise MappingSpecError(
                f'the mapping\'s source names where rows come from, like "Scout"; '
                f"it is {shown(source)}"
            )
        steps = parse_steps(obj.get("steps"), "", _OPS)
        absent = obj.get("absent", "keep")
        if absent not in ABSENT:
            raise MappingSpecError(
                f"the mapping's absent says what a field the row leaves out means: "
                f'"keep" (not compared) or "clear" (cleared like a null), not {shown(absent)}'
            )
        return cls(
            target=target,
            key_fields=tuple(key_fields),
            steps=steps,
            source=source.strip(),
            owns=_owns(obj["owns"], steps) if "owns" in obj else None,
            absent=absent,
        )

    def key_of(self, row: object) -> str | None:
        """The row's key from Scout's row; None when a key field is missing, empty or not an id."""
        key, _ = self._key(row)
        return key

    def _key(self, row: object) -> tuple[str | None, str | None]:
        """The row's key, or None and what is wrong with it."""
        parts: list[str] = []
        for name, path in self._key_paths:
            part = walk(row, path)
            if part is MISSING or part is None or part == "":
                return None, f"the row has no {name}"
            if type(part) is not str and (
                isinstance(part, bool) or not isinstance(part, str | int)
            ):
                return None, f"the row's {name} is {json_kind(part)}, not an id"
            parts.append(str(part))
        return ":".join(parts), None

    def map_row(self, position: int, row: object, context: MappingContext) -> MappedRow:
        """Map one row. Never raises: a bad row comes back as a problem with the reason."""
        return self._map_row_safely(position, row, RunShared(context, self.source))

    def _map_row_safely(self, position: int, row: object, run: RunShared) -> MappedRow:
        try:
            return self._map_row(position, row, run)
        except Exception as exc:
            # One odd row must not stop a run of a thousand: it shows as a problem instead.
            return _answer(position, None, {}, "problem", _fault(exc))

    def _map_row(self, position: int, row: object, run: RunShared) -> MappedRow:
        if type(row) is not dict and not isinstance(row, Mapping):
            return _answer(
                position,
                None,
                {},
                "problem",
                f"row {position} is {json_kind(row)}, not an object; "
                f"{self.source} sent something that is not a row",
            )
        key, key_problem = self._key(row)
        label = key if key is not None else f"row {position}"
        state = RowState(run, _NOUNS[self.target], label, key, [])
        frame = Frame(row, {}, state)
        problem: str | None = None
        try:
            for apply in self._applies:
                apply(frame)
        except Skip as skip:
            # A skip wins over a missing key, so a skip_if can set aside rows that have none.
            return _answer(position, key, frame.out, "skipped", skip.reason)
        except Problem as exc:
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
        return self.mapper(context)(rows, 0)

    def mapper(self, context: MappingContext) -> Callable[[Sequence[Any], int], list[MappedRow]]:
        """map_rows a part at a time: each call maps rows that start at that position."""
        run = RunShared(context, self.source)

        def map_part(rows: Sequence[Any], start: int) -> list[MappedRow]:
            return [self._map_row_safely(start + i, row, run) for i, row in enumerate(rows)]

        return map_part


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


def _owns(raw: object, steps: tuple[Step, ...]) -> frozenset[str]:
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        raise MappingSpecError(
            'the mapping\'s owns lists the fields it answers for, like ["venue", "sides.medal"], '
            f"not {shown(raw)}"
        )
    writes = written(steps)
    for name in raw:
        if name not in writes:
            raise MappingSpecError(
                f"the mapping owns {shown(name)}, but no step writes it; its steps write "
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
    folder = resources.files("omnium_imports").joinpath("mappings")
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
