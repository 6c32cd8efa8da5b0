"""A small Games to test against: one event, two disciplines, competitors and units."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg

EVENT = "AG2026"


def unit_code(discipline: str, n: int) -> str:
    """An ODF-shaped code: discipline (3) + gender (1) + event (18) + phase (4) + unit (8)."""
    return f"{discipline}M{'EVENT':-<18}{'FNL-':<4}{n:0>8}"[:34].ljust(34, "-")


@dataclass(slots=True)
class Games:
    event_id: str
    disciplines: dict[str, str]
    competitors: dict[str, str] = field(default_factory=dict)  # code -> id
    units: list[str] = field(default_factory=list)  # ids, in creation order
    unit_codes: dict[str, str] = field(default_factory=dict)  # id -> code


async def make_games(conn: asyncpg.Connection, *, units: int = 10) -> Games:
    """Reference data is set up with SQL here; match data changes only through the road."""
    event_id = await conn.fetchval(
        "INSERT INTO event (code, name, time_zone) VALUES ($1, 'Test Games', 'Asia/Tokyo') "
        "RETURNING id::text",
        EVENT,
    )
    disciplines = {}
    for code, name in (("FBL", "Football"), ("ATH", "Athletics")):
        disciplines[code] = await conn.fetchval(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, $2, $3) RETURNING id::text",
            event_id,
            code,
            name,
        )
    games = Games(event_id, disciplines)
    for noc in ("KOR", "JPN", "CHN", "IND"):
        games.competitors[noc] = await conn.fetchval(
            "INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc) "
            "VALUES ($1, $2, 'team', $3, $4, $5) RETURNING id::text",
            event_id,
            disciplines["FBL"],
            f"FBL-{noc}",
            f"{noc} football",
            noc,
        )
    start = datetime(2026, 9, 20, 1, 0, tzinfo=UTC)
    for n in range(units):
        code = unit_code("FBL", n + 1)
        unit_id = await conn.fetchval(
            "INSERT INTO unit (event_id, discipline_id, code, name, phase, start_at, venue) "
            "VALUES ($1, $2, $3, $4, 'Group A', $5, 'Nagoya Stadium') RETURNING id::text",
            event_id,
            disciplines["FBL"],
            code,
            f"Match {n + 1}",
            start + timedelta(hours=n),
        )
        await conn.execute(
            "INSERT INTO unit_competitor (unit_id, sort_order, competitor_id) "
            "VALUES ($1, 1, $2), ($1, 2, $3)",
            unit_id,
            games.competitors["KOR"],
            games.competitors["JPN"],
        )
        games.units.append(unit_id)
        games.unit_codes[unit_id] = code
    return games


async def make_event(database_url: str, code: str, unit_codes: Sequence[str] = ()) -> None:
    """A Games of that code with these units (in one discipline) and nothing else: what the
    live routes look up before they stream, for a test that publishes to the stream itself."""
    conn = await asyncpg.connect(database_url)
    try:
        event_id = await conn.fetchval(
            "INSERT INTO event (code, name) VALUES ($1, 'Live Games') RETURNING id", code
        )
        discipline_id = await conn.fetchval(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, 'ATH', 'Athletics') "
            "RETURNING id",
            event_id,
        )
        await conn.executemany(
            "INSERT INTO unit (event_id, discipline_id, code, name) VALUES ($1, $2, $3, $3)",
            [(event_id, discipline_id, unit) for unit in unit_codes],
        )
    finally:
        await conn.close()


async def make_run(conn: asyncpg.Connection, games: Games, code: str = "scout-fbl") -> str:
    """An integration (once) and a new run of it, status received."""
    integration_id = await conn.fetchval("SELECT id FROM integration WHERE code = $1", code)
    if integration_id is None:
        integration_id = await conn.fetchval(
            "INSERT INTO integration (code, event_id, name) VALUES ($1, $2, 'Scout football') "
            "RETURNING id",
            code,
            games.event_id,
        )
    run_id: str = await conn.fetchval(
        "INSERT INTO integration_run (integration_id, scout_run_id, status, scout_status, build) "
        "VALUES ($1, $2, 'received', 'passed', 'all') RETURNING id::text",
        integration_id,
        uuid.uuid4().hex,
    )
    return run_id
