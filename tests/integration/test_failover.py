"""The database fails over under writes: real etcd, Patroni and two PostgreSQL nodes.

A failover costs the leader's TTL (10 s here), so the module makes one: the fixture `switch`
starts the pair, the command service, imports with a Games day run in flight, delivery and a
gateway, all on the pair's multi-host DSN; saves commands, holds one command in flight, kills
the leader's Patroni and postmaster together (a lost machine), waits for the standby to lead,
saves again, and lets the run finish. Each test then checks one promise against the new
primary. Nothing is restarted but the killed node, which rejoins as a standby at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest
import redis.asyncio as aioredis

from omnium.command.v1 import command_pb2
from omnium_command._sql import QUERIES as COMMAND_QUERIES
from omnium_db import apply_migrations, init_connection
from omnium_devstack.ha import HaTimings, PatroniCluster
from omnium_devstack.roles import grant_services, prepare_migrator, service_urls
from omnium_gateway import Cache
from omnium_gateway._outbox import OutboxRelay
from omnium_live import stream_key
from tests.support.command import CommandClient, command
from tests.support.delivery import LOCK_WAIT, query_until, running_delivery
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.imports import games_day
from tests.support.outage import crashable_redis
from tests.support.receiver import Receiver, webhook_receiver
from tests.support.waiting import eventually

# The module's one failover (start, kill, promote, finish the run, rejoin) runs in the first
# test's setup.
pytestmark = pytest.mark.timeout(420)

ACCEPTED = command_pb2.OUTCOME_ACCEPTED
DUPLICATE = command_pb2.OUTCOME_DUPLICATE
TRY_AGAIN = command_pb2.OUTCOME_TRY_AGAIN
# Quick enough for a test, and still ttl ≥ loop_wait + 2 × retry_timeout as Patroni requires.
TEST_TIMINGS = HaTimings(ttl=10, loop_wait=1, retry_timeout=4)
# Far longer than the module: a unit the gateway cached stays cached, and the relay never
# polls, so only its invalidations (woken by NOTIFY, or by its listener's catch-up after the
# reconnect) can show a change.
DAY = 86_400
# Every outbox row about a unit, with the cache group the gateway keeps that unit's page in.
UNIT_ROWS = """
SELECT d.id, 'unit:' || e.code || ':' || u.code AS unit_group
  FROM domain_event d JOIN event e ON e.id = d.event_id JOIN unit u ON u.id = d.unit_id
 WHERE d.id > $1
"""


@dataclass
class Switch:
    """What happened around the failover, for the tests to check."""

    cluster: PatroniCluster
    old_leader: str
    new_leader: str
    saved_before: list[str] = field(default_factory=list)
    saved_after: list[str] = field(default_factory=list)
    in_flight_answer: command_pb2.Answer | None = None
    in_flight_resent: list[command_pb2.Answer] = field(default_factory=list)
    same_command_app: bool = False
    run_id: str = ""
    run: dict[str, object] = field(default_factory=dict)
    batch_done_at_kill: int = 0
    live_ids: list[int] = field(default_factory=list)
    outbox_ids: list[int] = field(default_factory=list)
    # The gateway: what it cached before the kill, what it showed after, what the database says.
    cached_before: dict[str, str] = field(default_factory=dict)
    shown_after: dict[str, str] = field(default_factory=dict)
    saved_status: dict[str, str] = field(default_factory=dict)
    # Its relay: the outbox id it started from and reached, the outbox head just before the
    # kill, and each unit group's generation then and at the end (bumped once per
    # invalidation), with the outbox rows that touched each group before and after the head.
    relay_from: int = 0
    relay_reached: int | None = None
    head_at_kill: int = 0
    generations_at_kill: dict[str, int] = field(default_factory=dict)
    generations_after: dict[str, int] = field(default_factory=dict)
    groups_before: set[str] = field(default_factory=set)
    groups_after: set[str] = field(default_factory=set)
    rejoined: bool = False
    alerts_while_alone: list[str] = field(default_factory=list)
    alerts_after_rejoin: list[str] = field(default_factory=list)


async def _submit_until_answered(
    client: CommandClient, cmd: command_pb2.Command, seconds: float = 60
) -> list[command_pb2.Answer]:
    """Send the same command until it is not try_again, as a caller told to retry does."""
    answers: list[command_pb2.Answer] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer: command_pb2.Answer = await client.stub.Submit(cmd, timeout=30)
        answers.append(answer)
        if answer.outcome != TRY_AGAIN:
            return answers
        await asyncio.sleep(0.2)
    raise AssertionError(f"still try_again after {seconds} s: {answers[-1]}")


def _status(cmd_id: str, unit_id: str, status: str) -> command_pb2.Command:
    return command(cmd_id, "results.set_status", {"status": status}, unit_id=unit_id)


async def _connect(url: str) -> asyncpg.Connection:
    conn: asyncpg.Connection = await eventually(
        lambda: asyncpg.connect(url, timeout=2),
        ignoring=(OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError),
        within=60,
        every=0.2,
        what="a connection",
    )
    await init_connection(conn)
    return conn


@pytest.fixture(scope="module")
async def switch(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Switch]:
    data = tmp_path_factory.mktemp("ha")
    cluster = PatroniCluster(data / "pair", fsync=False, timings=TEST_TIMINGS)
    await asyncio.to_thread(cluster.start)
    try:
        # As production runs them: the migrations as the migration role, then the services'
        # roles; each service connects as its own login, the test itself as the superuser.
        migrator = await _connect(await prepare_migrator(cluster.database_url))
        await apply_migrations(migrator)
        await migrator.close()
        await grant_services(cluster.database_url)
        async with crashable_redis(data / "redis") as redis_server, webhook_receiver() as hook:
            yield await _switch(cluster, redis_server.redis_url, hook)
    finally:
        await asyncio.to_thread(cluster.stop)
        if cluster.home != cluster.data_dir:
            shutil.rmtree(cluster.home, ignore_errors=True)


async def _switch(cluster: PatroniCluster, redis_url: str, hook: Receiver) -> Switch:
    url = cluster.database_url
    logins = service_urls(url)
    old = cluster.leader_name()
    assert old is not None
    watch = {
        "database_standby_expected": True,
        "standby_check_seconds": 0.5,
        "alert_webhook_url": hook.url,
    }
    async with (
        games_day(
            url,
            command_settings=watch,
            import_overrides={"imports_poll_seconds": 1.0},
            service_urls=logins,
        ) as day,
        # A stream long enough to keep every change of the test (1,252 units and more).
        running_delivery(logins["delivery"], redis_url, live_stream_length=100_000) as delivery,
        running_gateway(
            logins["gateway"],
            redis_url,
            cache_ttl_scheduled=DAY,
            cache_ttl_live=DAY,
            gateway_outbox_poll_seconds=DAY,
        ) as gateway,
    ):
        app = day.command.app
        relay = gateway.gateway.relay
        assert relay is not None and relay.watermark is not None
        relay_from = relay.watermark
        run = await day.sim.make_run("schedule", wait_doorbell=True)
        # Hold the run's row once a few batches are in, so the run is surely in flight at the
        # kill (each batch bumps batch_done on that row).
        holder = await _connect(cluster.node_url(cluster.node(old)))
        row = await eventually(
            lambda: holder.fetchrow(
                "SELECT id::text, batch_done FROM integration_run WHERE scout_run_id = $1",
                run.id,
            ),
            until=lambda row: row is not None and row["batch_done"] >= 3,
            within=60,
            every=0.02,
            what="the import run to get going",
        )
        switch = Switch(cluster, old, "")
        switch.relay_from = relay_from
        switch.run_id = row["id"]
        tx = holder.transaction()
        await tx.start()
        switch.batch_done_at_kill = await holder.fetchval(
            "SELECT batch_done FROM integration_run WHERE id = $1::uuid FOR UPDATE", row["id"]
        )
        picked = await holder.fetch("SELECT id::text, code FROM unit ORDER BY code LIMIT 25")
        units = [r["id"] for r in picked]
        codes = [r["code"] for r in picked]
        assert len(units) == 25
        # Each of these units is changed below, before or after the kill: cached now, for a day.
        for code in codes:
            first = await gateway.get(f"/v1/events/AG2026/units/{code}")
            assert first.status_code == 200
            switch.cached_before[code] = first.json()["status"]
        for n, unit in enumerate(units[:10]):
            answer = await day.command.stub.Submit(
                _status(f"before-{n}", unit, "DELAYED"), timeout=30
            )
            assert answer.outcome == ACCEPTED, answer
            switch.saved_before.append(f"before-{n}")
        # One command waits on a lock the holder has, so it is in flight at the kill.
        await holder.execute("SELECT 1 FROM unit WHERE id = $1::uuid FOR UPDATE", units[10])
        in_flight = _status("in-flight", units[10], "INTERRUPTED")
        pending = asyncio.ensure_future(day.command.stub.Submit(in_flight, timeout=60))
        await query_until(holder, LOCK_WAIT, within=20)

        # The generations first, then the head: a row past the head commits after both, so
        # the relay's invalidation for it can only come after them.
        every_unit = [r["code"] for r in await holder.fetch("SELECT code FROM unit")]
        switch.generations_at_kill = await _generations(
            redis_url, gateway.gateway.cache, {f"unit:AG2026:{code}" for code in every_unit}
        )
        switch.head_at_kill = await holder.fetchval("SELECT coalesce(max(id), 0) FROM domain_event")
        await asyncio.to_thread(cluster.kill_node, old)
        switch.in_flight_answer = await pending
        # Its server is gone: drop it without the goodbye a close would wait for.
        holder.terminate()
        switch.new_leader = await asyncio.to_thread(cluster.wait_for_leader, 90, old)

        switch.in_flight_resent = await _submit_until_answered(day.command, in_flight)
        switch.in_flight_resent += await _submit_until_answered(day.command, in_flight)
        for n, unit in enumerate(units[11:], start=11):
            answers = await _submit_until_answered(
                day.command, _status(f"after-{n}", unit, "RUNNING")
            )
            assert answers[-1].outcome == ACCEPTED, answers[-1]
            switch.saved_after.append(f"after-{n}")
        switch.same_command_app = day.command.app is app

        # The test's own plain connection went with the old primary (only the services'
        # pools follow by themselves).
        day.db.terminate()
        day.db = await _connect(url)
        finished = await day.wait_for_run(run.id, seconds=180)
        switch.run = dict(finished)

        db = day.db
        switch.outbox_ids = [r["id"] for r in await db.fetch("SELECT id FROM domain_event")]
        switch.live_ids = await _live_ids(redis_url, len(switch.outbox_ids))
        switch.relay_reached = await _relay_reaches(relay, max(switch.outbox_ids))
        for row in await db.fetch(UNIT_ROWS, switch.relay_from):
            after = row["id"] > switch.head_at_kill
            (switch.groups_after if after else switch.groups_before).add(row["unit_group"])
        switch.generations_after = await _generations(
            redis_url, gateway.gateway.cache, switch.groups_before | switch.groups_after
        )
        switch.saved_status = {
            r["code"]: r["status"]
            for r in await db.fetch("SELECT code, status FROM unit WHERE code = ANY($1)", codes)
        }
        switch.shown_after = await _shown_until(gateway, switch.saved_status)
        # The new primary runs alone until the old one rejoins: the command service says so.
        switch.alerts_while_alone = await _alerts(hook, 1)
        await asyncio.to_thread(cluster.start_node, old)
        await asyncio.to_thread(cluster.wait_streaming, old, 90)
        await asyncio.to_thread(cluster.wait_sync_standby, 90)
        switch.rejoined = True
        switch.alerts_after_rejoin = await _alerts(hook, 2)
        # games_day closes the connection it made, not this replacement.
        await db.close()
        del delivery
    return switch


async def _alerts(hook: Receiver, count: int, seconds: float = 30) -> list[str]:
    for _ in range(int(seconds * 10)):
        if len(hook.got) >= count:
            break
        await asyncio.sleep(0.1)
    return [
        ("cleared" if got.json["cleared"] else "raised") + ": " + got.json["message"]
        for got in hook.got
    ]


async def _live_ids(redis_url: str, expected: int, seconds: float = 60) -> list[int]:
    """The outbox ids the live stream carries, once it has as many as the outbox holds."""
    client = aioredis.from_url(redis_url)
    try:
        deadline = time.monotonic() + seconds
        while True:
            entries = await client.xrange(stream_key("AG2026"))
            ids = [
                json.loads(fields[b"data"])["id"]
                for _, fields in entries
                if b"data" in fields and "id" in json.loads(fields[b"data"])
            ]
            if len(ids) >= expected or time.monotonic() > deadline:
                return ids
            await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def _generations(redis_url: str, cache: Cache, groups: set[str]) -> dict[str, int]:
    """Each group's generation in Redis; 0 for a group never invalidated."""
    names = sorted(groups)
    client = aioredis.from_url(redis_url)
    try:
        values = await client.mget([cache.gen_key(name) for name in names]) if names else []
    finally:
        await client.aclose()
    return {name: int(value or 0) for name, value in zip(names, values, strict=True)}


async def _relay_reaches(relay: OutboxRelay, last_id: int, seconds: float = 60) -> int | None:
    """The outbox id the relay has reached, once it is `last_id` or the time is up."""
    for _ in range(int(seconds * 5)):
        if (relay.watermark or 0) >= last_id:
            break
        await asyncio.sleep(0.2)
    return relay.watermark


async def _shown_until(
    gateway: RunningGateway, expected: dict[str, str], seconds: float = 30
) -> dict[str, str]:
    """The status the gateway shows for each unit, once it shows every expected one or the
    time is up."""
    deadline = time.monotonic() + seconds
    shown: dict[str, str] = {}
    while True:
        for code in expected:
            answer = await gateway.get(f"/v1/events/AG2026/units/{code}")
            shown[code] = answer.json()["status"] if answer.status_code == 200 else ""
        if shown == expected or time.monotonic() > deadline:
            return shown
        await asyncio.sleep(0.2)


async def _new_primary(switch: Switch) -> asyncpg.Connection:
    return await _connect(switch.cluster.database_url)


async def test_every_command_answered_accepted_is_on_the_new_primary(switch: Switch) -> None:
    assert switch.new_leader != switch.old_leader
    db = await _new_primary(switch)
    try:
        ids = switch.saved_before + switch.saved_after
        found = await db.fetchval(
            "SELECT count(*) FROM command WHERE command_id = ANY($1) AND outcome = 'accepted'", ids
        )
        logged = await db.fetchval(
            "SELECT count(*) FROM timeline_item WHERE command_id = ANY($1)", ids
        )
    finally:
        await db.close()
    assert len(switch.saved_before) == 10 and len(switch.saved_after) == 14
    assert found == logged == len(ids)


async def test_the_command_in_flight_answers_try_again_and_is_written_once(
    switch: Switch,
) -> None:
    answer = switch.in_flight_answer
    assert answer is not None
    assert answer.outcome == TRY_AGAIN, answer
    assert "send the same command again" in answer.reason.lower(), answer.reason
    assert "Traceback" not in answer.reason and "Error" not in answer.reason
    outcomes = [a.outcome for a in switch.in_flight_resent]
    assert outcomes[-1] == DUPLICATE
    assert next(o for o in outcomes if o != TRY_AGAIN) in (ACCEPTED, DUPLICATE)
    db = await _new_primary(switch)
    try:
        written = await db.fetchval(
            "SELECT count(*) FROM timeline_item WHERE command_id = 'in-flight'"
        )
        events = await db.fetchval(
            "SELECT count(*) FROM domain_event WHERE command_id = 'in-flight'"
        )
    finally:
        await db.close()
    assert written == 1
    assert events == 1


async def test_the_running_service_follows_the_new_primary_without_a_restart(
    switch: Switch,
) -> None:
    assert switch.same_command_app
    assert switch.saved_after, "nothing was saved after the switch"


async def test_the_import_run_in_flight_finishes_with_no_batch_written_twice(
    switch: Switch,
) -> None:
    run = switch.run
    assert run["status"] == "done", run
    assert 3 <= switch.batch_done_at_kill < run["batch_total"]  # type: ignore[operator]
    assert run["batch_done"] == run["batch_total"]
    db = await _new_primary(switch)
    try:
        twice = await db.fetchval(
            "SELECT count(*) FROM (SELECT command_id FROM timeline_item "
            "WHERE command_id LIKE $1 GROUP BY command_id HAVING count(*) > 1) t",
            f"{switch.run_id}:%",
        )
        batches = await db.fetchval(
            "SELECT count(DISTINCT command_id) FROM timeline_item WHERE command_id LIKE $1",
            f"{switch.run_id}:%",
        )
        units = await db.fetchval("SELECT count(*) FROM unit")
    finally:
        await db.close()
    assert twice == 0
    assert batches == run["batch_total"]
    assert units == 1252


async def test_delivery_pushed_every_saved_change_once_across_the_switch(switch: Switch) -> None:
    assert switch.outbox_ids
    missing = sorted(set(switch.outbox_ids) - set(switch.live_ids))
    assert missing == [], f"{len(missing)} changes never pushed live"
    doubled = len(switch.live_ids) - len(set(switch.live_ids))
    assert doubled == 0


async def test_the_gateway_shows_every_change_to_units_it_had_cached_for_a_day(
    switch: Switch,
) -> None:
    """Cached before the kill, changed before it, in flight at it and after it: only the
    relay's invalidations can show the changes."""
    assert len(switch.cached_before) == 25
    assert set(switch.cached_before.values()).isdisjoint(switch.saved_status.values())
    assert switch.shown_after == switch.saved_status


async def test_the_gateway_relay_invalidates_every_unit_changed_across_the_switch(
    switch: Switch,
) -> None:
    assert switch.relay_reached is not None
    assert switch.relay_reached >= max(switch.outbox_ids)
    # Units the run created or changed after the kill are among these.
    assert switch.groups_after
    before, after, then = switch.groups_before, switch.groups_after, switch.generations_at_kill
    never = sorted(g for g in before | after if switch.generations_after[g] == 0)
    assert never == [], f"{len(never)} units never invalidated"
    missed = sorted(g for g in after if switch.generations_after[g] <= then.get(g, 0))
    assert missed == [], f"{len(missed)} units changed after the kill, not invalidated after it"


async def test_the_old_primary_rejoins_as_a_streaming_standby(switch: Switch) -> None:
    assert switch.rejoined
    roles = {m["name"]: m["role"] for m in switch.cluster.members()}
    assert roles[switch.new_leader] == "leader"
    assert roles[switch.old_leader] == "sync_standby"


async def test_the_standby_watch_sees_the_standby_under_command_s_role_only(
    switch: Switch,
) -> None:
    # As the services connect: the command service's login (pg_monitor) reads sync_state; a
    # login in any other role sees the standby's row with that column hidden.
    seen = {}
    for service in ("command", "gateway"):
        as_role = await _connect(service_urls(switch.cluster.database_url)[service])
        try:
            seen[service] = await as_role.fetchval(COMMAND_QUERIES["sync_standbys"])
        finally:
            await as_role.close()
    assert seen == {"command": 1, "gateway": 0}


def test_saves_on_one_server_only_are_alerted_and_cleared(switch: Switch) -> None:
    alone, after = switch.alerts_while_alone, switch.alerts_after_rejoin
    assert len(alone) == 1 and alone[0].startswith("raised: The database has no synchronous")
    assert len(after) == 2 and after[1].startswith("cleared: ")


HOW_TO_INSTALL = {
    "patroni": "sudo apt-get install patroni",
    "etcd": "sudo apt-get install etcd-server",
}


@pytest.mark.parametrize(
    "missing", [("patroni",), ("etcd",), ("patroni", "etcd")], ids=["patroni", "etcd", "both"]
)
def test_the_ha_profile_refuses_to_start_without_patroni_or_etcd(
    tmp_path: Path, missing: tuple[str, ...]
) -> None:
    """With what is missing off PATH, `run --ha` says how to install it, and only it, and
    starts nothing."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for name in HOW_TO_INSTALL.keys() - set(missing):
        found = shutil.which(name)
        assert found is not None, f"{name} is needed on this machine for this test"
        (bare / name).symlink_to(found)
    env = {**os.environ, "PATH": str(bare)}
    for name in ("OMNIUM_DATABASE_URL", "OMNIUM_REDIS_URL"):
        env.pop(name, None)
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "dev", "run", "--ha", "--data-dir", str(data)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    for name, install in HOW_TO_INSTALL.items():
        assert (install in done.stderr) == (name in missing), done.stderr
    assert "Traceback" not in done.stderr
    assert not (data / "ha").exists() or not any((data / "ha").iterdir())
