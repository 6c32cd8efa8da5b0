"""The checker step on delivery's medal tables and live push: while a unit a client's checker
holds shows a medal no approval covers, that client's medal table feeds (whole table and top-N,
JSON, CSV and ODF XML) wait, as the public medal table does, and go out once it is approved; live
push leaves out a medal row's change while the public table waits, and never carries a checker
switched on or off (it changes no result a listener shows).

Real parts: command, delivery, an SFTP server, PostgreSQL and Redis.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from omnium.command.v1 import command_pb2
from omnium_delivery import load_clients
from omnium_live import stream_key
from tests.support.command import CommandClient, running_command
from tests.support.delivery import running_delivery, sends, settled
from tests.support.games import EVENT, make_games
from tests.support.servers import Servers
from tests.support.sftp import SftpServer, asyncssh_server
from tests.support.waiting import eventually

ACCEPTED = command_pb2.OUTCOME_ACCEPTED
MEDAL_FEEDS = [
    {"kind": "medals", "format": "json"},
    {"kind": "medals", "format": "csv", "top": 5},
    {"kind": "medals", "format": "odf"},
]
GLO = "GLO".ljust(34, "-")
FILES = (
    f"{EVENT}_{GLO}_DT_MEDALS.json",
    f"{EVENT}_{GLO}_DT_MEDALS_TOP5.csv",
    f"{EVENT}_{GLO}_DT_MEDALS.xml",
)


async def _submit(cmd: CommandClient, command_id: str, code: str, payload: Any, **kw: Any) -> None:
    answer = await cmd.submit(command_id=command_id, code=code, payload=payload, **kw)
    assert answer.outcome == ACCEPTED, answer.reason


async def _medal_row(cmd: CommandClient, noc: str, gold: int, rank: int, scope: str = "") -> None:
    """A row of the whole Games' table, or of a discipline's (`scope`)."""
    await _submit(
        cmd,
        f"row-{scope}{noc}-{gold}",
        "medals.set_row",
        {"fields": {"gold": gold, "total": gold, "rank": rank}},
        kind="medal_row",
        code_ref=f"{scope}:{noc}",
        event_code=EVENT,
    )


def _files(server: SftpServer, code: str) -> list[str]:
    """The client's three medal table files as they stand ('' for one not sent yet)."""
    folder = server.root / code
    return [(folder / name).read_text() if (folder / name).exists() else "" for name in FILES]


async def _shows(server: SftpServer, code: str, noc: str) -> bool:
    return all(noc in text for text in _files(server, code))


async def _built_past(db: asyncpg.Connection, code: str, command_id: str) -> bool:
    """Every feed of the client was built (sent, found unchanged, or held) past that command."""
    return bool(
        await db.fetchval(
            "SELECT bool_and(f.built_id >= (SELECT max(id) FROM domain_event "
            "WHERE command_id = $2) AND f.marks <= f.built_marks) "
            "FROM client_feed f JOIN client c ON c.id = f.client_id WHERE c.code = $1",
            code,
            command_id,
        )
    )


def _client(code: str, server: SftpServer, checker: bool | list[str]) -> dict[str, Any]:
    return {
        "code": code,
        "event": EVENT,
        "transport": "sftp",
        "sftp": server.sftp_settings(folder=code),
        "feeds": MEDAL_FEEDS,
        "checker": checker,
    }


@pytest.mark.parametrize(
    ("checker", "overrides"),
    [(True, {}), (["FBL"], {}), (False, {"checker_disciplines": ("fbl",)})],
    ids=["per-client", "per-client-discipline", "per-sport-setting"],
)
async def test_a_client_s_medal_tables_wait_for_the_approval_of_a_medal_they_would_count(
    db: asyncpg.Connection,
    database_url: str,
    tmp_path: Path,
    checker: bool | list[str],
    overrides: dict[str, Any],
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]  # football
    # The per-sport setting holds football for every client, "direct" too.
    direct_held = bool(overrides)
    async with asyncssh_server(tmp_path) as server:
        for code in ("checked", "direct"):
            (server.root / code).mkdir()
        await load_clients(
            db, [_client("checked", server, checker), _client("direct", server, ["ATH"])]
        )
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, feed_debounce_seconds=0.2, **overrides),
        ):
            await _medal_row(cmd, "KOR", 1, 1)
            for code in ("checked", "direct"):
                await eventually(lambda c=code: _shows(server, c, "KOR"), what=f"{code} KOR")
                await eventually(lambda c=code: settled(db, c), what=f"{code} settled")
            first = len(await sends(db, "checked"))
            before = _files(server, "checked")

            # A football gold saved, not approved; then the medal row that counts it.
            await _submit(
                cmd,
                "gold",
                "results.set_sides",
                {"sides": [{"order": 1, "score": "2", "medal": "GOLD"}]},
                unit_id=unit,
            )
            await _medal_row(cmd, "JPN", 2, 1)
            for code in ("checked", "direct"):
                await eventually(
                    lambda c=code: _built_past(db, c, "row-JPN-2"), what=f"{code} built"
                )
            if not direct_held:
                await eventually(lambda: _shows(server, "direct", "JPN"), what="direct JPN")
            # Held: the checked client keeps the table it had, in every format; nothing sent.
            waiting = _files(server, "checked")
            waiting_sends = len(await sends(db, "checked"))

            await _submit(cmd, "approve", "results.approve", {}, unit_id=unit)
            await eventually(lambda: _shows(server, "checked", "JPN"), what="checked JPN")
            await eventually(lambda: settled(db, "checked"), what="checked settled")
            after = _files(server, "checked")
    assert waiting == before
    assert all("JPN" not in text for text in waiting)
    assert waiting_sends == first
    assert all("JPN" in text and "KOR" in text for text in after)
    assert json.loads(after[0])["medals"][0]["noc"] == "JPN"


def _discipline_table(server: SftpServer, discipline: str) -> list[str]:
    path = server.root / "scoped" / f"{EVENT}_{discipline.ljust(34, '-')}_DT_MEDALS.json"
    return [row["noc"] for row in json.loads(path.read_text())["medals"]] if path.exists() else []


async def test_a_discipline_s_medal_table_waits_only_for_its_own_medals(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]  # football
    feeds = [
        {"kind": "medals", "format": "json", "discipline": "FBL"},
        {"kind": "medals", "format": "json", "discipline": "ATH"},
    ]
    async with asyncssh_server(tmp_path) as server:
        (server.root / "scoped").mkdir()
        client = {**_client("scoped", server, True), "feeds": feeds}
        await load_clients(db, [client])
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, feed_debounce_seconds=0.2),
        ):
            await _submit(
                cmd,
                "gold",
                "results.set_sides",
                {"sides": [{"order": 1, "score": "2", "medal": "GOLD"}]},
                unit_id=unit,
            )
            await _medal_row(cmd, "JPN", 1, 1, scope="FBL")
            await _medal_row(cmd, "JPN", 1, 1, scope="ATH")
            await eventually(lambda: _built_past(db, "scoped", "row-FBLJPN-1"), what="built")
            # Athletics has no medal waiting: its table goes out; football's waits.
            await eventually(
                lambda: _when_true(_discipline_table(server, "ATH") == ["JPN"]), what="ATH"
            )
            football_waiting = _discipline_table(server, "FBL")
            await _submit(cmd, "approve", "results.approve", {}, unit_id=unit)
            await eventually(
                lambda: _when_true(_discipline_table(server, "FBL") == ["JPN"]), what="FBL"
            )
    assert football_waiting == []


async def _when_true(value: bool) -> bool:
    return value


async def _stream(redis: aioredis.Redis) -> list[dict[str, Any]]:
    entries = await redis.xrange(stream_key(EVENT))
    return [json.loads(fields[b"data"]) for _, fields in entries]


async def _heard(redis: aioredis.Redis, venue: str) -> list[dict[str, Any]] | None:
    """The whole stream once the venue change has reached it (live push keeps the order)."""
    items = await _stream(redis)
    found = any(
        c.get("field") == "venue" and c.get("new") == venue
        for item in items
        for c in item.get("changes") or ()
    )
    return items if found else None


async def test_live_push_leaves_out_a_held_medal_row_and_a_switched_checker(
    db: asyncpg.Connection, database_url: str, servers: Servers
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    redis = aioredis.from_url(servers.redis_url)
    await redis.delete(stream_key(EVENT))
    # A client whose checker holds every discipline (it takes no feeds here).
    await db.execute(
        "INSERT INTO client (code, name, event_id, transport, settings) "
        "SELECT 'checked', 'Checked', id, 'webhook', '{\"checker\": true}' FROM event"
    )
    try:
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, servers.redis_url),
        ):
            await _submit(
                cmd,
                "gold",
                "results.set_sides",
                {"sides": [{"order": 1, "score": "2", "medal": "GOLD"}]},
                unit_id=unit,
            )
            await _medal_row(cmd, "JPN", 1, 1)
            # Another client's checker switched on: an outbox row for the gateway's caches.
            await db.execute(
                "INSERT INTO client (code, name, event_id, transport, settings) "
                "SELECT 'second', 'Second', id, 'webhook', '{\"checker\": [\"ATH\"]}' FROM event"
            )
            await _submit(
                cmd, "venue-1", "units.set_fields", {"fields": {"venue": "Hall 7"}}, unit_id=unit
            )
            held = await eventually(lambda: _heard(redis, "Hall 7"), what="the venue change")

            # Approved: the table is free, and the next medal row goes out live.
            await _submit(cmd, "approve", "results.approve", {}, unit_id=unit)
            await _medal_row(cmd, "CHN", 1, 2)
            await _submit(
                cmd, "venue-2", "units.set_fields", {"fields": {"venue": "Hall 8"}}, unit_id=unit
            )
            freed = await eventually(lambda: _heard(redis, "Hall 8"), what="the second venue")
    finally:
        await redis.aclose()
    # Held: the gold (score and medal) and the JPN row that counts it never went out, nor the
    # second client's checker; only the venue did.
    assert [(i["kind"], [c["field"] for c in i["changes"]]) for i in held] == [
        ("unit.changed", ["venue"])
    ], held
    # Approved: the approval carries the medal, and the next medal row goes out as saved.
    assert [(i["kind"], i["code"]) for i in freed[1:]] == [
        ("results.approved", games.unit_codes[unit]),
        ("medal_row.changed", ":CHN"),
        ("unit.changed", games.unit_codes[unit]),
    ], freed
    approval = {c["field"]: c["new"] for c in freed[1]["changes"]}
    assert approval["sides[1].medal"] == "GOLD"
