"""The settle window runs on a timer: official results are read again up to 72 hours on with
no new Scout run (F17), each due key asked for once across copies, Scout or the database away."""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from omnium_imports import ImportsApp
from omnium_imports._followups import FollowUps
from omnium_scout_sim import ReplaySettings, Run
from tests.support.delivery import results_client, running_delivery
from tests.support.imports import GamesDay, games_day, import_settings
from tests.support.outage import CONNECT_RACE, crashable_postgres
from tests.support.sftp import asyncssh_server
from tests.support.waiting import eventually

pytestmark = CONNECT_RACE  # the outage test's connects racing the crash

EVENT = "AG2026"
# The test's hour, in real seconds, on both clocks: the simulator's replay and omnium's window.
HOUR = 0.2


def settle_hours(hour: float = HOUR) -> dict[str, float]:
    """Every hour of the settle window lasting `hour` real seconds (the defaults, scaled)."""
    scale = hour / 3600
    return {
        "settle_first_hours": 1 * scale,
        "settle_hourly_until_hours": 6 * scale,
        "settle_six_hourly_until_hours": 24 * scale,
        "settle_until_hours": 72 * scale,
        "settle_hourly_step_hours": 1 * scale,
        "settle_six_hourly_step_hours": 6 * scale,
        "settle_daily_step_hours": 24 * scale,
    }


def page_runs(day: GamesDay) -> list[Run]:
    return [r for r in day.sim.runs.newest("schedule", limit=200) if r.build == "page"]


def keys_asked(runs: list[Run]) -> Counter[str]:
    """How many page runs asked for each key (Scout lists every key it still has)."""
    return Counter(row["externalId"] for run in runs for row in run.rows)


async def load(day: GamesDay) -> None:
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["status"] == "done"


async def make_due(day: GamesDay, keys: list[str]) -> None:
    """These keys went official a while ago and are due for a read now."""
    await day.db.execute(
        "UPDATE integration_key_state SET official_at = now() - interval '2 hours', "
        "next_read_at = now() - interval '1 minute' "
        "WHERE integration_id = $1::uuid AND subject_key = ANY($2::text[])",
        day.schedule_id,
        keys,
    )


async def next_read_at(day: GamesDay, key: str) -> Any:
    return await day.db.fetchval(
        "SELECT next_read_at FROM integration_key_state WHERE subject_key = $1", key
    )


async def test_a_protest_decided_30_hours_after_official_is_read_and_delivered(
    database_url: str, tmp_path: Path
) -> None:
    overrides = {**settle_hours(), "followup_seconds": 0.05, "followup_asked_wait_seconds": 2.0}
    async with (
        games_day(database_url, followups=True, import_overrides=overrides) as day,
        asyncssh_server(tmp_path) as sftp,
        running_delivery(database_url, feed_debounce_seconds=0.2),
    ):
        await results_client(day.db, sftp, "ndtv", EVENT)
        sim = day.sim
        # The Games' first podium final, played on the simulator's fast clock: it is official
        # a minute before the replay starts, and the replay's first run carries that.
        final = sim.games.units["SC-000030"]
        assert final.medals == "podium"
        official_local = final.start + timedelta(minutes=final.duration_minutes + 15)
        replay = sim.start_replay(
            ReplaySettings(
                seconds_per_hour=HOUR,
                tick_seconds=0.05,
                schedule_every_seconds=3600,  # no other run while the test lasts
                start_local=official_local + timedelta(minutes=1),
            )
        )
        replay.paused = True  # the clock waits for omnium to read the first run
        gold = next(c for c in sim.unit(final.external_id)["competitors"] if c["medal"] == "GOLD")
        # Thirty hours after official, past the 24 hours the old code read results for, the
        # jury withdraws the gold.
        replay.at(
            official_local + timedelta(hours=30),
            f"protest upheld: {gold['externalId']} disqualified from {final.external_id}",
            lambda: sim.disqualify(final.external_id, gold["externalId"]),
        )
        first = await eventually(lambda: _first_run(day), within=10, what="the replay's first run")
        assert first is not None and first.build == "all"
        assert (await day.wait_for_run(first.id))["status"] == "done"
        replay.paused = False

        async def side() -> asyncpg.Record:
            row: asyncpg.Record = await day.db.fetchrow(
                "SELECT s.result, s.rank, s.medal FROM unit_competitor s "
                "JOIN unit u ON u.id = s.unit_id WHERE u.code = $1 AND s.sort_order = $2",
                final.rsc,
                gold["order"],
            )
            return row

        assert tuple(await side()) == (gold["result"], 1, "GOLD")

        async def disqualified() -> bool:
            return tuple(await side()) == ("DSQ", None, None)

        await eventually(disqualified, within=60, what="the disqualification in our data")

        def feed_side() -> dict[str, Any] | None:
            for path in (sftp.root / "ndtv").glob("*DT_RESULT*.json"):
                for unit in json.loads(path.read_bytes())["units"]:
                    if unit["code"] == final.rsc:
                        found: dict[str, Any] = next(
                            s for s in unit["sides"] if s["order"] == gold["order"]
                        )
                        return found
            return None

        async def file_shows_it() -> bool:
            found = feed_side()
            return found is not None and (found["result"], found["medal"]) == ("DSQ", None)

        await eventually(file_shows_it, within=30, what="the client's file with the DSQ")
        written = await day.db.fetchrow(
            "SELECT r.build, extract(epoch FROM r.received_at - k.official_at) AS after "
            "FROM integration_row w JOIN integration_run r ON r.id = w.run_id "
            "JOIN integration_key_state k ON k.integration_id = w.integration_id "
            " AND k.subject_key = w.subject_key "
            "WHERE w.subject_key = $1 AND w.outcome = 'accepted' "
            "ORDER BY r.received_at DESC LIMIT 1",
            final.external_id,
        )
        builds = [
            r["build"]
            for r in await day.db.fetch(
                "SELECT build FROM integration_run WHERE integration_id = $1::uuid "
                "ORDER BY received_at",
                day.schedule_id,
            )
        ]
        scout_builds = [r.build for r in sim.runs.newest("schedule", limit=200)]
    # Read by a page run the timer asked for, in the window's daily part (after 24 hours).
    assert written["build"] == "page"
    assert written["after"] > 24 * HOUR
    # No other run came in between: the first full run, then only page runs.
    assert builds[0] == "all" and set(builds[1:]) == {"page"}
    assert scout_builds.count("all") == 1


async def _first_run(day: GamesDay) -> Run | None:
    runs = day.sim.runs.newest("schedule", limit=1)
    return runs[0] if runs else None


async def _copy(day: GamesDay, **overrides: Any) -> ImportsApp:
    """Another imports process on the same database: the settle window's timer only."""
    app = ImportsApp(import_settings(day.database_url, day.command.port, **overrides))
    await app.start(0, workers=0, scheduler=False, followups=True, grpc_port=0)
    return app


def _timer(app: ImportsApp) -> FollowUps:
    assert app.followups is not None
    return app.followups


async def test_two_copies_never_ask_for_the_same_key(database_url: str) -> None:
    async with games_day(database_url) as day:
        await load(day)
        # Scout's page runs are made but never rung in, so no key is read: each stays asked.
        day.sim.mute_doorbell(True)
        # Room for all 1,000 keys in page runs at once (four of 250): no key is ever read here.
        timer = {
            "followup_seconds": 0.05,
            "followup_asked_wait_seconds": 60.0,
            "followup_page_runs_at_once": 4,
        }
        copies = [await _copy(day, **timer), await _copy(day, **timer)]
        # Scout takes its time to answer a page run request: while one copy waits for it,
        # the other's passes go on, both at once.
        day.sim.slow_next(100, 0.3, path_prefix="/v1/jobs/")
        keys = [u["externalId"] for u in day.sim.reference()["units"][:1000]]
        await make_due(day, keys)
        try:

            async def all_asked() -> bool:
                return set(keys_asked(page_runs(day))) == set(keys)

            await eventually(all_asked, within=20, what="every due key asked for")
            # Five more passes of each copy: nobody asks again while the page runs are awaited.
            passes = [_timer(c).passes for c in copies]

            async def five_more() -> bool:
                return all(_timer(c).passes >= p + 5 for c, p in zip(copies, passes, strict=True))

            await eventually(five_more, within=20, what="five more passes of each copy")
            asked = keys_asked(page_runs(day))
            by_copy = [sum(len(a.keys) for a in _timer(c).asked) for c in copies]
            sizes = [len(r.rows) for r in page_runs(day)]
        finally:
            for app in copies:
                await app.stop(grace=1)
    assert set(asked) == set(keys)
    assert max(asked.values()) == 1  # each key in one page run, by one copy
    assert sum(by_copy) == len(keys) and min(by_copy) > 0  # both copies asked
    assert max(sizes) <= 250  # followup_keys_per_run


async def test_a_key_asked_for_is_asked_again_only_after_its_wait(database_url: str) -> None:
    async with games_day(
        database_url,
        followups=True,
        import_overrides={"followup_seconds": 0.05, "followup_asked_wait_seconds": 1.0},
    ) as day:
        await load(day)
        day.sim.mute_doorbell(True)  # Scout makes the page run, but omnium never reads it
        key = day.sim.reference()["units"][5]["externalId"]
        await make_due(day, [key])

        async def asked_twice() -> list[Run]:
            runs = [r for r in page_runs(day) if keys_asked([r])[key]]
            return runs if len(runs) >= 2 else []

        second, first = (await eventually(asked_twice, within=20, what="a second ask"))[:2]
        passes = _timer(day.imports).passes
    gap = (second.finished_at - first.finished_at).total_seconds()
    # The wait runs from when the key was marked asked, in the database, a moment before Scout
    # was asked (and Scout's clock stamps its run): the two Scout times may be closer by that
    # moment. Without the wait the asks would come every pass, 0.05 s apart.
    assert gap >= 0.95
    # Asked every pass it would have been asked about 20 times in that second.
    assert passes >= 10


async def test_scout_not_answering_gives_the_keys_back(database_url: str) -> None:
    async with games_day(
        database_url,
        followups=True,
        import_overrides={"followup_seconds": 0.1, "followup_asked_wait_seconds": 600.0},
    ) as day:
        await load(day)
        key = day.sim.reference()["units"][7]["externalId"]
        day.sim.fail_next(1, path_prefix="/v1/jobs/")
        await make_due(day, [key])
        # The first ask fails; had its key kept the 600 s wait, no page run would come now.
        pages = await eventually(lambda: _pages_of(day, key), within=10, what="a page run")
        await day.sim.wait_for_doorbells()
        read = await day.wait_for_run(pages[0].id)
        after = await next_read_at(day, key)
        faults = day.sim.faults.to_json()
    assert read["status"] == "done"
    assert after is not None  # read, and on to its next read in the window
    assert faults["errors"] == []  # the first ask met the error


async def _pages_of(day: GamesDay, key: str) -> list[Run]:
    return [r for r in page_runs(day) if keys_asked([r])[key]]


async def test_a_window_that_closed_unread_asks_no_more(database_url: str) -> None:
    async with games_day(
        database_url,
        followups=True,
        import_overrides={"followup_seconds": 0.05, "followup_asked_wait_seconds": 600.0},
    ) as day:
        await load(day)
        closed, open_ = (u["externalId"] for u in day.sim.reference()["units"][10:12])
        # Official four days ago, its last read never came: it leaves the window unasked.
        await day.db.execute(
            "UPDATE integration_key_state SET official_at = now() - interval '4 days', "
            "next_read_at = now() - interval '1 day' WHERE subject_key = $1",
            closed,
        )
        await make_due(day, [open_])  # claimed with it, or after it
        await eventually(lambda: _pages_of(day, open_), within=10, what="the open key asked")
        gone = await next_read_at(day, closed)
        asked_closed = await _pages_of(day, closed)
    assert gone is None
    assert asked_closed == []


async def test_the_timer_outlasts_a_database_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        crashable_postgres(tmp_path) as pg,
        games_day(
            pg.database_url,
            followups=True,
            import_overrides={
                "followup_seconds": 0.1,
                "database_connect_timeout_seconds": 1.0,
                "imports_database_retry_first_seconds": 0.1,
                "imports_database_retry_max_seconds": 0.5,
            },
        ) as day,
    ):
        await load(day)
        timer = _timer(day.imports)
        await day.db.close()
        await pg.crash()
        down = timer.passes
        await eventually(
            lambda: _passes_after(timer, down + 3), within=30, what="passes while down"
        )
        await pg.start()
        day.db = await asyncpg.connect(pg.database_url)
        try:
            key = day.sim.reference()["units"][3]["externalId"]
            await make_due(day, [key])
            await eventually(lambda: _pages_of(day, key), within=30, what="a page run after")
        finally:
            await day.db.close()
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("omnium")
    ]
    assert errors == []
    assert any("follow-ups: cannot reach the database" in r.getMessage() for r in caplog.records)


async def _passes_after(timer: FollowUps, at_least: int) -> bool:
    return timer.passes >= at_least


async def test_the_timer_stops_with_the_process(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        # Between two passes a minute apart, as in production: a stop does not wait for it.
        app = await _copy(day, followup_seconds=60.0, imports_stop_grace_seconds=5.0)
        timer_task = app.tasks[-1]
        await eventually(lambda: _passes_after(_timer(app), 1), within=10, what="a first pass")
        await app.stop()
    assert timer_task.done() and not timer_task.cancelled()  # ended, not cut after the grace
