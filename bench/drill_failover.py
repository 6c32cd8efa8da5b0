"""The failover drill: kill -9 the database leader under load and count what was lost.

A Patroni pair (synchronous standby), Redis and every service that matters, each in its own
process (command, scoring, imports, delivery, the gateway, the Scout simulator replaying a Games
day and ringing the doorbell, the demo clients' SFTP sink and a webhook receiver). Under load —
20 scorers tapping through the gateway's scorer routes as the console does (a tap not saved stays
queued and is sent again with the same client id), a few public API readers, a Scout run in
flight — the leader is killed (Patroni and PostgreSQL together); the standby takes over, the old
leader rejoins. Then a shorter second case: the leader's postmaster alone is killed and Patroni
restarts it in place; `restart_listeners_back_s` is how long after that postmaster first
answers every service's LISTEN connection is back on it. Afterwards everything is checked
against the primary: taps answered saved and not there, actions or import batches applied
twice, changes no client got. A drill, not a test: it prints figures (`name: value`, the second
case's prefixed `restart_`) and exits 0 when it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import web

from bench._common import free_port, say, wait_for_port
from bench._drill import (
    IN_FLIGHT,
    READER_KEY,
    ROOT,
    TOKEN,
    Load,
    Service,
    add_load_options,
    add_run_options,
    child_env,
    command_line,
    connect,
    database,
    deliveries_settled,
    first_save_after,
    import_checks,
    job_status,
    migration_step,
    noisy_lines,
    receivers_app,
    run_drills,
    run_in_flight,
    run_status,
    say_diagnosis,
    seed_scorers,
    start_load,
    start_service,
    steady,
    stop_service,
    tap_checks,
    until,
)
from dev.games_day import services, set_up_demo
from omnium_db import DATABASE_ERRORS, connect_each_host
from omnium_delivery.sinks import ensure_keys
from omnium_devstack import RedisServer
from omnium_devstack.launcher import host_port
from omnium_devstack.roles import own_logins
from omnium_settings import Settings

# Services the drill runs; the admin console and the provider pull play no part in a failover.
SERVICES = ("command", "scoring", "imports", "delivery", "gateway", "scout-sim", "client-sinks")
CASES = ("failover", "restart")

log = logging.getLogger("bench.drill_failover")


# --- the clock of one run ----------------------------------------------------------------------


@dataclass
class Case:
    """One fault: when it was made, when writes came back, what was in flight."""

    name: str
    began: float = 0.0  # monotonic: the case's load starts counting here
    began_wall: float = 0.0
    kill: float | None = None
    leader: float | None = None  # a node accepts writes again (Patroni's view)
    rejoin_s: float | None = None
    run_id: str | None = None  # the import run in flight at the kill
    run_status: str = "none"
    asked_run: str | None = None  # a Scout run asked for that never got in flight
    outage_end: float | None = None  # the first tap saved again
    listeners_back_s: float | None = None  # the restart: first answer to every LISTEN back


@dataclass
class Drill(Load):
    """What the load saw, and the two cases' clocks."""

    phases: Sequence[str] = CASES
    cases: dict[str, Case] = field(default_factory=lambda: {n: Case(n) for n in CASES})

    @property
    def case(self) -> Case:
        return self.cases[self.current]


# --- the database's state ----------------------------------------------------------------------


async def wait_leader(cluster: Any, within: float, not_name: str | None = None) -> str:
    """A node that leads and accepts writes (and is not `not_name`)."""

    def check() -> str | None:
        name: str | None = cluster.leader_name()
        if name is None or name == not_name:
            return None
        status = cluster.node(name).status() or {}
        return name if status.get("role") in ("master", "primary") else None

    found: str = await until("no node led", within, check)
    return found


async def wait_streaming(cluster: Any, name: str, within: float) -> None:
    def check() -> bool:
        status = cluster.node(name).status()
        if status is None or status.get("replication_state", "streaming") != "streaming":
            return False
        return any(
            m["name"] == name
            and m.get("role") in ("replica", "sync_standby")
            and m.get("state") in ("streaming", "running")
            for m in cluster.members()
        )

    await until(f"{name} did not stream from the leader", within, check)


async def wait_sync_standby(cluster: Any, within: float) -> None:
    def check() -> bool:
        return any(m.get("role") == "sync_standby" for m in cluster.members())

    await until("no node became the synchronous standby", within, check)


# --- every LISTEN connection back --------------------------------------------------------------

# The services' LISTEN connections (NotifyListener names each `<service>:listen`), counted once
# idle after a statement: a listener's first statement is its LISTEN.
LISTENING = """
SELECT application_name AS name, count(*) AS n FROM pg_stat_activity
 WHERE application_name LIKE '%:listen' AND state = 'idle' AND query <> ''
 GROUP BY application_name
"""


@dataclass(frozen=True)
class Listening:
    """The LISTEN connections of one postmaster, by name, and when that postmaster started."""

    postmaster_start: datetime
    names: Counter[str]


async def listening(conn: asyncpg.Connection) -> Listening:
    # Bounded: a postmaster on its way down may hold a look forever.
    start: datetime = await conn.fetchval("SELECT pg_postmaster_start_time()", timeout=5)
    rows = await conn.fetch(LISTENING, timeout=5)
    return Listening(start, Counter({r["name"]: r["n"] for r in rows}))


@dataclass
class ListenersBack:
    """From the first answer of a postmaster other than `before`'s (Patroni's restart, or a new
    leader) to every LISTEN connection `before` had being back on it."""

    before: Listening
    answered: float | None = None
    back: float | None = None

    def look(self, at: float, now: Listening) -> bool:
        """One look at the primary at `at` (monotonic); True once every listener is back."""
        if now.postmaster_start == self.before.postmaster_start:
            # The postmaster from before the kill, not gone yet: its connections do not count.
            return False
        if self.answered is None:
            self.answered = at
        if all(now.names[name] >= n for name, n in self.before.names.items()):
            self.back = at
        return self.back is not None

    def missing(self, now: Listening) -> list[str]:
        return sorted(name for name, n in self.before.names.items() if now.names[name] < n)

    @property
    def seconds(self) -> float | None:
        if self.answered is None or self.back is None:
            return None
        return self.back - self.answered


async def listening_now(url: str) -> Listening:
    conn = await connect(url)
    try:
        return await listening(conn)
    finally:
        await conn.close()


async def listeners_back(url: str, before: Listening, within: float) -> float | None:
    """Seconds from the primary's first answer after the kill to every LISTEN connection of
    `before` being back (None if not within `within` s); looked at every 50 ms."""
    clock = ListenersBack(before)
    deadline = time.monotonic() + within
    now: Listening | None = None
    while time.monotonic() < deadline:
        try:
            conn = await connect_each_host(url, host_timeout=1.0)
        except DATABASE_ERRORS:
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < deadline:
                now = await listening(conn)
                if clock.look(time.monotonic(), now):
                    return clock.seconds
                if now.postmaster_start == before.postmaster_start:
                    break
                await asyncio.sleep(0.05)
        except DATABASE_ERRORS:
            pass
        finally:
            conn.terminate()
        await asyncio.sleep(0.05)
    if clock.answered is None or now is None:
        say(f"restart: no restarted postmaster answered within {within:.0f} s")
    else:
        say(f"restart: LISTEN connections not back within {within:.0f} s: {clock.missing(now)}")
    return None


# --- the faults --------------------------------------------------------------------------------


async def writes_back(drill: Drill, case: Case, within: float) -> None:
    """Until a tap first sent after the kill is answered saved."""
    assert case.kill is not None
    case.outage_end = await first_save_after(drill, case.kill, within)
    if case.outage_end is None:
        say(f"{case.name}: no tap was saved within {within:.0f} s of the kill")


# --- one run -----------------------------------------------------------------------------------


async def one_run(args: argparse.Namespace, run_no: int) -> dict[str, float | str]:
    # SIGTERM stops the drill as Ctrl-C does: the task is cancelled and every finally runs.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    data_dir = args.data_dir.resolve()
    shutil.rmtree(data_dir, ignore_errors=True)
    logs = data_dir / "logs"
    logs.mkdir(parents=True)
    drill = Drill()
    async with database(data_dir) as cluster:
        redis = RedisServer(data_dir, 0)
        await asyncio.to_thread(redis.start)
        try:
            return await _with_servers(
                args, run_no, drill, cluster, redis.redis_url, data_dir,
                services, set_up_demo, Settings,
            )  # fmt: skip
        finally:
            await asyncio.to_thread(redis.stop)


async def _with_servers(
    args: argparse.Namespace,
    run_no: int,
    drill: Drill,
    cluster: Any,
    redis_url: str,
    data_dir: Path,
    services: Callable[..., Any],
    set_up_demo: Callable[..., Any],
    settings_type: Any,
) -> dict[str, float | str]:
    url = cluster.database_url
    logs = data_dir / "logs"
    await migration_step(url, child_env({}), logs)
    ports = {
        name: free_port()
        for name in (
            "gateway", "doorbell", "admin", "scout_simulator", "command", "scoring", "imports",
            "delivery", "sftp_sink", "webhook_sink",
        )
    }  # fmt: skip
    values = {f"OMNIUM_{name.upper()}_PORT": str(port) for name, port in ports.items()}
    values |= {
        "OMNIUM_DATABASE_URL": url,
        "OMNIUM_REDIS_URL": redis_url,
        "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports['command']}",
        "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports['scoring']}",
        "OMNIUM_IMPORTS_ADDRESS": f"127.0.0.1:{ports['imports']}",
        "OMNIUM_GATEWAY_API_KEYS": f"drill:{READER_KEY}:10000:10000",
        "OMNIUM_LOG_LEVEL": "INFO",
        # The drill's receivers and Scout simulator listen on this machine.
        "OMNIUM_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
    }
    settings = settings_type.from_env(values)
    env = child_env(values)
    secret = "drill-scout-secret-" + os.urandom(6).hex()
    (data_dir / "scout-secret").write_text(secret + "\n")
    ensure_keys(data_dir / "sftp-keys")
    (data_dir / "webhook-secret").write_text("whsec_ZHJpbGwtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ==\n")
    # The webhook client is this process (it keeps each body); the sink takes the SFTP files.
    sink_settings = settings.replace(webhook_sink_port=free_port())
    # Each service as its own database role, as production runs them.
    specs = {s.name: s for s in own_logins(services(settings, data_dir / "scout-secret"), url)}
    specs["client-sinks"] = next(
        s for s in services(sink_settings, data_dir / "scout-secret") if s.name == "client-sinks"
    )
    hooks = web.AppRunner(receivers_app(drill), access_log=None, shutdown_timeout=1)
    await hooks.setup()
    await web.TCPSite(hooks, "127.0.0.1", ports["webhook_sink"]).start()
    running: list[Service] = []
    try:
        for name in SERVICES:
            spec = specs[name]
            extra = []
            if name == "scout-sim":
                extra = ["--replay-seconds-per-hour", str(args.replay_seconds_per_hour)]
            own_env = env | dict(spec.env)
            running.append(await start_service(name, command_line(spec, extra), own_env, logs))
        for service, name in zip(running, SERVICES, strict=True):
            for _, where in specs[name].listens:
                await wait_for_port(
                    service.proc, host_port(where)[1], service.log, 90, f"the {name} process"
                )
        say(f"services: {', '.join(SERVICES)} up (logs in {logs})")
        # The demo's integrations and clients: ndtv by SFTP, dailyhunt by webhook (to us).
        await set_up_demo(url, settings, secret, data_dir)
        units = await seed_scorers(url, args.scorers)
        figures = await _load_and_faults(args, drill, cluster, url, ports, units, data_dir)
    finally:
        drill.stopping.set()
        for service in reversed(running):
            await stop_service(service)
        await hooks.cleanup()
        for service in running:
            lines = noisy_lines(service.log)
            if lines:
                say(f"{service.name} log: {len(lines)} error lines, first: {lines[0][:300]}")
    say(f"run {run_no} done")
    return figures


async def _load_and_faults(
    args: argparse.Namespace,
    drill: Drill,
    cluster: Any,
    url: str,
    ports: dict[str, int],
    units: list[tuple[str, str]],
    data_dir: Path,
) -> dict[str, float | str]:
    base = f"http://127.0.0.1:{ports['gateway']}"
    scout = f"http://127.0.0.1:{ports['scout_simulator']}"
    load = start_load(drill, base, units, args)
    failover = drill.cases["failover"]
    failover.began, failover.began_wall = time.monotonic(), drill.begin("failover")
    watches: list[asyncio.Task[float | None]] = []
    try:
        await _kill_the_leader(args, drill, cluster, url, scout)
        await _kill_the_postmaster(args, drill, cluster, url, scout, watches)
    except BaseException:
        # Stopped (Ctrl-C) or failed: no waiting for queues, straight to stopping everything.
        for task in [*load, *watches]:
            task.cancel()
        await asyncio.gather(*load, *watches, return_exceptions=True)
        raise
    drill.stopping.set()
    say("load stopped; the scorers send what is still queued")
    await asyncio.gather(*load, return_exceptions=True)
    return await _settle_and_check(args, drill, url, data_dir)


async def _kill_the_leader(
    args: argparse.Namespace, drill: Drill, cluster: Any, url: str, scout: str
) -> None:
    """The failover case: the leader's node killed under load; it rejoins as a standby."""
    failover = drill.cases["failover"]
    await steady(drill, args.steady_seconds)
    say(f"steady: {sum(t.saved is not None for t in drill.taps)} taps saved; waiting for a run")
    failover.run_id, failover.asked_run = await run_in_flight(url, scout, args.run_wait)
    old = cluster.leader_name()
    say(f"failover: kill -9 {old} (Patroni and PostgreSQL), run in flight {failover.run_id}")
    failover.kill = time.monotonic()
    await asyncio.to_thread(cluster.kill_node, old)
    new = await wait_leader(cluster, 120, not_name=old)
    failover.leader = time.monotonic()
    say(f"failover: {new} leads {failover.leader - failover.kill:.1f} s after the kill")
    await writes_back(drill, failover, 120)
    await asyncio.sleep(args.seconds)
    rejoin = time.monotonic()
    await asyncio.to_thread(cluster.start_node, old)
    await wait_streaming(cluster, old, 120)
    failover.rejoin_s = time.monotonic() - rejoin
    say(f"failover: {old} streams again after {failover.rejoin_s:.1f} s")
    await wait_sync_standby(cluster, 60)


async def _kill_the_postmaster(
    args: argparse.Namespace,
    drill: Drill,
    cluster: Any,
    url: str,
    scout: str,
    watches: list[asyncio.Task[float | None]],
) -> None:
    """The restart case: the leader's postmaster killed under load. The watch on the LISTEN
    connections goes into `watches`, for the caller to cancel if the drill stops."""
    restart = drill.cases["restart"]
    restart.began, restart.began_wall = time.monotonic(), drill.begin("restart")
    await steady(drill, args.steady_seconds / 2)
    restart.run_id, restart.asked_run = await run_in_flight(url, scout, args.run_wait)
    leader = cluster.leader_name()
    before = await listening_now(url)
    say(f"restart: LISTEN connections before: {dict(sorted(before.names.items()))}")
    say(f"restart: kill -9 the postmaster of {leader}, run in flight {restart.run_id}")
    restart.kill = time.monotonic()
    await asyncio.to_thread(cluster.kill_postmaster, leader)
    back = asyncio.create_task(listeners_back(url, before, 120))
    watches.append(back)
    await writes_back(drill, restart, 120)
    now_leader = await wait_leader(cluster, 120)
    restart.leader = time.monotonic()
    other = next(n.name for n in cluster.nodes if n.name != now_leader)
    await wait_streaming(cluster, other, 120)
    await wait_sync_standby(cluster, 60)
    restart.rejoin_s = time.monotonic() - restart.kill
    say(f"restart: {now_leader} leads, {other} streams, {restart.rejoin_s:.1f} s after the kill")
    restart.listeners_back_s = await back
    if restart.listeners_back_s is not None:
        say(
            f"restart: every LISTEN connection back {restart.listeners_back_s:.2f} s after "
            "the primary answered again"
        )
    await asyncio.sleep(args.seconds / 2)


async def _settle_and_check(
    args: argparse.Namespace, drill: Drill, url: str, data_dir: Path
) -> dict[str, float | str]:
    began = time.monotonic()
    await _wait_runs(args, drill, url, began)
    missed = await deliveries_settled(url, data_dir / "sftp", drill, began, args.settle_seconds)
    outages = {
        name: (case.kill or 0.0, case.outage_end or float("inf"))
        for name, case in drill.cases.items()
    }
    taps = await tap_checks(url, drill, outages)
    twice = await import_checks(url, drill)
    await say_diagnosis(url, drill)
    figures: dict[str, float | str] = {}
    for name in CASES:
        figures |= _case_figures(drill, name, taps[name], twice[name], missed[name])
    return figures


async def _wait_runs(args: argparse.Namespace, drill: Drill, url: str, began: float) -> None:
    """Each case's import run, waited for until it is no longer in flight (or the settle time
    since `began` is up); a case with no run in flight gets its Scout job's status."""
    for case in drill.cases.values():
        if case.run_id is None:
            if case.asked_run is not None:
                case.run_status = await job_status(url, case.asked_run)
                say(
                    f"{case.name}: no run was in flight; Scout run {case.asked_run}: "
                    f"{case.run_status}"
                )
            continue
        while True:
            case.run_status = await run_status(url, case.run_id)
            if case.run_status not in (*IN_FLIGHT, "partly_done"):
                break
            if time.monotonic() - began > args.settle_seconds:
                say(f"{case.name}: run {case.run_id} still {case.run_status}; not waiting more")
                break
            await asyncio.sleep(2)


def _case_figures(
    drill: Drill, name: str, taps: Mapping[str, float], twice: int, missed: Sequence[str]
) -> dict[str, float | str]:
    """One case's figures, its answers said as they are counted."""
    case = drill.cases[name]
    prefix = "failover_" if name == "failover" else "restart_"
    answers = drill.answers[name]
    errors = sum(n for status, n in answers.items() if status not in ("200", "304"))
    say(f"{name}: public API answers {dict(answers)}")
    say(f"{name}: scorer sync answers (HTTP) {dict(drill.syncs[name])}")
    say(f"{name}: taps saved without an answer saying so {taps['taps_stored_unanswered']}")
    gap = (
        case.outage_end - case.kill
        if case.outage_end is not None and case.kill is not None
        else float("nan")
    )
    figures: dict[str, float | str] = {
        f"{prefix}acked_lost": taps["acked_lost"],
        f"{prefix}duplicates": taps["duplicates"],
        f"{prefix}write_gap_s": gap,
        f"{prefix}api_errors": errors,
        f"{prefix}import_batches_twice": twice,
        f"{prefix}import_run_status": case.run_status,
        f"{prefix}delivery_missed": len(missed),
        f"{prefix}rejoin_s": case.rejoin_s if case.rejoin_s is not None else float("nan"),
        f"{prefix}taps": taps["taps"],
        f"{prefix}taps_saved": taps["taps_saved"],
        f"{prefix}scorer_retries": taps["scorer_retries"],
        f"{prefix}tap_p50_ms": taps["tap_p50_ms"],
        f"{prefix}tap_p99_ms": taps["tap_p99_ms"],
    }
    if name == "restart":
        back = case.listeners_back_s
        figures[f"{prefix}listeners_back_s"] = back if back is not None else float("nan")
    return figures


# --- entry -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_failover", description=__doc__)
    add_load_options(
        parser,
        seconds=30.0,
        seconds_help="load kept going after writes came back (the second case: half)",
        steady=15.0,
    )
    add_run_options(
        parser, settle=90.0, seed=20261130, data_dir=ROOT / ".omnium" / "drill-failover"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    return run_drills("drill_failover", parse_args(argv), one_run)


if __name__ == "__main__":
    sys.exit(main())
