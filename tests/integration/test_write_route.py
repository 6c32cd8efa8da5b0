"""Writes only where Patroni says: a primary whose Patroni dies is fenced off the services'
route (HAProxy asking Patroni `GET /primary`) before any other node can lead.

Real etcd, Patroni, two PostgreSQL nodes and HAProxy. Only the leader's Patroni is killed:
its PostgreSQL runs on as a writable primary; through the multi-host DSN alone the services
kept writing to it for as long as it lived.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import asyncpg
import pytest

from omnium.command.v1 import command_pb2
from omnium_db import apply_migrations
from omnium_devstack.ha import HaTimings, PatroniCluster
from tests.support.command import command, running_command
from tests.support.games import make_games
from tests.support.outage import DATABASE_DOWN, connect_when_up
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(300)

TRY_AGAIN = command_pb2.OUTCOME_TRY_AGAIN
# As the failover tests: ttl ≥ loop_wait + 2 × retry_timeout, as Patroni requires.
TIMINGS = HaTimings(ttl=10, loop_wait=1, retry_timeout=4)


async def _refused(url: str) -> bool:
    """Whether a new connection through the route is refused (a write cannot even start)."""
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except DATABASE_DOWN:
        return True
    await conn.close()
    return False


async def _still_a_primary(url: str) -> bool:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        return not await conn.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await conn.close()


async def _saved_on(url: str, command_id: str) -> int:
    conn = await connect_when_up(url)
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM command WHERE command_id = $1", command_id)
        )
    finally:
        await conn.close()


async def test_a_primary_whose_patroni_dies_takes_no_new_writes(tmp_path: Path) -> None:
    cluster = PatroniCluster(tmp_path / "pair", fsync=False, timings=TIMINGS)
    await asyncio.to_thread(cluster.start)
    try:
        url = cluster.database_url
        db = await connect_when_up(url)
        await apply_migrations(db)
        unit = (await make_games(db, units=1)).units[0]
        old = cluster.leader_name()
        assert old is not None
        async with running_command(url) as client:
            before = await client.submit(
                command_id="before",
                code="results.set_status",
                unit_id=unit,
                payload={"status": "DELAYED"},
            )
            assert before.outcome == command_pb2.OUTCOME_ACCEPTED, before

            await asyncio.to_thread(cluster.kill_patroni, old)
            killed = time.monotonic()
            await eventually(
                lambda: _refused(url), within=60, every=0.1, what="the route to refuse connections"
            )
            fenced_after = time.monotonic() - killed
            # Fenced while its PostgreSQL still runs as a writable primary: the route did it.
            assert await _still_a_primary(cluster.node_url(cluster.node(old)))
            # A connection held from before is cut too: a pool cannot go on writing there.
            with pytest.raises(DATABASE_DOWN):
                await db.execute("INSERT INTO schema_version SELECT * FROM schema_version LIMIT 0")

            # Writes come back on the new leader, and none went to the fenced node.
            new = await asyncio.to_thread(cluster.wait_for_leader, 90, old)
            after = command(
                command_id="after",
                code="results.set_status",
                unit_id=unit,
                payload={"status": "RUNNING"},
            )
            deadline = time.monotonic() + 90
            while (answer := await client.stub.Submit(after, timeout=30)).outcome == TRY_AGAIN:
                assert time.monotonic() < deadline, answer
                await asyncio.sleep(0.2)
            assert answer.outcome == command_pb2.OUTCOME_ACCEPTED, answer
        assert await _saved_on(cluster.node_url(cluster.node(new)), "after") == 1
        assert await _saved_on(cluster.node_url(cluster.node(old)), "after") == 0
        db.terminate()
    finally:
        await asyncio.to_thread(cluster.stop)
        if cluster.home != cluster.data_dir:
            shutil.rmtree(cluster.home, ignore_errors=True)
    # Promised: within the route's checks (FENCE_SECONDS, about 3 s), and in any case before
    # the leader key can pass to another node (its ttl): never two primaries taking writes.
    assert fenced_after < TIMINGS.ttl, fenced_after
