"""A frozen primary costs the writes no more than the failover: with the leader's machine hung
(its Patroni, postmaster and every backend stopped with SIGSTOP, its sockets open and its
kernel still acknowledging what is sent), commands sent through the command service's pool
land on the new leader long before the old one wakes.

Real etcd, Patroni, two PostgreSQL nodes and HAProxy, the route every service uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from omnium.command.v1 import command_pb2
from omnium_db import apply_migrations
from omnium_devstack.ha import HaTimings, PatroniCluster
from tests.support.command import CommandClient, command, running_command
from tests.support.games import make_games
from tests.support.outage import connect_when_up

pytestmark = pytest.mark.timeout(400)

ACCEPTED = command_pb2.OUTCOME_ACCEPTED
TIMINGS = HaTimings(ttl=10, loop_wait=1, retry_timeout=4)
# The old leader stays frozen this long unless every write has landed elsewhere first; the
# writes must land well before it wakes, within this bound of the freeze.
FROZEN_SECONDS = 60.0
WRITES_WITHIN = 45.0
# Several commands at once, so several pooled connections are caught on the frozen node.
WRITERS = 5


async def _saved_on(url: str, command_ids: list[str]) -> int:
    conn = await connect_when_up(url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM command WHERE command_id = ANY($1::text[])", command_ids
            )
        )
    finally:
        await conn.close()


async def _until_accepted(
    client: CommandClient, command_id: str, unit: str, frozen: float
) -> float:
    """Send one command, and the same again while it is not saved; seconds from the freeze to
    its acceptance."""
    sent = command(
        command_id=command_id,
        code="results.set_status",
        unit_id=unit,
        payload={"status": "DELAYED"},
    )
    while True:
        try:
            answer = await client.stub.Submit(sent, timeout=30)
        except Exception:
            answer = None
        if answer is not None and answer.outcome in (ACCEPTED, command_pb2.OUTCOME_DUPLICATE):
            return time.monotonic() - frozen
        assert time.monotonic() - frozen < FROZEN_SECONDS, f"{command_id}: {answer}"
        await asyncio.sleep(0.2)


async def test_writes_reach_the_new_leader_while_the_old_one_is_frozen(tmp_path: Path) -> None:
    cluster = PatroniCluster(tmp_path / "pair", fsync=False, timings=TIMINGS)
    await asyncio.to_thread(cluster.start)
    stopped: list[int] = []
    try:
        url = cluster.database_url
        db = await connect_when_up(url)
        await apply_migrations(db)
        units = (await make_games(db, units=WRITERS)).units
        await db.close()
        old = cluster.leader_name()
        assert old is not None
        await asyncio.to_thread(cluster.wait_sync_standby, 60)
        async with running_command(url, people_pool_size=WRITERS) as client:
            # The pool holds connections to the leader through the route before the freeze.
            warm = await asyncio.gather(
                *(
                    _until_accepted(client, f"before-{n}", unit, time.monotonic())
                    for n, unit in enumerate(units)
                )
            )
            assert len(warm) == WRITERS

            stopped = await asyncio.to_thread(cluster.freeze_node, old)
            frozen = time.monotonic()
            ids = [f"frozen-{n}" for n in range(WRITERS)]
            took = await asyncio.gather(
                *(
                    _until_accepted(client, i, unit, frozen)
                    for i, unit in zip(ids, units, strict=True)
                )
            )
            # Landed while the old leader was still frozen, so on another node.
            assert time.monotonic() - frozen < FROZEN_SECONDS
            new = cluster.leader_name()
            assert new is not None and new != old
            assert await _saved_on(cluster.node_url(cluster.node(new)), ids) == WRITERS
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        # Woken, the old leader finds the key taken and follows; it never takes the key back
        # (Patroni 3.0.2 did, on etcd3, and the new leader demoted itself, losing its writes).
        await asyncio.sleep(TIMINGS.loop_wait * 4 + TIMINGS.retry_timeout)
        assert cluster.leader_name() == new
        assert await _saved_on(cluster.node_url(cluster.node(new)), ids) == WRITERS
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(cluster.stop)
        if cluster.home != cluster.data_dir:
            shutil.rmtree(cluster.home, ignore_errors=True)
    # Generous for a busy machine, and far below the freeze: the writes did not wait for the
    # old leader to wake (the leader key's ttl, the promotion and the command's own time limit).
    assert max(took) < WRITES_WITHIN, took
