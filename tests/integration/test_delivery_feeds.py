"""Feeds through the whole road: command writes, the outbox, debounce, the checker, resend."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format

from omnium.command.v1 import command_pb2
from omnium.delivery.v1 import delivery_pb2
from omnium_delivery import load_clients
from tests.support.command import running_command
from tests.support.delivery import running_delivery, sends, settled
from tests.support.games import EVENT, make_games
from tests.support.sftp import SftpServer, asyncssh_server
from tests.support.waiting import eventually

FEEDS = [
    {"kind": "schedule", "format": "json"},
    {"kind": "results", "format": "json", "discipline": "FBL"},
    {"kind": "results", "format": "odf"},
]


def client(
    code: str, server: SftpServer, feeds: list[dict[str, Any]], **more: Any
) -> dict[str, Any]:
    return {
        "code": code,
        "event": EVENT,
        "transport": "sftp",
        "sftp": server.sftp_settings(folder=code),
        "feeds": feeds,
        **more,
    }


@contextlib.asynccontextmanager
async def ndtv_on_sftp(
    db: asyncpg.Connection, tmp_path: Path, feeds: list[dict[str, Any]]
) -> AsyncIterator[SftpServer]:
    """An SFTP server, and the client ndtv taking these feeds into its folder there."""
    async with asyncssh_server(tmp_path) as server:
        (server.root / "ndtv").mkdir()
        await load_clients(db, [client("ndtv", server, feeds)])
        yield server


def document(server: SftpServer, code: str, kind: str, scope: str = "GLO") -> Any:
    doc_type = {"schedule": "DT_SCHEDULE", "results": "DT_RESULT"}[kind]
    return json.loads((server.root / code / f"{EVENT}_{scope:-<34}_{doc_type}.json").read_bytes())


async def score(cmd: Any, unit_id: str, n: int, command_id: str) -> None:
    answer = await cmd.submit(
        command_id=command_id,
        code="results.set_sides",
        payload={"sides": [{"order": 1, "score": str(n)}, {"order": 2, "score": "0"}]},
        unit_id=unit_id,
    )
    assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason


async def test_a_burst_of_100_writes_is_one_rebuild_per_feed(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=10)
    async with ndtv_on_sftp(db, tmp_path, FEEDS) as server:
        # A 2 s window on a shared test machine: the 100 writes must all fall inside one.
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, feed_debounce_seconds=2.0) as delivery,
        ):
            await eventually(lambda: settled(db, "ndtv"), what="the first versions")
            builds = delivery.app.builds
            first = len(await sends(db, "ndtv"))
            sem = asyncio.Semaphore(10)

            async def write(n: int) -> None:
                async with sem:
                    await score(cmd, games.units[n % 10], n, f"burst-{n}")

            await asyncio.gather(*(write(n) for n in range(100)))
            await eventually(lambda: _more_sends(db, first + 2), what="the rebuilt feeds")
            await asyncio.sleep(2.5)  # a second rebuild would have come within one more window
            # One rebuild of each results feed; scores are not in the schedule, so it is not
            # rebuilt at all.
            assert delivery.app.builds - builds == 2
        records = await sends(db, "ndtv")
    assert len(records) == first + 2
    assert sorted((r["kind"], r["version"]) for r in records[first:]) == [
        ("results", 2),
        ("results", 2),
    ]
    final = document(server, "ndtv", "results", "FBL")
    scores = {u["code"]: u["sides"][0]["score"] for u in final["units"]}
    # The one rebuild carries what was saved last for every unit.
    saved = await db.fetch(
        "SELECT u.code, s.score FROM unit u JOIN unit_competitor s ON s.unit_id = u.id "
        "WHERE s.sort_order = 1"
    )
    assert scores == {r["code"]: r["score"] for r in saved}
    assert len(set(scores.values())) == 10


async def _more_sends(db: asyncpg.Connection, n: int) -> bool:
    return len(await sends(db, "ndtv")) >= n and await settled(db, "ndtv")


async def test_a_feed_whose_bytes_did_not_change_is_not_sent_again(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    async with (
        ndtv_on_sftp(db, tmp_path, [{"kind": "schedule", "format": "json"}]),
        running_command(database_url) as cmd,
        running_delivery(database_url, feed_debounce_seconds=1.0) as delivery,
    ):
        await eventually(lambda: settled(db, "ndtv"), what="the first version")
        builds = delivery.app.builds
        for n, status in enumerate(["DELAYED", "SCHEDULED"]):
            answer = await cmd.submit(
                command_id=f"flip-{n}",
                code="results.set_status",
                payload={"status": status},
                unit_id=games.units[0],
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
        await eventually(
            lambda: _built(delivery.app, builds + 1), what="the rebuild after the flip"
        )
        await eventually(lambda: settled(db, "ndtv"), what="the feed current again")
    # Rebuilt once, the same bytes as before: nothing sent.
    assert len(await sends(db, "ndtv")) == 1


async def _built(app: Any, n: int) -> bool:
    return bool(app.builds >= n)


@pytest.mark.parametrize(
    ("checker", "overrides"),
    [(True, {}), (["FBL"], {}), (False, {"checker_disciplines": ("fbl",)})],
    ids=["per-client", "per-client-discipline", "per-sport-setting"],
)
async def test_the_checker_holds_results_until_a_person_approves(
    db: asyncpg.Connection,
    database_url: str,
    tmp_path: Path,
    checker: bool | list[str],
    overrides: dict[str, Any],
) -> None:
    games = await make_games(db, units=3)
    unit = games.units[1]
    feeds = [{"kind": "results", "format": "json"}]
    async with asyncssh_server(tmp_path) as server:
        for code in ("checked", "direct"):
            (server.root / code).mkdir()
        await load_clients(
            db,
            [
                client("checked", server, feeds, checker=checker),
                client("direct", server, feeds, checker=["ATH"]),
            ],
        )
        # The per-sport setting holds football for every client, "direct" too.
        direct_held = bool(overrides)
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, feed_debounce_seconds=0.2, **overrides),
        ):
            await eventually(lambda: settled(db, "checked"), what="the empty results")
            await score(cmd, unit, 3, "goal-1")
            for code in ("checked", "direct"):
                await eventually(lambda c=code: _covers(db, c, "goal-1"), what=f"{code} rebuilt")
            # Held: the checked client has nothing of it yet; a client not held has it at once.
            assert document(server, "checked", "results")["units"] == []
            assert len(await sends(db, "checked")) == 1
            assert await _has_unit(server, "direct", 0 if direct_held else 1)

            answer = await cmd.submit(
                command_id="approve-1", code="results.approve", payload={}, unit_id=unit
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer.reason
            await eventually(lambda: _has_unit(server, "checked", 1), what="approved results")
            approved = document(server, "checked", "results")["units"][0]
            assert approved["code"] == games.unit_codes[unit]
            assert [s["score"] for s in approved["sides"]] == ["3", "0"]
            assert [s["noc"] for s in approved["sides"]] == ["KOR", "JPN"]

            # A change after the approval waits for the next one; the approved score stays.
            await score(cmd, unit, 4, "goal-2")
            for code in ("checked", "direct"):
                await eventually(lambda c=code: _covers(db, c, "goal-2"), what=f"{code} rebuilt")
            assert await _score_is(server, "checked", "3")
            assert await _score_is(server, "direct", "3" if direct_held else "4")
            assert len(await sends(db, "checked")) == 2
    log = await db.fetchrow(
        "SELECT actor_name, code FROM timeline_item WHERE command_id = 'approve-1'"
    )
    assert log["code"] == "results.approve" and log["actor_name"] == "Aiko Tanaka"


async def _covers(db: asyncpg.Connection, code: str, command_id: str) -> bool:
    """The client's feeds are built past the outbox rows of that command."""
    return bool(
        await db.fetchval(
            "SELECT bool_and(f.built_id >= (SELECT max(id) FROM domain_event "
            "WHERE command_id = $2)) FROM client_feed f JOIN client c ON c.id = f.client_id "
            "WHERE c.code = $1",
            code,
            command_id,
        )
    )


async def _has_unit(server: SftpServer, code: str, n: int) -> bool:
    try:
        return bool(len(document(server, code, "results")["units"]) == n)
    except (OSError, ValueError):
        return False


async def _score_is(server: SftpServer, code: str, value: str) -> bool:
    units = document(server, code, "results")["units"]
    return bool(units) and units[0]["sides"][0]["score"] == value


async def test_delivery_service_shows_last_received_and_resends(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    async with (
        ndtv_on_sftp(db, tmp_path, [{"kind": "results", "format": "odf"}]),
        running_command(database_url) as cmd,
        running_delivery(database_url, feed_debounce_seconds=0.1) as delivery,
    ):
        await eventually(lambda: settled(db, "ndtv"), what="the first version")
        await score(cmd, games.units[0], 1, "goal-1")
        await eventually(lambda: _more_sends(db, 2), what="version 2")
        answer = await delivery.stub.ListClients(delivery_pb2.ListClientsRequest(), timeout=5)
        (ndtv,) = answer.clients
        (feed,) = ndtv.feeds
        last = feed.last_received
        assert (ndtv.code, ndtv.transport, feed.version, feed.owed) == (
            "ndtv",
            "sftp",
            2,
            False,
        )
        assert last.outcome == "delivered" and last.version == 2
        assert 0 < last.delay_seconds < 30
        assert last.delivered_at.ToDatetime() > last.saved_at.ToDatetime()
        assert feed.file_name == last.file_name

        resent = await delivery.stub.Resend(
            delivery_pb2.ResendRequest(client_code="ndtv"), timeout=5
        )
        assert resent.feeds == 1
        await eventually(lambda: _more_sends(db, 3), what="the resend")
        listed = await delivery.stub.ListSends(
            delivery_pb2.ListSendsRequest(client_code="ndtv"), timeout=5
        )
        assert [(s.version, s.resend) for s in listed.sends] == [
            (2, True),
            (2, False),
            (1, False),
        ]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await delivery.stub.Resend(delivery_pb2.ResendRequest(client_code="nobody"), timeout=5)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert "there is no client 'nobody'" in (refused.value.details() or "")
    assert json_format.MessageToDict(last)["outcome"] == "delivered"


async def test_two_copies_share_the_work_and_send_nothing_twice(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=6)
    async with asyncssh_server(tmp_path) as server:
        codes = [f"client{n}" for n in range(4)]
        for code in codes:
            (server.root / code).mkdir()
        await load_clients(db, [client(code, server, FEEDS) for code in codes])
        async with (
            running_command(database_url) as cmd,
            # Two clients at once each: one copy cannot hold all four, whichever wakes first.
            running_delivery(
                database_url, feed_debounce_seconds=0.3, delivery_clients_at_once=2
            ) as one,
            running_delivery(
                database_url, feed_debounce_seconds=0.3, delivery_clients_at_once=2
            ) as two,
        ):
            for n in range(30):
                await score(cmd, games.units[n % 6], n, f"w-{n}")
                if n % 10 == 9:
                    await asyncio.sleep(0.4)
            for code in codes:
                await eventually(lambda code=code: settled(db, code), what=f"{code} current")
            assert one.sent and two.sent, "both copies sent some files"
    rows = await db.fetch(
        "SELECT feed_id, version, count(*) AS n FROM delivery_attempt GROUP BY feed_id, version"
    )
    assert rows and all(r["n"] == 1 for r in rows)


async def test_the_sweep_rebuilds_a_feed_behind_its_data(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    async with (
        ndtv_on_sftp(db, tmp_path, [{"kind": "results", "format": "json"}]) as server,
        running_delivery(database_url, feed_rebuild_seconds=3600) as delivery,
    ):
        await eventually(lambda: settled(db, "ndtv"), what="the first version")
        # A change the outbox never told of (as if its row were read before it committed).
        await db.execute(
            "UPDATE unit_competitor SET score = '5' WHERE unit_id = $1 AND sort_order = 1",
            games.units[0],
        )
        await asyncio.sleep(0.5)
        assert len(await sends(db, "ndtv")) == 1
        assert await delivery.app.sweep() == 1
        await eventually(lambda: _more_sends(db, 2), what="the swept feed sent")
        assert await delivery.app.sweep() == 1
        await eventually(lambda: settled(db, "ndtv"), what="checked again")
        await asyncio.sleep(0.5)
    # The second sweep rebuilt it too, found the same bytes and sent nothing.
    assert len(await sends(db, "ndtv")) == 2
    assert await _score_is(server, "ndtv", "5")


async def test_a_change_that_commits_late_still_reaches_the_feed(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    late_unit, other_unit = games.units
    async with (
        ndtv_on_sftp(db, tmp_path, [{"kind": "results", "format": "json"}]) as server,
        running_command(database_url) as cmd,
        running_delivery(database_url, feed_debounce_seconds=0.1),
    ):
        await eventually(lambda: settled(db, "ndtv"), what="the first version")
        # A writer takes its outbox id first and commits last, after a later change was
        # read and its feed built and sent.
        late = await asyncpg.connect(database_url)
        try:
            async with late.transaction():
                await late.execute(
                    "UPDATE unit_competitor SET score = '7' WHERE unit_id = $1 AND sort_order = 1",
                    late_unit,
                )
                await late.execute(
                    "INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, "
                    "unit_id, seq, command_id, payload) "
                    "VALUES ($1, 'unit.changed', 'unit', $2, $2, nextval('change_seq'), "
                    "'late-1', '{\"changes\": []}')",
                    games.event_id,
                    late_unit,
                )
                await score(cmd, other_unit, 1, "goal-1")
                await eventually(lambda: _covers(db, "ndtv", "goal-1"), what="goal-1 sent")
                assert len(document(server, "ndtv", "results")["units"]) == 1
        finally:
            await late.close()
        await eventually(lambda: _has_unit(server, "ndtv", 2), what="the late change")
    scores = {
        u["code"]: u["sides"][0]["score"] for u in document(server, "ndtv", "results")["units"]
    }
    assert scores == {games.unit_codes[late_unit]: "7", games.unit_codes[other_unit]: "1"}


async def test_the_send_log_forgets_old_sends_but_never_a_feed_s_newest(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    async with (
        ndtv_on_sftp(db, tmp_path, FEEDS),
        running_command(database_url) as cmd,
        running_delivery(database_url, feed_debounce_seconds=0.2) as delivery,
    ):
        await eventually(lambda: settled(db, "ndtv"), what="the first versions")
        await score(cmd, games.units[0], 3, "log-1")
        await eventually(lambda: _more_sends(db, 5), what="the results feeds again")
        await eventually(lambda: settled(db, "ndtv"), what="the second versions")
        before = await sends(db, "ndtv")
        await db.execute("UPDATE delivery_attempt SET finished_at = now() - interval '40 days'")
        assert await delivery.app.trim_log() == len(before) - 3
        assert await delivery.app.trim_log() == 0
    kept = await sends(db, "ndtv")
    newest = {}
    for row in before:
        newest[row["feed_id"]] = row["id"]
    assert sorted(r["id"] for r in kept) == sorted(newest.values())
    assert len(kept) == 3
