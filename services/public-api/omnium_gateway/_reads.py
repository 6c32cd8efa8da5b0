"""The public API's database reads: each answers one JSON body and how fast its data changes."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import asyncpg

from omnium_gateway._sql import QUERIES

# How fast a response's data changes, which sets how long it is cached (settings cache_ttl_*).
LIVE = "live"
SCHEDULED = "scheduled"
FINAL = "final"
REFERENCE = "reference"
LEADERBOARD = "leaderboard"
NEGATIVE = "negative"
TTL_CLASSES = (LIVE, SCHEDULED, FINAL, REFERENCE, LEADERBOARD, NEGATIVE)

# A unit in one of these can change any second; a final one is not expected to change again.
LIVE_STATUSES = frozenset({"GETTING_READY", "RUNNING", "INTERRUPTED", "UNOFFICIAL", "PROTESTED"})
FINAL_STATUSES = frozenset({"OFFICIAL", "CANCELLED"})


@dataclass(frozen=True, slots=True)
class Loaded:
    """One read's answer: HTTP status, the JSON body, and its TTL class."""

    status: int
    body: bytes
    ttl_class: str


def error_body(message: str, **extra: str) -> bytes:
    return json.dumps({"error": message, **extra}).encode()


def not_found(message: str) -> Loaded:
    return Loaded(404, error_body(message), NEGATIVE)


def state_of(statuses: list[str] | None) -> str:
    """The TTL class of a list of units: live if any is live, final if all are final."""
    if not statuses:
        return SCHEDULED
    if any(s in LIVE_STATUSES for s in statuses):
        return LIVE
    if all(s in FINAL_STATUSES for s in statuses):
        return FINAL
    return SCHEDULED


def _q(value: str) -> str:
    return json.dumps(value)


async def read_events(conn: asyncpg.Connection) -> Loaded:
    items = await conn.fetchval(QUERIES["events"])
    return Loaded(200, f'{{"events":{items}}}'.encode(), REFERENCE)


async def read_disciplines(conn: asyncpg.Connection, event: str) -> Loaded:
    row = await conn.fetchrow(QUERIES["disciplines"], event)
    if row is None:
        return not_found(f"There is no event {event}.")
    return Loaded(200, f'{{"event":{_q(event)},"disciplines":{row["items"]}}}'.encode(), REFERENCE)


async def read_schedule(
    conn: asyncpg.Connection,
    event: str,
    day: dt.date | None,
    discipline: str | None,
    status: str | None,
    held: tuple[str, ...] = (),
) -> Loaded:
    """`held`: the disciplines the checker holds by setting (clients' checkers are read too)."""
    row = await conn.fetchrow(
        *QUERIES.bind(
            "schedule",
            event=event,
            day=day,
            discipline=discipline,
            status=status,
            held=list(held),
        )
    )
    if row is None:
        return not_found(f"There is no event {event}.")
    if not row["found_discipline"]:
        return not_found(f"There is no discipline {discipline} in {event}.")
    filters = json.dumps(
        {"date": day.isoformat() if day else None, "discipline": discipline, "status": status}
    )
    body = f'{{"event":{_q(event)},"filters":{filters},"units":{row["items"]}}}'
    return Loaded(200, body.encode(), state_of(row["statuses"]))


async def read_unit(
    conn: asyncpg.Connection, event: str, unit_code: str, held: tuple[str, ...] = ()
) -> Loaded:
    row = await conn.fetchrow(
        *QUERIES.bind("unit", event=event, unit_code=unit_code, held=list(held))
    )
    if row is None:
        return not_found(f"There is no unit {unit_code} in event {event}.")
    return Loaded(200, row["body"].encode(), state_of([row["status"]]))


#: Why a held medal table has no rows, for the people reading it.
MEDALS_HELD = (
    "A result that decides medals is waiting for a person's approval; the table shows again "
    "once it is approved."
)


async def read_medals(
    conn: asyncpg.Connection, event: str, top: int | None, held: tuple[str, ...] = ()
) -> Loaded:
    """`held`: the disciplines the checker holds by setting (clients' checkers are read too)."""
    row = await conn.fetchrow(*QUERIES.bind("medals", event=event, top=top, held=list(held)))
    if row is None:
        return not_found(f"There is no event {event}.")
    note = f',"note":{_q(MEDALS_HELD)}' if row["held"] else ""
    body = (
        f'{{"event":{_q(event)},"top":{json.dumps(top)},"held":{json.dumps(row["held"])}'
        f'{note},"rows":{row["items"]}}}'
    )
    return Loaded(200, body.encode(), LEADERBOARD)
