"""Signed webhooks: a real receiver checks the signature; one that is down gets retries, then an
alert."""

from __future__ import annotations

import socket

import asyncpg

from omnium_delivery import load_clients
from tests.support.delivery import running_delivery, sends, settled
from tests.support.games import EVENT, make_games
from tests.support.receiver import webhook_receiver
from tests.support.waiting import eventually


async def _medals(db: asyncpg.Connection, games_event: str) -> None:
    for rank, noc in enumerate(["CHN", "JPN", "KOR", "IND", "THA", "IRI", "UZB"], start=1):
        await db.execute(
            "INSERT INTO medal_row (event_id, noc, gold, total, rank) VALUES ($1, $2, $3, $3, $4)",
            games_event,
            noc,
            20 - rank,
            rank,
        )


def hook_client(code: str, url: str, secret: str) -> dict[str, object]:
    return {
        "code": code,
        "name": "DailyHunt",
        "event": EVENT,
        "transport": "webhook",
        "webhook": {"url": url, "secret": secret},
        "feeds": [{"kind": "medals", "format": "json", "top": 5}],
    }


async def test_the_top_five_medal_table_arrives_signed(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    await _medals(db, games.event_id)
    async with webhook_receiver() as receiver:
        await load_clients(db, [hook_client("dailyhunt", receiver.url, receiver.secret)])
        async with running_delivery(database_url):
            await eventually(lambda: settled(db, "dailyhunt"), what="the medal table")
    (got,) = receiver.got
    assert got.signature_ok
    assert got.headers["content-type"] == "application/json"
    data = got.json["data"]
    assert got.json["type"] == "feed.updated"
    assert [row["noc"] for row in data["document"]["medals"]] == ["CHN", "JPN", "KOR", "IND", "THA"]
    assert data["document"]["document_type"] == "DT_MEDALS"
    (record,) = await sends(db, "dailyhunt")
    assert record["outcome"] == "delivered" and record["sha256"] == data["sha256"]


async def test_a_receiver_that_is_down_gets_retries_then_an_alert(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    await _medals(db, games.event_id)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"  # bound, never listening
        async with webhook_receiver() as on_duty:
            await load_clients(db, [hook_client("dailyhunt", dead, on_duty.secret)])
            async with running_delivery(
                database_url,
                webhook_tries=3,
                webhook_retry_base_seconds=0.05,
                alert_webhook_url=on_duty.url,
            ):
                records = await eventually(lambda: sends(db, "dailyhunt"), what="a failed send")
                await eventually(lambda: _sent_alert(db), what="the alert sent")
    assert [(r["outcome"], r["attempts"]) for r in records] == [("failed", 3)]
    assert "could not be reached" in records[0]["error"]
    (alert,) = on_duty.got
    assert alert.json["client"] == "dailyhunt" and alert.json["kind"] == "send_failed"
    owed = await db.fetchval("SELECT marks > built_marks FROM client_feed")
    assert owed, "the feed is still owed, so it is tried again later"


async def test_the_alert_clears_once_a_send_gets_through(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    await _medals(db, games.event_id)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
        async with webhook_receiver() as receiver:
            await load_clients(db, [hook_client("dailyhunt", dead, receiver.secret)])
            async with running_delivery(
                database_url,
                webhook_tries=2,
                webhook_retry_base_seconds=0.05,
                delivery_retry_seconds=0.5,
            ):
                await eventually(lambda: _alerts(db, "open"), what="the alert")
                # The client fixes its address: a settings change; the next try gets through.
                await load_clients(db, [hook_client("dailyhunt", receiver.url, receiver.secret)])
                await eventually(lambda: settled(db, "dailyhunt"), what="the medal table")
    assert await _alerts(db, "open") == 0
    assert await _alerts(db, "cleared") == 1
    assert [r["outcome"] for r in await sends(db, "dailyhunt")][-1] == "delivered"
    assert len(receiver.got) == 1 and receiver.got[0].signature_ok


async def _alerts(db: asyncpg.Connection, status: str) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM delivery_alert WHERE status = $1", status)
    return count


async def _sent_alert(db: asyncpg.Connection) -> bool:
    return bool(await db.fetchval("SELECT count(*) FROM delivery_alert WHERE sent_at IS NOT NULL"))


async def test_a_receiver_answering_errors_gets_retries_and_then_the_file(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    await _medals(db, games.event_id)
    async with webhook_receiver() as receiver:
        receiver.status = 503
        await load_clients(db, [hook_client("dailyhunt", receiver.url, receiver.secret)])
        async with running_delivery(
            database_url, webhook_tries=5, webhook_retry_base_seconds=0.05
        ) as delivery:
            await eventually(lambda: _count(receiver.got, 2), what="two refused tries")
            receiver.status = 200
            await eventually(lambda: settled(db, "dailyhunt"), what="the medal table")
            # The send is recorded (settled) a moment before the app hands it to on_send.
            await eventually(lambda: _count(delivery.sent, 1), what="the send, handed on")
            assert delivery.sent[-1].result.outcome == "delivered"
    (record,) = await sends(db, "dailyhunt")
    assert record["attempts"] == len(receiver.got) >= 3
    # Every try is the same message: one id, so the receiver can drop repeats.
    assert len({g.headers["webhook-id"] for g in receiver.got}) == 1


async def _count(items: list[object], n: int) -> bool:
    return len(items) >= n
