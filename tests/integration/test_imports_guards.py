"""Guards pause a run with a reason and write nothing; Start continues it. Missing keys and
alerts: each raised once, and cleared when the cause is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from omnium_imports import ImportsApp, add_version, mapping_file
from omnium_imports._queue import enqueue_start
from omnium_scout_sim import Run
from tests.support.imports import GamesDay, games_day, import_settings
from tests.support.waiting import eventually


async def _load(day: GamesDay) -> None:
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["status"] == "done"


async def _open(day: GamesDay, table: str, kind: str) -> int:
    count: int = await day.db.fetchval(
        f"SELECT count(*) FROM {table} WHERE kind = $1 AND status = 'open'", kind
    )
    return count


async def test_too_few_rows_pauses_and_start_continues(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)
        commands = await day.db.fetchval("SELECT count(*) FROM command")
        day.sim.shorten_next_run(100)
        for unit in day.sim.reference()["units"][:100]:
            day.sim.reschedule(unit["externalId"], venue="Short Run Venue")
        short = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(short.id)
        assert paused["status"] == "paused_by_guard"
        assert "Scout sent 100 rows; it usually sends about 1,252" in paused["reason"]
        assert await day.db.fetchval("SELECT count(*) FROM command") == commands
        assert await _open(day, "review_item", "guard") == 1
        assert await _open(day, "alert", "guard") == 1
        # A person looked and says go: the same run, past the guard.
        await enqueue_start(day.db, paused["id"])
        await day.jobs_idle()
        started = await day.wait_for_run(short.id)
        moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Short Run Venue'")
        assert started["status"] == "done"
        assert moved == 100
        assert await _open(day, "review_item", "guard") == 0
        assert await _open(day, "alert", "guard") == 0


async def test_reopening_finished_units_pauses(database_url: str) -> None:
    async with games_day(database_url) as day:
        units = [u for u in day.sim.reference()["units"] if u["disciplineCode"] == "ATH"][:6]
        for unit in units:
            day.sim.post_result(unit["externalId"], status="OFFICIAL")
        await _load(day)
        for unit in units:
            day.sim.post_result(unit["externalId"], status="RUNNING")
        reopen = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(reopen.id)
        official = await day.db.fetchval("SELECT count(*) FROM unit WHERE status = 'OFFICIAL'")
    assert paused["status"] == "paused_by_guard"
    assert "would reopen 6 finished units (at most 5 may)" in paused["reason"]
    assert official == 6


async def test_a_key_missing_from_two_full_runs_asks_once(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)
        gone = day.sim.reference()["units"][10]
        day.sim.drop(gone["externalId"])

        async def missing_runs() -> int:
            value: int = await day.db.fetchval(
                "SELECT missing_runs FROM integration_key_state WHERE subject_key = $1",
                gone["externalId"],
            )
            return value

        # A day build never marks anything missing.
        day_run = await day.sim.make_run(
            "schedule", build="day", day=date(2026, 9, 20), wait_doorbell=True
        )
        await day.wait_for_run(day_run.id)
        assert await missing_runs() == 0
        for expected in (1, 2, 3):
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            assert (await day.wait_for_run(run.id))["status"] == "done"
            assert await missing_runs() == expected
        items = await day.db.fetch("SELECT question FROM review_item WHERE kind = 'missing'")
        unit_status = await day.db.fetchval("SELECT status FROM unit WHERE code = $1", gone["rsc"])
        day.sim.restore(gone["externalId"])
        back = await day.sim.make_run("schedule", wait_doorbell=True)
        await day.wait_for_run(back.id)
        assert await missing_runs() == 0
    assert len(items) == 1
    assert f"no longer list {gone['externalId']}" in items[0]["question"]
    # Nothing is cancelled by an import on its own (auto_cancel_missing is off).
    assert unit_status != "CANCELLED"


async def test_scout_failing_twice_alerts_once_and_clears(database_url: str) -> None:
    received: list[dict[str, object]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/alerts", hook)
    async with TestServer(app) as server:
        url = str(server.make_url("/alerts"))
        async with games_day(database_url, import_overrides={"alert_webhook_url": url}) as day:
            for n in range(3):
                run = await day.sim.make_run(
                    "schedule", fail_checks=f"timeout {n}", wait_doorbell=True
                )
                await day.wait_for_run(run.id)
            open_alerts = await _open(day, "alert", "scout_failed")
            # It clears as it was raised: after as many passing full runs in a row.
            await _load(day)
            after_one = await _open(day, "alert", "scout_failed")
            await _load(day)
            cleared = await day.db.fetchval(
                "SELECT count(*) FROM alert WHERE kind = 'scout_failed' AND status = 'cleared'"
            )
    assert open_alerts == 1
    assert after_one == 1
    assert cleared == 1
    assert [a["kind"] for a in received] == ["scout_failed"]
    assert "last 2 runs failed their own checks" in str(received[0]["message"])


async def test_official_results_are_read_again_in_their_settle_window(database_url: str) -> None:
    async with games_day(
        database_url, followups=True, import_overrides={"followup_seconds": 0.1}
    ) as day:
        unit = next(u for u in day.sim.reference()["units"] if u["disciplineCode"] == "SWM")
        day.sim.post_result(unit["externalId"], status="OFFICIAL")
        await _load(day)
        state = await day.db.fetchrow(
            "SELECT official_at, next_read_at - official_at AS wait FROM integration_key_state "
            "WHERE subject_key = $1",
            unit["externalId"],
        )
        assert state["official_at"] is not None and state["wait"].total_seconds() == 3600
        # An hour on: with no new run, the timer asks Scout to read that page again.
        await day.db.execute(
            "UPDATE integration_key_state SET official_at = official_at - interval '61 minutes',"
            " next_read_at = now() - interval '1 minute' WHERE subject_key = $1",
            unit["externalId"],
        )

        async def page_runs() -> list[Run]:
            return [r for r in day.sim.runs.newest("schedule", limit=100) if r.build == "page"]

        pages = await eventually(page_runs, within=10, what="a page run")
        assert len(pages) == 1 and pages[0].row_count == 1
        await day.sim.wait_for_doorbells()
        page = await day.wait_for_run(pages[0].id)
        after = await day.db.fetchrow(
            "SELECT next_read_at - official_at AS wait FROM integration_key_state "
            "WHERE subject_key = $1",
            unit["externalId"],
        )
    assert page["status"] == "done"
    # Read at about 61 minutes: the next read is an hour after that.
    assert 7000 < after["wait"].total_seconds() < 7500


async def test_a_failed_run_alerts_once_and_clears(database_url: str) -> None:
    async with games_day(database_url) as day:
        for _ in range(2):
            day.sim.malform_next_page("not_json")
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            assert (await day.wait_for_run(run.id))["status"] == "failed"
        raised = await day.db.fetchval("SELECT count(*) FROM alert WHERE kind = 'run_failed'")
        await _load(day)
        still_open = await _open(day, "alert", "run_failed")
    assert raised == 1
    assert still_open == 0


async def test_no_new_run_for_three_intervals_alerts(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)
        await day.db.execute(
            "UPDATE integration SET check_seconds = 60, last_heard_at = now(); "
            "UPDATE integration_run SET received_at = now() - interval '1 hour'"
        )
        scheduler = ImportsApp(
            import_settings(database_url, day.command.port, scheduler_seconds=0.2)
        )
        await scheduler.start(0, workers=0, scheduler=True, grpc_port=0)
        try:
            await eventually(
                lambda: _open(day, "alert", "quiet"), within=5, every=0.1, what="the quiet alert"
            )
            await asyncio.sleep(1)  # five more scheduler ticks: still one alert
        finally:
            await scheduler.stop(grace=1)
        quiet = await day.db.fetch(
            "SELECT message, integration_id::text AS integration FROM alert WHERE kind = 'quiet'"
        )
    # One for the quiet integration (the medal table, set up just now, is not quiet yet), not
    # one per scheduler tick.
    assert [q["integration"] for q in quiet] == [day.schedule_id]
    assert "No new run from Scout for 3 check intervals" in quiet[0]["message"]


async def _new_version(day: GamesDay, change: Callable[[dict[str, Any]], None]) -> None:
    """Give the schedule integration a new mapping version, changed by `change`."""
    spec = mapping_file("scout_units")
    change(spec)
    await add_version(day.db, day.schedule_id, spec, "test")


async def test_rows_that_cannot_be_read_pause(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)

        def forget_scheduled(spec: dict[str, Any]) -> None:
            status = next(s for s in spec["steps"] if s.get("op") == "map")
            del status["table"]["SCHEDULED"]

        await _new_version(day, forget_scheduled)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(run.id)
    assert paused["status"] == "paused_by_guard"
    assert "rows could not be read (more than 10%)" in paused["reason"]
    assert "SCHEDULED" in paused["reason"]


async def test_rows_naming_things_we_do_not_have_pause(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)
        units = day.sim.reference()["units"]
        for n, unit in enumerate(units[:140]):
            day.sim.swap_competitor(
                unit["externalId"],
                order=1,
                competitor_id=f"SC-T-NEW{n}",
                name=f"New team {n}",
                noc="KOR",
            )
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(run.id)
    assert paused["status"] == "paused_by_guard"
    assert "140 of 1,252 rows name units or competitors we do not have" in paused["reason"]


async def test_a_run_clearing_many_values_pauses(database_url: str) -> None:
    async with games_day(database_url) as day:
        await _load(day)

        def clear_venues(spec: dict[str, Any]) -> None:
            spec["steps"].append({"op": "set", "to": "venue", "value": None})

        await _new_version(day, clear_venues)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = await day.wait_for_run(run.id)
        venues = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue IS NOT NULL")
    assert paused["status"] == "paused_by_guard"
    assert "would clear 1252 records we hold" in paused["reason"]
    assert venues == 1252


async def test_auto_cancel_missing_goes_through_the_command_service(database_url: str) -> None:
    async with games_day(database_url) as day:
        await day.db.execute(
            "UPDATE integration SET settings = '{\"auto_cancel_missing\": true}' WHERE id = $1",
            day.schedule_id,
        )
        await _load(day)
        gone = day.sim.reference()["units"][20]
        day.sim.drop(gone["externalId"])
        for _ in range(2):
            run = await day.sim.make_run("schedule", wait_doorbell=True)
            await day.wait_for_run(run.id)
        status = await day.db.fetchval("SELECT status FROM unit WHERE code = $1", gone["rsc"])
        logged = await day.db.fetchval(
            "SELECT actor_kind || ' ' || actor_name || ' ' || screen FROM timeline_item "
            "WHERE code = 'results.set_status'"
        )
    assert status == "CANCELLED"
    assert logged == "integration integration:scout-schedule imports:missing"
