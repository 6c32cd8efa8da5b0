"""What every step shares: the row it works on, how it fails, and how its arguments are read."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from omnium_imports.mapping._paths import MISSING, SplitPath, is_path, json_kind, shown, walk

LOOKUP_KINDS = ("competitor", "unit")


class MappingSpecError(ValueError):
    """A mapping version that cannot be used; the message names the step and what to fix."""


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


# -- mapping one row --------------------------------------------------------------------------


class Problem(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Skip(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RunShared:
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
class RowState:
    run: RunShared
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
class Frame:
    """Steps work on one input object and one output dict: the row, or an element inside each."""

    source: Mapping[str, object]
    out: dict[str, Any]
    row: RowState
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

    def read(self, path: SplitPath) -> Any:
        return walk(self.source, path)

    def output(self, name: str) -> Any:
        return self.out.get(name, MISSING)


# -- the step ---------------------------------------------------------------------------------


class Step(ABC):
    """One op, defined once: `parse` checks its JSON, `apply` does it to a row.

    `apply` changes the frame's output, or raises Problem or Skip.
    """

    __slots__ = ()

    op: ClassVar[str]  # the op's name in a mapping version's JSON

    @classmethod
    @abstractmethod
    def parse(cls, args: Args) -> Step: ...

    @abstractmethod
    def apply(self, frame: Frame) -> None: ...


# A step's apply, bound once when the steps are parsed rather than looked up on every row.
Apply: TypeAlias = Callable[[Frame], None]


# -- checking steps ---------------------------------------------------------------------------


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


def hint(name: str) -> str:
    return _HINTS[name]


_Choice = TypeVar("_Choice", bound=str)


class Args:
    """One step's arguments, read with messages that name the step.

    `ops` is every step by its op name, for the steps nested in this one.
    """

    def __init__(
        self, raw: Mapping[str, object], where: str, op: str, ops: Mapping[str, type[Step]]
    ) -> None:
        self.raw = raw
        self.where = where
        self.op = op
        self.ops = ops

    def fail(self, message: str) -> MappingSpecError:
        return MappingSpecError(f"{self.where} ({self.op}): {message}")

    def only(self, *names: str) -> None:
        for name in self.raw:
            if name != "op" and name not in names:
                raise self.fail(
                    f"it does not take {shown(name)}; {self.op} takes {', '.join(names)}"
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
                f"it is {json_kind(value)} ({shown(value)})"
            )
        return value.strip()

    def path(self, name: str) -> str:
        text = self.text(name)
        if not is_path(text):
            raise self.fail(f"{name!r} {text!r} has an empty part; {_HINTS['path']}")
        return text

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(f"{name!r} must be true or false, not {shown(value)}")
        return value

    def choice(self, name: str, choices: tuple[_Choice, ...], default: _Choice) -> _Choice:
        value = self.raw.get(name, default)
        for choice in choices:
            if value == choice:
                return choice
        raise self.fail(
            f"{name!r} must be {' or '.join(repr(c) for c in choices)}, not {shown(value)}"
        )

    def steps(self, name: str) -> tuple[Step, ...]:
        """Nested steps, checked as the mapping's own are; messages name this step first."""
        return parse_steps(self.value(name), f"{self.where} ({self.op})", self.ops)


def parse_steps(raw: object, outer: str, ops: Mapping[str, type[Step]]) -> tuple[Step, ...]:
    owner = outer or "the mapping"
    if not isinstance(raw, list) or not raw:
        raise MappingSpecError(
            f"{owner} needs 'steps': a list of at least one step, like "
            f'[{{"op": "read", "path": "externalId", "to": "id"}}]; it is {shown(raw)}'
        )
    steps: list[Step] = []
    for number, item in enumerate(raw, start=1):
        where = f"{outer}, inner step {number}" if outer else f"step {number}"
        if not isinstance(item, Mapping):
            raise MappingSpecError(
                f'{where} must be an object like {{"op": "read", ...}}, not {json_kind(item)}'
            )
        op = item.get("op")
        if op is None:
            raise MappingSpecError(f"{where} has no 'op'; say which it is: {', '.join(ops)}")
        step = ops.get(op) if isinstance(op, str) else None
        if step is None:
            raise MappingSpecError(
                f"{where} has op {shown(op)}, which we do not know; the ops are {', '.join(ops)}"
            )
        steps.append(step.parse(Args(item, where, op, ops)))
    return tuple(steps)
