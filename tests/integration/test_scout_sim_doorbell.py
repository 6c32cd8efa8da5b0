"""The Scout simulator's doorbell (signed, rung again until omnium answers), its replay of a
Games day on a fast clock, and its command line."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import logging
import re
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from omnium_devstack import free_port
from omnium_scout_sim import (
    DoorbellTarget,
    Limits,
    Replay,
    ReplaySettings,
    RingAgain,
    Run,
    ScoutSimulator,
    SimulatorConfig,
    SimulatorError,
)
from tests.support.scout_sim import SEED, finals, new_run, read_all, running
from tests.support.waiting import eventually

SECRET = "s3cret-for-tests"


@dataclass
class Doorbells:
    """A tiny omnium doorbell: checks the signature as omnium does and keeps what came."""

    secret: str
    url: str = ""
    calls: list[tuple[str, bytes, bool]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    unavailable: int = 0  # the next rings answered 503 with Retry-After, as omnium does

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.unavailable:
            self.unavailable -= 1
            return web.json_response(
                {"queued": False, "error": "the database did not answer"},
                status=503,
                headers={"Retry-After": "0"},
            )
        expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        given = request.headers.get("X-Scout-Signature", "")
        good = hmac.compare_digest(given.encode(), expected.encode())
        self.calls.append((request.match_info["code"], body, good))
        self.arrived.set()
        if not good:
            return web.json_response({"error": "the signature did not match"}, status=401)
        return web.json_response({"queued": True, "job": len(self.calls)})

    async def next_call(self) -> tuple[str, bytes, bool]:
        async with asyncio.timeout(10):
            while not self.calls:
                self.arrived.clear()
                await self.arrived.wait()
        return self.calls.pop(0)


@asynccontextmanager
async def doorbell_receiver(secret: str = SECRET, port: int = 0) -> AsyncIterator[Doorbells]:
    doorbells = Doorbells(secret)
    app = web.Application()
    app.router.add_post("/doorbell/{code}", doorbells.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    doorbells.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield doorbells
    finally:
        await runner.cleanup()


# Rings again quickly, so the tests of ringing again are quick.
QUICK_RINGS = RingAgain(tries=30, first_seconds=0.05, max_seconds=0.2)


def with_doorbells(
    url: str, secret: str = SECRET, again: RingAgain = QUICK_RINGS
) -> SimulatorConfig:
    return SimulatorConfig(
        seed=SEED,
        doorbells={
            "schedule": DoorbellTarget(url, "scout-schedule", secret),
            "medals": DoorbellTarget(url, "scout-medals", secret),
        },
        limits=Limits(doorbell_again=again),
    )


# -- the doorbell ----------------------------------------------------------------------


async def test_the_doorbell_is_signed_with_the_jobs_secret() -> None:
    async with doorbell_receiver() as doorbells:
        sim = ScoutSimulator(with_doorbells(doorbells.url))
        async with running(sim) as http:
            made = await http.post("/control/runs", json={"wait_doorbell": True})
            run = made.json()["run"]
            assert made.json()["doorbell"]["status"] == 200
            code, body, good = await doorbells.next_call()
            assert (code, good) == ("scout-schedule", True)
            sent = json.loads(body)
            assert sent["run"] == run
            assert (
                sent["sample"] == [r for p in await read_all(http, run["id"], 10) for r in p][:10]
            )
            assert len(sent["sample"]) == 10

            # A page run asked over Scout's API rings in the background, after the answer.
            paged = await http.post(
                "/v1/jobs/schedule/runs", json={"build": "page", "keys": ["SC-000001"]}
            )
            code, body, good = await doorbells.next_call()
            assert good and json.loads(body)["run"]["id"] == paged.json()["id"]
            assert json.loads(body)["run"]["build"] == "page"

            sim.mark_official(finals(sim.games, "WLF")[0])
            await sim.make_run("medals")
            code, body, good = await doorbells.next_call()
            assert (code, good) == ("scout-medals", True)
            assert json.loads(body)["sample"] == sim.medal_table()[:10]

            # A wrong signature: omnium answers 401, and the simulator records it. A 4xx is
            # omnium's last word: it is not rung again.
            await http.post("/control/doorbell", json={"bad_signatures": 1})
            await sim.make_run("schedule", wait_doorbell=True)
            code, body, good = await doorbells.next_call()
            assert good is False
            assert sim.deliveries[-1].status == 401 and sim.deliveries[-1].signed_wrongly
            assert sim.deliveries[-1].tries == 1 and doorbells.calls == []

            # The same run rung again; then a muted doorbell sends nothing.
            rung = await http.post("/control/doorbell/ring", json={"run_id": run["id"]})
            assert rung.json()["doorbell"]["status"] == 200
            assert json.loads((await doorbells.next_call())[1])["run"]["id"] == run["id"]
            await http.post("/control/doorbell", json={"muted": True})
            await new_run(http)
            await sim.wait_for_doorbells()
            assert doorbells.calls == []


async def test_a_doorbell_nobody_answers_does_not_stop_the_simulator() -> None:
    async with doorbell_receiver() as doorbells:
        url = doorbells.url
    # Nothing listens there any more: each doorbell is rung three times, then given up.
    sim = ScoutSimulator(with_doorbells(url, again=RingAgain(3, 0.01, 0.02)))
    async with running(sim) as http:
        made = await http.post("/control/runs", json={"wait_doorbell": True})
        assert made.status_code == 200
        assert made.json()["doorbell"]["status"] is None
        assert made.json()["doorbell"]["error"]
        assert made.json()["doorbell"]["tries"] == 3
        await new_run(http)
        await sim.wait_for_doorbells()
        assert len(sim.deliveries) == 2
        assert (await http.get("/v1/jobs/schedule/runs")).status_code == 200


async def test_a_doorbell_rung_before_omnium_listens_lands_once_it_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`make run` starts Scout and omnium at once; Scout's first run must not be missed."""
    caplog.set_level(logging.INFO, logger="omnium_scout_sim")
    port = free_port()
    sim = ScoutSimulator(with_doorbells(f"http://127.0.0.1:{port}"))
    async with running(sim) as http:
        run = await new_run(http)  # rings in the background; nothing listens yet

        async def rung_in_vain() -> bool:
            return any("ringing again" in r.getMessage() for r in caplog.records)

        await eventually(rung_in_vain, within=10, what="a ring nobody answered")
        async with doorbell_receiver(port=port) as doorbells:
            code, body, good = await doorbells.next_call()
            await sim.wait_for_doorbells()
            landed = sim.deliveries[-1]
            # omnium's database is away for one ring: a 503 with Retry-After is rung again.
            doorbells.unavailable = 1
            await sim.make_run("schedule", wait_doorbell=True)
            again = sim.deliveries[-1]
            assert len(doorbells.calls) == 1
    assert (code, good) == ("scout-schedule", True)
    assert json.loads(body)["run"]["id"] == run["id"]
    assert landed.status == 200 and landed.tries > 1
    assert (again.status, again.tries) == (200, 2)


# -- the replay ------------------------------------------------------------------------


async def test_the_replay_plays_the_same_day_the_same_way() -> None:
    moment = datetime(2026, 9, 24, 14, 0)
    played = []
    for _ in range(2):
        sim = ScoutSimulator(SimulatorConfig(seed=SEED))
        replay = Replay(sim, ReplaySettings(start_local=moment))
        replay.advance_to(moment)
        played.append((sim.games.listed_rows(), sim.medal_table()))
    assert played[0] == played[1]
    rows, table = played[0]
    statuses = Counter(row["status"] for row in rows)
    assert statuses["OFFICIAL"] > 300 and statuses["SCHEDULED"] > 300
    assert table and table[0]["rank"] == 1
    assert all(
        row["status"] == "SCHEDULED"
        for row in rows
        if datetime.fromisoformat(row["startLocal"]) > moment
    )


async def test_a_change_set_for_later_happens_on_the_replay_clock() -> None:
    sim = ScoutSimulator(SimulatorConfig(seed=SEED))
    final = sim.games.units[finals(sim.games, "SWM")[0]]
    official = final.start + timedelta(minutes=final.duration_minutes + 15)
    replay = Replay(sim, ReplaySettings(start_local=official))
    replay.advance_to(official)
    gold = next(c for c in sim.unit(final.external_id)["competitors"] if c["medal"] == "GOLD")
    made: list[datetime] = []

    def protest() -> None:
        made.append(replay.clock)
        sim.disqualify(final.external_id, gold["externalId"])

    replay.at(official + timedelta(hours=30), "a protest upheld", protest)
    replay.advance_to(official + timedelta(hours=29, minutes=59))
    before = next(
        c for c in sim.unit(final.external_id)["competitors"] if c["order"] == gold["order"]
    )
    replay.advance_to(official + timedelta(hours=30, minutes=30))
    after = next(
        c for c in sim.unit(final.external_id)["competitors"] if c["order"] == gold["order"]
    )
    replay.advance_to(official + timedelta(hours=50))
    assert (before["result"], before["medal"]) == (gold["result"], "GOLD")
    assert (after["result"], after["rank"], after["medal"]) == ("DSQ", None, None)
    assert made == [official + timedelta(hours=30, minutes=30)]  # once, on the step it fell in
    with pytest.raises(SimulatorError):
        replay.at(datetime(2026, 9, 25, 12, 0, tzinfo=UTC), "with an offset", protest)


async def test_a_replay_started_again_goes_on_from_its_kept_clock(tmp_path: Path) -> None:
    """The dev stack restarted: PostgreSQL kept the day, and Scout goes on with it rather than
    starting the morning again (which the guards would pause as results taken back)."""
    kept = tmp_path / "scout-sim-clock"
    fast = ReplaySettings(
        seconds_per_hour=0.05,
        schedule_every_seconds=60.0,
        tick_seconds=0.01,
        start_local=datetime(2026, 9, 26, 8, 0),
        state_file=kept,
    )
    first = ScoutSimulator(SimulatorConfig(seed=SEED))
    first.start_replay(fast)

    async def two_hours_on() -> bool:
        return kept.is_file() and datetime.fromisoformat(kept.read_text().strip()) > datetime(
            2026, 9, 26, 10, 0
        )

    await eventually(two_hours_on, within=20.0, what="the replay clock kept two hours on")
    await first.stop()
    stopped_at = datetime.fromisoformat(kept.read_text().strip())
    again = ScoutSimulator(SimulatorConfig(seed=SEED))
    replay = again.start_replay(dataclasses.replace(fast, tick_seconds=60.0))
    went_on = replay.clock
    official = Counter(row["status"] for row in again.games.listed_rows())["OFFICIAL"]
    await again.reset()  # back to the seeded start: the kept clock too
    reset_to = replay.clock
    await again.stop()
    assert went_on == stopped_at
    assert official > 0
    assert reset_to == fast.start_local
    assert datetime.fromisoformat(kept.read_text().strip()) == fast.start_local


async def test_the_replay_makes_runs_and_stops() -> None:
    async with doorbell_receiver() as doorbells:
        sim = ScoutSimulator(with_doorbells(doorbells.url))
        async with running(sim) as http:
            replay = sim.start_replay(
                ReplaySettings(
                    seconds_per_hour=0.05,
                    schedule_every_seconds=0.1,
                    tick_seconds=0.01,
                    start_local=datetime(2026, 9, 26, 8, 0),
                )
            )

            async def replayed() -> tuple[datetime, list[Any], list[Any]]:
                state = (await http.get("/control/state")).json()
                clock = datetime.fromisoformat(state["replay"]["clock_local"])
                schedule = (await http.get("/v1/jobs/schedule/runs")).json()["runs"]
                medals = (await http.get("/v1/jobs/medals/runs")).json()["runs"]
                return clock, schedule, medals

            async def far_enough() -> bool:
                clock_local, schedule, medals = await replayed()
                two_hours = clock_local > datetime(2026, 9, 26, 10, 0)
                return bool(two_hours and len(schedule) >= 3 and medals)

            # Two replayed hours and three schedule runs take about 0.6 s; a busy machine
            # builds each 1,252-unit run slower, so wait for them rather than for a time.
            await eventually(far_enough, within=20.0, what="two hours and three runs replayed")
            clock_local, schedule, medals = await replayed()
            assert clock_local > datetime(2026, 9, 26, 10, 0)
            assert len(schedule) >= 3 and medals
            paused = await http.post("/control/replay", json={"paused": True})
            assert paused.json()["replay"]["paused"] is True
            clock = replay.clock
            await asyncio.sleep(0.1)
            assert replay.clock == clock
            await sim.wait_for_doorbells()
            assert {code for code, _, good in doorbells.calls if good} == {
                "scout-schedule",
                "scout-medals",
            }
        assert replay.to_json()["running"] is False


async def test_the_replay_reads_the_medal_table_from_its_first_second() -> None:
    """As Scout reads each job on its schedule: a medals run every cycle, the first at once,
    though no final is over yet (the demo's medal card had no run, "Late", until a medal)."""
    sim = ScoutSimulator()
    sim.start_replay(
        ReplaySettings(seconds_per_hour=3600.0, schedule_every_seconds=0.2, tick_seconds=0.05)
    )
    try:

        async def medal_runs(count: int) -> list[Run]:
            runs = sim.runs.newest("medals", limit=5)
            return runs if len(runs) >= count else []

        first = (await eventually(lambda: medal_runs(1), within=5.0, what="a medals run"))[-1]
        assert (first.row_count, first.status) == (0, "passed")
        # Made in the same cycle as the first schedule run.
        assert sim.runs.newest("schedule", limit=5)[-1].finished_at <= first.finished_at
        await eventually(lambda: medal_runs(3), within=10.0, what="three medals runs")
        assert sim.medal_table() == []  # nothing changed: a run was made each time anyway
        assert len(sim.runs.newest("schedule", limit=5)) >= 3
    finally:
        await sim.stop()


async def test_the_command_line_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "scout-sim.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "omnium_scout_sim",
            "--port",
            "0",
            "--replay",
            "--replay-seconds-per-hour",
            "2",
            "--replay-run-every",
            "0.5",
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        try:
            assert process.stdout is not None
            async with asyncio.timeout(30):
                line = (await process.stdout.readline()).decode()
            port = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            assert port, f"no address in {line!r}; log: {log.read_text()}"
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port[1]}") as http:
                runs = (await http.get("/v1/jobs/schedule/runs")).json()["runs"]
            assert runs and runs[0]["rowCount"] >= 1240
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert code == 0, log.read_text()


def test_replay_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="seconds_per_hour"):
        ReplaySettings(seconds_per_hour=0).check()
    with pytest.raises(ValueError, match="within the Games"):
        ReplaySettings(start_local=datetime(2026, 9, 19) - timedelta(days=1)).check()
