"""The Scout simulator over real HTTP: the Games, runs, pages, faults and the control API."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import date, datetime

import httpx
import pytest

from omnium_scout_sim import (
    Games,
    ScoutSimulator,
    SimulatorConfig,
)
from tests.support.scout_sim import SEED, finals, new_run, read_all

TEAM_SPORTS = {"FBL", "BKB", "VVO", "HOC", "CRI", "HBL"}
MEASURED = {"ATH", "SWM", "ROW", "CSP", "SAL", "CTR", "WLF", "GAR", "SHO"}
RSC = re.compile(r"^[A-Z0-9-]{34}$")


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


async def test_a_medal_withdrawn_and_a_table_of_zeros_over_http(
    sim: ScoutSimulator, http: httpx.AsyncClient
) -> None:
    final = finals(sim.games, "SWM")[0]
    row = (await http.post(f"/control/units/{final}/official")).json()["unit"]
    table = {r["noc"]: r for r in (await http.get("/control/medals")).json()["medals"]}
    medallist = next(c for c in row["competitors"] if c["medal"])
    # A protest upheld: that medal goes; a NOC with no medal left leaves the table.
    upheld = await http.post(
        f"/control/units/{final}/disqualify", json={"externalId": medallist["externalId"]}
    )
    assert upheld.status_code == 200, upheld.text
    withdrawn = next(
        c
        for c in upheld.json()["unit"]["competitors"]
        if c["externalId"] == medallist["externalId"]
    )
    assert (withdrawn["medal"], withdrawn["rank"], withdrawn["result"]) == (None, None, "DSQ")
    after = {r["noc"]: r for r in (await http.get("/control/medals")).json()["medals"]}
    assert (
        after.get(medallist["noc"], {"total": 0})["total"] == table[medallist["noc"]]["total"] - 1
    )
    unknown = await http.post(f"/control/units/{final}/disqualify", json={"externalId": "nobody"})
    assert unknown.status_code == 400 and "has no competitor 'nobody'" in unknown.text
    # The next full medal table lists every NOC with no medals; the one after is whole again.
    zero = await http.post("/control/faults/zero-medals", json={})
    assert zero.json()["faults"]["zero_next_medal_table"] is True
    zeros = [r for p in await read_all(http, (await new_run(http, job="medals"))["id"]) for r in p]
    assert zeros and all(r["total"] == 0 for r in zeros)
    whole = [r for p in await read_all(http, (await new_run(http, job="medals"))["id"]) for r in p]
    assert sum(r["total"] for r in whole) == sum(r["total"] for r in after.values())


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
