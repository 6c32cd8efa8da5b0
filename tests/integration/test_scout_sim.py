"""The Scout simulator over real HTTP: runs, pages, faults, the control API and the doorbell."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from omnium_devstack import free_port
from omnium_scout_sim import (
    DoorbellTarget,
    Games,
    Limits,
    Replay,
    ReplaySettings,
    RingAgain,
    Run,
    ScoutSimulator,
    SimulatorConfig,
    SimulatorError,
)
from tests.support.delivery import eventually

SEED = 7
SECRET = "s3cret-for-tests"
TEAM_SPORTS = {"FBL", "BKB", "VVO", "HOC", "CRI", "HBL"}
MEASURED = {"ATH", "SWM", "ROW", "CSP", "SAL", "CTR", "WLF", "GAR", "SHO"}
RSC = re.compile(r"^[A-Z0-9-]{34}$")


# -- helpers ---------------------------------------------------------------------------


@asynccontextmanager
async def running(sim: ScoutSimulator) -> AsyncIterator[httpx.AsyncClient]:
    await sim.start()
    try:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
            yield client
    finally:
        await sim.stop()


@pytest.fixture
async def sim() -> AsyncIterator[ScoutSimulator]:
    simulator = ScoutSimulator(SimulatorConfig(seed=SEED))
    await simulator.start()
    try:
        yield simulator
    finally:
        await simulator.stop()


@pytest.fixture
async def http(sim: ScoutSimulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
        yield client


async def new_run(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post("/control/runs", json=body)
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()["run"]
    return run


async def read_all(http: httpx.AsyncClient, run_id: str, page: int = 500) -> list[list[Any]]:
    """Every page of a run, read as omnium reads it: until a short page."""
    pages: list[list[Any]] = []
    offset = 0
    while True:
        response = await http.get(
            f"/v1/runs/{run_id}/items", params={"offset": offset, "limit": page}
        )
        assert response.status_code == 200, response.text
        items = response.json()["items"]
        pages.append(items)
        if len(items) < page:
            return pages
        offset += len(items)


def finals(games: Games, discipline: str) -> list[str]:
    return [
        u.external_id
        for u in games.units.values()
        if u.discipline == discipline and u.medals != "none"
    ]


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


# -- the Games -------------------------------------------------------------------------


def test_the_same_seed_makes_the_same_games() -> None:
    one, two, other = Games(SEED), Games(SEED), Games(SEED + 1)
    assert one.listed_rows() == two.listed_rows()
    assert one.reference() == two.reference()
    assert one.listed_rows() != other.listed_rows()


def test_the_games_look_like_an_asian_games() -> None:
    games = Games(SEED)
    reference = games.reference()
    assert reference["event"] == {
        "code": "AG2026",
        "name": "Aichi-Nagoya 2026",
        "timeZone": "Asia/Tokyo",
        "firstDay": "2026-09-19",
        "lastDay": "2026-10-04",
    }
    rows = games.listed_rows()
    assert len(rows) >= 1240
    codes = {row["disciplineCode"] for row in rows}
    assert len(codes) >= 20
    assert (
        TEAM_SPORTS | MEASURED | {"BDM", "TTE", "BOX", "JUD", "WRE", "FEN", "TKW", "ARC"} <= codes
    )
    assert len(reference["nocs"]) == 45
    assert {"KOR", "JPN", "CHN", "IND", "THA"} <= {n["code"] for n in reference["nocs"]}
    rscs = [row["rsc"] for row in rows]
    assert all(
        RSC.match(rsc) and rsc.startswith(row["disciplineCode"])
        for rsc, row in zip(rscs, rows, strict=True)
    )
    assert len(set(rscs)) == len(rscs)
    assert len({row["externalId"] for row in rows}) == len(rows)
    days = Counter(datetime.fromisoformat(row["startLocal"]).date() for row in rows)
    assert min(days) == date(2026, 9, 19) and max(days) == date(2026, 10, 4)
    assert all(len(row["startLocal"]) == 19 for row in rows)  # local time, no offset
    for row in rows:
        sizes = len(row["competitors"])
        if row["disciplineCode"] in TEAM_SPORTS:
            assert sizes == 2, row
        elif row["disciplineCode"] in MEASURED:
            assert 6 <= sizes <= 8, row
        assert row["status"] == "SCHEDULED"
        assert all(c["medal"] is None and c["result"] is None for c in row["competitors"])
    known = {c["externalId"] for c in reference["competitors"]}
    assert {c["externalId"] for row in rows for c in row["competitors"]} <= known


# -- reading runs ----------------------------------------------------------------------


async def test_a_full_run_is_read_in_pages_of_500(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    made = await new_run(http, job="schedule")
    listed = (await http.get("/v1/jobs/schedule/runs", params={"status": "passed"})).json()
    assert [r["id"] for r in listed["runs"]] == [made["id"]]
    run = (await http.get(f"/v1/runs/{made['id']}")).json()
    assert run == made
    assert run["status"] == "passed" and run["build"] == "all" and run["rowCount"] >= 1240
    assert run["finishedAt"].endswith("Z") and "reason" not in run and "day" not in run
    pages = await read_all(http, run["id"])
    assert [len(p) for p in pages] == [500, 500, run["rowCount"] - 1000]
    rows = [row for page in pages for row in page]
    assert len({row["externalId"] for row in rows}) == run["rowCount"]
    assert rows == sim.games.listed_rows()


async def test_a_page_holds_at_most_500_rows(sim: ScoutSimulator, http: httpx.AsyncClient) -> None:
    run = await new_run(http)
    url = f"/v1/runs/{run['id']}/items"
    too_many = await http.get(url, params={"limit": 501})
    assert too_many.status_code == 400
    assert "at most 500" in too_many.json()["error"]
    for params in ({"limit": 0}, {"offset": -1}, {"limit": "many"}):
        assert (await http.get(url, params=params)).status_code == 400
    assert len((await http.get(url, params={"limit": 500})).json()["items"]) == 500
    assert (await http.get("/v1/runs/no-such-run/items")).status_code == 404
    assert (await http.get("/v1/runs/no-such-run")).json() == {
        "error": "there is no run 'no-such-run' (or it is too old to be kept)"
    }


async def test_runs_are_listed_newest_first_and_by_status(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    first = await new_run(http)
    failed = await new_run(http, fail_checks="the site showed a maintenance page")
    last = await new_run(http)
    everything = (await http.get("/v1/jobs/schedule/runs")).json()["runs"]
    assert [r["id"] for r in everything] == [last["id"], failed["id"], first["id"]]
    passed = (await http.get("/v1/jobs/schedule/runs", params={"status": "passed"})).json()
    assert [r["id"] for r in passed["runs"]] == [last["id"], first["id"]]
    one = (await http.get("/v1/jobs/schedule/runs", params={"limit": 1})).json()
    assert [r["id"] for r in one["runs"]] == [last["id"]]
    assert (await http.get("/v1/jobs/nope/runs")).status_code == 404
    assert (await http.get("/v1/jobs/schedule/runs", params={"status": "ok"})).status_code == 400


async def test_a_run_that_failed_its_checks(sim: ScoutSimulator, http: httpx.AsyncClient) -> None:
    made = await new_run(http, fail_checks="only 12 rows were found")
    run = (await http.get(f"/v1/runs/{made['id']}")).json()
    assert run["status"] == "failed"
    assert run["reason"] == "only 12 rows were found"
    latest_passed = await http.get("/v1/jobs/schedule/runs", params={"status": "passed"})
    assert latest_passed.json() == {"runs": []}


async def test_a_page_run_reads_only_the_keys_asked(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    ids = list(sim.games.units)
    keys = [*ids[100:349], "SC-999999"]  # 250 keys, one the site does not have
    answer = await http.post("/v1/jobs/schedule/runs", json={"build": "page", "keys": keys})
    assert answer.status_code == 200, answer.text
    run = (await http.get(f"/v1/runs/{answer.json()['id']}")).json()
    assert run["build"] == "page" and run["rowCount"] == 249
    rows = [row for page in await read_all(http, run["id"]) for row in page]
    assert [row["externalId"] for row in rows] == ids[100:349]
    too_many = await http.post("/v1/jobs/schedule/runs", json={"build": "page", "keys": ids[:251]})
    assert too_many.status_code == 400
    assert "at most 250 keys" in too_many.json()["error"]
    day = await http.post("/v1/jobs/schedule/runs", json={"build": "day", "day": "2026-09-21"})
    day_run = (await http.get(f"/v1/runs/{day.json()['id']}")).json()
    assert day_run["build"] == "day" and day_run["day"] == "2026-09-21"
    day_rows = [row for page in await read_all(http, day_run["id"]) for row in page]
    assert day_rows and all(row["startLocal"].startswith("2026-09-21") for row in day_rows)


# -- faults ----------------------------------------------------------------------------


async def test_scout_answers_500_for_the_next_requests(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    run = await new_run(http)
    fault = await http.post("/control/faults/errors", json={"count": 2, "path_prefix": "/v1/runs/"})
    assert fault.status_code == 200
    assert (await http.get("/v1/jobs/schedule/runs")).status_code == 200  # another path
    assert (await http.get("/control/state")).status_code == 200  # control is never faulted
    first = await http.get(f"/v1/runs/{run['id']}/items")
    second = await http.get(f"/v1/runs/{run['id']}")
    assert (first.status_code, second.status_code) == (500, 500)
    assert "internal error" in first.json()["error"]
    assert (await http.get(f"/v1/runs/{run['id']}")).status_code == 200


async def test_scout_answers_slowly(sim: ScoutSimulator, http: httpx.AsyncClient) -> None:
    run = await new_run(http)
    sim.slow_next(1, 1.0)
    with pytest.raises(httpx.ReadTimeout):
        await http.get(f"/v1/runs/{run['id']}", timeout=0.3)
    started = time.monotonic()
    assert (await http.get(f"/v1/runs/{run['id']}")).status_code == 200
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("kind", ["not_json", "no_items", "not_objects"])
async def test_a_malformed_page(sim: ScoutSimulator, http: httpx.AsyncClient, kind: str) -> None:
    run = await new_run(http)
    assert (await http.post("/control/faults/malformed-page", json={"kind": kind})).is_success
    bad = await http.get(f"/v1/runs/{run['id']}/items", params={"limit": 5})
    assert bad.status_code == 200
    if kind == "not_json":
        with pytest.raises(json.JSONDecodeError):
            bad.json()
    elif kind == "no_items":
        assert "items" not in bad.json()
    else:
        assert bad.json()["items"] and not any(isinstance(i, dict) for i in bad.json()["items"])
    good = await http.get(f"/v1/runs/{run['id']}/items", params={"limit": 5})
    assert all(isinstance(i, dict) for i in good.json()["items"])


async def test_a_run_that_claims_more_rows_than_it_has(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    assert (await http.post("/control/faults/overclaim", json={"extra": 7})).is_success
    run = await new_run(http)
    rows = sum(len(p) for p in await read_all(http, run["id"]))
    assert run["rowCount"] == rows + 7
    assert (await new_run(http))["rowCount"] == rows  # used up


async def test_a_short_run(sim: ScoutSimulator, http: httpx.AsyncClient) -> None:
    assert (await http.post("/control/faults/short-run", json={"rows": 12})).is_success
    run = await new_run(http)
    assert run["rowCount"] == 12
    assert sum(len(p) for p in await read_all(http, run["id"])) == 12


# -- the site changing -----------------------------------------------------------------


async def test_a_dropped_unit_leaves_later_runs_and_comes_back(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    unit = "SC-000042"
    before = await new_run(http)
    assert (await http.post(f"/control/units/{unit}/drop")).json()["listed"] is False
    without = await new_run(http)
    assert without["rowCount"] == before["rowCount"] - 1
    ids = {r["externalId"] for p in await read_all(http, without["id"]) for r in p}
    assert unit not in ids
    frozen = {r["externalId"] for p in await read_all(http, before["id"]) for r in p}
    assert unit in frozen  # a run is a snapshot: later changes do not touch it
    paged = await http.post("/v1/jobs/schedule/runs", json={"build": "page", "keys": [unit]})
    assert (await http.get(f"/v1/runs/{paged.json()['id']}")).json()["rowCount"] == 0
    assert (await http.post(f"/control/units/{unit}/restore")).json()["listed"] is True
    back = await new_run(http)
    assert back["rowCount"] == before["rowCount"]
    assert unit in {r["externalId"] for p in await read_all(http, back["id"]) for r in p}


async def test_results_times_venues_and_cancelling(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    unit = next(u for u in sim.games.units.values() if u.discipline == "FBL")
    home, away = (c.competitor.external_id for c in unit.contestants)
    live = await http.post(
        f"/control/units/{unit.external_id}/result",
        json={"status": "RUNNING", "competitors": [{"externalId": home, "result": "1"}]},
    )
    assert live.status_code == 200, live.text
    row = live.json()["unit"]
    assert row["status"] == "RUNNING"
    assert [c["result"] for c in row["competitors"]] == ["1", None]
    moved = await http.post(
        f"/control/units/{unit.external_id}/reschedule",
        json={"start_local": "2026-09-22T19:30:00", "venue": "Toyohashi Stadium"},
    )
    assert moved.json()["unit"]["startLocal"] == "2026-09-22T19:30:00"
    assert moved.json()["unit"]["venue"] == "Toyohashi Stadium"
    with_offset = await http.post(
        f"/control/units/{unit.external_id}/reschedule",
        json={"start_local": "2026-09-22T19:30:00+09:00"},
    )
    assert with_offset.status_code == 400
    cancelled = await http.post(f"/control/units/{unit.external_id}/cancel")
    assert cancelled.json()["unit"]["status"] == "CANCELLED"
    run = await new_run(http)
    rows = {r["externalId"]: r for p in await read_all(http, run["id"]) for r in p}
    assert rows[unit.external_id]["status"] == "CANCELLED"
    assert rows[unit.external_id]["venue"] == "Toyohashi Stadium"
    assert (await http.post("/control/units/SC-999999/cancel")).status_code == 404
    stranger = await http.post(
        f"/control/units/{unit.external_id}/result",
        json={"competitors": [{"externalId": away, "rank": 0}]},
    )
    assert stranger.status_code == 400
    typo = await http.post("/control/runs", json={"failChecks": "x"})
    assert typo.status_code == 400 and "fail_checks" in typo.json()["error"]


async def test_official_finals_make_the_medal_table(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    medal_units = finals(sim.games, "SWM") + finals(sim.games, "JUD")
    unofficial = await http.post(
        f"/control/units/{medal_units[0]}/result", json={"status": "UNOFFICIAL"}
    )
    assert all(c["medal"] is None for c in unofficial.json()["unit"]["competitors"])
    assert all(c["rank"] is not None for c in unofficial.json()["unit"]["competitors"])
    expected: Counter[tuple[str, str]] = Counter()
    for unit_id in medal_units:
        answer = await http.post(f"/control/units/{unit_id}/official")
        row = answer.json()["unit"]
        assert row["status"] == "OFFICIAL"
        for c in row["competitors"]:
            if row["phase"] == "Bronze Medal Match":
                assert c["medal"] == ("BRONZE" if c["rank"] == 1 else None)
            elif row["phase"] in ("Final", "Gold Medal Match"):
                assert c["medal"] == {1: "GOLD", 2: "SILVER", 3: "BRONZE"}.get(c["rank"])
            if c["medal"]:
                expected[(c["noc"], c["medal"])] += 1
    table = (await http.get("/control/medals")).json()["medals"]
    assert table, "official finals gave no medals"
    for row in table:
        got = (row["gold"], row["silver"], row["bronze"])
        assert got == tuple(expected[(row["noc"], m)] for m in ("GOLD", "SILVER", "BRONZE"))
        assert row["total"] == sum(got)
    assert sum(r["total"] for r in table) == sum(expected.values())
    keys = [(-r["gold"], -r["silver"], -r["bronze"]) for r in table]
    assert keys == sorted(keys) and table[0]["rank"] == 1
    run = await new_run(http, job="medals")
    assert [r for p in await read_all(http, run["id"]) for r in p] == table
    reopened = await http.post(
        f"/control/units/{medal_units[-1]}/result", json={"status": "UNOFFICIAL"}
    )
    assert all(c["medal"] is None for c in reopened.json()["unit"]["competitors"])
    after = (await http.get("/control/medals")).json()["medals"]
    assert sum(r["total"] for r in after) < sum(r["total"] for r in table)


async def test_unknown_competitors_and_units_for_held_rows(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    unit = "SC-000300"
    swapped = await http.post(
        f"/control/units/{unit}/competitor",
        json={"order": 1, "externalId": "SC-P-99999", "name": "NEW Athlete", "noc": "KOR"},
    )
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["unit"]["competitors"][0]["externalId"] == "SC-P-99999"
    copy = await http.post(
        f"/control/units/{unit}/copy", json={"start_local": "2026-10-01T10:00:00"}
    )
    new = copy.json()["unit"]
    assert new["externalId"] != unit and RSC.match(new["rsc"])
    reference = (await http.get("/control/reference")).json()
    assert "SC-P-99999" not in {c["externalId"] for c in reference["competitors"]}
    assert new["externalId"] not in {u["externalId"] for u in reference["units"]}
    run = await new_run(http)
    assert new["externalId"] in {
        r["externalId"] for p in await read_all(http, run["id"]) for r in p
    }


async def test_reference_and_state(sim: ScoutSimulator, http: httpx.AsyncClient) -> None:
    reference = (await http.get("/control/reference")).json()
    assert reference["event"]["code"] == "AG2026"
    assert len(reference["disciplines"]) >= 20
    assert len(reference["units"]) == len(sim.games.units)
    assert all(
        RSC.match(u["rsc"]) and u["externalId"].startswith("SC-") for u in reference["units"]
    )
    assert {"externalId", "name", "noc", "discipline"} <= set(reference["competitors"][0])
    assert reference["scout"]["jobs"] == {"schedule": "schedule", "medals": "medals"}
    state = (await http.get("/control/state")).json()
    assert state["units"]["total"] == len(sim.games.units)
    assert state["runs"]["schedule"]["latest"] is None


async def test_reset_goes_back_to_the_seeded_start(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    seeded = sim.games.listed_rows()
    old = await new_run(http)
    await http.post("/control/units/SC-000001/drop")
    await http.post("/control/units/SC-000002/official")
    await http.post("/control/faults/errors", json={"count": 5})
    assert (await http.post("/control/reset")).status_code == 200
    assert (await http.get(f"/v1/runs/{old['id']}")).status_code == 404
    assert (await http.get("/v1/jobs/schedule/runs")).json() == {"runs": []}
    assert sim.games.listed_rows() == seeded
    again = await new_run(http)
    assert again["id"] != old["id"]


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
