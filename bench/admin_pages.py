"""The console's pages under load: wrk against each screen, signed in, with /health as the anchor.

The stack is real and in this process (command, imports, the Scout simulator, the console);
wrk is its own process, so the server keeps a core. A Games day is loaded and `--runs` more
runs are made first, so the runs page, its chart and a 1,252-row run page have data to show.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx

from bench._common import BenchError, database_server, database_url_for, drop, recreate, require
from dev.demo import Feed, demo_integrations
from omnium_accounts import Accounts
from omnium_admin import AdminApp
from omnium_command import CommandApp
from omnium_db import PoolRoad, apply_migrations, create_pool, init_connection
from omnium_imports import ImportsApp
from omnium_scout_sim import DoorbellTarget, ScoutSimulator, SimulatorConfig
from omnium_settings import Settings

DB_NAME = "omnium_bench_admin"
TOKEN = "bench"
# The console acts for its signed-in person with a caller of its own (docs/callers.md).
CONSOLE_TOKEN = "bench-admin-console"
SECRET = "bench-doorbell-secret"
PASSWORD = "bench password 1"
CODE = "bench-schedule"
FINISHED = ("done", "partly_done", "failed", "scout_failed", "older", "paused_by_guard")


def say(message: str) -> None:
    print(f"bench-admin: {message}", file=sys.stderr, flush=True)


async def wait_for_run(db: asyncpg.Connection, scout_run_id: str) -> str:
    for _ in range(1200):
        row = await db.fetchrow(
            "SELECT id::text, status FROM integration_run WHERE scout_run_id = $1", scout_run_id
        )
        if row is not None and row["status"] in FINISHED:
            return str(row["id"])
        await asyncio.sleep(0.05)
    raise RuntimeError(f"run {scout_run_id} did not finish")


@contextlib.asynccontextmanager
async def stack(database_url: str, runs: int) -> AsyncIterator[tuple[AdminApp, str]]:
    """The whole stack with a loaded Games day; yields the console and the first run's id."""
    base = Settings.from_env(
        {},
        database_url=database_url,
        grpc_callers=(f"bench:service:{TOKEN}", f"admin-console:operator-console:{CONSOLE_TOKEN}"),
        grpc_token=TOKEN,
        scout_retry_base_seconds=0.01,
        imports_poll_seconds=0.2,
        # The bench's Scout simulator listens on this machine.
        outbound_allowed_networks=("127.0.0.0/8", "::1/128"),
    )
    command = CommandApp(base)
    command_port = await command.start(0)
    settings = base.replace(command_address=f"127.0.0.1:{command_port}")
    imports = ImportsApp(settings)
    doorbell = await imports.start(0, workers=1, scheduler=False, grpc_port=0)
    sim = ScoutSimulator(
        SimulatorConfig(
            doorbells={"schedule": DoorbellTarget(f"http://127.0.0.1:{doorbell}", CODE, SECRET)}
        )
    )
    await sim.start()
    admin = AdminApp(
        settings.replace(imports_address=f"127.0.0.1:{imports.grpc_port}", grpc_token=CONSOLE_TOKEN)
    )
    db = await asyncpg.connect(database_url)
    await init_connection(db)
    try:
        await demo_integrations(db, sim.reference(), sim.base_url, SECRET, [Feed(CODE, "schedule")])
        first = await sim.make_run("schedule", wait_doorbell=True)
        first_id = await wait_for_run(db, first.id)
        units = sim.reference()["units"]
        for n in range(runs):
            for unit in units[n * 10 : n * 10 + 10]:
                sim.reschedule(unit["externalId"], venue=f"Bench Venue {n}")
            run = await sim.make_run("schedule", wait_doorbell=True)
            await wait_for_run(db, run.id)
        pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="bench", size=1)
        await Accounts(pool, settings).create("bench", "Bench Operator", "operator", PASSWORD)
        await pool.close()
        await admin.start(0)
        yield admin, first_id
    finally:
        await admin.stop()
        await db.close()
        await sim.stop()
        await imports.stop(grace=2)
        await command.stop(grace=1)


async def session_cookie(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, follow_redirects=False) as client:
        form = await client.get("/sign-in")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        answer = await client.post(
            "/sign-in", data={"csrf_token": token[1], "login": "bench", "password": PASSWORD}
        )
        assert answer.status_code == 303, answer.text
        return str(client.cookies["omnium_session"])


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


async def wrk(url: str, cookie: str, seconds: int, connections: int) -> dict[str, float]:
    """One wrk run: p50, p99 (ms) and requests per second; non-2xx answers fail the bench."""
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-H",
        f"Cookie: omnium_session={cookie}",
        url,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    text = out.decode()
    if proc.returncode != 0 or "Non-2xx" in text:
        raise RuntimeError(f"wrk {url} failed:\n{text}{err.decode()}")
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    assert p50 and p99 and rps, text
    return {"p50": _ms(p50[1]), "p99": _ms(p99[1]), "rps": float(rps[1])}


async def run(args: argparse.Namespace, server_url: str) -> list[str]:
    await recreate(server_url, DB_NAME)
    url = database_url_for(server_url, DB_NAME)
    conn = await asyncpg.connect(url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    lines: list[str] = []
    try:
        say(f"loading a Games day and {args.runs} more runs")
        async with stack(url, args.runs) as (admin, first_run):
            base = f"http://127.0.0.1:{admin.port}"
            cookie = await session_cookie(base)
            pages = {
                "health": "/health",
                "integrations": "/integrations",
                "api_integrations": "/api/integrations",
                "runs": f"/runs?integration={CODE}",
                "run_1252_rows": f"/runs/{first_run}",
                "waiting": "/waiting",
                "units_search": "/units?q=ATH",
            }
            for name, path in pages.items():
                say(f"wrk {path} for {args.seconds} s, {args.connections} connections")
                figures = await wrk(base + path, cookie, args.seconds, args.connections)
                lines += [
                    f"admin_{name}_p50_ms {figures['p50']:.2f}",
                    f"admin_{name}_p99_ms {figures['p99']:.2f}",
                    f"admin_{name}_rps {figures['rps']:.0f}",
                ]
    finally:
        if not args.keep:
            await drop(server_url, DB_NAME)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admin_pages", description=__doc__)
    parser.add_argument("--runs", type=int, default=30, help="runs made before measuring")
    parser.add_argument("--seconds", type=int, default=5, help="wrk time per page")
    parser.add_argument("--connections", type=int, default=4, help="wrk connections")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    args = parser.parse_args()
    try:
        require("wrk")
    except BenchError as exc:
        say(str(exc))
        return 2
    logging.basicConfig(level=logging.WARNING)
    with (
        tempfile.TemporaryDirectory(prefix="omnium-bench-admin-") as tmp,
        database_server(Path(tmp)) as server_url,
    ):
        lines = asyncio.run(run(args, server_url))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
