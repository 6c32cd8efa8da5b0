"""One trace per change, end to end, across the hops that are not calls (the import queue, the
outbox, the live stream): every service runs for real in this process, exporting to memory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from omnium_accounts import Accounts
from omnium_db import PoolRoad, create_pool
from omnium_delivery import load_clients
from omnium_gateway import LiveRoutes, ScorerRoutes
from omnium_live import stream_key
from omnium_settings import Settings
from omnium_telemetry import setup_tracing, shutdown_tracing
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, make_games
from tests.support.gateway import running_gateway
from tests.support.imports import games_day
from tests.support.receiver import webhook_receiver
from tests.support.scoring import assign, running_scoring
from tests.support.servers import Servers
from tests.support.sse import read_events
from tests.support.waiting import eventually


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    setup_tracing("omnium-test", Settings.from_env({}), exporter=exporter)
    try:
        yield exporter
    finally:
        shutdown_tracing()


def one_trace(spans: InMemorySpanExporter, root: ReadableSpan) -> list[ReadableSpan]:
    assert root.context is not None
    trace_id = root.context.trace_id
    return [s for s in spans.get_finished_spans() if s.context and s.context.trace_id == trace_id]


def names(found: Sequence[ReadableSpan]) -> set[str]:
    return {s.name for s in found}


def server_span(spans: InMemorySpanExporter, name_ends: str) -> ReadableSpan:
    found = [
        s
        for s in spans.get_finished_spans()
        if s.kind == SpanKind.SERVER and s.name.endswith(name_ends)
    ]
    assert len(found) == 1, [s.name for s in found]
    return found[0]


async def test_one_doorbell_ring_is_one_trace_from_the_ring_to_a_delivery_send(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    async with (
        games_day(database_url) as day,
        webhook_receiver() as receiver,
        running_delivery(database_url, feed_debounce_seconds=0.1) as delivery,
    ):
        # The first run brings in the Games; the client then gets its first file.
        first = await day.sim.make_run("schedule", wait_doorbell=True)
        assert (await day.wait_for_run(first.id))["status"] == "done"
        await load_clients(
            day.db,
            [
                {
                    "code": "dailyhunt",
                    "event": EVENT,
                    "transport": "webhook",
                    "webhook": {"url": receiver.url, "secret": receiver.secret},
                    "feeds": [{"kind": "results", "format": "json"}],
                }
            ],
        )
        await eventually(lambda: _true(len(delivery.sent) >= 1), what="the first file")
        await asyncio.sleep(0.3)  # anything else the first run owes goes out before we look
        before = len(receiver.got)
        spans.clear()

        # One result changes on the site; Scout reads it and rings.
        unit = next(u for u in day.sim.games.units.values() if len(u.contestants) >= 2)
        day.sim.post_result(unit.external_id)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        done = await day.wait_for_run(run.id)
        assert done["status"] == "done" and done["outcomes"].get("accepted") == 1, done
        await eventually(lambda: _true(len(receiver.got) > before), what="the changed file")

    ring = server_span(spans, "/doorbell/{integration_code}")
    trace = one_trace(spans, ring)
    found = names(trace)
    for stage in ("job", "fetch", "map", "fast_path", "guards", "batch"):
        assert f"imports.{stage}" in found, (stage, sorted(found))
    apply = [s for s in trace if s.name.endswith("CommandService/ApplyImportBatch")]
    assert {s.kind for s in apply} == {SpanKind.CLIENT, SpanKind.SERVER}
    sends = [s for s in trace if s.name == "delivery.send"]
    assert sends and sends[0].attributes is not None
    assert sends[0].attributes["omnium.client"] == "dailyhunt"
    # The webhook's own request carries the trace on to the client.
    assert ring.context is not None
    trace_hex = f"{ring.context.trace_id:032x}"
    assert any(trace_hex in got.headers.get("traceparent", "") for got in receiver.got[before:])
    # The Scout simulator's ring is the start: everything after hangs under it.
    assert ring.parent is not None
    roots = [s for s in trace if s.parent is None]
    assert [s.kind for s in roots] == [SpanKind.CLIENT], [s.name for s in roots]


async def test_one_scorer_tap_is_one_trace_from_the_gateway_to_the_sse_publish(
    db: asyncpg.Connection, database_url: str, servers: Servers, spans: InMemorySpanExporter
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    unit_code = games.unit_codes[unit]
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    await redis.aclose()
    async with running_scoring(database_url) as scoring:
        address = f"127.0.0.1:{scoring.port}"
        routes = scoring.settings.replace(scoring_address=address, redis_url=servers.redis_url)
        async with (
            running_delivery(database_url, servers.redis_url),
            running_gateway(
                database_url,
                servers.redis_url,
                [ScorerRoutes(routes), LiveRoutes(routes)],
                scoring_address=address,
            ) as gateway,
        ):
            pool = await create_pool(routes, PoolRoad.PEOPLE, application_name="test", size=1)
            try:
                await Accounts(pool, routes).create("mina", "Mina Park", "scorer", "a long pass")
            finally:
                await pool.close()
            await assign(db, [unit], "mina")  # her match: the tap is saved, not refused
            async with httpx.AsyncClient(base_url=gateway.url) as http:
                signed = await http.post(
                    "/score/api/sign-in", json={"login": "mina", "password": "a long pass"}
                )
                headers = {"X-CSRF-Token": signed.json()["csrf"]}
                listener = asyncio.create_task(
                    read_events(f"{gateway.url}/v1/events/{EVENT}/units/{unit_code}/live", 1)
                )
                await asyncio.sleep(0.3)
                spans.clear()
                tap = await http.post(
                    f"/score/api/matches/{unit}/actions",
                    json={"client_id": "w:1", "kind": "start_period"},
                    headers=headers,
                )
                assert tap.json()["outcome"] == "saved"
                (event,) = await listener
                assert event["data"]["unit"] == unit_code
                await eventually(
                    lambda: _true("live.sse_publish" in names(spans.get_finished_spans())),
                    what="the SSE publish span",
                )

    tapped = server_span(spans, "/score/api/matches/{unit_id}/actions")
    trace = one_trace(spans, tapped)
    # The trace starts at the scorer's request (this test's HTTP client carries traceparent).
    (root,) = [s for s in trace if s.parent is None]
    assert tapped.parent is not None and root.context is not None
    assert root.kind == SpanKind.CLIENT and tapped.parent.span_id == root.context.span_id
    found = names(trace)
    assert any(n.endswith("ScoringService/Act") for n in found), sorted(found)
    submits = [s for s in trace if s.name.endswith("CommandService/Submit")]
    assert SpanKind.SERVER in {s.kind for s in submits}, sorted(found)
    assert {"live.publish", "live.sse_publish"} <= found, sorted(found)


async def _true(value: bool) -> bool:
    return value
