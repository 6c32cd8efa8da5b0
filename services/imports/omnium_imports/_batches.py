"""Mapped rows to the command service's import batches: ≤25 units, sorted by our id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from omnium.command.v1 import command_pb2
from omnium_imports.mapping import MappedRow, MappingVersion

T = TypeVar("T")

_UNIT_FIELDS = ("name", "phase", "start_at", "venue", "status", "discipline_code")
_SIDE_FIELDS = ("competitor_id", "score", "result", "rank", "medal")
_MEDAL_FIELDS = ("gold", "silver", "bronze", "total", "rank")
# What an import may clear: a unit's name and status are never nothing.
CLEARABLE_UNIT = ("phase", "start_at", "venue")
CLEARABLE_SIDE = _SIDE_FIELDS
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class Clearing:
    """Which fields a null (or, if the mapping says so, a left-out field) clears in our data:
    the clearable fields the integration's mapping owns. The seed's diff is "site values −
    current values − pinned fields", so a value the site no longer has is a difference."""

    unit: tuple[str, ...] = ()
    side: tuple[str, ...] = ()
    absent: bool = False

    @classmethod
    def of(cls, version: MappingVersion) -> Clearing:
        owned = version.owned
        return cls(
            unit=tuple(name for name in CLEARABLE_UNIT if name in owned),
            side=tuple(name for name in CLEARABLE_SIDE if f"sides.{name}" in owned),
            absent=version.absent == "clear",
        )

    def unit_fields(self, value: Mapping[str, object]) -> list[str]:
        return self._fields(self.unit, value)

    def side_fields(self, side: Mapping[str, object]) -> list[str]:
        return self._fields(self.side, side)

    def _fields(self, names: tuple[str, ...], value: Mapping[str, object]) -> list[str]:
        cleared = []
        for name in names:
            given = value.get(name, _ABSENT)
            if given is None or (given is _ABSENT and self.absent):
                cleared.append(name)
        return cleared


def unit_row(row: MappedRow, unit_id: str | None, clearing: Clearing) -> command_pb2.BatchRow:
    """A unit row: placed on our id when we know it, else by its code. An owned field that
    maps to nothing is sent as cleared; other nulls are not said (see Clearing)."""
    value = row.value
    values = command_pb2.UnitValues()
    for name in _UNIT_FIELDS:
        if value.get(name) is not None:
            setattr(values, name, _text(value[name]))
    if clearing.unit:
        values.clear.extend(clearing.unit_fields(value))
    for side in value.get("sides") or ():
        added = values.sides.add(order=int(side["order"]))
        for name in _SIDE_FIELDS:
            if side.get(name) is not None:
                setattr(added, name, int(side[name]) if name == "rank" else _text(side[name]))
        if clearing.side:
            added.clear.extend(clearing.side_fields(side))
    subject = command_pb2.Subject(kind="unit", id=unit_id or "", code=value.get("code") or "")
    if unit_id:
        subject.code = ""
    return command_pb2.BatchRow(
        position=row.position, key=row.key or "", hash=row.hash, subject=subject, unit=values
    )


def medal_row(row: MappedRow, scope: str) -> command_pb2.BatchRow:
    value = row.value
    values = command_pb2.MedalRowValues(
        noc=str(value.get("noc") or ""),
        **{name: int(value[name]) for name in _MEDAL_FIELDS if value.get(name) is not None},
    )
    return command_pb2.BatchRow(
        position=row.position,
        key=row.key or "",
        hash=row.hash,
        subject=command_pb2.Subject(kind="medal_row", code=scope),
        medal_row=values,
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def ordered(
    rows: Sequence[MappedRow], target: str, unit_ids: Mapping[str, str]
) -> list[tuple[MappedRow, str | None]]:
    """Rows sorted by our id, so every writer locks in one order, each with that id.

    Units we do not have yet (a schedule creating them) come last, sorted by code.
    """
    if target == "medal_row":
        return [(row, None) for row in sorted(rows, key=lambda r: str(r.value.get("noc")))]
    placed: list[tuple[str, MappedRow, str | None]] = []
    for row in rows:
        unit_id = row.value.get("unit_id") or unit_ids.get(str(row.value.get("code")))
        sort_key = "0" + unit_id if unit_id else "1" + str(row.value.get("code"))
        placed.append((sort_key, row, unit_id or None))
    placed.sort(key=lambda item: item[0])
    return [(row, unit_id) for _, row, unit_id in placed]


def batch_row(
    row: MappedRow, target: str, unit_id: str | None, clearing: Clearing
) -> command_pb2.BatchRow:
    if target == "medal_row":
        return medal_row(row, str(row.value.get("scope") or ""))
    return unit_row(row, unit_id, clearing)


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]
