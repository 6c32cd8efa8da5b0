"""Outages to test against: a private PostgreSQL and Redis that a test may crash and start
again on the same ports, and a host that takes connections and never answers.

The session's servers are shared by every test, so a test of an outage starts its own pair
here (a few seconds) and stops it as a crash would. Starting and stopping run in a thread so
the services under test keep running on the event loop meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import redis.asyncio as aioredis

from omnium_db import apply_migrations
from omnium_devstack import PostgresServer, RedisServer, free_port
from tests.support.waiting import eventually

# A connect racing the crash (the server resets it mid-handshake, ECONNRESET) can leave its
# socket transport, or the bare socket under it, to the garbage collector inside asyncio/asyncpg,
# not in our code: seen once in 594 tests, and once (the bare socket) in 690. These tests check
# what a client sees; an unclosed *connection* of ours (asyncpg's own warning) still fails.
CONNECT_RACE = [
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function _SelectorTransport.__del__"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]


@dataclass
class CrashablePostgres:
    """One private cluster with our schema in its database `omnium`."""

    server: PostgresServer

    @property
    def database_url(self) -> str:
        return self.server.database_url

    async def crash(self) -> None:
        """`pg_ctl stop -m immediate`: every connection is cut, nothing is checkpointed."""
        await asyncio.to_thread(self.server.stop, "immediate")

    async def start(self) -> None:
        await asyncio.to_thread(self.server.start)

    async def restart(self, down_seconds: float = 0.0) -> None:
        await self.crash()
        await asyncio.sleep(down_seconds)
        await self.start()


@contextlib.asynccontextmanager
async def crashable_postgres(data_dir: Path) -> AsyncIterator[CrashablePostgres]:
    server = PostgresServer(data_dir, free_port(), fsync=False)
    await asyncio.to_thread(server.start)
    try:
        conn = await asyncpg.connect(server.database_url)
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
        yield CrashablePostgres(server)
    finally:
        await asyncio.to_thread(server.stop, "immediate")
        shutil.rmtree(server.fallback_home, ignore_errors=True)


@dataclass
class CrashableRedis:
    server: RedisServer

    @property
    def redis_url(self) -> str:
        return self.server.redis_url

    async def crash(self) -> None:
        await asyncio.to_thread(self.server.stop)

    async def start(self) -> None:
        await asyncio.to_thread(self.server.start)

    async def restart_with_its_data(self) -> None:
        """Stop and start again holding what it held, as a Redis with persistence restarts:
        a snapshot first (this one keeps nothing on disk by itself), which it loads at start."""
        client = aioredis.from_url(self.redis_url, socket_timeout=5)
        try:
            await client.save()
        finally:
            await client.aclose()
        await self.crash()
        await self.start()


@contextlib.asynccontextmanager
async def crashable_redis(data_dir: Path) -> AsyncIterator[CrashableRedis]:
    server = RedisServer(data_dir, free_port())
    await asyncio.to_thread(server.start)
    try:
        yield CrashableRedis(server)
    finally:
        await asyncio.to_thread(server.stop)


@dataclass
class SilentHost:
    """A host that takes every TCP connection and never says a word, as a machine that went
    away looks to a client whose packets are dropped (no refusal, no reset)."""

    port: int
    accepted: int = 0

    def in_front_of(self, database_url: str) -> str:
        """`database_url` with this host named first, as in a failover DSN."""
        parts = urlsplit(database_url)
        userinfo, at, host = parts.netloc.rpartition("@")
        netloc = f"{userinfo}{at}127.0.0.1:{self.port},{host}"
        query = "&".join(q for q in (parts.query, "target_session_attrs=read-write") if q)
        return urlunsplit(parts._replace(netloc=netloc, query=query))


@contextlib.asynccontextmanager
async def silent_host() -> AsyncIterator[SilentHost]:
    held: set[asyncio.StreamWriter] = set()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host.accepted += 1
        held.add(writer)
        try:
            # Read what the client sends (its startup packet) and answer nothing, until it
            # gives up and closes.
            while await reader.read(4096):
                pass
        finally:
            held.discard(writer)
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    host = SilentHost(server.sockets[0].getsockname()[1])
    try:
        yield host
    finally:
        server.close()
        for writer in list(held):
            writer.close()
        await server.wait_closed()


# What a connection to a PostgreSQL that is down, failing over or frozen raises.
DATABASE_DOWN = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


async def connect_when_up(url: str, within: float = 60) -> asyncpg.Connection:
    """A connection to `url` as soon as one is made, trying again every 0.2 s."""
    conn: asyncpg.Connection = await eventually(
        lambda: asyncpg.connect(url, timeout=3),
        ignoring=DATABASE_DOWN,
        within=within,
        every=0.2,
        what="a connection",
    )
    return conn
