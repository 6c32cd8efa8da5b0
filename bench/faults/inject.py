"""The faults of the fault matrix, each made on the running HA profile and waited out.

Each fault is a coroutine `fault(stack, mark)`: it makes the fault, calls `mark()` at the
moment it is made (the write gap counts from there), undoes it where something must be undone
(SIGCONT, the killed node started again, Redis started again) and returns once the database
leads again. The harness then waits for the pair to be whole (`wait_whole`) before the checker
reads the nodes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import BenchError, say
from bench._drill import until
from omnium_devstack import RedisServer
from omnium_devstack.server import child_pids

Mark = Callable[[], None]


@dataclass(frozen=True)
class Timing:
    """How long the faults last; the drill's options fill it."""

    freeze_s: float = 40.0  # the primary's machine hangs this long
    slow_s: float = 20.0  # the standby's walreceiver stopped this long
    redis_down_s: float = 5.0  # Redis is started again after this
    down_s: float = 10.0  # a killed node (or its Patroni) is started again this long after
    stall_s: float = 3.0  # the replication link stalled before the leader is lost
    etcd_down_s: float = 15.0  # a killed etcd member is started again after this
    cut_s: float = 40.0  # the leader's Patroni is cut from etcd at least this long
    synchronous: bool = True  # False with BREAK=async: no synchronous standby to wait for


# --- the pair's state --------------------------------------------------------------------------


def _patroni_view(cluster: Any, name: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.node(name).status() or {}
    return status


async def wait_leader(cluster: Any, within: float, not_name: str | None = None) -> str:
    """A node that holds the leader key and runs as the primary (and is not `not_name`)."""

    def check() -> str | None:
        name: str | None = cluster.leader_name()
        if name is None or name == not_name:
            return None
        return name if _patroni_view(cluster, name).get("role") in ("master", "primary") else None

    found: str = await until("no node led", within, check)
    return found


async def wait_whole(cluster: Any, timing: Timing, within: float) -> str:
    """The pair whole again: a leader, the other node streaming from it (as the synchronous
    standby unless replication is asynchronous), and HAProxy routing to the leader alone."""
    leader = await wait_leader(cluster, within)

    def check() -> bool:
        members = cluster.members()
        other = [m for m in members if m["name"] != leader]
        roles = ("sync_standby",) if timing.synchronous else ("replica", "sync_standby")
        return bool(other) and all(
            m.get("role") in roles and m.get("state") in ("streaming", "running") for m in other
        )

    await until("the other node did not stream from the leader", within, check)
    await until(
        f"HAProxy did not route writes to {leader} alone",
        within,
        lambda: cluster.route.servers_up() == {leader},
    )
    await until("etcd was not whole (every member healthy, one leader)", within, cluster.etcd.whole)
    return leader


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def _start_again(cluster: Any, name: str, after: float) -> None:
    await asyncio.sleep(after)
    say(f"starting {name}'s Patroni again")
    await asyncio.to_thread(cluster.start_node, name)


# --- the faults --------------------------------------------------------------------------------


async def leader_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of the leader's Patroni and postmaster together (its machine lost); the node is
    started again once another leads, and rejoins as the standby."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    mark()
    await asyncio.to_thread(cluster.kill_node, old)
    new = await wait_leader(cluster, 120, not_name=old)
    say(f"leader_killed: {new} leads")
    await _start_again(cluster, old, timing.down_s)


async def postmaster_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of the leader's postmaster alone; Patroni restarts it in place."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    mark()
    await asyncio.to_thread(cluster.kill_postmaster, old)


async def patroni_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of the leader's Patroni alone: its PostgreSQL runs on as a primary that no
    longer renews the leader key. Once the other node leads, Patroni is started again; it
    finds another leader and turns its PostgreSQL into a standby (pg_rewind)."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    mark()
    await asyncio.to_thread(cluster.kill_patroni, old)
    new = await wait_leader(cluster, 120, not_name=old)
    say(f"patroni_killed: {new} leads")
    await _start_again(cluster, old, timing.down_s)


async def primary_frozen(stack: Any, mark: Mark, timing: Timing) -> None:
    """SIGSTOP of the leader's Patroni, postmaster and every backend (its machine hangs), then
    SIGCONT after `freeze_s`: it wakes to find another leader."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    mark()
    pids = await asyncio.to_thread(cluster.freeze_node, old)
    try:
        await asyncio.sleep(timing.freeze_s)
    finally:
        _signal(pids, signal.SIGCONT)
    say(f"primary_frozen: {old} woken after {timing.freeze_s:.0f} s")


async def switchover(stack: Any, mark: Mark, timing: Timing) -> None:
    """A planned switchover with `patronictl switchover` to the standby."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    new = next(n.name for n in cluster.nodes if n.name != old)
    patronictl = shutil.which("patronictl")
    if patronictl is None:
        raise BenchError("patronictl is not installed (the Debian package 'patroni' has it)")
    argv = [patronictl, "-c", str(cluster.node(old).config), "switchover"]
    argv += ["--leader", old, "--candidate", new, "--force"]
    mark()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"patronictl switchover failed ({proc.returncode}): {out.decode()}")
    await wait_leader(cluster, 120, not_name=old)


async def redis_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of Redis (the cache, the outbox's stream, the live fan-out); started again on
    the same port after `redis_down_s`, empty, as a restarted cache would be."""
    redis = stack.redis
    found = redis.running()
    if found is None:
        raise BenchError("Redis is not running")
    pid, port = found
    mark()
    os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(timing.redis_down_s)
    again = RedisServer(redis.data_dir, port)
    await asyncio.to_thread(again.start)
    stack.redis = again


async def copy_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of the first copy of the command service (every tap goes through it) and of the
    gateway, mid-call under load; each started again at once, as a kubelet would."""
    fleet = stack.fleet
    mark()
    for service in ("command", "gateway"):
        victim = fleet.of(service)[0]
        victim.busy = True
        try:
            await fleet.kill9(victim)
            await asyncio.sleep(0.5)
            await fleet.start(victim)
            await fleet.ready(victim, 90)
        finally:
            victim.busy = False


def _child_named(postmaster: int, word: bytes) -> int | None:
    """A postmaster's child whose title names it (walreceiver, walsender)."""
    for pid in child_pids(postmaster):
        with contextlib.suppress(OSError):
            if word in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    return None


async def standby_slowed(stack: Any, mark: Mark, timing: Timing) -> None:
    """SIGSTOP of the standby's walreceiver for `slow_s` (a standby whose disk or link
    stalls), then SIGCONT."""
    cluster = stack.cluster
    leader = await wait_leader(cluster, 30)
    standby = next(n for n in cluster.nodes if n.name != leader)
    postmaster = standby.postmaster_pid()
    receiver = _child_named(postmaster, b"walreceiver") if postmaster else None
    if receiver is None:
        raise BenchError(f"{standby.name} runs no walreceiver")
    mark()
    _signal([receiver], signal.SIGSTOP)
    try:
        await asyncio.sleep(timing.slow_s)
    finally:
        _signal([receiver], signal.SIGCONT)


async def link_stalled_leader_killed(stack: Any, mark: Mark, timing: Timing) -> None:
    """The replication link stalls (SIGSTOP of the leader's walsender) for `stall_s`, then the
    leader's machine is lost (`leader_killed`) before the link moves again. With a synchronous
    standby nothing was answered saved meanwhile; without one, what was is on no other node."""
    cluster = stack.cluster
    old = await wait_leader(cluster, 30)
    postmaster = cluster.node(old).postmaster_pid()
    sender = _child_named(postmaster, b"walsender") if postmaster else None
    if sender is None:
        raise BenchError(f"{old} runs no walsender")
    _signal([sender], signal.SIGSTOP)
    await asyncio.sleep(timing.stall_s)
    mark()
    await asyncio.to_thread(cluster.kill_node, old)
    # The machine is lost: the stopped walsender too (stopped, it cannot see its postmaster go).
    _signal([sender], signal.SIGKILL)
    new = await wait_leader(cluster, 120, not_name=old)
    say(f"link_stalled_leader_killed: {new} leads")
    await _start_again(cluster, old, timing.down_s)


async def etcd_member_lost(stack: Any, mark: Mark, timing: Timing) -> None:
    """kill -9 of etcd's raft leader (found from etcd's own status API), started again on its
    data after `etcd_down_s`, and waited for until the three members are whole. The two left
    are a quorum: they elect a leader within a second or two, well inside Patroni's
    retry_timeout, so the database leader keeps its key. A failover (another node leading, or
    the same node demoted and promoted again: a new timeline) fails the fault."""
    cluster = stack.cluster
    etcd = cluster.etcd
    if len(etcd.members) < 3:
        raise BenchError("etcd_member_lost needs three etcd members (the drill starts three)")
    leader = await wait_leader(cluster, 30)
    timeline = _patroni_view(cluster, leader).get("timeline")
    victim = await until("etcd named no raft leader", 30, etcd.leader)
    mark()
    await asyncio.to_thread(etcd.kill_member, victim)
    say(f"etcd_member_lost: killed etcd's raft leader {victim}")
    try:
        elected = await until("the two etcd members left elected no leader", 30, etcd.leader)
        say(f"etcd_member_lost: {elected} leads etcd; {victim} down for {timing.etcd_down_s:.0f} s")
        await asyncio.sleep(timing.etcd_down_s)
    finally:
        await asyncio.to_thread(etcd.start_member, victim)
    await until(f"etcd was not whole after {victim} started again", 60, etcd.whole)
    say(f"etcd_member_lost: {victim} rejoined; etcd whole, {etcd.leader()} leads it")
    now = await wait_leader(cluster, 30)
    again = _patroni_view(cluster, now).get("timeline")
    if now != leader or again != timeline:
        raise BenchError(
            f"losing one etcd member of three failed the database over: {leader} led on "
            f"timeline {timeline}, now {now} on timeline {again}"
        )


async def primary_cut_from_etcd(stack: Any, mark: Mark, timing: Timing) -> None:
    """The leader's Patroni partitioned from every etcd member (its relay cut: bytes dropped,
    nothing answered), while its PostgreSQL, the standby, the clients and the other Patroni
    keep their links. Patroni cannot renew the key within retry_timeout and demotes its
    PostgreSQL; the key expires after the TTL and the standby is promoted. The link is healed
    once that has happened and at least `cut_s` after the cut; the old leader then rejoins as
    the standby (wait_whole)."""
    cluster = stack.cluster
    if not getattr(cluster, "cuttable", False):
        raise BenchError("primary_cut_from_etcd needs the HA profile's relays (cuttable=True)")
    old = await wait_leader(cluster, 30)
    mark()
    began = time.monotonic()
    await asyncio.to_thread(cluster.cut_from_etcd, old)
    say(f"primary_cut_from_etcd: {old}'s Patroni cut from etcd")
    try:

        def demoted() -> bool:
            status = cluster.node(old).status()
            return status is not None and status.get("role") not in ("master", "primary")

        await until(f"{old} did not demote itself while cut from etcd", 60, demoted)
        say(f"primary_cut_from_etcd: {old} demoted {time.monotonic() - began:.1f} s after the cut")
        new = await wait_leader(cluster, 120, not_name=old)
        say(f"primary_cut_from_etcd: {new} leads {time.monotonic() - began:.1f} s after the cut")
        await asyncio.sleep(max(0.0, timing.cut_s - (time.monotonic() - began)))
    finally:
        await asyncio.to_thread(cluster.heal_etcd_link, old)
    say(f"primary_cut_from_etcd: {old}'s link to etcd healed")


FAULTS: dict[str, Callable[[Any, Mark, Timing], Awaitable[None]]] = {
    "leader_killed": leader_killed,
    "postmaster_killed": postmaster_killed,
    "patroni_killed": patroni_killed,
    "primary_frozen": primary_frozen,
    "switchover": switchover,
    "redis_killed": redis_killed,
    "copy_killed": copy_killed,
    "standby_slowed": standby_slowed,
    "link_stalled_leader_killed": link_stalled_leader_killed,
    "etcd_member_lost": etcd_member_lost,
    "primary_cut_from_etcd": primary_cut_from_etcd,
}


# --- who holds the leader key ------------------------------------------------------------------


def leader_key(etcd_url: str, scope: str) -> str | None:
    """The node named in Patroni's leader key, read from etcd itself: its v2 store (the HA
    profile's), else its v3 one ("" when nobody holds it, None when etcd does not answer)."""
    path = f"/service/{scope}/leader"
    try:
        with urllib.request.urlopen(f"{etcd_url}/v2/keys{path}", timeout=1) as answer:
            return str(json.loads(answer.read())["node"]["value"])
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            return None
    except (OSError, ValueError, KeyError):
        return None
    key = base64.b64encode(path.encode()).decode()
    request = urllib.request.Request(
        f"{etcd_url}/v3/kv/range",
        data=json.dumps({"key": key}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=1) as answer:
            found = json.loads(answer.read())
    except (OSError, ValueError):
        return None
    kvs = found.get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else ""


def any_leader_key(etcd_urls: list[str], scope: str) -> str | None:
    """`leader_key` from the first etcd member that answers (one may be down by design)."""
    for url in etcd_urls:
        if (found := leader_key(url, scope)) is not None:
            return found
    return None


async def watch_leader(etcd_urls: list[str], scope: str, records: list[dict[str, Any]]) -> None:
    """A `leader` record each time the key changes hands, looked at every 100 ms on whichever
    etcd member answers."""
    last: str | None = None
    while True:
        at = time.monotonic()
        now = await asyncio.to_thread(any_leader_key, etcd_urls, scope)
        if now is not None and now != last:
            records.append({"kind": "leader", "node": now, "since": at})
            last = now
        await asyncio.sleep(0.1)
