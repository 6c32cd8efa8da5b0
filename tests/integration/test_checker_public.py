"""The checker step on the public ways out: while a discipline's or a client's
checker holds a unit's results, the public API and live push show its sides' results only as a
person approved them, as the client files do (tests/integration/test_delivery_feeds.py), so
fans never see what clients may not yet publish. Everything else about the unit goes out as
saved."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from omnium.command.v1 import command_pb2
from omnium_gateway._route_sets import LiveRoutes
from omnium_live import live_hub, stream_key
from tests.support.command import running_command
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, make_games
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.servers import Servers
from tests.support.sse import read_events, reading
from tests.support.waiting import eventually


@pytest.mark.parametrize("held_by", ["setting", "client"])
async def test_held_results_reach_the_public_api_and_live_push_only_once_approved(
    db: asyncpg.Connection, database_url: str, servers: Servers, held_by: str
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    code = games.unit_codes[unit]
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    await redis.aclose()
    options: dict[str, Any] = {}
    if held_by == "setting":
        options["checker_disciplines"] = ("fbl",)
    else:
        # A client whose checker is on for every discipline (it takes no feeds here).
        await db.execute(
            "INSERT INTO client (code, name, event_id, transport, settings) "
            "SELECT 'checked', 'Checked', id, 'webhook', '{\"checker\": true}' FROM event"
        )
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **options))
    async with (
        running_command(database_url) as cmd,
        running_delivery(database_url, servers.redis_url, **options),
        running_gateway(database_url, servers.redis_url, [live], **options) as gw,
    ):

        async def read() -> dict[str, Any]:
            body: dict[str, Any] = (await gw.get(f"/v1/events/{EVENT}/units/{code}")).json()
            return body

        before = await read()
        assert before["held"] is True
        listening = asyncio.create_task(
            read_events(f"{gw.url}/v1/events/{EVENT}/units/{code}/live", 2, within=60)
        )
        await reading(live_hub(gw.app), EVENT, listeners=1)

        async def submit(command_id: str, command: str, payload: dict[str, Any]) -> None:
            answer = await cmd.submit(
                command_id=command_id, code=command, payload=payload, unit_id=unit
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason

        await submit("goal-1", "results.set_sides", {"sides": [{"order": 1, "score": "3"}]})
        await submit("venue-1", "units.set_fields", {"fields": {"venue": "Hall 7"}})
        await eventually(lambda: _venue_is(read, "Hall 7"), what="the venue change")
        held = await read()
        await submit("approve-1", "results.approve", {})
        approved = await eventually(lambda: _score_is(read, "3"), what="the approved score")
        heard = await asyncio.wait_for(listening, 30)
        await submit("goal-2", "results.set_sides", {"sides": [{"order": 1, "score": "4"}]})
        await submit("venue-2", "units.set_fields", {"fields": {"venue": "Hall 8"}})
        await eventually(lambda: _venue_is(read, "Hall 8"), what="the second venue change")
        after = await read()
    # Saved but held: the public read shows no score; the venue changed at once.
    assert [s["score"] for s in held["sides"]] == [None, None]
    assert held["held"] is True
    # Live push: the score change never went out; the venue did, then the approval with it.
    assert [e["event"] for e in heard] == ["unit.changed", "results.approved"], heard
    assert [(c["field"], c["new"]) for c in heard[0]["data"]["changes"]] == [("venue", "Hall 7")]
    approval = {c["field"]: c["new"] for c in heard[1]["data"]["changes"]}
    assert approval["sides[1].score"] == "3"
    assert [s["score"] for s in approved["sides"]] == ["3", None]
    # A score saved after the approval waits for the next one.
    assert [s["score"] for s in after["sides"]] == ["3", None]


async def _venue_is(read: Any, venue: str) -> bool:
    return bool((await read())["venue"] == venue)


async def _score_is(read: Any, score: str) -> dict[str, Any] | None:
    body: dict[str, Any] = await read()
    return body if body["sides"][0]["score"] == score else None


async def test_a_discipline_nobody_holds_shows_results_at_once(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    code = games.unit_codes[unit]
    async with (
        running_command(database_url) as cmd,
        running_gateway(database_url, servers.redis_url, checker_disciplines=("ath",)) as gw,
    ):
        answer = await cmd.submit(
            command_id="goal-1",
            code="results.set_sides",
            payload={"sides": [{"order": 1, "score": "1"}]},
            unit_id=unit,
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED

        async def scored() -> dict[str, Any] | None:
            body: dict[str, Any] = (await gw.get(f"/v1/events/{EVENT}/units/{code}")).json()
            return body if body["sides"][0]["score"] == "1" else None

        body = await eventually(scored, what="the score")
    assert body["held"] is False
