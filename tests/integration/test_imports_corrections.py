"""Corrections land: a value Scout no longer reports is cleared in our data, through the road,
unless a person pinned it; the I12 guard counts exactly the clears that would be written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omnium.command.v1 import command_pb2
from omnium_imports._queue import enqueue_start
from omnium_scout_sim import ScoutSimulator
from tests.support.delivery import results_client, running_delivery
from tests.support.gateway import running_gateway
from tests.support.imports import GamesDay, games_day
from tests.support.servers import Servers
from tests.support.sftp import asyncssh_server
from tests.support.waiting import eventually

EVENT = "AG2026"


def podium_finals(sim: ScoutSimulator, count: int) -> list[str]:
    """Units that give gold, silver and bronze, with more than three competitors."""
    found = [
        unit.external_id
        for unit in sim.games.units.values()
        if unit.medals not in ("none", "bronze") and len(unit.contestants) > 3
    ]
    assert len(found) >= count, f"the simulated Games have {len(found)} podium finals"
    return found[:count]


def winner(sim: ScoutSimulator, external_id: str, medal: str = "GOLD") -> dict[str, Any]:
    row = sim.unit(external_id)
    side: dict[str, Any] = next(c for c in row["competitors"] if c["medal"] == medal)
    return side


async def run_done(day: GamesDay) -> dict[str, Any]:
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    row = await day.wait_for_run(run.id)
    assert row["status"] == "done", row["reason"]
    return dict(row)


async def side_of(day: GamesDay, rsc: str, order: int) -> dict[str, Any]:
    row = await day.db.fetchrow(
        "SELECT s.result, s.rank, s.medal, s.pinned FROM unit_competitor s "
        "JOIN unit u ON u.id = s.unit_id WHERE u.code = $1 AND s.sort_order = $2",
        rsc,
        order,
    )
    assert row is not None
    return dict(row)


async def test_a_gold_withdrawn_after_official_is_cleared_and_clients_see_it(
    database_url: str, servers: Servers, tmp_path: Path
) -> None:
    async with (
        games_day(database_url) as day,
        asyncssh_server(tmp_path) as sftp,
        running_delivery(database_url, feed_debounce_seconds=0.2),
        running_gateway(database_url, servers.redis_url) as gateway,
    ):
        await results_client(day.db, sftp, "ndtv", EVENT)
        final = podium_finals(day.sim, 1)[0]
        rsc = day.sim.unit(final)["rsc"]
        day.sim.mark_official(final)
        gold = winner(day.sim, final)
        await run_done(day)
        assert (await side_of(day, rsc, gold["order"]))["medal"] == "GOLD"

        # A protest upheld: the site withdraws the gold and the rank; the result reads DSQ.
        day.sim.disqualify(final, gold["externalId"])
        done = await run_done(day)
        ours = await side_of(day, rsc, gold["order"])
        assert (ours["result"], ours["rank"], ours["medal"]) == ("DSQ", None, None)
        assert done["outcomes"].get("accepted") == 1, done["outcomes"]
        diffs = await day.db.fetch(
            "SELECT diff FROM timeline_item "
            "WHERE code = 'imports.apply_batch' AND diff::text LIKE $1",
            f"%{rsc}%",
        )
        entries = {(e["field"], e["old"], e["new"]) for row in diffs for e in row["diff"]}
        # On the timeline as a diff from old to nothing, like any other change.
        assert (f"sides[{gold['order']}].medal", "GOLD", None) in entries
        assert (f"sides[{gold['order']}].rank", 1, None) in entries

        async def api_shows_no_gold() -> bool:
            answer = await gateway.get(f"/v1/events/{EVENT}/units/{rsc}")
            sides = {s["order"]: s for s in answer.json()["sides"]}
            return sides[gold["order"]]["medal"] is None

        await eventually(api_shows_no_gold, within=20, what="the public API without the gold")

        def feed_unit() -> dict[str, Any] | None:
            for path in (sftp.root / "ndtv").glob("*DT_RESULT*.json"):
                for unit in json.loads(path.read_bytes())["units"]:
                    if unit["code"] == rsc:
                        found: dict[str, Any] = unit
                        return found
            return None

        async def file_shows_no_gold() -> bool:
            unit = feed_unit()
            if unit is None:
                return False
            side = next(s for s in unit["sides"] if s["order"] == gold["order"])
            return side["medal"] is None and side["result"] == "DSQ"

        await eventually(file_shows_no_gold, within=30, what="the client's file without the gold")


async def test_a_pinned_medal_is_not_cleared(database_url: str) -> None:
    async with games_day(database_url) as day:
        final = podium_finals(day.sim, 1)[0]
        rsc = day.sim.unit(final)["rsc"]
        day.sim.mark_official(final)
        gold = winner(day.sim, final)
        await run_done(day)
        unit_id = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", rsc)
        # The jury's decision is entered by hand before Scout's site catches up: it is pinned.
        answer = await day.command.submit(
            command_id="jury-1",
            code="results.set_sides",
            unit_id=unit_id,
            payload={"sides": [{"order": gold["order"], "medal": "GOLD"}]},
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        pinned = await side_of(day, rsc, gold["order"])
        assert "medal" in pinned["pinned"]

        day.sim.disqualify(final, gold["externalId"])
        done = await run_done(day)
        ours = await side_of(day, rsc, gold["order"])
    # The rank, not pinned, is cleared; the medal a person set stays, kept by hand.
    assert (ours["result"], ours["rank"], ours["medal"]) == ("DSQ", None, "GOLD")
    assert done["outcomes"].get("accepted") == 1, done["outcomes"]


async def test_eleven_clears_pause_the_run_and_start_writes_them(database_url: str) -> None:
    async with games_day(database_url) as day:
        finals = podium_finals(day.sim, 11)
        for final in finals:
            day.sim.mark_official(final)
        await run_done(day)
        # Fourth place in each: a rank and no medal, so each disqualification clears one value.
        fourths = []
        for final in finals:
            fourth = next(c for c in day.sim.unit(final)["competitors"] if c["rank"] == 4)
            fourths.append((day.sim.unit(final)["rsc"], fourth["order"]))
            day.sim.disqualify(final, fourth["externalId"])
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(run.id)
        assert paused["status"] == "paused_by_guard"
        assert "would clear 11 records we hold" in paused["reason"]
        assert [(await side_of(day, rsc, order))["rank"] for rsc, order in fourths] == [4] * 11

        await enqueue_start(day.db, paused["id"])
        await day.jobs_idle()
        started = await day.wait_for_run(run.id)
        assert started["status"] == "done", started["reason"]
        ranks = [(await side_of(day, rsc, order))["rank"] for rsc, order in fourths]
    assert ranks == [None] * 11


async def test_ten_clears_pass_and_a_pinned_value_is_not_counted(database_url: str) -> None:
    async with games_day(database_url) as day:
        finals = podium_finals(day.sim, 11)
        for final in finals:
            day.sim.mark_official(final)
        await run_done(day)
        # One of the eleven ranks is pinned by hand: that clear would not be written.
        first = day.sim.unit(finals[0])
        fourth = next(c for c in first["competitors"] if c["rank"] == 4)
        unit_id = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", first["rsc"])
        answer = await day.command.submit(
            command_id="jury-2",
            code="results.set_sides",
            unit_id=unit_id,
            payload={"sides": [{"order": fourth["order"], "rank": 4}]},
        )
        assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
        for final in finals:
            rank4 = next(c for c in day.sim.unit(final)["competitors"] if c["rank"] == 4)
            day.sim.disqualify(final, rank4["externalId"])
        await run_done(day)
        kept = await side_of(day, first["rsc"], fourth["order"])
    assert kept["rank"] == 4


async def test_a_new_unit_records_no_clears_of_values_it_never_had(database_url: str) -> None:
    """The mapping owns results, so a schedule row's empty results are sent as cleared; on a
    unit being made they are nothing, and no diff, row log or client event says "null → null"."""
    async with games_day(database_url) as day:
        await run_done(day)
        made = await day.db.fetchval(
            "SELECT count(*) FROM domain_event WHERE kind = 'unit.created'"
        )
        assert made > 100
        cleared_in_events = await day.db.fetchval(
            "SELECT count(*) FROM domain_event e, jsonb_array_elements(e.payload->'changes') c"
            " WHERE e.kind = 'unit.created' AND c->'new' = 'null'::jsonb"
        )
        cleared_in_rows = await day.db.fetchval(
            "SELECT count(*) FROM integration_row r, jsonb_array_elements(r.diff) d"
            " WHERE d->'new' = 'null'::jsonb"
        )
        unit_fields = await day.db.fetchval(
            "SELECT count(*) FROM domain_event e, jsonb_array_elements(e.payload->'changes') c"
            " WHERE e.kind = 'unit.created' AND c->>'field' = 'venue'"
        )
    assert (cleared_in_events, cleared_in_rows) == (0, 0)
    assert unit_fields == made
