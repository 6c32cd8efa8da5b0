"""Start a real delivery service on an ephemeral port, and wait for what it sends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from omnium.delivery.v1 import delivery_pb2_grpc
from omnium_delivery import DeliveryApp, Sent, load_clients
from omnium_grpc import open_channel
from tests.support.command import settings_for
from tests.support.sftp import SftpServer
from tests.support.waiting import eventually

T = TypeVar("T")


@dataclass(slots=True)
class DeliveryClient:
    app: DeliveryApp
    stub: delivery_pb2_grpc.DeliveryServiceStub
    sent: list[Sent] = field(default_factory=list)


@asynccontextmanager
async def running_delivery(
    database_url: str, redis_url: str | None = None, **overrides: Any
) -> AsyncIterator[DeliveryClient]:
    settings = settings_for(database_url, redis_url=redis_url, **overrides)
    sent: list[Sent] = []
    app = DeliveryApp(settings, on_send=sent.append)
    port = await app.start(0)
    channel = open_channel(f"127.0.0.1:{port}", settings)
    try:
        yield DeliveryClient(app, delivery_pb2_grpc.DeliveryServiceStub(channel), sent)
    finally:
        await channel.close()
        await app.stop(grace=1)


async def query_until(
    db: asyncpg.Connection, query: str, *args: object, within: float = 60.0
) -> Any:
    """The first truthy value `query` reads (polled, as `eventually` does); fail after
    `within` seconds."""
    return await eventually(lambda: db.fetchval(query, *args), within=within, what=query)


LOCK_WAIT = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"


async def sends(db: asyncpg.Connection, client: str) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT a.*, f.kind, f.format FROM delivery_attempt a "
        "JOIN client c ON c.id = a.client_id JOIN client_feed f ON f.id = a.feed_id "
        "WHERE c.code = $1 ORDER BY a.id",
        client,
    )


async def first_send(db: asyncpg.Connection, client: str, *, within: float = 30.0) -> None:
    """Wait for the send delivery makes to a new client when it starts, carrying no change.

    A test that measures a change lets this go first: begun after the change is saved (a busy
    machine), it would carry the change but be measured from no save, so the promise, the
    Delivery screen and the delay histogram would never see it measured.
    """
    await eventually(lambda: sends(db, client), within=within, what=f"{client}'s first send")


async def settled(db: asyncpg.Connection, client: str) -> bool:
    """Every feed of the client is current: nothing owed, and each was delivered once."""
    row = await db.fetchrow(
        "SELECT count(*) FILTER (WHERE f.marks > f.built_marks OR f.force) AS owed, "
        "count(*) FILTER (WHERE f.delivered_at IS NULL) AS never "
        "FROM client_feed f JOIN client c ON c.id = f.client_id WHERE c.code = $1",
        client,
    )
    return bool(row["owed"] == 0 and row["never"] == 0)


async def results_client(db: asyncpg.Connection, server: SftpServer, code: str, event: str) -> None:
    """A client taking the results feed as JSON files into its own folder on `server`."""
    (server.root / code).mkdir()
    await load_clients(
        db,
        [
            {
                "code": code,
                "event": event,
                "transport": "sftp",
                "sftp": server.sftp_settings(folder=code),
                "feeds": [{"kind": "results", "format": "json"}],
            }
        ],
    )


def filed_scores(server: SftpServer, code: str) -> dict[str, str | None]:
    """Each unit's first-side score in the results files client `code` has on `server`."""
    scores: dict[str, str | None] = {}
    # Only the final names: a file being written has a hidden `.part` name until renamed.
    for path in (server.root / code).glob("*DT_RESULT*.json"):
        for unit in json.loads(path.read_bytes())["units"]:
            scores[unit["code"]] = unit["sides"][0]["score"]
    return scores
