"""The scorer route set over HTTP: sign-in, CSRF, actions and sync, provider pushes."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg
import httpx

from tests.support.games import make_games
from tests.support.scoring import running_console

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "odf_play_by_play.xml"


async def test_a_scorer_signs_in_and_scores_over_http(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_console(database_url) as site:
        await site.accounts.create("mina", "Mina Park", "scorer", "a long password")
        await site.assign("mina", games.units)
        await site.accounts.create("vic", "Vic Viewer", "viewer", "a long password")
        async with httpx.AsyncClient(base_url=site.url) as http:
            assert (await http.get("/score/api/matches")).status_code == 401
            page = await http.get("/score/")
            assert page.status_code == 200 and "omnium scorer" in page.text
            viewer = await http.post(
                "/score/api/sign-in", json={"login": "vic", "password": "a long password"}
            )
            # Not an account for this console: the same answer as a wrong password.
            assert viewer.status_code == 401
            assert viewer.json() == {"error": "the login or the password is wrong"}
            wrong = await http.post("/score/api/sign-in", json={"login": "mina", "password": "x"})
            assert wrong.json() == {"error": "the login or the password is wrong"}
            signed = await http.post(
                "/score/api/sign-in", json={"login": "mina", "password": "a long password"}
            )
            csrf = signed.json()["csrf"]
            listed = (await http.get("/score/api/matches")).json()["matches"]
            assert [m["unit_id"] for m in listed] == [unit]
            no_csrf = await http.post(
                f"/score/api/matches/{unit}/actions",
                json={"client_id": "w:1", "kind": "start_period"},
            )
            assert no_csrf.status_code == 403
            headers = {"X-CSRF-Token": csrf}
            first = await http.post(
                f"/score/api/matches/{unit}/actions",
                json={"client_id": "w:1", "kind": "start_period", "client_at": 1790000000000},
                headers=headers,
            )
            assert first.json()["outcome"] == "saved"
            synced = await http.post(
                "/score/api/sync",
                json={
                    "actions": [
                        {"client_id": "w:2", "unit_id": unit, "kind": "goal", "side": 2},
                        {"client_id": "w:3", "unit_id": unit, "kind": "goal", "side": 9},
                        {"client_id": "w:1", "unit_id": unit, "kind": "start_period"},
                    ]
                },
                headers=headers,
            )
            body = synced.json()
            state = (await http.get(f"/score/api/matches/{unit}?recent=3")).json()
            standing = (await http.get(f"/score/api/matches/{unit}?standing=1")).json()
            bad = await http.get(f"/score/api/matches/{unit}?recent=lots")
            async with http.stream("GET", f"/score/api/matches/{unit}/watch") as events:
                lines = events.aiter_lines()
                first_event = await anext(line async for line in lines if line.startswith("data:"))
            # After the copy of seq 2: a goal, an undo of it, an undo of the goal of seq 2
            # (in that copy), another goal. The read brings the copy up to date.
            more = [
                {"client_id": "w:4", "unit_id": unit, "kind": "goal", "side": 1},
                {"client_id": "w:5", "unit_id": unit, "kind": "undo"},
                {"client_id": "w:6", "unit_id": unit, "kind": "undo"},
                {"client_id": "w:7", "unit_id": unit, "kind": "goal", "side": 1},
            ]
            await http.post("/score/api/sync", json={"actions": more}, headers=headers)
            since = (await http.get(f"/score/api/matches/{unit}?standing=1&after=2")).json()
            whole = (await http.get(f"/score/api/matches/{unit}?standing=1")).json()
            ahead = (await http.get(f"/score/api/matches/{unit}?standing=1&after=99")).json()
            bad_after = await http.get(f"/score/api/matches/{unit}?standing=1&after=x")
    assert [(a["client_id"], a["outcome"]) for a in body["answers"]] == [
        ("w:2", "saved"),
        ("w:3", "refused"),
        ("w:1", "duplicate"),
    ]
    assert body["answers"][1]["reason"] == "Goal: there is no side 9"
    assert [s["score"] for s in state["sides"]] == ["0", "1"]
    watched = json.loads(first_event.removeprefix("data: "))
    assert (watched["seq"], watched["state"]["sides"][1]["goals"]) == (2, 1)
    assert state["recent"][0]["actor_name"] == "Mina Park"
    assert "standing" not in state  # only when asked: a long match has hundreds
    assert standing["standing_seq"] == 2 and standing["recent"] == []
    assert [(a["seq"], a["kind"], a["side"]) for a in standing["standing"]] == [
        (1, "start_period", None),
        (2, "goal", 2),
    ]
    assert standing["standing"][0]["client_at"] == 1790000000000
    assert bad.status_code == 400 and "recent is how many" in bad.json()["error"]
    assert (since["standing_seq"], since["standing_after"], since["undone_since"]) == (6, 2, [2])
    assert [(a["seq"], a["kind"], a["side"]) for a in since["standing"]] == [(6, "goal", 1)]
    # The copy of seq 2 without what was undone since, and what came: the whole list.
    merged = [a for a in standing["standing"] if a["seq"] not in since["undone_since"]]
    merged += since["standing"]
    assert merged == whole["standing"] and whole["standing_after"] == 0
    assert [a["seq"] for a in whole["standing"]] == [1, 6]
    assert ahead["standing_after"] == 0 and ahead["standing"] == whole["standing"]
    assert bad_after.status_code == 400 and "after is the seq" in bad_after.json()["error"]
    row = await db.fetchrow(
        "SELECT source_code, screen, client_at FROM match_action WHERE command_id = 'w:1'"
    )
    account = await db.fetchval("SELECT id::text FROM account WHERE login = 'mina'")
    assert (row["source_code"], row["screen"]) == (f"account:{account}", "scorer-console")
    assert row["client_at"].timestamp() == 1790000000


async def test_a_provider_pushes_over_http_with_its_key(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    body = SAMPLE.read_text().replace("{unit_code}", games.unit_codes[games.units[0]])
    path = "/v1/providers/odf-fbl/messages"
    async with running_console(database_url) as site, httpx.AsyncClient(base_url=site.url) as http:
        no_key = await http.post(path, content=body)
        bad_key = await http.post(path, content=body, headers={"X-Api-Key": "nope"})
        unknown = await http.post(
            "/v1/providers/nobody/messages", content=body, headers={"X-Api-Key": "k"}
        )
        good = await http.post(
            path,
            content=body,
            headers={"X-Api-Key": "test-odf-key", "Content-Type": "application/xml"},
        )
        broken = await http.post(path, content=b"<OdfBody", headers={"X-Api-Key": "test-odf-key"})
    assert (no_key.status_code, bad_key.status_code, unknown.status_code) == (401, 401, 401)
    # An unknown provider and a wrong key get the same answer: a stranger cannot list them.
    assert unknown.json() == bad_key.json()
    assert good.status_code == 200 and good.json()["outcome"] == "accepted"
    assert good.json()["actions"] == 5
    assert broken.status_code == 400
    assert broken.json()["reason"].startswith("the message is not well-formed XML")
    kept = await db.fetch("SELECT content_type, outcome FROM provider_message ORDER BY id")
    assert [tuple(k) for k in kept] == [
        ("application/xml", "accepted"),
        ("application/octet-stream", "refused"),
    ]
