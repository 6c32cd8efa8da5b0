"""One contract for live push: the OpenAPI document the gateway serves names every event a live
stream sends, and each event's data is valid against the schema the document gives it. Real
command, delivery and gateway; each kind of change is made the way it is made on a Games day
(commands, an import batch that creates a unit, an approval of held results)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from omnium.command.v1 import command_pb2
from omnium_gateway._route_sets import LiveRoutes
from omnium_live import live_hub, stream_key
from tests.support.command import import_batch, running_command
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, make_games, make_run, unit_code
from tests.support.gateway import gateway_settings, running_gateway
from tests.support.openapi import schema_validator
from tests.support.servers import Servers
from tests.support.sse import read_events, reading

# Football's results wait for a person's approval, so an approval is among the changes.
CHECKED = {"checker_disciplines": ("fbl",)}


def documented_events(doc: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """The events a live route's 200 answer documents, by their `event:` name."""
    answer = doc["paths"][path]["get"]["responses"]["200"]
    variants = answer["content"]["text/event-stream"]["schema"]["oneOf"]
    return {v["properties"]["event"]["const"]: v for v in variants}


async def test_every_live_event_is_named_and_shaped_as_the_document_says(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=2)
    unit = games.units[0]
    run_id = await make_run(db, games)
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    await redis.aclose()
    live = LiveRoutes(gateway_settings(database_url, servers.redis_url, **CHECKED))
    async with (
        running_command(database_url) as cmd,
        running_delivery(database_url, servers.redis_url, **CHECKED),
        running_gateway(database_url, servers.redis_url, [live], **CHECKED) as gw,
    ):
        doc = (await gw.get("/v1/openapi.json")).json()
        path = "/v1/events/{event}/live"
        events = documented_events(doc, path)
        changes = {name for name, v in events.items() if "id" in v.get("required", [])}
        listening = asyncio.create_task(
            read_events(f"{gw.url}/v1/events/{EVENT}/live", len(changes), within=60)
        )
        await reading(live_hub(gw.app), EVENT, listeners=1)

        async def submit(command_id: str, code: str, payload: dict[str, Any], **on: Any) -> None:
            answer = await cmd.submit(command_id=command_id, code=code, payload=payload, **on)
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, (code, answer.reason)

        # unit.changed (the score is held by the checker: it goes out with the approval).
        await submit("venue", "units.set_fields", {"fields": {"venue": "Hall 7"}}, unit_id=unit)
        await submit(
            "goal", "results.set_sides", {"sides": [{"order": 1, "score": "2"}]}, unit_id=unit
        )
        # results.approved
        await submit("approve", "results.approve", {}, unit_id=unit)
        # competitor.changed
        await submit(
            "rename",
            "competitors.set_fields",
            {"fields": {"name": "Korea Republic football"}},
            unit_id=games.competitors["KOR"],
            kind="competitor",
        )
        # medal_row.changed
        await submit(
            "medal",
            "medals.set_row",
            {"fields": {"gold": 1, "total": 1}},
            kind="medal_row",
            code_ref=":KOR",
            event_code=EVENT,
        )
        # unit.created: a schedule import naming a unit omnium does not have yet.
        new_unit = command_pb2.BatchRow(
            position=0,
            key="new-unit",
            hash=b"n" * 32,
            subject=command_pb2.Subject(kind="unit", code=unit_code("FBL", 9)),
            unit=command_pb2.UnitValues(name="Football, a new match", discipline_code="FBL"),
        )
        batch = import_batch(run_id, 0, [new_unit])
        batch.create_units = True
        answer = await cmd.batch(batch)
        assert [r.outcome for r in answer.rows] == [command_pb2.ROW_OUTCOME_ACCEPTED], answer
        heard = await asyncio.wait_for(listening, 60)
    # Every change kind the document names was sent, and nothing it does not name.
    assert sorted(e["event"] for e in heard) == sorted(changes), heard
    pattern = re.compile(events["unit.changed"]["properties"]["id"]["pattern"])
    for event in heard:
        variant = events[event["event"]]
        assert pattern.match(event["id"]), event
        data_schema = variant["properties"]["data"]["contentSchema"]
        errors = list(schema_validator(doc, data_schema).iter_errors(event["data"]))
        assert not errors, f"{event['event']}: {errors[0].message} in {json.dumps(event['data'])}"
    # The same events and payloads on a unit's own stream.
    assert documented_events(doc, "/v1/events/{event}/units/{unit_code}/live") == events
