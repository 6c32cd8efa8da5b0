"""From Scout to the client: the doorbell of a run that changes 50 results, through imports,
command and delivery, to an SSE listener, a webhook client and an SFTP client.

The Scout simulator (in this process) holds a Games day; the command, imports, delivery and
gateway services run as their own processes, at their own CPU priorities, as `make run` starts
them. The first run brings in the whole Games and the clients get their first files. Then, for
each measured run, 50 units get new results on the simulated site, Scout freezes the run and
rings the doorbell; every delay is from just before the ring to what the receiving side saw:
the SSE event of each change read by a listener on the gateway, the first webhook and the first
final SFTP file carrying it. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import asyncssh
import redis.asyncio as aioredis
from aiohttp import web

from bench._common import (
    BenchError,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    servers,
    tracing,
    tracing_line,
)
from bench._common import service_env as common_env
from bench.delivery import Seen as DeliverySeen
from bench.delivery import Service, sftp_server, start, stop, wait_port
from dev import demo
from omnium_db import apply_migrations, init_connection
from omnium_delivery import load_clients
from omnium_live import stream_key
from omnium_scout_sim import DoorbellTarget, ScoutSimulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_e2e"
TOKEN = "bench"
API_KEY = "bench-e2e-key-0001"
SECRET = "bench-doorbell-secret"
HOOK_SECRET = "whsec_" + "YmVuY2gtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ=="
SCHEDULE = demo.SCHEDULE.code
# A run in one of these has finished (the others are on their way).
FINISHED = ["done", "partly_done", "failed", "scout_failed", "older", "paused_by_guard"]
TARGETS = {
    "scout_to_push_p95_ms": 500.0,
    "scout_to_webhook_p95_ms": 1000.0,
    "scout_to_sftp_p95_ms": 2500.0,
}


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


# --- the receiving side ----------------------------------------------------------------------


@dataclass
class Seen:
    """When each client saw what: wall times."""

    pushes: dict[int, float] = field(default_factory=dict)  # outbox id -> SSE event read
    hooks: dict[tuple[str, int], float] = field(default_factory=dict)  # (feed, version)
    # (client, file name, version) -> final file present, as bench.delivery's SFTP server
    # records it
    sftp: DeliverySeen = field(default_factory=DeliverySeen)


def hooks_app(seen: Seen) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.time()
        data = json.loads(body)["data"]
        seen.hooks[(data["feed"], data["version"])] = arrived
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    return app


async def listen(url: str, seen: Seen, ready: asyncio.Event) -> None:
    """One SSE listener on the Games' stream: when each change's event was read."""
    headers = {"X-API-Key": API_KEY, "Accept": "text/event-stream"}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.get(url, headers=headers) as response,
    ):
        if response.status != 200:
            raise BenchError(f"the SSE listener got {response.status}: {await response.text()}")
        ready.set()
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                arrived = time.time()
                data = json.loads(line[6:])
                if isinstance(data, dict) and isinstance(data.get("id"), int):
                    seen.pushes.setdefault(data["id"], arrived)


# --- the services ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def services(env: Mapping[str, str], logdir: Path) -> AsyncIterator[list[Service]]:
    names = (
        ("command", "omnium_command", "OMNIUM_COMMAND_PORT"),
        ("imports", "omnium_imports", "OMNIUM_DOORBELL_PORT"),
        ("delivery", "omnium_delivery", "OMNIUM_DELIVERY_PORT"),
        ("gateway", "omnium_gateway", "OMNIUM_GATEWAY_PORT"),
    )
    started: list[Service] = []
    try:
        for name, module, _port in names:
            started.append(await start(name, module, env, logdir))
        for service, (_, _, port) in zip(started, names, strict=True):
            await wait_port(service, int(env[port]))
        yield started
    finally:
        for service in reversed(started):
            await stop(service)


async def all_delivered(conn: asyncpg.Connection) -> bool:
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM client_feed "
        "         WHERE marks > built_marks OR delivered_at IS NULL) AS owed, "
        "       (SELECT last_id FROM delivery_cursor) >= "
        "       (SELECT coalesce(max(id), 0) FROM domain_event) AS read"
    )
    return bool(row["owed"] == 0 and row["read"])


async def until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise BenchError(f"waited {within:.0f} s for {what}")


async def run_finished(conn: asyncpg.Connection, scout_run_id: str) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT id::text, status, reason, outcomes FROM integration_run "
        "WHERE scout_run_id = $1 AND status = ANY($2::text[])",
        scout_run_id,
        FINISHED,
    )
    return row


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Results:
    push: list[float] = field(default_factory=list)
    webhook: list[float] = field(default_factory=list)
    sftp: list[float] = field(default_factory=list)
    runs: int = 0
    changes: int = 0
    missing: dict[str, int] = field(default_factory=lambda: {"push": 0, "webhook": 0, "sftp": 0})
    run_seconds: list[float] = field(default_factory=list)  # doorbell to run done


async def run(
    db_server: str, redis_url: str, args: argparse.Namespace, trace_env: Mapping[str, str]
) -> Results:
    rng = random.Random(args.seed)
    await recreate(db_server, DB_NAME)
    db_url = database_url_for(db_server, DB_NAME)
    conn = await asyncpg.connect(db_url)
    await init_connection(conn)
    seen = Seen()
    tmp = Path(tempfile.mkdtemp(prefix="omnium-bench-e2e-"))
    ports = {
        "OMNIUM_COMMAND_PORT": free_port(),
        "OMNIUM_IMPORTS_PORT": free_port(),
        "OMNIUM_DOORBELL_PORT": free_port(),
        "OMNIUM_DELIVERY_PORT": free_port(),
        "OMNIUM_GATEWAY_PORT": free_port(),
    }
    doorbell = f"http://127.0.0.1:{ports['OMNIUM_DOORBELL_PORT']}"
    sim = ScoutSimulator(
        SimulatorConfig(doorbells={"schedule": DoorbellTarget(doorbell, SCHEDULE, SECRET)})
    )
    runner: web.AppRunner | None = None
    acceptor: asyncssh.SSHAcceptor | None = None
    try:
        await apply_migrations(conn)
        await sim.start()
        await demo.demo_integrations(
            conn, sim.reference(), sim.base_url, SECRET, feeds=(demo.SCHEDULE,)
        )
        event = sim.reference()["event"]["code"]
        acceptor, runner = await open_clients(conn, tmp, seen, redis_url, event)
        env = service_env(ports, db_url, redis_url, trace_env, args)
        async with services(env, tmp):
            say("the first run: the whole Games in, and the clients' first files")
            first = await sim.make_run("schedule", wait_doorbell=True)
            await until(lambda: run_finished(conn, first.id), 300, "the first run")
            await until(lambda: all_delivered(conn), 120, "the clients' first files")
            listening = asyncio.Event()
            gateway = f"http://127.0.0.1:{ports['OMNIUM_GATEWAY_PORT']}"
            listener = asyncio.create_task(
                listen(f"{gateway}/v1/events/{event}/live", seen, listening)
            )
            await asyncio.wait_for(listening.wait(), 30)
            await asyncio.sleep(0.5)
            units = [
                u.external_id
                for u in sim.games.units.values()
                if len(u.contestants) >= 2 and u.status != "CANCELLED"
            ]
            rang: dict[str, float] = {}  # our run id -> when the doorbell was rung
            results = Results()
            await timed_runs(conn, sim, units, rng, args, rang, results)
            await asyncio.sleep(1)
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await listener
        await measure(conn, seen, rang, results)
        results.runs = args.runs
        return results
    finally:
        await sim.stop()
        if runner is not None:
            await runner.cleanup()
        if acceptor is not None:
            acceptor.close()
        await conn.close()
        if not args.keep:
            await drop(db_server, DB_NAME)


async def open_clients(
    conn: asyncpg.Connection, tmp: Path, seen: Seen, redis_url: str, event: str
) -> tuple[asyncssh.SSHAcceptor, web.AppRunner]:
    """The SFTP client's server and the webhook receiver, and both clients on record."""
    keys = tmp / "keys"
    keys.mkdir()
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(keys / "client_key"))
    (keys / "client_key").chmod(0o600)
    acceptor, host_key = await sftp_server(tmp / "sftp", keys, seen.sftp)
    runner = web.AppRunner(hooks_app(seen), access_log=None, shutdown_timeout=1)
    await runner.setup()
    hook_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", hook_port).start()
    redis = aioredis.from_url(redis_url)
    await redis.delete(stream_key(event))
    await redis.aclose()
    await load_clients(
        conn,
        [
            {
                "code": "files",
                "event": event,
                "transport": "sftp",
                "sftp": {
                    "host": "127.0.0.1",
                    "port": acceptor.sockets[0].getsockname()[1],
                    "username": "files",
                    "client_key": str(keys / "client_key"),
                    "host_key": host_key,
                },
                "feeds": [{"kind": "results", "format": "json"}],
            },
            {
                "code": "hook",
                "event": event,
                "transport": "webhook",
                "webhook": {"url": f"http://127.0.0.1:{hook_port}/hook", "secret": HOOK_SECRET},
                "feeds": [{"kind": "results", "format": "json"}],
            },
        ],
    )
    return acceptor, runner


def service_env(
    ports: Mapping[str, int],
    db_url: str,
    redis_url: str,
    trace_env: Mapping[str, str],
    args: argparse.Namespace,
) -> dict[str, str]:
    """Every service's environment: its ports, the servers, one caller, the bench's settings."""
    return common_env(
        ports,
        db_url,
        redis_url,
        TOKEN,
        OMNIUM_COMMAND_ADDRESS=f"127.0.0.1:{ports['OMNIUM_COMMAND_PORT']}",
        OMNIUM_GATEWAY_WORKERS="1",
        OMNIUM_GATEWAY_API_KEYS=f"bench:{API_KEY}:10000000:100000000",
        OMNIUM_GATEWAY_REDIS_PREFIX=f"bench:{uuid.uuid4().hex[:8]}:",
        **trace_env,
        **dict(setting.split("=", 1) for setting in args.set),
    )


async def timed_runs(
    conn: asyncpg.Connection,
    sim: ScoutSimulator,
    units: Sequence[str],
    rng: random.Random,
    args: argparse.Namespace,
    rang: dict[str, float],
    results: Results,
) -> None:
    """The measured runs, one after another, each delivered before the next: `rang` notes
    when each run's doorbell was rung."""
    for n in range(args.runs):
        for external_id in rng.sample(units, args.changes):
            sim.post_result(external_id)
        began_wall, began = time.time(), time.monotonic()
        scout_run = await sim.make_run("schedule")
        await until(functools.partial(run_finished, conn, scout_run.id), 120, f"run {n + 1}")
        done = await run_finished(conn, scout_run.id)
        assert done is not None
        if done["status"] != "done":
            raise BenchError(f"run {n + 1} ended {done['status']}: {done['reason']}")
        results.run_seconds.append(time.monotonic() - began)
        rang[done["id"]] = began_wall
        await until(lambda: all_delivered(conn), 60, f"run {n + 1}'s deliveries")
        await asyncio.sleep(args.pause)
        say(
            f"run {n + 1}/{args.runs}: {done['outcomes'].get('accepted', 0)} "
            f"changed, done {results.run_seconds[-1] * 1000:.0f} ms after the doorbell"
        )


async def measure(
    conn: asyncpg.Connection, seen: Seen, rang: Mapping[str, float], results: Results
) -> None:
    """Each change a measured run saved, against when each client first had it."""
    changes = await conn.fetch(
        "SELECT id, split_part(command_id, ':', 1) AS run_id FROM domain_event "
        "WHERE kind LIKE 'unit.%' AND split_part(command_id, ':', 1) = ANY($1::text[]) "
        "ORDER BY id",
        list(rang),
    )
    attempts = await conn.fetch(
        "SELECT c.transport, a.feed_id, a.file_name, a.version, a.outbox_id "
        "  FROM delivery_attempt a JOIN client c ON c.id = a.client_id "
        " WHERE a.outcome = 'delivered' ORDER BY a.id"
    )
    landed: dict[str, list[tuple[int, float | None]]] = {"webhook": [], "sftp": []}
    for a in attempts:
        at = (
            seen.sftp.files.get(("files", a["file_name"], a["version"]))
            if a["transport"] == "sftp"
            else seen.hooks.get((a["feed_id"], a["version"]))
        )
        landed[a["transport"]].append((a["outbox_id"] or 0, at))
    results.changes = len(changes)
    starts = sorted(rang.values())
    for change in changes:
        began = rang[change["run_id"]]
        pushed = seen.pushes.get(change["id"])
        if pushed is None:
            results.missing["push"] += 1
        else:
            results.push.append((pushed - began) * 1000)
        for transport, into in (("webhook", results.webhook), ("sftp", results.sftp)):
            # The sends that arrived while this run was measured (before the next doorbell).
            ends = next((b for b in starts if b > began), float("inf"))
            sends = [(c, t) for c, t in landed[transport] if t is not None and began <= t < ends]
            first = next((t for covered, t in sends if covered >= change["id"]), None)
            if first is None and sends:
                # No send of the run names this change: the feed was rebuilt after it and its
                # bytes were those of the run's last send (delivery records no attempt then),
                # so that last send already carried it.
                first = sends[-1][1]
            if first is None:
                results.missing[transport] += 1
            else:
                into.append((first - began) * 1000)


def describe(name: str, values: Sequence[float]) -> str:
    if not values:
        return f"# {name}: no samples"
    return (
        f"# {name}: {len(values)} samples, p50 {percentile(values, 50):.0f} ms, "
        f"p95 {percentile(values, 95):.0f} ms, p99 {percentile(values, 99):.0f} ms, "
        f"max {max(values):.0f} ms"
    )


def report(args: argparse.Namespace, results: Results) -> list[str]:
    series = {
        "scout_to_push": results.push,
        "scout_to_webhook": results.webhook,
        "scout_to_sftp": results.sftp,
    }
    lines = [
        f"# {results.runs} runs of {args.changes} changed results each ({results.changes} "
        f"changes saved); each delay from just before the doorbell rings",
        describe(
            "doorbell -> run done (imports and command)", [s * 1000 for s in results.run_seconds]
        ),
        describe("push (doorbell -> SSE event read)", results.push),
        describe("webhook (doorbell -> first webhook carrying the change)", results.webhook),
        describe("sftp (doorbell -> first final file carrying the change)", results.sftp),
        f"# not delivered: {results.missing}",
        f"# machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
    ]
    figures = {f"{name}_p95_ms": percentile(values, 95) for name, values in series.items()}
    for name, value in figures.items():
        met = "met" if value <= TARGETS[name] else "MISSED"
        lines.append(f"# {name} target <= {TARGETS[name]:.0f} ms: {met}")
    lines += [f"{name}: {value:.0f}" for name, value in figures.items()]
    lines += [f"{name}_p50_ms: {percentile(values, 50):.0f}" for name, values in series.items()]
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.e2e", description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="measured runs (at least 20)")
    parser.add_argument("--changes", type=int, default=50, help="results changed per run")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.5,
        help="seconds between one run's last delivery and the next",
    )
    parser.add_argument("--seed", type=int, default=20260920)
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".omnium" / "bench-e2e")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OMNIUM_NAME=value",
        help="a setting for every service (to try a poll interval or a window); repeatable",
    )
    parser.add_argument(
        "--trace-ratio",
        type=float,
        default=None,
        help="tracing on: the services export traces over OTLP to a counting sink, keeping "
        "this share of new traces; off by default",
    )
    parser.add_argument(
        "--spans-out",
        type=Path,
        default=None,
        help="with --trace-ratio: each span as a JSON line in this file (where the time goes)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        with (
            servers(args.data_dir, say) as (db_server, redis_url),
            tracing(args.trace_ratio, args.spans_out) as sink,
        ):
            results = asyncio.run(run(db_server, redis_url, args, sink.env if sink else {}))
    except BenchError as exc:
        print(f"bench.e2e: {exc}", file=sys.stderr, flush=True)
        return 1
    print(tracing_line(sink))
    for line in report(args, results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
