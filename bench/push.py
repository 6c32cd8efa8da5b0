"""Live push at fan scale: N SSE listeners on the real gateway, a Games final's rate of changes.

The real stack: command and delivery processes, and `python -m omnium_gateway` with its
workers. Listeners run in separate load processes (`bench.push --client`), half on the Games
route and half spread over the hot units' routes. Changes go through the command service at
`--rate` a second for `--seconds`; each delay is from the change's save (its outbox row's
saved_at) to the moment a listener read its event. Not a test: it prints figures, last of all
`name: value` lines.

`--anchor nchan` then measures nginx's push engine in the gateway's place, in the same run on
the same machine: the gateway stopped, nginx with nchan (as many workers) on the same routes,
the same listener processes reading its EventSource endpoint, and the same changes at the same
rate through command and delivery, each entry delivery publishes to Redis POSTed to nchan's
publisher as it comes (a relay standing in for delivery publishing to nchan itself). It prints
the same figures again with an `nchan_` prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import redis.asyncio as aioredis

from bench._common import (
    BenchError,
    cpu_seconds,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    rss_mb,
    servers,
    service_env,
)
from bench._nchan import relay, require_nchan, running_nchan
from bench.delivery import EVENT, TOKEN, processes, seed
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_db import apply_migrations, init_connection
from omnium_grpc import actor_message, command_message, open_channel
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
        # What a browser's EventSource sends (nchan serves only such requests).
        headers = {"X-API-Key": API_KEY, "Accept": "text/event-stream"}
        response = await http.get(url, headers=headers)
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
        # Every listener uses the bench's one key: no cap on one client's streams.
        "OMNIUM_LIVE_MAX_STREAMS_PER_CLIENT": "0",
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


def _family(pid: int) -> list[int]:
    """A server's parent process and its workers."""
    return [pid, *map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]


def family_rss_mb(pid: int) -> float:
    return sum(rss_mb(p) for p in _family(pid))


def family_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in _family(pid))


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
    await asyncio.to_thread(tmp.mkdir, parents=True, exist_ok=True)
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


def change(command_id: str, score: int, unit_id: str) -> command_pb2.Command:
    return command_message(
        command_id,
        "results.set_sides",
        {"sides": [{"order": 1, "score": str(score)}]},
        actor_message("scorer", "bench scorer", screen="bench"),
        unit_id=unit_id,
    )


async def redis_clients(redis: aioredis.Redis) -> int:
    info: Any = await redis.info("clients")
    return int(info["connected_clients"])


@dataclass(slots=True)
class Phase:
    """One push engine under the same listeners and changes: what each listener read."""

    name: str
    command_prefix: str  # the command ids of its changes
    results: list[Any]
    redis_connections: int
    rss_mb: float
    cpu_seconds: float  # the server's, parent and workers, while the changes went out


async def listen_while_changing(
    name: str,
    url: str,
    routes: list[str],
    args: argparse.Namespace,
    tmp: Path,
    submit: Callable[[str, int], Awaitable[None]],
    redis: aioredis.Redis,
    server_pid: int,
) -> Phase:
    """Every listener open on `url`, then the changes at the rate asked, then what each read."""
    say(f"{name}: opening {len(routes)} listeners")
    clients = await start_clients(url, routes, args.per_client, tmp / name)
    await asyncio.sleep(1.0)
    connections = await redis_clients(redis)
    total = int(args.rate * args.seconds)
    say(f"{name}: sending {total} changes over {args.seconds:.0f} s")
    prefix = f"{name}-push-"
    cpu = family_cpu_seconds(server_pid)
    began = time.monotonic()

    async def send(n: int) -> None:
        await asyncio.sleep(max(0.0, began + n / args.rate - time.monotonic()))
        await submit(f"{prefix}{n}", n)

    await asyncio.gather(*(send(n) for n in range(total)))
    await asyncio.sleep(args.settle)
    connections = max(connections, await redis_clients(redis))
    rss, cpu = family_rss_mb(server_pid), family_cpu_seconds(server_pid) - cpu
    return Phase(name, prefix, await stop_clients(clients), connections, rss, cpu)


async def run(db_server: str, redis_url: str, args: argparse.Namespace) -> list[dict[str, float]]:
    await recreate(db_server, DB_NAME)
    db_url = database_url_for(db_server, DB_NAME)
    conn = await asyncpg.connect(db_url)
    await init_connection(conn)
    tmp = Path(tempfile.mkdtemp(prefix="omnium-bench-push-"))
    redis = aioredis.from_url(redis_url)
    phases: list[Phase] = []
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
        env = service_env(ports, db_url, redis_url, TOKEN)
        routes = plan_routes(args.listeners, list(hot.values()))
        units = list(hot)
        port = free_port()
        async with processes(env, tmp):
            baseline = await redis_clients(redis)
            settings = Settings.from_env({}, grpc_token=TOKEN)
            channel = open_channel(f"127.0.0.1:{ports['OMNIUM_COMMAND_PORT']}", settings)
            stub = command_pb2_grpc.CommandServiceStub(channel)

            # A new score every time, so no change repeats the one before it on its unit (an
            # unchanged result saves nothing, and the next phase would be sent fewer events).
            scores = itertools.count(1)

            async def submit(command_id: str, n: int) -> None:
                command = change(command_id, next(scores), units[n % len(units)])
                answer = await stub.Submit(command, timeout=10)
                if answer.outcome != command_pb2.OUTCOME_ACCEPTED:
                    raise BenchError(f"change {command_id} was {answer.outcome}: {answer.reason}")

            try:
                with gateway(gateway_env(env, port, args.workers), tmp) as gw:
                    phases.append(
                        await listen_while_changing(
                            "gateway",
                            f"http://127.0.0.1:{port}",
                            routes,
                            args,
                            tmp,
                            submit,
                            redis,
                            gw.pid,
                        )
                    )
                if args.anchor == "nchan":
                    phases.append(await nchan_phase(args, routes, tmp, submit, redis))
            finally:
                await channel.close()
        saves = await conn.fetch(
            "SELECT d.id, d.command_id, extract(epoch FROM d.saved_at)::float8 AS saved, u.code "
            "  FROM domain_event d JOIN unit u ON u.id = d.unit_id "
            " WHERE d.command_id LIKE '%-push-%' ORDER BY d.id"
        )
    finally:
        await conn.close()
        await redis.aclose()
        if not args.keep:
            await drop(db_server, DB_NAME)
    say(
        f"{args.rate:g} changes a second for {args.seconds:.0f} s; {args.listeners} listeners "
        f"over {math.ceil(args.listeners / args.per_client)} load processes; {args.workers} "
        f"workers; Redis clients {baseline} before the gateway"
    )
    return [
        tally(phase, [r for r in saves if r["command_id"].startswith(phase.command_prefix)])
        for phase in phases
    ]


async def nchan_phase(
    args: argparse.Namespace,
    routes: list[str],
    tmp: Path,
    submit: Callable[[str, int], Awaitable[None]],
    redis: aioredis.Redis,
) -> Phase:
    """The same listeners and changes on nginx with nchan, fed what delivery publishes."""
    port = free_port()
    async with running_nchan(port, args.workers) as nchan:
        ready = asyncio.Event()
        relaying = asyncio.create_task(relay(redis, nchan.url, EVENT, ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            phase = await listen_while_changing(
                "nchan", nchan.url, routes, args, tmp, submit, redis, nchan.pid
            )
        finally:
            relaying.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relaying
    return phase


def tally(phase: Phase, saves: list[Any]) -> dict[str, float]:
    """The figures of one phase: every event each listener should have read, and when it did."""
    saved_at = {r["id"]: r["saved"] for r in saves}
    by_unit: dict[str, set[int]] = {}
    for r in saves:
        by_unit.setdefault(r["code"], set()).add(r["id"])
    expected = missed = failed = 0
    delays: list[float] = []
    for result in phase.results:
        failed += result["failed"]
        for route, seen in zip(result["routes"], result["seen"], strict=True):
            code = route.split("/units/")[1].removesuffix("/live") if "/units/" in route else None
            wanted = set(saved_at) if code is None else by_unit.get(code, set())
            got = {i for i, _ in seen}
            expected += len(wanted)
            missed += len(wanted - got)
            delays += [(t - saved_at[i]) * 1000 for i, t in seen if i in wanted]
    say(f"{phase.name}: {len(saves)} saved changes; listeners that failed: {failed}")
    rss = f"{phase.name}_rss_mb"
    figures = {
        "push_listeners": sum(len(r["routes"]) for r in phase.results),
        "push_events_expected": expected,
        "push_events_missed": missed,
        "push_p50_ms": percentile(delays, 50),
        "push_p95_ms": percentile(delays, 95),
        "push_p99_ms": percentile(delays, 99),
        rss: phase.rss_mb,
        "redis_connections": phase.redis_connections,
        f"{phase.name}_cpu_seconds": phase.cpu_seconds,
    }
    if phase.name == "gateway":
        return figures
    # The anchor's figures beside the gateway's: the same names, prefixed.
    return {
        name if name.startswith(phase.name) else f"{phase.name}_{name}": v
        for name, v in figures.items()
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
    parser.add_argument(
        "--anchor",
        choices=["nchan"],
        help="then measure this push engine in the gateway's place, in the same run",
    )
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
        if args.anchor == "nchan":
            require_nchan()
        with servers(args.data_dir, say) as (db_server, redis_url):
            phases = asyncio.run(run(db_server, redis_url, args))
    except BenchError as exc:
        print(f"bench.push: {exc}", file=sys.stderr, flush=True)
        return 1
    for figures in phases:
        engine = next(name for name in figures if name.endswith("_rss_mb")).removesuffix("_rss_mb")
        missed = next(v for name, v in figures.items() if name.endswith("push_events_missed"))
        p95 = next(v for name, v in figures.items() if name.endswith("push_p95_ms"))
        say(
            f"{engine} targets: 0 missed ({'met' if missed == 0 else 'MISSED'}), "
            f"p95 <= {TARGET_P95_MS:.0f} ms ({'met' if p95 <= TARGET_P95_MS else 'MISSED'})"
        )
    for figures in phases:
        for name, value in figures.items():
            exact = name.endswith(("_rss_mb", "_cpu_seconds"))
            print(f"{name}: {value:.1f}" if exact else f"{name}: {value:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
