"""What a person knows a row by: the unit's name, its discipline and sides, and its fields in
words ("Japan score", "side 2 score"), not Scout's keys (`SC-000006`) or `sides[2].score`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg

from omnium_admin._sql import QUERIES

_SIDE_FIELD = re.compile(r"^sides\[([0-9]+)\]\.([a-z_]+)$")
FIELD_WORDS = {
    "start_at": "start time",
    "competitor_id": "competitor",
    "sort_order": "order",
    "noc": "NOC",
}


def field_words(field: str, sides: list[str] | None = None) -> str:
    """`sides[2].score` → "Korea score" when side 2 is Korea, else "side 2 score"."""
    side = _SIDE_FIELD.match(field)
    if side is None:
        return FIELD_WORDS.get(field, field.replace("_", " "))
    order, name = int(side[1]), FIELD_WORDS.get(side[2], side[2].replace("_", " "))
    team = sides[order - 1] if sides and 0 < order <= len(sides) else ""
    return f"{team} {name}" if team else f"side {order} {name}"


def unit_words(unit: Mapping[str, Any]) -> dict[str, Any]:
    """A unit as a row names it: its page, name, discipline, sides and start."""
    sides = [s for s in unit["sides"] if s]
    return {
        "id": unit["id"],
        "code": unit["code"],
        "name": unit["name"],
        "discipline": unit["discipline"],
        "sides": list(unit["sides"]),
        "teams": " v ".join(sides),
        "start_at": unit["start_at"],
    }


async def units_for(
    reader: asyncpg.Pool, integration: str, keys: Iterable[str], unit_ids: Iterable[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The units an integration's rows name: (by Scout's key, by our id)."""
    found = await reader.fetch(
        *QUERIES.bind(
            "units_named",
            integration=integration,
            keys=sorted(set(keys)),
            unit_ids=sorted(set(unit_ids)),
        )
    )
    by_key, by_id = {}, {}
    for row in found:
        unit = unit_words(row)
        by_id[unit["id"]] = unit
        if row["key"]:
            by_key[row["key"]] = unit
    return by_key, by_id


def name_rows(
    rows: list[dict[str, Any]],
    by_key: Mapping[str, dict[str, Any]],
    by_id: Mapping[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each row with its unit (or None) and each change's field in words."""
    for row in rows:
        unit = by_id.get(row["unit_id"]) or by_key.get(row["key"])
        row["unit"] = unit
        sides = unit["sides"] if unit else None
        for change in (*row["changes"], *row["kept"]):
            change["words"] = field_words(change["field"], sides)
    return rows


async def name_items(reader: asyncpg.Pool, items: list[dict[str, Any]]) -> None:
    """Waiting items named by their unit, and each lookup form's example of our codes."""
    for integration in sorted({i["integration"] for i in items}):
        mine = [i for i in items if i["integration"] == integration]
        by_key, _ = await units_for(reader, integration, [i["key"] for i in mine], [])
        examples: dict[str, str] = {}
        for item in mine:
            item["unit"] = by_key.get(item["key"]) if item["kind"] != "guard" else None
            kind = item["lookup_kind"]
            if item["lookup"] and kind not in examples:
                examples[kind] = await reader.fetchval(QUERIES["example_code"], integration, kind)
            item["example"] = examples.get(kind) or ""
