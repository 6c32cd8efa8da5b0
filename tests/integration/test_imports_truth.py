"""Imports tell the operator the truth (issue 31): an alert stays up while its cause holds, and
the card is green only when Scout, omnium and Waiting for you are all fine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from omnium.command.v1 import command_pb2
from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_admin import _present as present
from omnium_command import CommandApp
from omnium_grpc import open_channel
from omnium_imports._worker import sweep_abandoned_runs
from tests.support.command import person
from tests.support.delivery import query_until
from tests.support.gateway import running_gateway
from tests.support.imports import SCHEDULE, GamesDay, games_day
from tests.support.servers import Servers


@asynccontextmanager
async def operator(day: GamesDay) -> AsyncIterator[imports_pb2_grpc.ImportsServiceStub]:
    channel = open_channel(f"127.0.0.1:{day.imports.grpc_port}", day.imports.settings)
    try:
        yield imports_pb2_grpc.ImportsServiceStub(channel)
    finally:
        await channel.close()


@asynccontextmanager
async def command_back(day: GamesDay) -> AsyncIterator[CommandApp]:
    """The command service started again, on the port imports already sends to."""
    app = CommandApp(day.command.settings)
    await app.start(day.command.port, migrate=False)
    try:
        yield app
    finally:
        await app.stop(grace=1)


async def done(day: GamesDay, job: str = "schedule") -> dict[str, Any]:
    run = await day.sim.make_run(job, wait_doorbell=True)
    ours = dict(await day.wait_for_run(run.id))
    assert ours["status"] == "done", ours["reason"]
    return ours


async def page_run(day: GamesDay, keys: list[str], job: str = "schedule") -> dict[str, Any]:
    run = await day.sim.make_run(job, build="page", keys=keys, wait_doorbell=True)
    return dict(await day.wait_for_run(run.id))


async def open_alerts(day: GamesDay) -> list[str]:
    rows = await day.db.fetch("SELECT kind FROM alert WHERE status = 'open' ORDER BY kind")
    return [row["kind"] for row in rows]


async def run_status(day: GamesDay, run_id: str) -> str:
    status: str = await day.db.fetchval(
        "SELECT status FROM integration_run WHERE id = $1::uuid", run_id
    )
    return status


async def card(ops: imports_pb2_grpc.ImportsServiceStub, code: str = SCHEDULE) -> dict[str, Any]:
    """The integration's card as the admin console shows it."""
    answer = await ops.ListIntegrations(imports_pb2.ListIntegrationsRequest(), timeout=10)
    return present.card(next(i for i in answer.integrations if i.code == code))


def first_key(day: GamesDay) -> str:
    key: str = day.sim.reference()["units"][0]["externalId"]
    return key


# Finding 1: a done page run cleared every alert and turned the card green.


async def test_a_page_run_leaves_a_guard_pause_standing(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        day.sim.shorten_next_run(100)
        short = await day.sim.make_run("schedule", wait_doorbell=True)
        paused = dict(await day.wait_for_run(short.id))
        before = await card(ops)
        page = await page_run(day, [first_key(day)])
        alerts = await open_alerts(day)
        after = await card(ops)
        still = await run_status(day, paused["id"])
    assert paused["status"] == "paused_by_guard"
    assert page["status"] == "done", page["reason"]
    assert alerts == ["guard"]
    assert still == "paused_by_guard"
    assert before["omnium"]["word"] == "Stopped by a check"
    assert after["omnium"]["word"] == "Stopped by a check"
    assert not after["green"] and after["verdict"] == "Needs a look"


async def test_a_page_run_leaves_a_run_waiting_for_a_person_failing(database_url: str) -> None:
    overrides = {
        "batch_retry_seconds": 3.0,
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.1,
        "resume_tries": 0,
    }
    async with games_day(database_url, import_overrides=overrides) as day, operator(day) as ops:
        await done(day)
        for unit in day.sim.reference()["units"][:30]:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        await day.command.app.stop(grace=1)
        full = await day.sim.make_run("schedule", wait_doorbell=True)
        partly = dict(await day.wait_for_run(full.id))
        async with command_back(day):
            page = await page_run(day, [first_key(day)])
            alerts = await open_alerts(day)
            after = await card(ops)
            still = await run_status(day, partly["id"])
    assert partly["status"] == "partly_done"
    assert page["status"] == "done", page["reason"]
    assert alerts == ["batch_failed"]
    assert still == "partly_done"
    assert after["omnium"]["word"] == "Failing"
    assert not after["green"]


async def test_the_card_is_not_green_while_an_item_waits_for_you(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        gone = first_key(day)
        day.sim.drop(gone)
        for _ in range(2):
            await done(day)
        await query_until(
            day.db, "SELECT count(*) FROM review_item WHERE kind = 'missing' AND status = 'open'"
        )
        seen = await card(ops)
    assert seen["waiting"] == 1
    assert not seen["green"]
    assert seen["omnium"]["word"] == "Waiting for you"


# Finding 2: an error inside a run left it "Running" for ever, with no alert.


async def test_an_error_after_the_batches_ends_the_run_failed_with_an_alert(
    database_url: str,
) -> None:
    overrides = {
        "auto_cancel_missing": True,
        "batch_retry_seconds": 0.5,
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.2,
    }
    async with games_day(database_url, import_overrides=overrides) as day, operator(day) as ops:
        await done(day)
        gone = first_key(day)
        day.sim.drop(gone)
        await done(day)  # missing once
        # The command service is down; the next full run writes nothing new (every row takes
        # the fast path), and its missing-keys step sends the cancel of the unit gone twice.
        await day.command.app.stop(grace=1)
        full = await day.sim.make_run("schedule", wait_doorbell=True)
        ended = dict(await day.wait_for_run(full.id, seconds=30))
        finished_at = await day.db.fetchval(
            "SELECT finished_at FROM integration_run WHERE id = $1::uuid", ended["id"]
        )
        alerts = await open_alerts(day)
        seen = await card(ops)
        asked = await day.db.fetchval(
            "SELECT count(*) FROM review_item WHERE kind = 'missing' AND status = 'open'"
        )
    assert ended["status"] == "failed"
    assert f"the cancel of {gone}" in ended["reason"]
    assert "UNAVAILABLE" in ended["reason"]
    assert finished_at is not None
    assert alerts == ["run_failed"]
    assert seen["omnium"]["word"] == "Failing"
    assert asked == 1  # the question stays for a person


async def test_a_run_left_applying_is_swept_with_a_reason_and_an_alert(database_url: str) -> None:
    async with games_day(database_url, import_overrides={"lease_expire_seconds": 1.0}) as day:
        first = await done(day)
        # A run whose job ended without closing it (a version before every stage was inside
        # the run's error handling left runs so).
        await day.db.execute(
            "UPDATE integration_run SET status = 'applying', finished_at = NULL, "
            "received_at = now() - interval '1 minute' WHERE id = $1::uuid",
            first["id"],
        )
        swept = await sweep_abandoned_runs(
            day.imports.settings, day.db, day.imports.workers[0].pipeline.alerts
        )
        run = await day.db.fetchrow(
            "SELECT status, reason, finished_at FROM integration_run WHERE id = $1::uuid",
            first["id"],
        )
        alerts = await open_alerts(day)
    assert swept == 1
    assert run["status"] == "failed"
    assert "was left applying" in run["reason"]
    assert run["finished_at"] is not None
    assert alerts == ["run_failed"]


# Finding 3: an answered question came back.


async def missing_items(day: GamesDay) -> dict[str, int]:
    rows = await day.db.fetch(
        "SELECT subject_key, id FROM review_item WHERE kind = 'missing' AND status = 'open'"
    )
    return {row["subject_key"]: row["id"] for row in rows}


async def missing_counts(day: GamesDay, keys: list[str]) -> dict[str, int]:
    rows = await day.db.fetch(
        "SELECT subject_key, missing_runs FROM integration_key_state WHERE subject_key = ANY($1)",
        keys,
    )
    return {row["subject_key"]: row["missing_runs"] for row in rows}


async def test_an_answered_missing_key_is_not_asked_again(database_url: str) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        units = day.sim.reference()["units"]
        dismissed, cancelled, by_hand = (units[n]["externalId"] for n in (0, 1, 2))
        # A person cancels one unit first; Scout then drops it with two others.
        by_hand_cancel = await day.command.submit(
            command_id="by-hand-cancel",
            code="results.set_status",
            payload={"status": "CANCELLED"},
            code_ref=units[2]["rsc"],
            event_code="AG2026",
        )
        assert by_hand_cancel.outcome == command_pb2.OUTCOME_ACCEPTED, by_hand_cancel.reason
        for key in (dismissed, cancelled, by_hand):
            day.sim.drop(key)
        for _ in range(2):
            await done(day)
        asked = await missing_items(day)
        for key, cancel in ((dismissed, False), (cancelled, True)):
            answer = await ops.ResolveMissing(
                imports_pb2.ResolveMissingRequest(
                    item_id=asked[key], cancel=cancel, actor=person("Mei", screen="admin:waiting")
                ),
                timeout=10,
            )
            assert answer.done, answer.message
        # Two more full runs (Waiting for you used to refill every ten minutes).
        for _ in range(2):
            await done(day)
        after = await missing_items(day)
        counts = await missing_counts(day, [dismissed, cancelled, by_hand])
        # Seen again, then missed again: it may be asked about once more.
        day.sim.restore(dismissed)
        await done(day)
        day.sim.drop(dismissed)
        for _ in range(2):
            await done(day)
        again = await missing_items(day)
    assert set(asked) == {dismissed, cancelled}  # the unit cancelled by hand is not asked about
    assert after == {}
    assert counts[dismissed] == 0 and counts[cancelled] == 0
    assert set(again) == {dismissed}


# Finding 4: a medal withdrawn after a protest could not be removed.


async def test_a_medal_withdrawn_after_a_protest_leaves_the_table(
    database_url: str, servers: Servers
) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        final = next(
            unit.external_id
            for unit in day.sim.games.units.values()
            if unit.medals not in ("none", "bronze") and len(unit.contestants) > 3
        )
        day.sim.mark_official(final)
        totals = {row["noc"]: row["total"] for row in day.sim.medal_table()}
        medallist = next(
            c
            for c in day.sim.unit(final)["competitors"]
            if c["medal"] and totals.get(c["noc"]) == 1
        )
        noc = medallist["noc"]
        await done(day, "medals")
        before = await day.db.fetchval("SELECT total FROM medal_row WHERE noc = $1", noc)
        # The protest is upheld: the NOC's only medal is taken back, and Scout's table no
        # longer lists it.
        day.sim.disqualify(final, medallist["externalId"])
        assert noc not in {row["noc"] for row in day.sim.medal_table()}
        for _ in range(2):
            await done(day, "medals")
        asked = await day.db.fetchrow(
            "SELECT id, subject_key FROM review_item WHERE kind = 'missing' AND status = 'open'"
        )
        answer = await ops.ResolveMissing(
            imports_pb2.ResolveMissingRequest(
                item_id=asked["id"], cancel=True, actor=person("Mei", screen="admin:waiting")
            ),
            timeout=10,
        )
        after = await day.db.fetchrow(
            "SELECT gold, silver, bronze, total, rank FROM medal_row WHERE noc = $1", noc
        )
        async with running_gateway(database_url, servers.redis_url) as gateway:
            served = (await gateway.get("/v1/events/AG2026/medals")).json()
    assert before == 1
    assert asked["subject_key"] == noc
    assert answer.done, answer.message
    assert tuple(after) == (0, 0, 0, 0, None)
    assert noc not in {row["noc"] for row in served["rows"]}
    assert served["rows"]  # the rest of the table is still there


# Finding 5: an older run could undo a newer correction.


async def test_a_resumed_older_run_does_not_undo_a_newer_page_run(database_url: str) -> None:
    overrides = {
        "batch_retry_seconds": 3.0,
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.5,
        # The worker resumes it when the test says (by then a newer page run is written).
        "resume_first_seconds": 3600.0,
        "resume_max_seconds": 3600.0,
    }
    async with games_day(database_url, import_overrides=overrides) as day:
        await done(day)
        units = day.sim.reference()["units"][:30]
        for unit in units:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        await day.command.app.stop(grace=1)
        full = await day.sim.make_run("schedule", wait_doorbell=True)
        partly = dict(await day.wait_for_run(full.id))
        async with command_back(day):
            # After the full run was read, the site corrects one venue; a page run reads it.
            corrected = units[0]
            day.sim.reschedule(corrected["externalId"], venue="Corrected")
            page = await page_run(day, [corrected["externalId"]])
            # The worker resumes the older run.
            await day.db.execute(
                "UPDATE integration_job SET not_before = now() "
                "WHERE run_id = $1::uuid AND status = 'queued'",
                partly["id"],
            )
            resumed = await query_until(
                day.db,
                "SELECT outcomes FROM integration_run WHERE id = $1::uuid AND status = 'done'",
                partly["id"],
                within=60,
            )
            await day.jobs_idle()
            venue = await day.db.fetchval(
                "SELECT venue FROM unit WHERE code = $1", corrected["rsc"]
            )
            moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
    assert partly["status"] == "partly_done"
    assert page["status"] == "done", page["reason"]
    assert venue == "Corrected"
    assert moved == 29
    assert resumed.get("older") == 1


# Also: "a batch that failed 3 times" alerted at the first partly done run, and again later.


async def test_a_batch_failed_alert_waits_for_the_third_failure_and_is_raised_once(
    database_url: str,
) -> None:
    overrides = {
        "batch_retry_seconds": 0.3,
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.1,
        "resume_first_seconds": 2.0,
        "resume_max_seconds": 2.0,
        "resume_tries": 3,
    }
    async with games_day(database_url, import_overrides=overrides) as day:
        await done(day)
        for unit in day.sim.reference()["units"][:30]:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        await day.command.app.stop(grace=1)  # down for good
        full = await day.sim.make_run("schedule", wait_doorbell=True)
        first = dict(await day.wait_for_run(full.id))
        after_first = await open_alerts(day)
        raised = await query_until(
            day.db,
            "SELECT message FROM alert WHERE kind = 'batch_failed' AND status = 'open'",
            within=60,
        )
        resumes_then = await day.db.fetchval(
            "SELECT count(*) FROM integration_job "
            "WHERE run_id = $1::uuid AND via = 'resume' AND started_at IS NOT NULL",
            first["id"],
        )
        waiting = await query_until(
            day.db,
            "SELECT message FROM alert WHERE kind = 'batch_failed' AND message LIKE '%waiting%'",
            within=60,
        )
        alerts = await day.db.fetchval("SELECT count(*) FROM alert WHERE kind = 'batch_failed'")
    assert first["status"] == "partly_done"
    assert after_first == []
    assert raised.startswith("Run partly done 3 times: ")
    assert resumes_then == 2  # the first attempt and two resumes (the next waits 2 s)
    assert waiting.startswith("Run partly done, waiting for you: ")
    assert alerts == 1


# Also: the settle window started when omnium first saw a result official.


async def test_the_settle_window_starts_when_the_source_said_official(database_url: str) -> None:
    async with games_day(database_url) as day:
        final = next(
            unit.external_id
            for unit in day.sim.games.units.values()
            if unit.medals not in ("none", "bronze")
        )
        day.sim.mark_official(final)
        # Scout read the official result three hours ago; omnium gets to the run only now.
        read_at = datetime.now(UTC) - timedelta(hours=3)
        run = await day.sim.make_run("schedule", finished_at=read_at, wait_doorbell=True)
        ours = await day.wait_for_run(run.id)
        window = await day.db.fetchrow(
            "SELECT official_at, next_read_at FROM integration_key_state WHERE subject_key = $1",
            final,
        )
    assert ours["status"] == "done", ours["reason"]
    assert abs(window["official_at"] - read_at) < timedelta(seconds=1)
    # The first read again is an hour after the source said official: due already.
    assert window["next_read_at"] - window["official_at"] == timedelta(hours=1)


# Also: a resumed run kept its old status while it wrote ("Partly done", not Running).


async def test_a_resumed_run_shows_running_while_it_writes(database_url: str) -> None:
    overrides = {
        "batch_retry_seconds": 2.0,
        "batch_retry_first_seconds": 0.2,
        "batch_retry_max_seconds": 0.5,
        "resume_first_seconds": 0.5,
        "resume_max_seconds": 0.5,
        "resume_tries": 1,
    }
    async with games_day(database_url, import_overrides=overrides) as day:
        await done(day)
        for unit in day.sim.reference()["units"][:30]:
            day.sim.reschedule(unit["externalId"], venue="Moved")
        await day.command.app.stop(grace=1)
        full = await day.sim.make_run("schedule", wait_doorbell=True)
        partly = dict(await day.wait_for_run(full.id))
        reason = await day.db.fetchval(
            "SELECT reason FROM integration_run WHERE id = $1::uuid", partly["id"]
        )
        # Its resume tries its batches (the command service is still down) for 2 s.
        running = await query_until(
            day.db,
            "SELECT status FROM integration_run WHERE id = $1::uuid "
            "AND status IN ('received', 'applying')",
            partly["id"],
            within=20,
        )
        await day.jobs_idle()
    assert partly["status"] == "partly_done"
    assert "It resumes by itself at " in reason and "(resume 1 of 1;" in reason
    assert running in ("received", "applying")


# Also: a row naming a unit we do not know came back not_placed, with no question.


async def test_a_row_naming_a_unit_we_do_not_have_is_held_with_a_question(
    database_url: str,
) -> None:
    async with games_day(database_url) as day, operator(day) as ops:
        await done(day)
        # From now on the integration places rows on our units only; Scout adds a replay.
        await day.db.execute(
            "UPDATE integration SET creates_units = false WHERE id = $1::uuid", day.schedule_id
        )
        source = day.sim.reference()["units"][5]
        replay = day.sim.copy_unit(source["externalId"])["externalId"]
        held = await done(day)
        question = await day.db.fetchval(
            "SELECT question FROM review_item WHERE kind = 'held' AND status = 'open' "
            "AND subject_key = $1",
            replay,
        )
        # A person answers: it is our unit of the source's code.
        ours = await day.db.fetchval("SELECT id::text FROM unit WHERE code = $1", source["rsc"])
        await ops.AddLookup(
            imports_pb2.AddLookupRequest(
                integration_code=SCHEDULE, kind="unit", external_id=replay, our_id=ours
            ),
            timeout=10,
        )
        placed = await done(day)
        still_open = await day.db.fetchval(
            "SELECT count(*) FROM review_item WHERE kind = 'held' AND status = 'open'"
        )
    assert held["outcomes"].get("held") == 1 and "not_placed" not in held["outcomes"]
    assert question is not None and "Which of our units is this?" in question
    assert "held" not in placed["outcomes"]
    assert still_open == 0


# Also: I12 counted cleared values of units only: a medal table of zeros passed every guard.


async def test_a_medal_table_of_zeros_is_paused_by_the_clear_guard(database_url: str) -> None:
    async with games_day(database_url) as day:
        finals = [
            unit.external_id
            for unit in day.sim.games.units.values()
            if unit.medals not in ("none", "bronze")
        ][:3]
        for final in finals:
            day.sim.mark_official(final)
        await done(day, "medals")
        nocs = await day.db.fetchval("SELECT count(*) FROM medal_row WHERE total > 0")
        await day.db.execute(
            "UPDATE integration SET settings = settings || '{\"max_cleared\": 2}'::jsonb "
            "WHERE id = $1::uuid",
            day.medals_id,
        )
        day.sim.zero_next_medal_table()
        zeros = await day.sim.make_run("medals", wait_doorbell=True)
        paused = await day.wait_for_run(zeros.id)
        still = await day.db.fetchval("SELECT count(*) FROM medal_row WHERE total > 0")
    assert nocs > 2
    assert paused["status"] == "paused_by_guard", paused["reason"]
    assert f"would clear {nocs} records we hold" in paused["reason"]
    assert still == nocs
