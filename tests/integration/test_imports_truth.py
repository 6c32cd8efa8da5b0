"""Imports tell the operator the truth: an alert stays up while its cause holds, the
card is green only when all is fine, every run ends, an answer stays answered, a withdrawn
medal goes, and newer data wins."""

from __future__ import annotations

from omnium.command.v1 import command_pb2
from omnium.imports.v1 import imports_pb2
from omnium_imports._worker import sweep_abandoned_runs
from tests.support.command import person
from tests.support.delivery import query_until
from tests.support.gateway import running_gateway
from tests.support.imports import GamesDay, games_day
from tests.support.servers import Servers
from tests.support.truth import (
    card,
    command_back,
    done,
    first_key,
    open_alerts,
    operator,
    page_run,
    run_status,
)

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
