"""Scout's doorbell: every answer it gives, and a doorbell never makes two runs."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.support.imports import SCHEDULE, SECRET, GamesDay, games_day, sign

DENIED = {"error": "the signature did not match"}


def _body(run_id: str = "r-1") -> bytes:
    ring = {
        "run": {
            "id": run_id,
            "job": "schedule",
            "status": "passed",
            "rowCount": 1,
            "finishedAt": "2026-09-20T01:00:00+00:00",
            "build": "all",
        },
        "sample": [],
    }
    return json.dumps(ring).encode()


async def _ring(day: GamesDay, code: str, body: bytes, signature: str | None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if signature is not None:
        headers["X-Scout-Signature"] = signature
    async with httpx.AsyncClient() as http:
        return await http.post(f"{day.doorbell_url}/doorbell/{code}", content=body, headers=headers)


async def test_who_may_ring(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        body = _body()
        unknown = await _ring(day, "no-such-integration", body, sign(body))
        missing = await _ring(day, SCHEDULE, body, None)
        wrong = await _ring(day, SCHEDULE, body, sign(body, "another-secret"))
        tampered = await _ring(day, SCHEDULE, body + b" ", sign(body))
        not_hex = await _ring(day, SCHEDULE, body, "sha256=zz")
        # The same 401 every time: nothing tells a caller which part was wrong.
        for answer in (unknown, missing, wrong, tampered, not_hex):
            assert answer.status_code == 401
            assert answer.json() == DENIED
        good = await _ring(day, SCHEDULE, body, sign(body))
        assert good.status_code == 200
        assert good.json()["queued"] is True and isinstance(good.json()["job"], int)
        assert await day.db.fetchval("SELECT count(*) FROM integration_job") == 1


async def test_two_secrets_while_rotating(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        await day.db.execute(
            "UPDATE integration SET secret = 'new-secret', previous_secret = $1 WHERE code = $2",
            SECRET,
            SCHEDULE,
        )
        old = await _ring(day, SCHEDULE, _body("r-old"), sign(_body("r-old"), SECRET))
        new = await _ring(day, SCHEDULE, _body("r-new"), sign(_body("r-new"), "new-secret"))
        await day.db.execute(
            "UPDATE integration SET previous_secret = NULL WHERE code = $1", SCHEDULE
        )
        retired = await _ring(day, SCHEDULE, _body("r-3"), sign(_body("r-3"), SECRET))
    assert old.json()["queued"] is True
    assert new.json()["queued"] is True
    assert retired.status_code == 401


async def test_bad_bodies(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        huge = b'{"run": {"id": "x"}, "sample": "' + b"x" * (1024 * 1024) + b'"}'
        too_big = await _ring(day, SCHEDULE, huge, sign(huge))
        not_json = await _ring(day, SCHEDULE, b"hello", sign(b"hello"))
        no_run = await _ring(day, SCHEDULE, b'{"sample": []}', sign(b'{"sample": []}'))
        assert await day.db.fetchval("SELECT count(*) FROM integration_job") == 0
    assert too_big.status_code == 413
    assert "over 1,048,576 bytes" in too_big.json()["error"]
    assert not_json.status_code == 400 and "not a doorbell" in not_json.json()["error"]
    assert no_run.status_code == 400


async def test_an_integration_that_is_not_on_queues_nothing(database_url: str) -> None:
    async with games_day(database_url, workers=0) as day:
        await day.db.execute("UPDATE integration SET state = 'paused' WHERE code = $1", SCHEDULE)
        body = _body()
        answer = await _ring(day, SCHEDULE, body, sign(body))
        assert await day.db.fetchval("SELECT count(*) FROM integration_job") == 0
    assert answer.status_code == 200
    assert answer.json() == {"queued": False, "reason": "the integration is paused"}


async def test_a_doorbell_replayed_ten_times_makes_one_run(database_url: str) -> None:
    async with games_day(database_url) as day:
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        for _ in range(9):
            await day.sim.ring(run.id)
        answers = [d for d in day.sim.deliveries if d.run_id == run.id]
        ours = await day.wait_for_run(run.id)
        await day.jobs_idle()
        late = await day.sim.ring(run.id)
        assert await day.db.fetchval("SELECT count(*) FROM integration_run") == 1
        assert await day.db.fetchval("SELECT count(*) FROM integration_job") == 1
    assert ours["status"] == "done"
    queued = [d.answer["queued"] for d in answers if isinstance(d.answer, dict)]
    assert queued.count(True) == 1 and len(queued) == 10
    assert late.answer == {"queued": False, "reason": f"run {run.id} is already known"}


async def test_the_doorbell_never_fetches(database_url: str) -> None:
    """Scout is stalled; the doorbell still answers at once, and the fetch happens later."""
    async with games_day(database_url, workers=0) as day:
        day.sim.mute_doorbell(True)
        run = await day.sim.make_run("schedule")
        day.sim.slow_next(5, 5.0, path_prefix="/v1/")
        body = json.dumps({"run": {"id": run.id}, "sample": []}).encode()
        answer = await asyncio.wait_for(_ring(day, SCHEDULE, body, sign(body)), 2)
        assert answer.json()["queued"] is True
        day.sim.clear_faults()
