"""Imports tell the operator the truth, the rest: the "3 times" alert, the settle
window's start, Running while a run writes, unknown units held, I12 by records, and what the
integration file carries."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from omnium.imports.v1 import imports_pb2
from omnium_imports._files import integration_from, mapping_file
from omnium_imports._followups import FollowUps
from omnium_imports._inputs import read_document
from omnium_imports._setup import register_integration
from tests.support.command import TOKEN
from tests.support.delivery import query_until
from tests.support.imports import SCHEDULE, GamesDay, games_day, sign
from tests.support.onboarding import terminal_env
from tests.support.truth import (
    EXAMPLES,
    done,
    open_alerts,
    operator,
)

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


# Also: the integration file could not carry its own settings, OMNIUM_CHECK_SECONDS was never
# read, and a secret rotated from the file never kept the previous one.


async def _ring(day: GamesDay, code: str, secret: str) -> int:
    body = json.dumps(
        {
            "run": {
                "id": "r-rotation",
                "job": "schedule",
                "status": "passed",
                "rowCount": 1,
                "finishedAt": "2026-09-20T01:00:00+00:00",
                "build": "all",
            },
            "sample": [],
        }
    ).encode()
    headers = {"content-type": "application/json", "X-Scout-Signature": sign(body, secret)}
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{day.doorbell_url}/doorbell/{code}", content=body, headers=headers
        )
    return answer.status_code


async def test_the_integration_file_s_settings_interval_and_secret_rotation(
    database_url: str,
) -> None:
    example = integration_from(read_document(str(EXAMPLES / "integration.json")))
    # A file with no check_seconds: the service's setting is its interval.
    first = dataclasses.replace(
        example, secret="first-secret-123", settings={"max_cleared": 40}, check_seconds=None
    )
    async with games_day(database_url) as day:
        await register_integration(day.db, first, check_seconds=900, rotation_seconds=3600)
        stored = await day.db.fetchrow(
            "SELECT check_seconds, settings FROM integration WHERE code = $1", first.code
        )
        # The secret is rotated from the file: Scout may still sign with the old one a while.
        second = dataclasses.replace(first, secret="second-secret-456")
        await register_integration(day.db, second, check_seconds=900, rotation_seconds=3600)
        old_within = await _ring(day, first.code, first.secret)
        new = await _ring(day, first.code, second.secret)
        await day.db.execute(
            "UPDATE integration SET previous_secret_until = now() - interval '1 second' "
            "WHERE code = $1",
            first.code,
        )
        old_after = await _ring(day, first.code, first.secret)
    assert stored["check_seconds"] == 900
    assert stored["settings"] == {"max_cleared": 40}
    assert (old_within, new, old_after) == (200, 200, 401)


# Also: `mapping publish` gave no warning when key_fields changed (every old key turns missing).


async def _publish(day: GamesDay, path: Path, *extra: str) -> tuple[int, str]:
    env = terminal_env(
        f"127.0.0.1:{day.command.port}",
        OMNIUM_DATABASE_URL=day.database_url,
        OMNIUM_GRPC_TOKEN=TOKEN,
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "omnium_imports",
        "mapping",
        "publish",
        SCHEDULE,
        str(path),
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()


async def test_mapping_publish_asks_yes_when_the_key_fields_change(
    database_url: str, tmp_path: Path
) -> None:
    mapping = mapping_file("scout_units")
    mapping["key_fields"] = ["disciplineCode", "externalId"]
    path = tmp_path / "rekeyed.json"
    path.write_text(json.dumps(mapping))
    async with games_day(database_url) as day:
        await done(day)
        before = await day.db.fetchval(
            "SELECT current_version FROM integration WHERE id = $1::uuid", day.schedule_id
        )
        refused, said = await _publish(day, path)
        unchanged = await day.db.fetchval(
            "SELECT current_version FROM integration WHERE id = $1::uuid", day.schedule_id
        )
        published, _ = await _publish(day, path, "--yes")
        after = await day.db.fetchval(
            "SELECT current_version FROM integration WHERE id = $1::uuid", day.schedule_id
        )
    assert refused == 1, said
    assert "key_fields change from ['externalId'] to ['disciplineCode', 'externalId']" in said
    assert "1,252 keys" in said and "--yes" in said
    assert unchanged == before
    assert published == 0
    assert after == before + 1


# Also: nothing bounded how many page runs were asked of Scout at once.


async def test_page_runs_asked_of_scout_at_once_are_bounded(database_url: str) -> None:
    async with games_day(database_url) as day:
        await done(day)
        # Scout makes the page runs but never rings them in: no key asked is read.
        day.sim.mute_doorbell(True)
        keys = [u["externalId"] for u in day.sim.reference()["units"][:1000]]
        await day.db.execute(
            "UPDATE integration_key_state SET official_at = now() - interval '2 hours', "
            "next_read_at = now() - interval '1 minute' "
            "WHERE integration_id = $1::uuid AND subject_key = ANY($2::text[])",
            day.schedule_id,
            keys,
        )
        settings = day.imports.settings
        assert day.imports.pool is not None
        timer = FollowUps(settings, day.imports.pool, day.imports.workers[0].pipeline.scout)
        asked = [len(await timer.ask_due()) for _ in range(4)]
    # Two page runs of 250 keys (followup_page_runs_at_once) wait to be read: the next passes
    # ask for none.
    assert asked == [1, 1, 0, 0]


# Also: `mapping check` did not say what the guards would do.


async def test_mapping_check_says_what_each_guard_would(database_url: str, tmp_path: Path) -> None:
    async with games_day(database_url) as day:
        await done(day)
        await day.db.execute(
            "UPDATE integration SET settings = settings || '{\"max_cleared\": 7}'::jsonb "
            "WHERE id = $1::uuid",
            day.schedule_id,
        )
        short = day.sim.reference()["units"][:100]
        rows = [day.sim.unit(unit["externalId"]) for unit in short]
        items = tmp_path / "short.json"
        items.write_text(json.dumps(rows))
        address = f"127.0.0.1:{day.command.port}"
        env = terminal_env(address, OMNIUM_DATABASE_URL=day.database_url, OMNIUM_GRPC_TOKEN=TOKEN)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "omnium_imports",
            "mapping",
            "check",
            SCHEDULE,
            "--items",
            str(items),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await process.communicate()
    said = out.decode()
    assert "Guards, as they would judge this run now: 1 would pause it." in said, said
    assert (
        "size (at least 50% of the usual rows, the median of the last 5 written runs): Scout "
        "sent 100 rows; it usually sends about 1,252." in said
    ), said
    # Each guard says the limit it holds this integration to: here its own max_cleared.
    assert "rows that cannot be read (at most 10%): passes" in said
    assert "records cleared (at most 7) or finished units reopened (at most 5) (I12)" in said
