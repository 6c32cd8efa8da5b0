"""SFTP delivery against real servers: asyncssh's and OpenSSH's own sshd."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import asyncpg

from omnium.command.v1 import command_pb2
from omnium_delivery import load_clients, read_clients_file
from tests.support.command import running_command
from tests.support.delivery import running_delivery, sends, settled
from tests.support.games import EVENT, make_games
from tests.support.sftp import SftpServer, asyncssh_server, new_keys, openssh_server, public
from tests.support.waiting import eventually

SEVEN_FEEDS = [
    {"kind": "schedule", "format": "odf"},
    {"kind": "schedule", "format": "json", "discipline": "FBL"},
    {"kind": "schedule", "format": "csv"},
    {"kind": "results", "format": "odf"},
    {"kind": "results", "format": "json", "discipline": "FBL"},
    {"kind": "medals", "format": "odf"},
    {"kind": "medals", "format": "csv", "top": 5},
]


def sftp_client(
    code: str, server: SftpServer, feeds: list[dict[str, Any]], **sftp: Any
) -> dict[str, Any]:
    return {
        "code": code,
        "name": code.upper(),
        "event": EVENT,
        "transport": "sftp",
        "sftp": server.sftp_settings(**sftp),
        "feeds": feeds,
    }


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


async def _seven_files_arrive_whole(
    db: asyncpg.Connection, database_url: str, server: SftpServer
) -> None:
    await make_games(db, units=4)
    await load_clients(db, [sftp_client("ndtv", server, SEVEN_FEEDS)])
    async with running_delivery(database_url):
        await eventually(lambda: settled(db, "ndtv"), what="seven files delivered")
    landed = files(server.root)
    records = await sends(db, "ndtv")
    assert len(records) == 7
    assert all(r["outcome"] == "delivered" and r["attempts"] == 1 for r in records)
    # Whole and byte-exact: each file's sha256 is the one recorded for its send.
    assert {name: hashlib.sha256(body).hexdigest() for name, body in landed.items()} == {
        r["file_name"]: r["sha256"] for r in records
    }
    assert f"{EVENT}_{'GLO':-<34}_DT_SCHEDULE.xml" in landed
    assert f"{EVENT}_{'GLO':-<34}_DT_MEDALS_TOP5.csv" in landed
    assert b'DocumentType="DT_SCHEDULE"' in landed[f"{EVENT}_{'GLO':-<34}_DT_SCHEDULE.xml"]
    assert b'Version="1"' in landed[f"{EVENT}_{'GLO':-<34}_DT_SCHEDULE.xml"]


async def test_seven_files_arrive_whole_over_asyncssh(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    async with asyncssh_server(tmp_path) as server:
        await _seven_files_arrive_whole(db, database_url, server)


async def test_seven_files_arrive_whole_over_openssh_sshd(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    async with openssh_server(tmp_path) as server:
        await _seven_files_arrive_whole(db, database_url, server)


async def test_a_cut_mid_upload_leaves_no_half_file_and_the_retry_delivers(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=4)
    async with asyncssh_server(tmp_path) as server:
        server.cut_uploads[0] = 1
        await load_clients(
            db, [sftp_client("ndtv", server, [{"kind": "schedule", "format": "odf"}])]
        )
        seen: list[tuple[str, bytes]] = []
        stop = asyncio.Event()

        async def watch() -> None:
            # What a client polling the folder would see: every file under its final name.
            while not stop.is_set():
                for name, body in files(server.root).items():
                    seen.append((name, body))
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        async with running_delivery(database_url, sftp_retry_base_seconds=0.3):
            await eventually(lambda: settled(db, "ndtv"), what="the schedule delivered")
        stop.set()
        await watcher
    (record,) = await sends(db, "ndtv")
    assert record["outcome"] == "delivered" and record["attempts"] == 2
    assert server.cut_uploads[0] == 0
    final = record["file_name"]
    whole = (server.root / final).read_bytes()
    assert hashlib.sha256(whole).hexdigest() == record["sha256"]
    # The half-written copy was only ever under its temporary name, never under the final one.
    assert any(name.endswith(".part") and len(body) < len(whole) for name, body in seen)
    assert all(body == whole for name, body in seen if name == final)
    assert not [n for n in files(server.root) if n.endswith(".part")]


async def test_a_wrong_host_key_is_refused_before_any_byte_is_sent(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=2)
    impostor, *_ = new_keys(tmp_path / "other")
    async with asyncssh_server(tmp_path) as server:
        await load_clients(
            db,
            [
                sftp_client(
                    "ndtv",
                    server,
                    [{"kind": "schedule", "format": "odf"}],
                    host_key=public(impostor),
                )
            ],
        )
        async with running_delivery(database_url):
            records = await eventually(lambda: sends(db, "ndtv"), what="a refused send")
        assert files(server.root) == {}
        assert server.uploads == []
    assert [(r["outcome"], r["attempts"]) for r in records] == [("refused", 1)]
    assert "pinned host key" in records[0]["error"]
    alerts = await db.fetch("SELECT kind, status FROM delivery_alert")
    assert [(a["kind"], a["status"]) for a in alerts] == [("host_key", "open")]


async def test_a_new_client_from_settings_alone_gets_its_files(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=3)
    async with asyncssh_server(tmp_path) as server:
        async with running_delivery(database_url):
            await asyncio.sleep(0.2)
            # No code and no restart: a settings change, as an operator would make it.
            settings_file = tmp_path / "clients.json"
            settings_file.write_text(
                '{"clients": [{"code": "news18", "name": "News18", "event": "AG2026", '
                '"transport": "sftp", "sftp": '
                + json.dumps(server.sftp_settings())
                + ', "feeds": [{"kind": "schedule", "format": "csv"}, '
                '{"kind": "medals", "format": "json", "top": 5}]}]}'
            )
            await load_clients(db, read_clients_file(settings_file))
            await eventually(lambda: settled(db, "news18"), what="the new client's files")
        landed = files(server.root)
    assert sorted(landed) == [
        f"{EVENT}_{'GLO':-<34}_DT_MEDALS_TOP5.json",
        f"{EVENT}_{'GLO':-<34}_DT_SCHEDULE.csv",
    ]
    assert landed[f"{EVENT}_{'GLO':-<34}_DT_SCHEDULE.csv"].count(b"\n") == 1 + 3 * 2


async def test_a_dead_client_holds_up_nobody_else(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    await make_games(db, units=2)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # accepts the connection and never says a word
        finally:
            writer.close()

    dead = await asyncio.start_server(silent, "127.0.0.1", 0)
    dead_port = dead.sockets[0].getsockname()[1]
    try:
        async with asyncssh_server(tmp_path) as server:
            feeds = [{"kind": "schedule", "format": "csv"}]
            await load_clients(
                db,
                [
                    sftp_client("dead", server, feeds, port=dead_port),
                    sftp_client("alive", server, feeds),
                ],
            )
            async with running_delivery(
                database_url, sftp_connect_timeout_seconds=10, sftp_tries=1
            ):
                await eventually(lambda: settled(db, "alive"), what="the live client's file")
                # The dead client is still in its first try, and nobody waited for it.
                assert await sends(db, "dead") == []
                await eventually(lambda: _open_alert(db, "dead"), what="the dead one's alert")
                records = await sends(db, "dead")
    finally:
        dead.close()
        await dead.wait_closed()
    assert [(r["outcome"], r["attempts"]) for r in records] == [("failed", 1)]
    assert records[0]["error"] == f"127.0.0.1:{dead_port} did not answer in time"
    assert await _open_alert(db, "dead") == "send_failed"


async def _open_alert(db: asyncpg.Connection, client: str) -> str | None:
    kind: str | None = await db.fetchval(
        "SELECT a.kind FROM delivery_alert a JOIN client c ON c.id = a.client_id "
        "WHERE c.code = $1 AND a.status = 'open'",
        client,
    )
    return kind


async def test_a_kept_connection_the_server_closed_is_opened_again_at_once(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=2)
    async with asyncssh_server(tmp_path) as server:
        await load_clients(
            db, [sftp_client("ndtv", server, [{"kind": "results", "format": "csv"}])]
        )
        async with (
            running_command(database_url) as cmd,
            running_delivery(database_url, feed_debounce_seconds=0.1),
        ):
            await eventually(lambda: settled(db, "ndtv"), what="the first version")
            for conn in server.connections:
                conn.abort()  # the server drops the idle connection
            await asyncio.sleep(0.2)
            answer = await cmd.submit(
                command_id="goal-1",
                code="results.set_sides",
                payload={"sides": [{"order": 1, "score": "1"}]},
                unit_id=games.units[0],
            )
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED
            await eventually(lambda: _two_sends(db), what="the second version")
    records = await sends(db, "ndtv")
    assert [(r["version"], r["attempts"], r["outcome"]) for r in records] == [
        (1, 1, "delivered"),
        (2, 1, "delivered"),
    ]
    assert len(server.connections) == 2


async def _two_sends(db: asyncpg.Connection) -> bool:
    return len(await sends(db, "ndtv")) == 2 and await settled(db, "ndtv")
