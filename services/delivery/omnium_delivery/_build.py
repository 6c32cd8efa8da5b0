"""Build a feed's document from the database: current data, or approved results (checker)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from omnium_delivery._documents import Document, competitor_ids, has_results, medal_row, unit_row
from omnium_delivery._sql import QUERIES
from omnium_settings import DeliverySettings


@dataclass(frozen=True, slots=True)
class FeedRow:
    """A due feed, as read by `due_feeds`."""

    id: int
    kind: str
    format: str
    discipline_id: str | None
    discipline: str | None
    top_n: int | None
    live: bool
    marks: int
    wanted_id: int
    force: bool
    version: int
    content_sha: str | None
    delivered_content_sha: str | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> FeedRow:
        return cls(**dict(row))

    def debounce(self, delivery: DeliverySettings) -> float:
        """The window a burst of writes to this feed is joined over."""
        return delivery.live_debounce_seconds if self.live else delivery.feed_debounce_seconds


def held_disciplines(
    client_settings: Mapping[str, Any], delivery: DeliverySettings
) -> frozenset[str] | None:
    """Disciplines whose results wait for a person for this client: its checker's
    and OMNIUM_CHECKER_DISCIPLINES; None: all of them."""
    checker = client_settings.get("checker", False)
    if checker is True:
        return None
    held = {d.upper() for d in delivery.checker_disciplines}
    if isinstance(checker, list):
        held.update(str(c).upper() for c in checker)
    return frozenset(held)


async def build(
    conn: asyncpg.Connection,
    *,
    event_id: str,
    event_code: str,
    feed: FeedRow,
    held: frozenset[str] | None,
) -> Document | None:
    """`held`: disciplines whose results wait for approval; None holds every discipline.

    None: the feed waits, sending nothing, as the public medal table does: a medal table while
    a unit the client's checker holds shows a medal no approval covers (a medal row does not
    say which unit's result it counts, so no table goes out that might rest on it)."""
    if feed.kind == "medals":
        if (held is None or held) and await conn.fetchval(
            *QUERIES.bind(
                "medals_held",
                event_id=event_id,
                discipline_id=feed.discipline_id,
                held_disciplines=sorted(held or ()),
                holds_every=held is None,
            )
        ):
            return None
        rows = await conn.fetch(
            *QUERIES.bind(
                "medal_rows",
                event_id=event_id,
                discipline_id=feed.discipline_id,
                at_most=feed.top_n or 10_000,
            )
        )
        return Document(
            "medals", event_code, feed.discipline, feed.top_n, [medal_row(r) for r in rows]
        )
    # A results feed reads only units with results, unless approved ones may stand in for them.
    only_results = feed.kind == "results" and held is not None and not held
    units = [
        dict(r)
        for r in await conn.fetch(
            *QUERIES.bind(
                "units",
                event_id=event_id,
                discipline_id=feed.discipline_id,
                only_results=only_results,
            )
        )
    ]
    if feed.kind == "results":
        units = await _results(conn, event_id, feed, units, held)
    # Approved results name their competitors by id only: look those up.
    missing = competitor_ids([u for u in units if any("name" not in s for s in u["sides"])])
    competitors: dict[str, dict[str, Any]] = {}
    if missing:
        rows = await conn.fetch(QUERIES["competitors"], missing)
        competitors = {r["id"]: dict(r) for r in rows}
    results = feed.kind == "results"
    lines = [unit_row(u, competitors, results=results) for u in units]
    return Document(feed.kind, event_code, feed.discipline, None, lines)


async def _results(
    conn: asyncpg.Connection,
    event_id: str,
    feed: FeedRow,
    units: list[dict[str, Any]],
    held: frozenset[str] | None,
) -> list[dict[str, Any]]:
    if held is not None and not held:
        return [u for u in units if has_results(u)]
    approved: dict[str, dict[str, Any]] = {}
    for row in await conn.fetch(QUERIES["approved_units"], event_id, feed.discipline_id):
        approved[row["unit_id"]] = row["payload"]["unit"]
    out = []
    for current in units:
        unit = current
        if held is None or current["discipline"] in held:
            # Held: what a person approved, never what was saved since.
            snapshot = approved.get(current["id"])
            if snapshot is None:
                continue
            unit = {**current, **snapshot}
        if has_results(unit):
            out.append(unit)
    return out
