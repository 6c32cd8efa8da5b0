"""A pooled connection whose server stops answering is given up by the pool itself, with no
route in front to cut it: the backend frozen with SIGSTOP (its kernel still acknowledges what
is sent, so TCP alone never notices), the statement times out, the cancel is not waited on
for ever, the connection is dropped and the next one answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket

import asyncpg
import pytest

from omnium_db import PoolRoad, create_pool
from tests.support.command import settings_for

# The road's limit and the grace, small so the test is quick; the bound below is generous.
LIMIT_SECONDS = 2.0
GRACE_SECONDS = 1.0
WITHIN = 60.0


async def test_a_statement_on_a_frozen_backend_gives_its_connection_up(
    database_url: str,
) -> None:
    settings = settings_for(
        database_url,
        people_transaction_seconds=LIMIT_SECONDS,
        database_answer_grace_seconds=GRACE_SECONDS,
    )
    pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="frozen", size=1)
    frozen: int | None = None
    try:
        async with pool.acquire() as conn:
            frozen = await conn.fetchval("SELECT pg_backend_pid()")
        assert frozen is not None
        os.kill(frozen, signal.SIGSTOP)

        async def on_the_frozen_one() -> None:
            async with pool.acquire() as conn:
                await conn.fetchval("SELECT 1")

        # The statement fails (it is never answered) and its connection is released for all
        # that: without the pool's command timeout this waits for the server for ever.
        with pytest.raises((TimeoutError, asyncpg.InterfaceError, OSError)):
            await asyncio.wait_for(on_the_frozen_one(), WITHIN)

        async def next_one() -> int:
            async with pool.acquire() as conn:
                return int(await conn.fetchval("SELECT pg_backend_pid()"))

        answered_by = await asyncio.wait_for(next_one(), WITHIN)
        assert answered_by != frozen
    finally:
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGCONT)
        pool.terminate()


async def test_pooled_connections_are_given_up_when_the_server_stops_acknowledging(
    database_url: str,
) -> None:
    settings = settings_for(database_url, database_tcp_dead_seconds=7.0)
    pool = await create_pool(settings, PoolRoad.READER, application_name="keepalive", size=1)
    try:
        async with pool.acquire() as conn:
            raw = conn._con if hasattr(conn, "_con") else conn
            sock = raw._transport.get_extra_info("socket")
            if sock.family == socket.AF_UNIX:
                pytest.fail("the test database must be reached over TCP")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 7000
            idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            interval = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
            probes = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
            # The last probe goes unanswered within the promised time.
            assert idle + interval * probes <= 7
    finally:
        await pool.close()
