"""Delivery benchmark: saved changes to SFTP clients, webhook clients and SSE listeners.

300 saved changes spread over 60 s through the real command and delivery processes, with 3 SFTP
clients (asyncssh servers), 3 webhook clients and 50 SSE listeners on the live routes. Every delay
is measured from the change's save (its outbox row's saved_at, taken just before the commit) to
what the receiving side saw: the SSE event read by a listener, the webhook received, the final
file renamed into place on the SFTP server. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import asyncssh
import redis.asyncio as aioredis
from aiohttp import web

from bench._common import (
    BenchError,
    cpu_seconds,
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
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_db import apply_migrations, init_connection
from omnium_delivery import load_clients
from omnium_grpc import actor_message, command_message, open_channel
from omnium_live import stream_key
from omnium_settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_delivery"
TOKEN = "bench"
EVENT = "BENCH26"
DISCIPLINES = ("FBL", "BKB", "VVO", "HBL", "HOC", "WPO", "TTE", "BDM", "TEN", "RUG")
NOCS = ("CHN", "JPN", "KOR", "IND", "THA", "IRI", "UZB", "KAZ", "INA", "TPE",
        "HKG", "PHI", "MAS", "SGP", "VIE", "QAT", "KSA", "BRN", "MGL", "PAK")  # fmt: skip
SECRET = "whsec_" + "YmVuY2gtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ=="
TARGETS = {"push_p95_ms": 250.0, "webhook_p95_ms": 500.0, "sftp_p95_ms": 2000.0}


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


# --- the receiving side ----------------------------------------------------------------------


@dataclass
class Seen:
    """When each receiver saw each version: (client, file or feed, version) -> wall time."""

    files: dict[tuple[str, str, int], float] = field(default_factory=dict)
    hooks: dict[tuple[str, int, int], float] = field(default_factory=dict)
    pushes: list[tuple[int, float]] = field(default_factory=list)  # (outbox id, time)


async def sftp_server(root: Path, keys: Path, seen: Seen) -> tuple[asyncssh.SSHAcceptor, str]:
    host = asyncssh.generate_private_key("ssh-ed25519")
    client = asyncssh.read_private_key(str(keys / "client_key"))
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)

    class Sftp(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
            self.user = chan.get_extra_info("username")
            (root / self.user).mkdir(exist_ok=True)
            super().__init__(chan, chroot=str(root / self.user).encode())

        def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
            super().posix_rename(oldpath, newpath)
            # ".<name>.<version>.part" -> "<name>": the file is whole under its final name now.
            version = int(oldpath.decode().rsplit(".", 2)[-2])
            name = os.path.basename(newpath.decode())
            seen.files[(self.user, name, version)] = time.time()

    acceptor = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host],
        authorized_client_keys=asyncssh.import_authorized_keys(client.export_public_key().decode()),
        sftp_factory=Sftp,
        allow_scp=False,
    )
    return acceptor, host.export_public_key().decode().strip()


def receivers_app(seen: Seen) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.time()
        data = json.loads(body)["data"]
        seen.hooks[(request.match_info["client"], data["feed"], data["version"])] = arrived
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks/{client}", hook)
    return app


@contextlib.asynccontextmanager
async def sse_side(redis_url: str, listeners: int, logdir: Path, seen: Seen) -> AsyncIterator[None]:
    """The gateway's live routes and the listeners, in their own process (bench.delivery_sse),
    as they would be on their own machines: the receivers here do not slow them, nor they
    the receivers."""
    out = logdir / "pushes.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.delivery_sse", "--redis-url", redis_url, "--event", EVENT,
        "--listeners", str(listeners), "--port", str(free_port()), "--out", str(out),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise BenchError(f"the SSE listeners did not start: {line!r}")
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
        if out.exists():
            seen.pushes.extend((int(i), float(t)) for i, t in json.loads(out.read_text()))


# --- set-up ----------------------------------------------------------------------------------


def unit_code(discipline: str, n: int) -> str:
    return f"{discipline}M{'EVENT':-<18}{'FNL-':<4}{n:0>8}"[:34].ljust(34, "-")


async def seed(conn: asyncpg.Connection, units: int) -> dict[str, list[str]]:
    """A Games of `units` units over ten disciplines, two sides each, and a medal table."""
    event_id = await conn.fetchval(
        "INSERT INTO event (code, name) VALUES ($1, 'Bench Games') RETURNING id", EVENT
    )
    by_discipline: dict[str, list[str]] = {}
    start = datetime(2026, 9, 20, 1, tzinfo=UTC)
    per = units // len(DISCIPLINES)
    for d in DISCIPLINES:
        discipline_id = await conn.fetchval(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, $2, $2) RETURNING id",
            event_id,
            d,
        )
        teams = [
            await conn.fetchval(
                "INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc) "
                "VALUES ($1, $2, 'team', $3, $4, $5) RETURNING id",
                event_id,
                discipline_id,
                f"{d}-{noc}",
                f"{noc} {d}",
                noc,
            )
            for noc in NOCS
        ]
        rows = [
            (uuid.uuid4(), event_id, discipline_id, unit_code(d, n), f"{d} match {n}",
             start + timedelta(minutes=30 * n))
            for n in range(1, per + 1)
        ]  # fmt: skip
        await conn.copy_records_to_table(
            "unit",
            records=rows,
            columns=["id", "event_id", "discipline_id", "code", "name", "start_at"],
        )
        sides = [
            (u[0], order, teams[(i * 2 + order) % len(teams)])
            for i, u in enumerate(rows)
            for order in (1, 2)
        ]
        await conn.copy_records_to_table(
            "unit_competitor", records=sides, columns=["unit_id", "sort_order", "competitor_id"]
        )
        by_discipline[d] = [str(u[0]) for u in rows]
    for rank, noc in enumerate(NOCS, start=1):
        await conn.execute(
            "INSERT INTO medal_row (event_id, noc, gold, total, rank) VALUES ($1, $2, $3, $3, $4)",
            event_id,
            noc,
            100 - rank,
            rank,
        )
    return by_discipline


def clients_spec(
    sftp_port: list[tuple[int, str]], key_file: Path, hooks_url: str, webhooks: int
) -> list[dict[str, Any]]:
    clients: list[dict[str, Any]] = []
    for n, (port, host_key) in enumerate(sftp_port):
        clients.append(
            {
                "code": f"sftp{n}",
                "event": EVENT,
                "transport": "sftp",
                "sftp": {
                    "host": "127.0.0.1",
                    "port": port,
                    "username": f"sftp{n}",
                    "client_key": str(key_file),
                    "host_key": host_key,
                },
                "feeds": [
                    {"kind": "schedule", "format": "odf"},
                    {"kind": "results", "format": "odf"},
                    {"kind": "results", "format": "json"},
                    {"kind": "medals", "format": "odf"},
                ],
            }
        )
    for n in range(webhooks):
        clients.append(
            {
                "code": f"hook{n}",
                "event": EVENT,
                "transport": "webhook",
                "webhook": {"url": f"{hooks_url}/hook{n}", "secret": SECRET},
                "feeds": [
                    {"kind": "results", "format": "json", "discipline": DISCIPLINES[n]},
                    {"kind": "medals", "format": "json", "top": 5},
                ],
            }
        )
    return clients


@dataclass
class Service:
    name: str
    proc: asyncio.subprocess.Process
    log: Path


async def start(name: str, module: str, env: Mapping[str, str], logdir: Path) -> Service:
    log = logdir / f"{name}.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, cwd=ROOT, env=dict(env),
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    return Service(name, proc, log)


async def wait_port(service: Service, port: int) -> None:
    for _ in range(600):
        if service.proc.returncode is not None:
            raise BenchError(f"{service.name} exited:\n{service.log.read_text()[-3000:]}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise BenchError(f"{service.name} did not listen on {port}")


async def stop(service: Service) -> None:
    if service.proc.returncode is None:
        service.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(service.proc.wait(), 15)
        except TimeoutError:
            service.proc.kill()
            await service.proc.wait()


@contextlib.asynccontextmanager
async def processes(env: Mapping[str, str], logdir: Path) -> AsyncIterator[Service]:
    command = await start("command", "omnium_command", env, logdir)
    delivery = await start("delivery", "omnium_delivery", env, logdir)
    try:
        await wait_port(command, int(env["OMNIUM_COMMAND_PORT"]))
        await wait_port(delivery, int(env["OMNIUM_DELIVERY_PORT"]))
        yield delivery
    finally:
        await stop(delivery)
        await stop(command)


async def all_delivered(conn: asyncpg.Connection) -> bool:
    """Delivery has read every outbox row, and no feed is owed anything."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM client_feed "
        "         WHERE marks > built_marks OR delivered_at IS NULL) AS owed, "
        "       (SELECT last_id FROM delivery_cursor) >= "
        "       (SELECT coalesce(max(id), 0) FROM domain_event) AS read"
    )
    return bool(row["owed"] == 0 and row["read"])


# --- the run ---------------------------------------------------------------------------------


def change(n: int, rng: random.Random, units: dict[str, list[str]]) -> command_pb2.Command:
    actor = actor_message("scorer", "bench scorer", screen="bench")
    if n % 10 == 9:
        # A medal table change inside the top five, so every medal feed changes.
        noc = NOCS[rng.randrange(5)]
        subject = command_pb2.Subject(kind="medal_row", code=f":{noc}", event_code=EVENT)
        return command_message(
            f"bench-{n}", "medals.set_row", {"fields": {"gold": 100 + n}}, actor, subject=subject
        )
    # The webhook clients follow the first disciplines: a third of the changes land there.
    d = DISCIPLINES[n % 3] if n % 3 == 0 else rng.choice(DISCIPLINES)
    unit = rng.choice(units[d])
    return command_message(
        f"bench-{n}",
        "results.set_sides",
        {"sides": [{"order": 1, "score": str(n)}]},
        actor,
        unit_id=unit,
    )


@dataclass
class Results:
    push: list[float]
    webhook: list[float]
    sftp: list[float]
    changes: int
    missing: dict[str, int]
    sends: int
    delivery_cpu_s: float = 0.0
    load: float = 0.0


async def run(
    db_server: str, redis_url: str, args: argparse.Namespace, trace_env: Mapping[str, str]
) -> Results:
    rng = random.Random(args.seed)
    await recreate(db_server, DB_NAME)
    db_url = database_url_for(db_server, DB_NAME)
    conn = await asyncpg.connect(db_url)
    await init_connection(conn)
    seen = Seen()
    tmp = Path(tempfile.mkdtemp(prefix="omnium-bench-delivery-"))
    try:
        await apply_migrations(conn)
        units = await seed(conn, args.units)
        receivers = await open_receivers(conn, tmp, seen, redis_url, args)
        env, command_port = service_env(db_url, redis_url, args, trace_env)
        async with (
            processes(env, tmp) as delivery,
            sse_side(redis_url, args.listeners, tmp, seen),
        ):
            say("waiting for every client's first files")
            if not await wait_all_delivered(conn, 1200):
                raise BenchError("the first versions of the feeds never all arrived")
            sends_before = await conn.fetchval("SELECT count(*) FROM delivery_attempt")
            cpu_before = cpu_seconds(delivery.proc.pid)
            load_before = os.getloadavg()[0]
            await send_changes(command_port, rng, units, args)
            say("waiting for the last deliveries")
            await wait_all_delivered(conn, 600)
            await asyncio.sleep(1)
            sends = await conn.fetchval("SELECT count(*) FROM delivery_attempt") - sends_before
            cpu = cpu_seconds(delivery.proc.pid) - cpu_before
            load = (load_before + os.getloadavg()[0]) / 2
        await receivers.close()
        results = await measure(conn, seen, args, sends)
        results.delivery_cpu_s, results.load = cpu, load
        return results
    finally:
        await conn.close()
        if not args.keep:
            await drop(db_server, DB_NAME)


@dataclass
class Receivers:
    """The clients' receiving ends: the SFTP servers, the webhook receiver, and the Redis
    connection that cleared the live stream."""

    acceptors: list[tuple[asyncssh.SSHAcceptor, str]]
    redis: aioredis.Redis
    runner: web.AppRunner

    async def close(self) -> None:
        await self.runner.cleanup()
        await self.redis.aclose()
        for acceptor, _ in self.acceptors:
            acceptor.close()


async def open_receivers(
    conn: asyncpg.Connection, tmp: Path, seen: Seen, redis_url: str, args: argparse.Namespace
) -> Receivers:
    """SFTP servers and the webhook receiver listening, an empty live stream, and the clients
    that send to them loaded."""
    keys = tmp / "keys"
    keys.mkdir()
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(keys / "client_key"))
    (keys / "client_key").chmod(0o600)
    acceptors = [await sftp_server(tmp / f"sftp{n}", keys, seen) for n in range(args.sftp)]
    redis = aioredis.from_url(redis_url)
    await redis.delete(stream_key(EVENT))
    app = receivers_app(seen)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    http_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", http_port).start()
    base = f"http://127.0.0.1:{http_port}"
    sftp_ports = [(a.sockets[0].getsockname()[1], key) for a, key in acceptors]
    await load_clients(
        conn, clients_spec(sftp_ports, keys / "client_key", f"{base}/hooks", args.webhooks)
    )
    return Receivers(acceptors, redis, runner)


def service_env(
    db_url: str, redis_url: str, args: argparse.Namespace, trace_env: Mapping[str, str]
) -> tuple[dict[str, str], int]:
    """The command and delivery processes' environment, and the command service's port."""
    ports = {"OMNIUM_COMMAND_PORT": free_port(), "OMNIUM_DELIVERY_PORT": free_port()}
    env = common_env(ports, db_url, redis_url, TOKEN, **trace_env)
    if args.delivery_nice is not None:
        env["OMNIUM_DELIVERY_NICE"] = str(args.delivery_nice)
    return env, ports["OMNIUM_COMMAND_PORT"]


async def wait_all_delivered(conn: asyncpg.Connection, polls: int) -> bool:
    """all_delivered, asked every 50 ms up to `polls` times; False if it never was."""
    for _ in range(polls):
        if await all_delivered(conn):
            return True
        await asyncio.sleep(0.05)
    return False


async def send_changes(
    command_port: int, rng: random.Random, units: dict[str, list[str]], args: argparse.Namespace
) -> None:
    """The changes, each submitted at its random moment over the run's seconds."""
    settings = Settings.from_env({}, grpc_token=TOKEN)
    channel = open_channel(f"127.0.0.1:{command_port}", settings)
    stub = command_pb2_grpc.CommandServiceStub(channel)
    at = sorted(rng.uniform(0, args.seconds) for _ in range(args.changes))
    commands = [change(n, rng, units) for n in range(args.changes)]
    say(f"sending {args.changes} changes over {args.seconds:.0f} s")
    began = time.monotonic()

    async def send(n: int) -> None:
        await asyncio.sleep(max(0.0, began + at[n] - time.monotonic()))
        answer = await stub.Submit(commands[n], timeout=10)
        if answer.outcome != command_pb2.OUTCOME_ACCEPTED:
            raise BenchError(f"change {n} was {answer.outcome}: {answer.reason}")

    await asyncio.gather(*(send(n) for n in range(args.changes)))
    await channel.close()


async def measure(
    conn: asyncpg.Connection, seen: Seen, args: argparse.Namespace, sends: int
) -> Results:
    saves = await conn.fetch(
        "SELECT d.id, extract(epoch FROM d.saved_at)::float8 AS saved, d.subject_kind, "
        "       di.code AS discipline "
        "  FROM domain_event d LEFT JOIN unit u ON u.id = d.unit_id "
        "  LEFT JOIN discipline di ON di.id = u.discipline_id "
        " WHERE d.command_id LIKE 'bench-%' ORDER BY d.id"
    )
    saved_at = {r["id"]: r["saved"] for r in saves}
    push = [(t - saved_at[i]) * 1000 for i, t in seen.pushes if i in saved_at]
    attempts = await conn.fetch(
        "SELECT c.code, c.transport, a.feed_id, a.file_name, a.version, a.outbox_id, f.kind, "
        "       d.code AS discipline "
        "  FROM delivery_attempt a JOIN client c ON c.id = a.client_id "
        "  JOIN client_feed f ON f.id = a.feed_id LEFT JOIN discipline d ON d.id = f.discipline_id "
        " WHERE a.outcome = 'delivered' ORDER BY a.id"
    )
    # Per feed: its sends in order, with the newest outbox row each carried and when it landed.
    by_feed: dict[tuple[str, int], list[tuple[int, float | None]]] = {}
    feed_info: dict[tuple[str, int], Any] = {}
    for a in attempts:
        key = (a["code"], a["feed_id"])
        feed_info[key] = a
        if a["transport"] == "sftp":
            landed = seen.files.get((a["code"], a["file_name"], a["version"]))
        else:
            landed = seen.hooks.get((a["code"], a["feed_id"], a["version"]))
        by_feed.setdefault(key, []).append((a["outbox_id"] or 0, landed))
    webhook: list[float] = []
    sftp: list[float] = []
    missing = {"webhook": 0, "sftp": 0}
    for save in saves:
        for key, info in feed_info.items():
            wanted = "medals" if save["subject_kind"] == "medal_row" else "results"
            if info["kind"] != wanted:
                continue
            if wanted == "results" and info["discipline"] not in (None, save["discipline"]):
                continue
            # The first send that carried this save is when the client had it.
            landed = next((t for covered, t in by_feed[key] if covered >= save["id"]), None)
            target = sftp if info["transport"] == "sftp" else webhook
            if landed is None:
                missing[info["transport"]] += 1
                if args.show_missing:
                    say(f"missing: save {save['id']} feed {key} sends {by_feed[key]}")
                continue
            target.append((landed - save["saved"]) * 1000)
    return Results(push, webhook, sftp, len(saves), missing, sends)


def describe(name: str, values: Sequence[float]) -> str:
    if not values:
        return f"# {name}: no samples"
    return (
        f"# {name}: {len(values)} samples, p50 {percentile(values, 50):.0f} ms, "
        f"p95 {percentile(values, 95):.0f} ms, p99 {percentile(values, 99):.0f} ms, "
        f"max {max(values):.0f} ms"
    )


def report(args: argparse.Namespace, results: Results) -> list[str]:
    figures = {
        "push_p95_ms": percentile(results.push, 95) if results.push else float("nan"),
        "webhook_p95_ms": percentile(results.webhook, 95) if results.webhook else float("nan"),
        "sftp_p95_ms": percentile(results.sftp, 95) if results.sftp else float("nan"),
    }
    lines = [
        f"# {results.changes} saved changes over {args.seconds:.0f} s; {args.sftp} SFTP clients, "
        f"{args.webhooks} webhook clients, {args.listeners} SSE listeners; "
        f"{results.sends} sends after the first versions; delivery at nice "
        f"{5 if args.delivery_nice is None else args.delivery_nice}",
        describe("push (save -> SSE event read)", results.push),
        describe("webhook (save -> received)", results.webhook),
        describe("sftp (save -> final file present)", results.sftp),
        f"# not delivered within the wait: {results.missing}; SSE events read "
        f"{len(results.push)} of {results.changes * args.listeners}",
        f"# the delivery process used {results.delivery_cpu_s:.1f} s of CPU during the changes; "
        f"machine load average about {results.load:.1f} on {os.cpu_count()} cores",
    ]
    for name, value in figures.items():
        met = "met" if value <= TARGETS[name] else "MISSED"
        lines.append(f"# {name} target <= {TARGETS[name]:.0f} ms: {met}")
    lines += [f"{name}: {value:.0f}" for name, value in figures.items()]
    lines.append(f"push_p50_ms: {percentile(results.push, 50):.0f}")
    lines.append(f"webhook_p50_ms: {percentile(results.webhook, 50):.0f}")
    lines.append(f"sftp_p50_ms: {percentile(results.sftp, 50):.0f}")
    lines.append(f"delivery_cpu_s: {results.delivery_cpu_s:.1f}")
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sftp", type=int, default=3)
    parser.add_argument("--webhooks", type=int, default=3)
    parser.add_argument("--listeners", type=int, default=50)
    parser.add_argument("--units", type=int, default=1250)
    parser.add_argument("--seed", type=int, default=20261007)
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".omnium" / "bench")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument(
        "--show-missing", action="store_true", help="name each save a client never got"
    )
    parser.add_argument(
        "--delivery-nice",
        type=int,
        default=None,
        help="run delivery at this CPU priority step instead of its setting (default +5)",
    )
    parser.add_argument(
        "--trace-ratio",
        type=float,
        default=None,
        help="tracing on: the services export traces over OTLP to a counting sink, keeping "
        "this share of new traces (0.01: 1 %%); off by default",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        with (
            servers(args.data_dir, say) as (db_server, redis_url),
            tracing(args.trace_ratio) as sink,
        ):
            results = asyncio.run(run(db_server, redis_url, args, sink.env if sink else {}))
    except BenchError as exc:
        print(f"bench.delivery: {exc}", file=sys.stderr, flush=True)
        return 1
    print(tracing_line(sink))
    for line in report(args, results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
