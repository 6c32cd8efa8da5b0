"""The checker step on every way out: while a checker holds a unit's results, another team's
reader or feed sees none of them by any gRPC read (match states, lists, timelines, runs), the
public medal table waits for the approval of the medals it would count, and switching a
checker on drops the public copies cached before it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from omnium_grpc import open_channel
from omnium_imports import ImportsApp
from tests.support.command import (
    FEED_TOKEN,
    STATS_TOKEN,
    TOKEN,
    import_batch,
    running_command,
    unit_row,
)
from tests.support.games import EVENT, make_games, make_run
from tests.support.gateway import running_gateway
from tests.support.imports import import_settings
from tests.support.scoring import assign, running_scoring
from tests.support.servers import Servers
from tests.support.waiting import eventually

OTHER_TEAMS = {"stats-team": STATS_TOKEN, "results-feed": FEED_TOKEN}
SAVED = scoring_pb2.OUTCOME_SAVED
ACCEPTED = command_pb2.OUTCOME_ACCEPTED


async def _checker_on(db: asyncpg.Connection, checker: str = "true") -> None:
    """A client of the Games whose checker holds every discipline (it takes no feeds here)."""
    await db.execute(
        "INSERT INTO client (code, name, event_id, transport, settings) "
        "SELECT 'checked', 'Checked', id, 'webhook', "
        "jsonb_build_object('checker', $1::text::jsonb) FROM event",
        checker,
    )


class _Reads:
    """What one caller reads of a match through scoring and, when its role may, command."""

    def __init__(self, token: str, scoring_port: int, command_port: int, settings: Any) -> None:
        self.scoring_channel = open_channel(f"127.0.0.1:{scoring_port}", settings, token=token)
        self.command_channel = open_channel(f"127.0.0.1:{command_port}", settings, token=token)
        self.scoring = scoring_pb2_grpc.ScoringServiceStub(self.scoring_channel)
        self.command = command_pb2_grpc.CommandServiceStub(self.command_channel)
        # A feed may not read timelines at all (docs/callers.md).
        self.timelines = token != FEED_TOKEN

    async def close(self) -> None:
        await self.scoring_channel.close()
        await self.command_channel.close()

    async def seen(self, unit: str, unit_code: str) -> dict[str, Any]:
        state = await self.scoring.GetMatchState(
            scoring_pb2.GetMatchStateRequest(unit_id=unit, recent=10, standing=True), timeout=10
        )
        stream = self.scoring.WatchMatch(scoring_pb2.GetMatchStateRequest(unit_id=unit))
        watched = await asyncio.wait_for(stream.read(), 10)
        stream.cancel()
        listing = await self.scoring.ListMatches(
            scoring_pb2.ListMatchesRequest(event_code=EVENT), timeout=10
        )
        seen = {
            "scores": [s.score for s in state.sides],
            "watched": [s.score for s in watched.sides],
            "names": [s.noc for s in state.sides],
            "state": state.state_json,
            "recent": len(state.recent) + len(state.standing),
            "summary": next(m.summary for m in listing.matches if m.unit_id == unit),
            "event timeline": None,
            "unit timeline": None,
        }
        if self.timelines:
            by_event = await self.command.GetTimeline(
                command_pb2.GetTimelineRequest(
                    subject=command_pb2.Subject(kind="event", code=EVENT)
                ),
                timeout=10,
            )
            by_unit = await self.command.GetTimeline(
                command_pb2.GetTimelineRequest(
                    subject=command_pb2.Subject(kind="unit", code=unit_code, event_code=EVENT)
                ),
                timeout=10,
            )
            seen["event timeline"] = sorted(i.command_id for i in by_event.items)
            seen["unit timeline"] = sorted(i.command_id for i in by_unit.items)
        return seen


async def test_another_team_reads_no_held_result_through_scoring_or_the_timeline(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    code = games.unit_codes[unit]
    await assign(db, games.units)
    await _checker_on(db)
    async with running_scoring(database_url) as scoring:
        assert (await scoring.act(unit, "dev1:1", "start_period")).outcome == SAVED
        assert (await scoring.act(unit, "dev1:2", "goal", 1)).outcome == SAVED
        venue = await scoring.command.submit(
            command_id="venue-1",
            code="units.set_fields",
            payload={"fields": {"venue": "Hall 7"}},
            unit_id=unit,
        )
        assert venue.outcome == ACCEPTED, venue.reason

        async def everyone() -> dict[str, dict[str, Any]]:
            seen = {}
            for name, token in {"omnium-tests": TOKEN, **OTHER_TEAMS}.items():
                reads = _Reads(token, scoring.port, scoring.command.port, scoring.settings)
                try:
                    seen[name] = await reads.seen(unit, code)
                finally:
                    await reads.close()
            return seen

        held = await everyone()
        approval = await scoring.command.submit(
            command_id="approve-1", code="results.approve", payload={}, unit_id=unit
        )
        assert approval.outcome == ACCEPTED, approval.reason
        assert (await scoring.act(unit, "dev1:3", "goal", 2)).outcome == SAVED
        approved = await everyone()
    # omnium's own services see the match as saved...
    assert held["omnium-tests"]["scores"] == ["1", "0"]
    assert held["omnium-tests"]["summary"] != ""
    assert held["omnium-tests"]["event timeline"] == ["dev1:1", "dev1:2", "venue-1"]
    assert approved["omnium-tests"]["scores"] == ["1", "1"]
    for name in OTHER_TEAMS:
        timelines = name == "stats-team"
        # ...another team sees who plays and nothing the checker holds, by any read.
        assert held[name] == {
            "scores": ["", ""],
            "watched": ["", ""],
            "names": ["KOR", "JPN"],
            "state": "",
            "recent": 0,
            "summary": "",
            # The start (0-0) and the goal carry held scores; the venue is no result.
            "event timeline": ["venue-1"] if timelines else None,
            "unit timeline": ["venue-1"] if timelines else None,
        }, name
        # Once approved, the score as approved; the goal after the approval waits for the next.
        assert approved[name]["scores"] == ["1", "0"], name
        assert approved[name]["watched"] == ["1", "0"], name
        assert approved[name]["state"] == "", name
        if timelines:
            shown = ["approve-1", "dev1:1", "dev1:2", "venue-1"]
            assert approved[name]["event timeline"] == shown
            assert approved[name]["unit timeline"] == shown


@asynccontextmanager
async def _running_imports(database_url: str, command_port: int) -> AsyncIterator[ImportsApp]:
    imports = ImportsApp(import_settings(database_url, command_port))
    await imports.start(0, workers=0, scheduler=False, followups=False, grpc_port=0)
    try:
        yield imports
    finally:
        await imports.stop(grace=1)


async def test_another_team_reads_a_run_without_the_held_results_it_brought(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=2)
    await _checker_on(db, '["FBL"]')
    run_id = await make_run(db, games)
    rows = [
        unit_row(1, games.units[0], venue="Arena 1", sides=[{"order": 1, "score": "2"}]),
        unit_row(2, games.units[1], venue="Arena 2"),
    ]
    seen: dict[str, list[list[tuple[str, str]]]] = {}
    async with running_command(database_url) as command:
        answer = await command.batch(import_batch(run_id, 1, rows))
        assert [r.outcome for r in answer.rows] == [command_pb2.ROW_OUTCOME_ACCEPTED] * 2
        async with _running_imports(database_url, command.port) as imports:
            for name, token in {"omnium-tests": TOKEN, "stats-team": STATS_TOKEN}.items():
                channel = open_channel(
                    f"127.0.0.1:{imports.grpc_port}", command.settings, token=token
                )
                stub = imports_pb2_grpc.ImportsServiceStub(channel)
                detail = await stub.GetRun(imports_pb2.GetRunRequest(run_id=run_id), timeout=10)
                await channel.close()
                seen[name] = [
                    [(c.field, c.new.string_value) for c in e.changes] for e in detail.changed
                ]
    # The row log has the held unit's score and its venue.
    assert ("sides[1].score", "2") in seen["omnium-tests"][0]
    assert ("venue", "Arena 1") in seen["omnium-tests"][0]
    # A reader sees the row, without the score the checker holds.
    assert [f for f, _ in seen["stats-team"][0] if f.startswith("sides[")] == []
    assert ("venue", "Arena 1") in seen["stats-team"][0]


async def test_the_medal_table_waits_for_the_approval_of_a_medal_it_would_count(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await _checker_on(db)
    async with (
        running_command(database_url) as cmd,
        running_gateway(database_url, servers.redis_url) as gw,
    ):

        async def submit(command_id: str, code: str, payload: dict[str, Any], **kw: Any) -> None:
            answer = await cmd.submit(command_id=command_id, code=code, payload=payload, **kw)
            assert answer.outcome == ACCEPTED, answer.reason

        async def table() -> dict[str, Any]:
            body: dict[str, Any] = (await gw.get(f"/v1/events/{EVENT}/medals")).json()
            return body

        await submit(
            "kor-row",
            "medals.set_row",
            {"fields": {"gold": 1, "total": 1, "rank": 1}},
            kind="medal_row",
            code_ref=":KOR",
            event_code=EVENT,
        )
        before = await eventually(table, what="the medal table")
        await submit(
            "gold",
            "results.set_sides",
            {"sides": [{"order": 1, "score": "2", "medal": "GOLD"}]},
            unit_id=unit,
        )
        waiting = await eventually(lambda: _when(table, lambda b: b["held"]), what="the table held")
        await submit("approve", "results.approve", {}, unit_id=unit)
        after = await eventually(
            lambda: _when(table, lambda b: not b["held"]), what="the table freed"
        )
    assert before["held"] is False
    assert [r["noc"] for r in before["rows"]] == ["KOR"]
    assert waiting["rows"] == []
    assert "waiting for a person's approval" in waiting["note"]
    assert [r["noc"] for r in after["rows"]] == ["KOR"]


async def _when(read: Any, ok: Any) -> dict[str, Any] | None:
    body: dict[str, Any] = await read()
    return body if ok(body) else None


async def test_switching_a_client_s_checker_on_drops_the_cached_public_copies(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    code = games.unit_codes[unit]
    async with (
        running_command(database_url) as cmd,
        running_gateway(database_url, servers.redis_url) as gw,
    ):
        # A final unit: its public copy is kept for hours unless something drops it.
        for command_id, command, payload in (
            ("score", "results.set_sides", {"sides": [{"order": 1, "score": "3"}]}),
            ("final", "results.set_status", {"status": "OFFICIAL"}),
        ):
            answer = await cmd.submit(
                command_id=command_id, code=command, payload=payload, unit_id=unit
            )
            assert answer.outcome == ACCEPTED, answer.reason

        async def unit_read() -> dict[str, Any]:
            body: dict[str, Any] = (await gw.get(f"/v1/events/{EVENT}/units/{code}")).json()
            return body

        async def schedule_read() -> dict[str, Any]:
            body: dict[str, Any] = (await gw.get(f"/v1/events/{EVENT}/schedule")).json()
            return body["units"][0]

        shown = await eventually(
            lambda: _when(unit_read, lambda b: b["status"] == "OFFICIAL"), what="the final"
        )
        listed = await eventually(
            lambda: _when(schedule_read, lambda b: b["status"] == "OFFICIAL"), what="the list"
        )
        assert (await unit_read())["sides"][0]["score"] == "3"
        await _checker_on(db)
        held = await eventually(lambda: _when(unit_read, lambda b: b["held"]), what="the hold")
        held_listed = await eventually(
            lambda: _when(schedule_read, lambda b: b["held"]), what="the list held"
        )
    assert shown["sides"][0]["score"] == listed["sides"][0]["score"] == "3"
    assert held["sides"][0]["score"] is None
    assert held_listed["sides"][0]["score"] is None


async def test_a_gateway_started_with_a_checker_serves_no_copy_cached_without_it(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    code = games.unit_codes[unit]
    prefix = "test:checker-restart:"
    async with running_command(database_url) as cmd:
        for command_id, command, payload in (
            ("score", "results.set_sides", {"sides": [{"order": 1, "score": "3"}]}),
            ("final", "results.set_status", {"status": "OFFICIAL"}),
        ):
            answer = await cmd.submit(
                command_id=command_id, code=command, payload=payload, unit_id=unit
            )
            assert answer.outcome == ACCEPTED, answer.reason
    path = f"/v1/events/{EVENT}/units/{code}"
    async with running_gateway(database_url, servers.redis_url, gateway_redis_prefix=prefix) as gw:
        before = (await gw.get(path)).json()
        again = await gw.get(path)
    async with running_gateway(
        database_url,
        servers.redis_url,
        gateway_redis_prefix=prefix,
        checker_disciplines=("fbl",),
    ) as gw:
        after = (await gw.get(path)).json()
    assert before["sides"][0]["score"] == "3" and before["held"] is False
    assert again.headers["X-Cache"] == "HIT"
    assert after["held"] is True and after["sides"][0]["score"] is None
