"""Imports tell the operator the truth, as the card and the run screens show it: a
started run is Running, the card reads the newest full run and keeps Start for a paused one,
an overtaken pause offers no Start, a run's time is the time it worked, a run says whether it
was a page or a full run, and Scout's 500s are not "Passed"."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_admin import _present as present
from omnium_imports._files import integration_from
from omnium_imports._inputs import Document, SetupError
from tests.support.command import person
from tests.support.delivery import query_until
from tests.support.gateway import running_gateway
from tests.support.imports import SCHEDULE, GamesDay, games_day
from tests.support.servers import Servers
from tests.support.truth import (
    EXAMPLES,
    card,
    done,
    first_key,
    open_alerts,
    operator,
    page_run,
    run_status,
)

START = person("Mei", screen="admin:runs")


async def _paused(day: GamesDay) -> dict[str, Any]:
    """A full run the size guard paused (Scout sent 100 of its usual rows)."""
    await done(day)
    day.sim.shorten_next_run(100)
    short = await day.sim.make_run("schedule", wait_doorbell=True)
    paused = dict(await day.wait_for_run(short.id))
    assert paused["status"] == "paused_by_guard", paused["reason"]
    paused["scout_run_id"] = short.id
    return paused


async def _shown(ops: imports_pb2_grpc.ImportsServiceStub, run_id: str) -> dict[str, Any]:
    detail = await ops.GetRun(imports_pb2.GetRunRequest(run_id=run_id), timeout=10)
    return present.run(detail.run)


async def test_a_started_run_is_running_from_the_moment_it_is_started(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        paused = await _paused(day)
        answer = await ops.StartRun(
            imports_pb2.StartRunRequest(run_id=str(paused["id"]), actor=START), timeout=10
        )
        # What the run page shows right after Start's redirect: never "Paused by a check".
        right_after = await _shown(ops, str(paused["id"]))
        await query_until(
            day.db,
            "SELECT status = 'done' FROM integration_run WHERE id = $1::uuid",
            paused["id"],
        )
        after = await _shown(ops, str(paused["id"]))
    assert answer.done, answer.message
    assert right_after["status"] in ("received", "applying", "done")
    assert right_after["word"] in ("Running", "Done")
    assert after["word"] == "Done"


async def test_the_card_reads_the_full_run_and_keeps_start_after_a_page_run(
    database_url: str,
) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        paused = await _paused(day)
        page = await page_run(day, [first_key(day)])
        seen = await card(ops)
    assert page["status"] == "done", page["reason"]
    assert seen["omnium"]["word"] == "Stopped by a check"
    # "Last run" names the full run its health is judged by, and the page run apart.
    assert seen["last_run"]["id"] == paused["id"]
    assert seen["last_run"]["kind"] == "full run"
    assert seen["last_run"]["word"] == "Paused by a check"
    assert seen["last_page_run"]["kind"] == "page run"
    assert seen["last_page_run"]["word"] == "Done"
    # Start is still offered for the paused run.
    assert seen["paused_run"]["id"] == paused["id"]


async def test_a_pause_overtaken_by_a_newer_full_run_offers_no_start(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        paused = await _paused(day)
        newer = await done(day)
        seen = await card(ops)
        shown = await _shown(ops, str(paused["id"]))
        answer = await ops.StartRun(
            imports_pb2.StartRunRequest(run_id=str(paused["id"]), actor=START), timeout=10
        )
        waiting = await ops.ListWaiting(imports_pb2.ListWaitingRequest(), timeout=10)
    assert newer["status"] == "done"
    assert seen["paused_run"] is None
    assert seen["green"], seen
    assert shown["status"] == "older"
    assert "Overtaken by run" in shown["reason"] and "cannot be started" in shown["reason"]
    assert not answer.done
    assert [w for w in waiting.items if w.kind == "guard"] == []


async def test_a_started_run_s_time_is_the_time_it_worked(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        paused = await _paused(day)
        await asyncio.sleep(2)  # the run waits for a person's Start
        await ops.StartRun(
            imports_pb2.StartRunRequest(run_id=str(paused["id"]), actor=START), timeout=10
        )
        await query_until(
            day.db,
            "SELECT status = 'done' FROM integration_run WHERE id = $1::uuid",
            paused["id"],
        )
        await day.jobs_idle()
        detail = await ops.GetRun(imports_pb2.GetRunRequest(run_id=str(paused["id"])), timeout=10)
        elapsed = await day.db.fetchval(
            "SELECT (1000 * extract(epoch FROM finished_at - received_at))::bigint "
            "FROM integration_run WHERE id = $1::uuid",
            paused["id"],
        )
    run = detail.run
    assert run.waited_ms >= 2000, (run.duration_ms, run.waited_ms, elapsed)
    # Each is rounded to the millisecond on its own: their sum may be 1 ms off the whole.
    assert abs(run.duration_ms + run.waited_ms - elapsed) <= 1
    assert present.run(run)["waited"].endswith(" s")


async def test_the_runs_say_whether_each_is_a_page_or_a_full_run(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        await page_run(day, [first_key(day)])
        answer = await ops.ListRuns(
            imports_pb2.ListRunsRequest(integration_code=SCHEDULE), timeout=10
        )
    assert [present.run(r)["kind"] for r in answer.runs] == ["page run", "full run"]


async def test_scout_answering_500s_is_not_passed(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        before = await card(ops)
        async with httpx.AsyncClient(base_url=day.sim.base_url, timeout=10) as sim:
            failing = await sim.post("/control/faults/errors", json={"count": 50})
            assert failing.status_code == 200, failing.text
            await ops.RunNow(imports_pb2.RunNowRequest(integration_code=SCHEDULE), timeout=10)
            await query_until(
                day.db,
                "SELECT count(*) FROM alert WHERE kind = 'run_failed' AND status = 'open'",
            )
            during = await card(ops)
            await sim.delete("/control/faults")
        back = await done(day)
        after = await card(ops)
        status = await run_status(day, str(back["id"]))
    assert before["scout"]["word"] == "Passed"
    assert during["scout"]["word"] == "Not answering" and not during["scout"]["ok"]
    assert not during["green"]
    assert status == "done"
    assert after["scout"]["word"] == "Passed"


async def test_an_integration_s_own_alert_threshold_from_its_file(database_url: str) -> None:
    example = json.loads((EXAMPLES / "integration.json").read_text())
    own = example | {"settings": {"alert_scout_failed_in_row": 1}}
    spec = integration_from(Document("own.json", json.dumps(own), EXAMPLES))
    wrong = example | {"settings": {"alert_scout_failed": 1}}
    with pytest.raises(SetupError) as refused:
        integration_from(Document("wrong.json", json.dumps(wrong), EXAMPLES))
    async with games_day(database_url) as day:
        await day.db.execute(
            "UPDATE integration SET settings = $2::jsonb WHERE id = $1::uuid",
            day.schedule_id,
            dict(spec.settings),
        )
        await done(day)
        failed = await day.sim.make_run("schedule", fail_checks="only 12 rows", wait_doorbell=True)
        ours = await day.wait_for_run(failed.id)
        alerts = await open_alerts(day)
    assert spec.settings == {"alert_scout_failed_in_row": 1}
    assert "'alert_scout_failed'" in str(refused.value)
    assert ours["status"] == "scout_failed"
    # One failed Scout run is enough for this integration (the service's default is 2).
    assert alerts == ["scout_failed"]


async def test_a_medal_page_run_leaves_every_rank_right(
    database_url: str, servers: Servers
) -> None:
    async with games_day(database_url) as day:
        finals = [
            u.external_id
            for u in day.sim.games.units.values()
            if u.medals not in ("none", "bronze")
        ]
        for final in finals[:6]:
            day.sim.mark_official(final)
        await done(day, "medals")
        before = {r["noc"]: r["rank"] for r in day.sim.medal_table()}
        # One more final: its medallists move up the table, and others move down a place
        # though their own rows do not change. The page run reads the medallists' rows only.
        day.sim.mark_official(finals[6])
        won = sorted({c["noc"] for c in day.sim.unit(finals[6])["competitors"] if c["medal"]})
        scout = {r["noc"]: r["rank"] for r in day.sim.medal_table()}
        assert any(before.get(noc) != rank for noc, rank in scout.items() if noc not in won)
        page = await page_run(day, won, "medals")
        ours = dict(
            await day.db.fetch(
                "SELECT noc, rank FROM medal_row WHERE discipline_id IS NULL AND total > 0"
            )
        )
        async with running_gateway(database_url, servers.redis_url) as gateway:
            served = (await gateway.get("/v1/events/AG2026/medals")).json()
    assert page["status"] == "done", page["reason"]
    assert ours == scout
    assert {r["noc"]: r["rank"] for r in served["rows"]} == scout
