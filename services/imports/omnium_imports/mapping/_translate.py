"""The steps that translate a value with what the row does not hold: a table, the zone, our ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from omnium_imports.mapping._paths import (
    HASH_JSON,
    MISSING,
    SplitPath,
    is_path,
    json_kind,
    own,
    shown,
    split,
    walk,
)
from omnium_imports.mapping._step import LOOKUP_KINDS, Args, Frame, Problem, Step, hint

MapUnknown: TypeAlias = Literal["keep", "use", "problem"]
MAP_UNKNOWN: tuple[MapUnknown, ...] = ("keep", "use", "problem")
# How a text is matched to the table's keys: "exact" (the default, as versions made before
# "case" had), or "any": "Scheduled", "scheduled" and "SCHEDULED" are one key.
MapCase: TypeAlias = Literal["exact", "any"]
MAP_CASES: tuple[MapCase, ...] = ("exact", "any")


def _table_key(value: object) -> str:
    # JSON tables have text keys only, so other values are looked up by their JSON text (1 -> "1").
    return value if isinstance(value, str) else HASH_JSON.encode(value)


@dataclass(frozen=True, slots=True)
class MapValues(Step):
    op = "map"
    field: str
    table: Mapping[str, object]
    unknown: MapUnknown = "problem"
    value: Any = None  # used for values not in the table when unknown is "use"
    case: MapCase = "exact"
    # With case "any": the table by its keys casefolded, built once (parse refuses two keys
    # that fold alike but mean different things).
    _folded: Mapping[str, object] | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        folded = {key.casefold(): ours for key, ours in self.table.items()}
        object.__setattr__(self, "_folded", folded if self.case == "any" else None)

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("field", "table", "unknown", "value", "case")
        table = args.value("table")
        if not isinstance(table, Mapping) or not table:
            raise args.fail(f"'table' must be {hint('table')}; it is {json_kind(table)}")
        if not all(isinstance(k, str) for k in table):
            raise args.fail("'table' keys must be texts, as in JSON")
        unknown = args.choice("unknown", MAP_UNKNOWN, "problem")
        if unknown == "use" and not args.has("value"):
            raise args.fail(
                "with unknown 'use' it needs 'value': what values not in the table become"
            )
        if unknown != "use" and args.has("value"):
            raise args.fail(
                "'value' goes only with unknown 'use'; say unknown 'use', or drop value"
            )
        case = args.choice("case", MAP_CASES, "exact")
        if case == "any":
            seen: dict[str, str] = {}
            for key, ours in table.items():
                other = seen.setdefault(key.casefold(), key)
                if other != key and table[other] != ours:
                    raise args.fail(
                        f"with case 'any' the keys {other!r} and {key!r} are one, but the table "
                        f"gives {shown(table[other])} and {shown(ours)}; keep one of them"
                    )
        return cls(args.text("field"), dict(table), unknown, args.raw.get("value"), case)

    def apply(self, frame: Frame) -> None:
        current = frame.out.get(self.field)
        # Null means "none yet" (no medal, no rank), not a value to translate.
        if current is None:
            return
        key = current if type(current) is str else _table_key(current)
        folded = self._folded
        if folded is None:
            ours = self.table.get(key, MISSING)
        else:
            ours = folded.get(key.casefold(), MISSING)
        if ours is not MISSING:
            frame.out[self.field] = own(ours)
        elif self.unknown == "use":
            frame.out[self.field] = own(self.value)
        elif self.unknown == "problem":
            known = ", ".join(sorted(self.table))
            if folded is not None:
                known += ", in any case"
            raise Problem(
                f"{frame.at()}{self.field} {shown(current)} is not in the mapping's table "
                f"(it knows {known}); add it to the table, or ask "
                f"{frame.row.source_name} what it means"
            )


@dataclass(frozen=True, slots=True)
class LocalTime(Step):
    op = "local_time"
    field: str

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("field")
        return cls(args.text("field"))

    def apply(self, frame: Frame) -> None:
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
            raise Problem(
                f"{frame.at()}{self.field} is {json_kind(current)} ({shown(current)}), "
                f"not a time {example}"
            )
        if len(text) <= 10:
            raise Problem(
                f"{frame.at()}{self.field} {shown(current)} has no time of day; "
                f"a start needs one, {example}"
            )
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise Problem(
                f"{frame.at()}{self.field} {shown(current)} is not a time {example}; "
                f"check what {frame.row.source_name} shows for it"
            ) from None
        if moment.tzinfo is None:
            zone = frame.row.run.zone()
            moment = moment.replace(tzinfo=zone)
            # A wall-clock time skipped when the clocks go forward comes back different.
            if moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != moment.replace(
                tzinfo=None
            ):
                raise Problem(
                    f"{frame.at()}{self.field} {shown(current)} does not exist in "
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
    op = "lookup"
    path: str
    kind: str
    to: str
    describe: tuple[str, ...] = ()
    unknown: LookupUnknown = "hold"
    _path: SplitPath = dataclasses.field(init=False, repr=False, compare=False)
    # a path of one part
    _name: str | None = dataclasses.field(init=False, repr=False, compare=False)
    _describe: tuple[SplitPath, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", split(self.path))
        object.__setattr__(self, "_name", self.path if len(self._path) == 1 else None)
        object.__setattr__(self, "_describe", tuple(split(path) for path in self.describe))

    @classmethod
    def parse(cls, args: Args) -> Step:
        args.only("path", "kind", "to", "describe", "unknown")
        kind = args.text("kind")
        if kind not in LOOKUP_KINDS:
            raise args.fail(
                f"'kind' {kind!r} is not one we look up; use {' or '.join(LOOKUP_KINDS)}"
            )
        describe = args.raw.get("describe", [])
        if not isinstance(describe, list) or not all(
            isinstance(p, str) and is_path(p) for p in describe
        ):
            raise args.fail(
                "'describe' must be a list of paths that name the thing for a person, "
                f'like ["name", "noc"]; it is {shown(describe)}'
            )
        unknown = args.choice("unknown", LOOKUP_UNKNOWN, "hold")
        return cls(args.path("path"), kind, args.text("to"), tuple(describe), unknown)

    def apply(self, frame: Frame) -> None:
        source = frame.source
        if self._name is not None and type(source) is dict:
            external = source.get(self._name, MISSING)
        else:
            external = walk(source, self._path)
        if type(external) is str and external:
            external_id = external
        elif external is MISSING or external is None or external == "":
            if self.unknown == "leave_out":
                frame.out.pop(self.to, None)
                return
            raise Problem(
                f"{frame.whose()} has no {self.path} to find the {self.kind} by; "
                f"ask {frame.row.source_name} to send it"
            )
        elif isinstance(external, bool) or not isinstance(external, str | int):
            raise Problem(
                f"{frame.at()}{self.path} is {json_kind(external)} ({shown(external)}), "
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

    def _question(self, frame: Frame, external_id: str) -> str:
        row = frame.row
        details = [
            str(value)
            for path in self._describe
            if (value := frame.read(path)) is not MISSING and value is not None and value != ""
        ]
        named = f"{self.kind} {external_id}" + (f" ({', '.join(details)})" if details else "")
        fix = f"we have no such {self.kind}. Add it, or map {external_id} to one we have."
        if not frame.where and external_id == row.key:
            return f"{row.source_name} sends {named}; {fix}"
        return f"{row.source_name} names {named} in {row.noun} {row.label}; {fix}"
