"""A run left partly done resumes by itself, with growing waits, when the command service comes
back: no new Scout run, nobody pressing anything. After `resume_tries` it waits for a person,
and its alert says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from omnium.imports.v1 import imports_pb2, imports_pb2_grpc
from omnium_command import CommandApp
from omnium_grpc import open_channel
from tests.support.delivery import query_until
from tests.support.imports import SCHEDULE, GamesDay, games_day
from tests.support.waiting import eventually

MOVED = 60  # units Scout moves: three batches of 25 or fewer


def _settings(**overrides: float) -> dict[str, float]:
    """A batch gives up after half a second; resumes wait 0.5 s, then 1 s, then 2 s."""
    return {
        "batch_retry_seconds": 0.5,
        "batch_retry_first_seconds": 0.1,
        "batch_retry_max_seconds": 0.2,
        "resume_first_seconds": 0.5,
        "resume_max_seconds": 2.0,
        # These tests read the alert of the first partly done attempt.
        "alert_batch_failed_times": 1,
        **overrides,
    }


async def _first_load_then_move(day: GamesDay) -> None:
    run = await day.sim.make_run("schedule", wait_doorbell=True)
    assert (await day.wait_for_run(run.id))["status"] == "done"
    for unit in day.sim.reference()["units"][:MOVED]:
        day.sim.reschedule(unit["externalId"], venue="Moved")


async def _resumes(day: GamesDay, run_id: str) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await day.db.fetch(
        "SELECT status, extract(epoch FROM not_before - created_at) AS wait, "
        "started_at >= not_before AS waited FROM integration_job "
        "WHERE run_id = $1::uuid AND via = 'resume' ORDER BY id",
        run_id,
    )
    return rows


async def _run(day: GamesDay, scout_run_id: str) -> asyncpg.Record:
    row: asyncpg.Record = await day.db.fetchrow(
        "SELECT id::text, status, reason, batch_total, batch_done FROM integration_run "
        "WHERE scout_run_id = $1",
        scout_run_id,
    )
    return row


@asynccontextmanager
async def _command_back(day: GamesDay) -> AsyncIterator[CommandApp]:
    """The command service started again, on the port imports already sends to."""
    app = CommandApp(day.command.settings)
    await app.start(day.command.port)
    try:
        yield app
    finally:
        await app.stop(grace=1)


async def test_a_partly_done_run_resumes_by_itself_once_the_command_service_is_back(
    database_url: str,
) -> None:
    async with games_day(database_url, import_overrides=_settings(resume_tries=6)) as day:
        await _first_load_then_move(day)
        runs_at_scout = day.sim.runs.count("schedule")
        await day.command.app.stop(grace=1)  # the command service is down
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        partly = await query_until(
            day.db,
            "SELECT reason FROM integration_run WHERE scout_run_id = $1 AND status = 'partly_done'",
            run.id,
            within=30,
        )
        ours = await _run(day, run.id)
        # Down through the first resume too: it ends partly done and queues the next, later.
        await eventually(
            lambda: _queued_after(day, ours["id"], 2), within=30, what="a second resume"
        )
        async with _command_back(day):
            done = await eventually(
                lambda: _run_if(day, run.id, "done"), within=30, what="the run done"
            )
            await day.jobs_idle()
            resumes = await _resumes(day, ours["id"])
            moved = await day.db.fetchval("SELECT count(*) FROM unit WHERE venue = 'Moved'")
            jobs = await day.db.fetch(
                "SELECT DISTINCT via FROM integration_job WHERE run_id = $1::uuid", ours["id"]
            )
            alert = await day.db.fetchval(
                "SELECT status FROM alert WHERE kind = 'batch_failed' ORDER BY id DESC LIMIT 1"
            )
        runs_after = day.sim.runs.count("schedule")
    assert "3 of 3 batches could not be saved" in partly
    assert "UNAVAILABLE" in partly
    assert done["batch_done"] == done["batch_total"] == 3
    assert moved == MOVED
    # Nobody ran it again and Scout made no new run: only its doorbell job, then resumes.
    assert {j["via"] for j in jobs} == {"doorbell", "resume"}
    assert runs_after == runs_at_scout + 1
    # Each resume waited its turn, the waits doubling: 0.5 s, 1 s, ...
    assert [float(r["wait"]) for r in resumes] == [0.5, 1.0, 2.0][: len(resumes)]
    assert len(resumes) >= 2 and all(r["waited"] for r in resumes)
    assert alert == "cleared"


async def test_after_its_tries_a_partly_done_run_waits_for_a_person(database_url: str) -> None:
    # Each batch outlasts the gRPC channel's reconnect (its backoff is capped at 1 s), so the
    # Run now pressed just after the command service is back is not spent on a stale backoff.
    async with games_day(
        database_url,
        import_overrides=_settings(
            resume_tries=2, resume_first_seconds=0.2, batch_retry_seconds=3.0
        ),
    ) as day:
        await _first_load_then_move(day)
        await day.command.app.stop(grace=1)
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        waiting = await eventually(
            lambda: _waiting_alert(day), within=30, what="the alert saying it waits"
        )
        ours = await _run(day, run.id)
        await day.jobs_idle()
        resumes = await _resumes(day, ours["id"])
        open_alerts = await day.db.fetchval(
            "SELECT count(*) FROM alert WHERE kind = 'batch_failed' AND status = 'open'"
        )
        async with _command_back(day), _operator(day) as ops:
            # A person reads the alert, sees the command service is back, and presses Run now.
            now = await ops.RunNow(imports_pb2.RunNowRequest(integration_code=SCHEDULE), timeout=10)
            done = await eventually(
                lambda: _run_if(day, run.id, "done"), within=30, what="the run done"
            )
            await day.jobs_idle()
            cleared = await day.db.fetchval(
                "SELECT count(*) FROM alert WHERE kind = 'batch_failed' AND status = 'open'"
            )
    assert [r["status"] for r in resumes] == ["done", "done"]  # two resumes, no third
    assert ours["status"] == "partly_done"
    assert (
        "It resumed by itself 2 times and the batches still could not be saved" in (ours["reason"])
    )
    assert "so it waits for you" in ours["reason"] and "press Run now" in ours["reason"]
    assert waiting.startswith("Run partly done, waiting for you: 3 of 3 batches")
    assert open_alerts == 1
    assert now.done
    assert done["batch_done"] == 3
    assert cleared == 0


async def _queued_after(day: GamesDay, run_id: str, count: int) -> bool:
    return len(await _resumes(day, run_id)) >= count


async def _run_if(day: GamesDay, scout_run_id: str, status: str) -> Any:
    """The run once it has that status; until then None (for `eventually`)."""
    row = await _run(day, scout_run_id)
    return row if row is not None and row["status"] == status else None


async def _waiting_alert(day: GamesDay) -> str:
    message: str = await day.db.fetchval(
        "SELECT message FROM alert WHERE kind = 'batch_failed' AND status = 'open' "
        "AND message LIKE '%waits for you%'"
    )
    return message


@asynccontextmanager
async def _operator(day: GamesDay) -> AsyncIterator[Any]:
    channel = open_channel(f"127.0.0.1:{day.imports.grpc_port}", day.imports.settings)
    try:
        yield imports_pb2_grpc.ImportsServiceStub(channel)
    finally:
        await channel.close()
