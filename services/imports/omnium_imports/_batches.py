"""Mapped rows to the command service's import batches: ≤25 units, sorted by our id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omnium.command.v1 import command_pb2
from omnium_imports.mapping import MappedRow

_UNIT_FIELDS = ("name", "phase", "start_at", "venue", "status", "discipline_code")
_SIDE_FIELDS = ("competitor_id", "score", "result", "rank", "medal")
_MEDAL_FIELDS = ("gold", "silver", "bronze", "total", "rank")


def unit_row(row: MappedRow, unit_id: str | None) -> command_pb2.BatchRow:
    """A unit row: placed on our id when we know it, else by its code."""
    value = row.value
    # A null from Scout means "not said", never "clear it": clearing is a guard's business.
    values = command_pb2.UnitValues()
    for name in _UNIT_FIELDS:
        if value.get(name) is not None:
            setattr(values, name, _text(value[name]))
    for side in value.get("sides") or ():
        added = values.sides.add(order=int(side["order"]))
        for name in _SIDE_FIELDS:
            if side.get(name) is not None:
                setattr(added, name, int(side[name]) if name == "rank" else _text(side[name]))
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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def cut(
    rows: Sequence[MappedRow],
    target: str,
    unit_ids: Mapping[str, str],
    size: int,
) -> list[list[command_pb2.BatchRow]]:
    """Batches of at most `size` rows, sorted by our id so every writer locks in one order.

    Units we do not have yet (a schedule creating them) come last, sorted by code.
    """
    if target == "medal_row":
        ordered = sorted(rows, key=lambda r: str(r.value.get("noc")))
        batch_rows = [medal_row(row, str(row.value.get("scope") or "")) for row in ordered]
    else:
        placed: list[tuple[str, str, MappedRow]] = []
        for row in rows:
            unit_id = row.value.get("unit_id") or unit_ids.get(str(row.value.get("code")))
            placed.append(
                ("0" + unit_id if unit_id else "1" + str(row.value.get("code")), unit_id or "", row)
            )
        placed.sort(key=lambda item: item[0])
        batch_rows = [unit_row(row, unit_id or None) for _, unit_id, row in placed]
    return [batch_rows[start : start + size] for start in range(0, len(batch_rows), size)]
