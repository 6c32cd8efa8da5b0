"""20 scorers tapping at once through the gateway's scorer routes, tap to saved.

First as scorers tap (2,000 actions: act_p50_ms, act_p95_ms, actions_per_s): each scorer taps,
sees the score, and taps again after a pause drawn at random around --think-ms (an exponential
distribution: mostly short pauses, sometimes back-to-back taps). Then the capacity: every scorer
taps again the moment an answer comes (capacity_actions_per_s, capacity_act_*), where latency
is simply how many wait in line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench._common import (
    BenchError,
    add_scored_match,
    cpu_seconds,
    database_server,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    say,
    wait_for_port,
)
from omnium_accounts import hash_password
from omnium_db import apply_migrations
from omnium_devstack.stack import dev_process_environ
from omnium_gateway import ScorerRoutes
from omnium_gateway._server import run_worker
from omnium_settings import Settings
from omnium_telemetry import setup_tracing, shutdown_tracing

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_scoring"
EVENT = "AG2026"
TOKEN = "bench"
PASSWORD = "bench password 1"

log = logging.getLogger("bench.scoring")


async def seed(db_url: str, scorers: int) -> list[str]:
    """One football match per scorer, each with its two teams, and one account per scorer."""
    conn = await asyncpg.connect(db_url)
    try:
        applied = await apply_migrations(conn)
        if applied:
            say(f"migrations applied: {applied}")
        event = await conn.fetchval(
            "INSERT INTO event (code, name) VALUES ($1, 'Bench Games') RETURNING id", EVENT
        )
        discipline = await conn.fetchval(
            "INSERT INTO discipline (event_id, code, name) VALUES ($1, 'FBL', 'Football') "
            "RETURNING id",
            event,
        )
        teams = []
        for noc in ("KOR", "JPN"):
            teams.append(
                await conn.fetchval(
                    "INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc) "
                    "VALUES ($1, $2, 'team', $3, $3, $3) RETURNING id",
                    event,
                    discipline,
                    noc,
                )
            )
        hashed = await asyncio.to_thread(hash_password, PASSWORD)
        units = []
        for n in range(scorers):
            code = f"FBLMEVENT-------------FNL-{n + 1:0>8}"[:34].ljust(34, "-")
            unit = await add_scored_match(
                conn,
                n,
                event=event,
                discipline=discipline,
                teams=teams,
                code=code,
                name=f"Bench match {n + 1}",
                password_hash=hashed,
            )
            units.append(unit)
        return units
    finally:
        await conn.close()


def _profiled(name: str) -> list[str]:
    """BENCH_PROFILE=<process>[,<process>...] runs those under cProfile (/tmp/<name>.prof)."""
    if name in os.environ.get("BENCH_PROFILE", "").split(","):
        return ["-m", "cProfile", "-o", f"/tmp/{name}.prof"]
    return []


def cpu_of(pids: list[int]) -> float:
    """CPU seconds of these processes so far; one that has ended (or is not here) counts 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


PIDS: dict[str, int] = {}


@contextlib.asynccontextmanager
async def process(
    name: str, args: list[str], env: dict[str, str], port: int, tmp: Path
) -> AsyncIterator[None]:
    logfile = tmp / f"{name}.log"
    with logfile.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    PIDS[name] = proc.pid
    try:
        await wait_for_port(proc, port, logfile, within=60, name=f"the {name} process")
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
        noisy = [
            line
            for line in logfile.read_text(errors="replace").splitlines()
            if any(w in line for w in ("ERROR", "Traceback", "incident"))
        ]
        if noisy:
            say(f"{name} log: {len(noisy)} error lines, first: {noisy[0]}")


async def database_backends(db_url: str) -> list[int]:
    """The PostgreSQL server processes serving the bench database (when it runs here)."""
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return [r["pid"] for r in rows]


class Gate:
    """Every scorer warms up, then all start the timed part together."""

    def __init__(self, scorers: int) -> None:
        self.scorers = scorers
        self.left = scorers
        self.warm = asyncio.Event()
        self.start = asyncio.Event()

    async def ready(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.warm.set()
        await self.start.wait()


async def scorer(
    base: str,
    n: int,
    unit: str,
    args: argparse.Namespace,
    warm: Gate,
    paced_done: Gate,
) -> tuple[list[float], list[float]]:
    """Sign in, warm up; then `args.actions / args.scorers` taps at a scorer's pace, then as
    many as fast as answers come. Each tap's ms from tap to saved, for both parts."""
    per_scorer = args.actions // args.scorers
    rng = random.Random(args.seed * 1000 + n)
    # unsafe: the jar keeps cookies from an IP address such as 127.0.0.1.
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(base_url=base, cookie_jar=jar) as http:
        async with http.post(
            "/score/api/sign-in", json={"login": f"scorer{n}", "password": PASSWORD}
        ) as response:
            if response.status != 200:
                raise BenchError(f"scorer{n} could not sign in: {await response.text()}")
            csrf = (await response.json())["csrf"]
        headers = {"X-CSRF-Token": csrf}
        path = f"/score/api/matches/{unit}/actions"
        taps = iter(range(1_000_000))

        async def tap(action: dict[str, Any]) -> float:
            i = next(taps)
            body = {"client_id": f"bench{n}:{i}", "client_at": time.time() * 1000, **action}
            began = time.perf_counter()
            async with http.post(path, json=body, headers=headers) as response:
                answer = await response.json()
            took = (time.perf_counter() - began) * 1000
            if answer.get("outcome") != "saved":
                raise BenchError(f"scorer{n} action {i}: {answer}")
            return took

        def goal() -> dict[str, Any]:
            return {"kind": "goal", "side": rng.choice((1, 2)), "fields": {"player": "9"}}

        await tap({"kind": "start_period"})
        for _ in range(1, args.warmup):
            await tap(goal())
        await warm.ready()
        # As a scorer taps: look at the score, then the next tap a moment later.
        paced = []
        for _ in range(per_scorer):
            await asyncio.sleep(rng.expovariate(1000 / args.think_ms))
            paced.append(await tap(goal()))
        await paced_done.ready()
        flat_out = [await tap(goal()) for _ in range(per_scorer)]
    return paced, flat_out


async def until(event: asyncio.Event, tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for `event`; if a scorer fails first, raise its error."""
    waiting = asyncio.create_task(event.wait())
    await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        await asyncio.gather(*tasks)  # raises the scorer's error
        raise BenchError("the scorers ended before the part did")


@dataclasses.dataclass
class CpuMeter:
    """CPU used by each process (and PostgreSQL's backends, and this client) over a part."""

    db_url: str
    before: dict[str, float] = dataclasses.field(default_factory=dict)
    backends: list[int] = dataclasses.field(default_factory=list)

    async def start(self) -> None:
        self.before = {name: cpu_seconds(pid) for name, pid in PIDS.items()}
        # PostgreSQL's share runs on the same two cores: its backends of this database.
        self.backends = await database_backends(self.db_url)
        self.before["postgresql"] = cpu_of(self.backends)
        self.before["bench client"] = sum(os.times()[:2])

    def report(self, actions: int) -> None:
        now = {name: cpu_seconds(pid) for name, pid in PIDS.items()}
        now["postgresql"] = cpu_of(self.backends)
        now["bench client"] = sum(os.times()[:2])
        parts = [f"{name} {(now[name] - self.before[name]) * 1000 / actions:.2f}" for name in now]
        say("  CPU ms per action: " + ", ".join(parts))


async def run(server_url: str, args: argparse.Namespace) -> dict[str, float]:
    db_url = database_url_for(server_url, DB_NAME)
    await recreate(server_url, DB_NAME)
    try:
        units = await seed(db_url, args.scorers)
        command_port, scoring_port, gateway_port = free_port(), free_port(), free_port()
        env = dev_process_environ()
        env |= {
            "OMNIUM_DATABASE_URL": db_url,
            "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
            "OMNIUM_GRPC_TOKEN": TOKEN,
            "OMNIUM_COMMAND_PORT": str(command_port),
            "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{command_port}",
            "OMNIUM_SCORING_PORT": str(scoring_port),
            "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{scoring_port}",
            "OMNIUM_GATEWAY_PORT": str(gateway_port),
            "OMNIUM_LOG_LEVEL": "WARNING",
        }
        per_scorer = args.actions // args.scorers
        timed = args.scorers * per_scorer
        with tempfile.TemporaryDirectory(prefix="bench-scoring-") as tmp:
            folder = Path(tmp)
            async with (
                process(
                    "command",
                    [*_profiled("command"), "-m", "omnium_command"],
                    env,
                    command_port,
                    folder,
                ),
                process(
                    "scoring",
                    [*_profiled("scoring"), "-m", "omnium_scoring"],
                    env,
                    scoring_port,
                    folder,
                ),
                process(
                    "gateway",
                    [*_profiled("gateway"), "-m", "bench.scoring", "gateway"],
                    env,
                    gateway_port,
                    folder,
                ),
            ):
                say(
                    f"{args.scorers} scorers, {per_scorer} timed actions each "
                    f"(after {args.warmup} warm-up actions), through the gateway (one worker)"
                )
                warm, paced_done = Gate(args.scorers), Gate(args.scorers)
                tasks = [
                    asyncio.create_task(
                        scorer(
                            f"http://127.0.0.1:{gateway_port}",
                            n,
                            units[n],
                            args,
                            warm,
                            paced_done,
                        )
                    )
                    for n in range(args.scorers)
                ]
                meter = CpuMeter(db_url)
                await until(warm.warm, tasks)
                # Figures on a shared machine depend on what else runs: say how busy it was.
                say("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
                say(
                    f"as scorers tap: a pause of {args.think_ms:.0f} ms on average "
                    "(exponential) after each answer"
                )
                await meter.start()
                began = time.perf_counter()
                warm.start.set()
                await until(paced_done.warm, tasks)
                paced_wall = time.perf_counter() - began
                meter.report(timed)
                say(f"then as fast as answers come, {per_scorer} actions each")
                await meter.start()
                began = time.perf_counter()
                paced_done.start.set()
                results = await asyncio.gather(*tasks)
                capacity_wall = time.perf_counter() - began
                meter.report(timed)
                say("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
                paced = [t for result, _ in results for t in result]
                flat_out = [t for _, result in results for t in result]
        conn = await asyncpg.connect(db_url)
        try:
            saved = await conn.fetchval("SELECT count(*) FROM match_action")
            seqs = await conn.fetchval("SELECT count(DISTINCT (unit_id, seq)) FROM match_action")
        finally:
            await conn.close()
        expected = args.scorers * (args.warmup + 2 * per_scorer)
        if saved != expected or seqs != expected:
            raise BenchError(f"{saved} actions saved ({seqs} distinct); expected {expected}")
        say(f"checks: {saved} actions saved once each, in {args.scorers} matches")
        return {
            "act_p50_ms": percentile(paced, 50),
            "act_p95_ms": percentile(paced, 95),
            "act_p99_ms": percentile(paced, 99),
            "actions_per_s": len(paced) / paced_wall,
            "capacity_actions_per_s": len(flat_out) / capacity_wall,
            "capacity_act_p50_ms": percentile(flat_out, 50),
            "capacity_act_p95_ms": percentile(flat_out, 95),
        }
    finally:
        await drop(server_url, DB_NAME)


async def gateway() -> None:
    """The real gateway app with the scorer routes: one worker of `python -m omnium_gateway`."""
    settings = Settings.from_env()
    # run_worker builds make_app(settings, route_sets=[...]) on the gateway's port and stops on
    # SIGTERM: one worker, so this process's CPU is the whole gateway's.
    setup_tracing("omnium-gateway", settings)
    try:
        await run_worker(settings, settings.gateway.port, route_sets=[ScorerRoutes(settings)])
    finally:
        shutdown_tracing()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scoring", description=__doc__)
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "gateway"))
    parser.add_argument("--scorers", type=int, default=20, help="scorers tapping at once")
    parser.add_argument("--actions", type=int, default=2000, help="timed actions in all")
    parser.add_argument("--warmup", type=int, default=5, help="untimed actions per scorer")
    parser.add_argument(
        "--think-ms",
        type=float,
        default=500.0,
        help="a scorer's mean pause between an answer and the next tap (exponential)",
    )
    parser.add_argument("--seed", type=int, default=20261130, help="random seed for the pauses")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT / ".omnium" / "bench",
        help="private PostgreSQL's folder when OMNIUM_DATABASE_URL is unset (%(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.mode == "gateway":
        asyncio.run(gateway())
        return 0
    try:
        with database_server(args.data_dir) as server_url:
            figures = asyncio.run(run(server_url, args))
    except BenchError as exc:
        print(f"bench.scoring: {exc}", file=sys.stderr, flush=True)
        return 1
    print()
    for name, value in figures.items():
        print(f"{name}: {value:.1f}" if name.endswith("_per_s") else f"{name}: {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
