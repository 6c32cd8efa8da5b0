"""Live push at fan scale: N SSE listeners on the real gateway, a Games final's rate of changes.

The real stack: command and delivery processes, and `python -m omnium_gateway` with its
workers. Listeners run in separate load processes (`bench.push --client`), half on the Games
route and half spread over the hot units' routes. Changes go through the command service at
`--rate` a second for `--seconds`; each delay is from the change's save (its outbox row's
saved_at) to the moment a listener read its event. Not a test: it prints figures, last of all
`name: value` lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from google.protobuf import json_format, struct_pb2

from bench._common import (
    BenchError,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    rss_mb,
    servers,
)
from bench.delivery import EVENT, TOKEN, processes, seed
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium.common.v1 import actor_pb2
from omnium_db import apply_migrations, init_connection
from omnium_grpc import open_channel
from omnium_live import stream_key
from omnium_settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_push"
API_KEY = "bench-push-key-0001"
PER_CLIENT = 1250  # listeners one load process holds
HOT_UNITS = 10  # the finals being scored; unit listeners spread over them
TARGET_P95_MS = 250.0


def say(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


def raise_open_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# --- the load side (its own processes) --------------------------------------------------------


async def _listen(
    http: aiohttp.ClientSession,
    url: str,
    seen: list[tuple[int, float]],
    opened: asyncio.Event,
    gate: asyncio.Semaphore,
) -> None:
    """One listener: the outbox id of each event and when it was read. Only the start of
    each `data:` line is looked at (`{"id":N,...`): the load must cost less than the gateway."""
    async with gate:
        response = await http.get(url, headers={"X-API-Key": API_KEY})
    if response.status != 200:
        raise BenchError(f"{url} answered {response.status}: {(await response.text())[:200]}")
    opened.set()
    marker = b'data: {"id":'
    try:
        async for chunk in response.content.iter_any():
            arrived = time.time()
            at = chunk.find(marker)
            while at >= 0:
                start = at + len(marker)
                end = chunk.find(b",", start)
                seen.append((int(chunk[start:end]), arrived))
                at = chunk.find(marker, end)
    finally:
        response.release()


async def client_main(args: argparse.Namespace) -> None:
    """Hold `--count` listeners; "ready" once all are open; on SIGTERM write what each read."""
    routes: list[str] = json.loads(args.routes)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=30)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    seen: list[list[tuple[int, float]]] = [[] for _ in routes]
    opened = [asyncio.Event() for _ in routes]
    gate = asyncio.Semaphore(100)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        tasks = [
            asyncio.create_task(_listen(http, args.url + route, s, o, gate))
            for route, s, o in zip(routes, seen, opened, strict=True)
        ]
        waiting: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(*(o.wait() for o in opened))
        )
        watched: list[asyncio.Future[Any]] = [waiting, *tasks]
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            for task in done:
                task.result()
        print("ready", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        dead = [t for t in tasks if t.done() and t.exception() is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    out = {"routes": routes, "seen": seen, "failed": len(dead)}
    await asyncio.to_thread(Path(args.out).write_text, json.dumps(out))


# --- the driver -------------------------------------------------------------------------------


def gateway_env(base: dict[str, str], port: int, workers: int) -> dict[str, str]:
    return base | {
        "OMNIUM_GATEWAY_PORT": str(port),
        "OMNIUM_GATEWAY_WORKERS": str(workers),
        "OMNIUM_GATEWAY_API_KEYS": f"bench:{API_KEY}:10000000:100000000",
        "OMNIUM_GATEWAY_REDIS_PREFIX": f"bench:{uuid.uuid4().hex[:8]}:",
    }


@contextlib.contextmanager
def gateway(env: dict[str, str], logdir: Path) -> Iterator[subprocess.Popen[str]]:
    log = (logdir / "gateway.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "omnium_gateway"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening" not in line:
            raise BenchError(f"the gateway did not start: {line!r}; see {logdir / 'gateway.log'}")
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def family_rss_mb(pid: int) -> float:
    """The gateway parent and its workers."""
    total = rss_mb(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return total + sum(rss_mb(int(c)) for c in children)


def plan_routes(listeners: int, units: list[str]) -> list[str]:
    """Half on the Games route, half spread over the hot units' routes."""
    base = f"/v1/events/{EVENT}"
    return [
        f"{base}/live" if n % 2 == 0 else f"{base}/units/{units[(n // 2) % len(units)]}/live"
        for n in range(listeners)
    ]


async def start_clients(
    url: str, routes: list[str], per_client: int, tmp: Path
) -> list[tuple[asyncio.subprocess.Process, Path]]:
    clients = []
    for n in range(math.ceil(len(routes) / per_client)):
        part = routes[n * per_client : (n + 1) * per_client]
        out = tmp / f"client{n}.json"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.push", "--client", "--url", url,
            "--routes", json.dumps(part), "--out", str(out),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        clients.append((proc, out))
    for proc, _ in clients:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 180)
        if line.strip() != b"ready":
            raise BenchError(f"a load process did not get its listeners open: {line!r}")
    return clients


async def stop_clients(clients: list[tuple[asyncio.subprocess.Process, Path]]) -> list[Any]:
    for proc, _ in clients:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    results = []
    for proc, out in clients:
        await asyncio.wait_for(proc.wait(), 60)
        results.append(json.loads(await asyncio.to_thread(out.read_text)))
    return results


def change(n: int, unit_id: str) -> command_pb2.Command:
    actor = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_SCORER, name="bench scorer")
    payload = struct_pb2.Struct()
    json_format.ParseDict({"sides": [{"order": 1, "score": str(n)}]}, payload)
    return command_pb2.Command(
        command_id=f"push-{n}", code="results.set_sides",
        subject=command_pb2.Subject(kind="unit", id=unit_id), payload=payload, actor=actor,
    )  # fmt: skip


async def redis_clients(redis: aioredis.Redis) -> int:
    info: Any = await redis.info("clients")
    return int(info["connected_clients"])


async def run(db_server: str, redis_url: str, args: argparse.Namespace) -> dict[str, float]:
    await recreate(db_server, DB_NAME)
    db_url = database_url_for(db_server, DB_NAME)
    conn = await asyncpg.connect(db_url)
    await init_connection(conn)
    tmp = Path(tempfile.mkdtemp(prefix="omnium-bench-push-"))
    redis = aioredis.from_url(redis_url)
    try:
        await apply_migrations(conn)
        by_discipline = await seed(conn, 100)
        hot_ids = [ids[0] for ids in by_discipline.values()][:HOT_UNITS]
        hot = {
            r["id"]: r["code"]
            for r in await conn.fetch(
                "SELECT id::text, code FROM unit WHERE id = ANY($1::uuid[])", hot_ids
            )
        }
        await redis.delete(stream_key(EVENT))
        ports = {"OMNIUM_COMMAND_PORT": free_port(), "OMNIUM_DELIVERY_PORT": free_port()}
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")}
        env |= {k: str(v) for k, v in ports.items()}
        env |= {
            "OMNIUM_DATABASE_URL": db_url,
            "OMNIUM_REDIS_URL": redis_url,
            "OMNIUM_GRPC_TOKENS": TOKEN,
            "OMNIUM_GRPC_TOKEN": TOKEN,
            "OMNIUM_LOG_LEVEL": "WARNING",
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        async with processes(env, tmp):
            baseline = await redis_clients(redis)
            with gateway(gateway_env(env, port, args.workers), tmp) as gw:
                say(f"opening {args.listeners} listeners")
                routes = plan_routes(args.listeners, list(hot.values()))
                clients = await start_clients(url, routes, args.per_client, tmp)
                await asyncio.sleep(1.0)
                connections = await redis_clients(redis)
                settings = Settings.from_env({}, grpc_token=TOKEN)
                channel = open_channel(f"127.0.0.1:{ports['OMNIUM_COMMAND_PORT']}", settings)
                stub = command_pb2_grpc.CommandServiceStub(channel)
                total = int(args.rate * args.seconds)
                units = list(hot)
                say(f"sending {total} changes over {args.seconds:.0f} s")
                began = time.monotonic()

                async def send(n: int) -> None:
                    await asyncio.sleep(max(0.0, began + n / args.rate - time.monotonic()))
                    answer = await stub.Submit(change(n, units[n % len(units)]), timeout=10)
                    if answer.outcome != command_pb2.OUTCOME_ACCEPTED:
                        raise BenchError(f"change {n} was {answer.outcome}: {answer.reason}")

                await asyncio.gather(*(send(n) for n in range(total)))
                await channel.close()
                await asyncio.sleep(args.settle)
                connections = max(connections, await redis_clients(redis))
                gateway_rss = family_rss_mb(gw.pid)
                results = await stop_clients(clients)
        saves = await conn.fetch(
            "SELECT d.id, extract(epoch FROM d.saved_at)::float8 AS saved, u.code "
            "  FROM domain_event d JOIN unit u ON u.id = d.unit_id "
            " WHERE d.command_id LIKE 'push-%' ORDER BY d.id"
        )
    finally:
        await conn.close()
        await redis.aclose()
        if not args.keep:
            await drop(db_server, DB_NAME)
    saved_at = {r["id"]: r["saved"] for r in saves}
    by_unit: dict[str, set[int]] = {}
    for r in saves:
        by_unit.setdefault(r["code"], set()).add(r["id"])
    expected = missed = 0
    delays: list[float] = []
    failed = 0
    for result in results:
        failed += result["failed"]
        for route, seen in zip(result["routes"], result["seen"], strict=True):
            code = route.split("/units/")[1].removesuffix("/live") if "/units/" in route else None
            wanted = set(saved_at) if code is None else by_unit.get(code, set())
            got = {i for i, _ in seen}
            expected += len(wanted)
            missed += len(wanted - got)
            delays += [(t - saved_at[i]) * 1000 for i, t in seen if i in wanted]
    say(
        f"{len(saves)} saved changes at {args.rate:g}/s; {args.listeners} listeners over "
        f"{math.ceil(args.listeners / args.per_client)} load processes; {args.workers} gateway "
        f"workers; Redis clients {baseline} before the gateway; listeners that failed: {failed}"
    )
    return {
        "push_listeners": args.listeners,
        "push_events_expected": expected,
        "push_events_missed": missed,
        "push_p50_ms": percentile(delays, 50),
        "push_p95_ms": percentile(delays, 95),
        "push_p99_ms": percentile(delays, 99),
        "gateway_rss_mb": gateway_rss,
        "redis_connections": connections,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.push", description=__doc__)
    parser.add_argument("--listeners", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=5.0, help="changes a second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2, help="gateway worker processes")
    parser.add_argument("--per-client", type=int, default=PER_CLIENT, help="listeners a process")
    parser.add_argument("--settle", type=float, default=3.0, help="wait after the last change")
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".omnium" / "bench")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    # The load processes this script starts.
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--routes", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    raise_open_files()
    if args.client:
        asyncio.run(client_main(args))
        return 0
    logging.basicConfig(level=logging.WARNING)
    try:
        with servers(args.data_dir, say) as (db_server, redis_url):
            figures = asyncio.run(run(db_server, redis_url, args))
    except BenchError as exc:
        print(f"bench.push: {exc}", file=sys.stderr, flush=True)
        return 1
    p95 = figures["push_p95_ms"]
    say(
        f"targets: 0 missed ({'met' if figures['push_events_missed'] == 0 else 'MISSED'}), "
        f"p95 <= {TARGET_P95_MS:.0f} ms ({'met' if p95 <= TARGET_P95_MS else 'MISSED'})"
    )
    for name, value in figures.items():
        print(f"{name}: {value:.0f}" if name != "gateway_rss_mb" else f"{name}: {value:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
