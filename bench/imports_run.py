"""Scout runs through the imports service, doorbell to done, with both services as deployed."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from bench._common import (
    BenchError,
    cpu_seconds,
    database_server,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    wait_for_port,
)
from dev.demo import Feed, demo_integrations
from omnium_db import apply_migrations, init_connection
from omnium_devstack.stack import dev_process_environ
from omnium_grpc import ROW_OUTCOMES as COMMAND_ROW_OUTCOMES
from omnium_scout_sim import ScoutSimulator

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_imports"
TOKEN = "bench"
SECRET = "bench-doorbell-secret"
SEED = 20261006
SMALL_ROWS = 1_240
CHANGED_ROWS = 50
PAGE_ROWS = 500  # Scout's page (DESIGN §6: at most 500)
DEFAULT_MAX_ROWS = 50_000  # settings.imports.scout_max_rows
# One integration per unit set, both on the simulator's Games; Scout jobs of the bench Scout.
SMALL = ("bench-schedule", "schedule", "A")  # code, job, unit-number letter
BIG = ("bench-schedule-big", "schedule-big", "B")
# Long enough that the scheduler never queues a check during the bench (it only checks
# integrations not heard from for this long); its start-up check is waited out before timing.
CHECK_SECONDS = 86_400
# The run's outcome counters that count rows (each row outcome of the command service, and
# not_sent); any other counter (say how many rows a fast path skipped) is shown, not checked.
ROW_OUTCOMES = frozenset(COMMAND_ROW_OUTCOMES.values()) | {"not_sent"}
FINISHED = frozenset({"done", "partly_done", "failed", "scout_failed", "older", "paused_by_guard"})
POLL_SECONDS = 0.005
START_SECONDS = 60.0
STOP_SECONDS = 30.0
SMALL_RUN_SECONDS = 60.0
DOORBELL_SECONDS = 10.0
TARGET_SMALL_MS = 300.0
TARGET_BIG_S = 30.0
TARGET_RERUN_S = 3.0
TARGET_RSS_MB = 400.0

log = logging.getLogger("bench.imports_run")


def say(message: str) -> None:
    print(message, flush=True)


def big_run_seconds(rows: int) -> float:
    """The longest a big run may take before the bench gives up (about 10x the target rate)."""
    return 120.0 + rows * 0.012


# --- Scout's rows ----------------------------------------------------------------------------


def encode(row: Mapping[str, Any]) -> bytes:
    return json.dumps(row, separators=(",", ":")).encode()


class RowMaker:
    """Unit rows in the simulator's shape, cut from its reference units (their disciplines,
    events, phases, venues and competitors) with new Scout ids and RSC codes of our own."""

    def __init__(self, reference: Mapping[str, Any]) -> None:
        self.templates: list[Mapping[str, Any]] = reference["units"]
        self.competitors = {c["externalId"]: c for c in reference["competitors"]}
        self.disciplines = {d["code"] for d in reference["disciplines"]}
        if not self.templates:
            raise BenchError("the simulator's reference has no units to model rows on")

    def row(self, letter: str, n: int) -> dict[str, Any]:
        template = self.templates[n % len(self.templates)]
        rsc = template["rsc"]
        if len(rsc) != 34 or template["disciplineCode"] not in self.disciplines:
            raise BenchError(f"the simulator's unit {template['externalId']} is not usable")
        return {
            "externalId": f"SC-{letter}{n:06d}",
            # Discipline, gender, event and phase of the template; the unit part is ours:
            # the set's letter and a number, so every code is unique across both sets.
            "rsc": f"{rsc[:26]}{letter}{n:07d}",
            "disciplineCode": template["disciplineCode"],
            "event": template["event"],
            "phase": template["phase"],
            "unitName": template["unitName"],
            "startLocal": template["startLocal"],
            "venue": template["venue"],
            "status": "SCHEDULED",
            "competitors": [
                {
                    "externalId": cid,
                    "name": self.competitors[cid]["name"],
                    "noc": self.competitors[cid]["noc"],
                    "order": order,
                    "result": None,
                    "rank": None,
                    "medal": None,
                }
                for order, cid in enumerate(template["competitors"], start=1)
            ],
        }

    def rows(self, letter: str, count: int) -> list[dict[str, Any]]:
        return [self.row(letter, n) for n in range(1, count + 1)]


def change(row: dict[str, Any], kind: int, tag: str) -> dict[str, Any]:
    """A copy of the row with one thing changed, as the site would: a venue, status or result."""
    new = {**row, "competitors": [dict(c) for c in row["competitors"]]}
    if kind == 0:
        new["venue"] = f"Bench Hall {tag}"
    elif kind == 1:
        new["status"] = "RUNNING" if row["status"] == "SCHEDULED" else "SCHEDULED"
    else:
        new["competitors"][0]["result"] = tag
    return new


# --- the bench's Scout (DESIGN §6) -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoutRun:
    id: str
    job: str
    finished_at: str
    rows: tuple[bytes, ...]  # each row's JSON, encoded once when the run is made

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "status": "passed",
            "rowCount": len(self.rows),
            "finishedAt": self.finished_at,
            "build": "all",
        }

    def doorbell_body(self, sample: int = 10) -> bytes:
        return (
            b'{"run":'
            + json.dumps(self.to_json()).encode()
            + b',"sample":['
            + b",".join(self.rows[:sample])
            + b"]}"
        )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"{name} must be a whole number, not {raw!r}"}),
            content_type="application/json",
        ) from None
    if not low <= value <= high:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"{name} must be {low} to {high}; it was {value}"}),
            content_type="application/json",
        )
    return value


class BenchScout:
    """GET /v1/jobs/{job}/runs, /v1/runs/{id} and /v1/runs/{id}/items, served from memory."""

    def __init__(self, jobs: Sequence[str]) -> None:
        self.by_job: dict[str, list[ScoutRun]] = {job: [] for job in jobs}
        self.by_id: dict[str, ScoutRun] = {}
        self.requests = 0
        self.pages = 0
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    def make_run(self, job: str, rows: Sequence[bytes]) -> ScoutRun:
        moment = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        run = ScoutRun(f"bench-{uuid.uuid4().hex[:16]}", job, moment, tuple(rows))
        self.by_job[job].append(run)
        self.by_id[run.id] = run
        return run

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/jobs/{job}/runs", self._runs)
        app.router.add_get("/v1/runs/{run_id}", self._run)
        app.router.add_get("/v1/runs/{run_id}/items", self._items)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if not sockets:
            raise BenchError("the bench Scout did not get a port")
        self.base_url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
        return self.base_url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _runs(self, request: web.Request) -> web.Response:
        self.requests += 1
        job = request.match_info["job"]
        if job not in self.by_job:
            return _error(404, f"there is no job {job!r}")
        status = request.query.get("status")
        if status not in (None, "passed", "failed"):
            return _error(400, f"status must be passed or failed, not {status!r}")
        limit = _int_query(request, "limit", 20, 1, 100)
        runs = [r for r in reversed(self.by_job[job]) if status in (None, "passed")][:limit]
        return web.json_response({"runs": [r.to_json() for r in runs]})

    def _find(self, request: web.Request) -> ScoutRun:
        run_id = request.match_info["run_id"]
        run = self.by_id.get(run_id)
        if run is None:
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"there is no run {run_id!r}"}),
                content_type="application/json",
            )
        return run

    async def _run(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.json_response(self._find(request).to_json())

    async def _items(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.pages += 1
        run = self._find(request)
        offset = _int_query(request, "offset", 0, 0, 10**9)
        limit = _int_query(request, "limit", PAGE_ROWS, 1, PAGE_ROWS)
        body = b'{"items":[' + b",".join(run.rows[offset : offset + limit]) + b"]}"
        return web.Response(body=body, content_type="application/json")


# --- the services, each its own process ------------------------------------------------------


@dataclass(slots=True)
class Service:
    name: str
    proc: asyncio.subprocess.Process
    logfile: Path
    stop_code: int | None = None
    stop_seconds: float | None = None
    killed: bool = False
    kept: str | None = None  # the log, read before its temporary folder goes

    def log_text(self) -> str:
        if self.kept is not None:
            return self.kept
        try:
            return self.logfile.read_text(errors="replace")
        except OSError:
            return ""

    def keep_log(self) -> None:
        self.kept = self.log_text()

    def tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def noisy(self) -> list[str]:
        words = ("WARNING", "ERROR", "Traceback", "incident")
        return [line for line in self.log_text().splitlines() if any(w in line for w in words)]


def service_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dev_process_environ()
    return env | dict(extra)


async def start_service(name: str, module: str, env: Mapping[str, str], logdir: Path) -> Service:
    logfile = logdir / f"{name}.log"
    with logfile.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            cwd=ROOT,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    return Service(name, proc, logfile)


async def wait_listening(service: Service, port: int, within: float) -> None:
    await wait_for_port(
        service.proc, port, service.logfile, within, name=f"the {service.name} process"
    )


async def stop_service(service: Service) -> None:
    proc = service.proc
    if proc.returncode is not None:
        service.stop_code = proc.returncode
        return
    stopping = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        service.stop_code = await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        service.stop_seconds = time.perf_counter() - stopping
    except TimeoutError:
        service.killed = True
        proc.kill()
        service.stop_code = await proc.wait()


def proc_mb(pid: int, key: str) -> float:
    """A memory line of /proc/<pid>/status (VmRSS, VmHWM) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no {key} for pid {pid}")


# --- one timed run ---------------------------------------------------------------------------

SQL_POLL = """
SELECT j.status AS job_status, j.error, r.status, r.reason, r.outcomes
  FROM integration_job j
  LEFT JOIN integration_run r ON r.id = j.run_id
 WHERE j.integration_id = $1::uuid AND j.kind = 'pull' AND j.scout_run_id = $2
"""
# Where the time went, on the database's clock: doorbell commit, claim, run recorded (after
# every page was read), first batch written (after mapping; the finish when no batch was sent),
# run finished.
SQL_PHASES = """
SELECT extract(epoch FROM j.started_at - j.created_at) AS queue,
       extract(epoch FROM r.started_at - j.started_at) AS fetch,
       extract(epoch FROM coalesce(c.created_at, r.finished_at) - r.started_at) AS map,
       extract(epoch FROM r.finished_at - c.created_at) AS batches,
       extract(epoch FROM r.finished_at - j.created_at) AS server,
       r.batch_total, r.batch_done
  FROM integration_job j
  JOIN integration_run r ON r.id = j.run_id
  LEFT JOIN command c ON c.command_id = r.id::text || ':0'
 WHERE j.integration_id = $1::uuid AND j.kind = 'pull' AND j.scout_run_id = $2
"""


@dataclass(slots=True)
class Timed:
    """One Scout run, doorbell to done."""

    rows: int
    seconds: float
    outcomes: dict[str, int]
    extra: dict[str, int]  # counters that are not row outcomes
    phases: dict[str, float]
    batches: int
    cpu: dict[str, float]  # CPU seconds per process group, doorbell to done

    @property
    def ms(self) -> float:
        return self.seconds * 1000


@dataclass(slots=True)
class Integration:
    code: str
    job: str
    id: str


@dataclass(slots=True)
class Bench:
    conn: Any  # asyncpg.Connection: plain, for polling and checks
    scout: BenchScout
    http: aiohttp.ClientSession
    doorbell_url: str
    services: dict[str, int]  # name -> pid, for the CPU each one used


SQL_BACKENDS = """
SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()
"""


def _cpu_or_none(pid: int) -> float | None:
    """User plus system CPU of a process so far, or None when it is gone or not ours to read."""
    try:
        return cpu_seconds(pid)
    except OSError:
        return None


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False


async def cpu_snapshot(bench: Bench) -> dict[int, tuple[str, float]]:
    """CPU so far of both services and of this database's PostgreSQL sessions, grouped by
    who opened them (application_name before the colon). Sessions of a server on another
    machine are left out: their pids mean nothing here."""
    taken: dict[int, tuple[str, float]] = {}
    for name, pid in bench.services.items():
        used = _cpu_or_none(pid)
        if used is not None:
            taken[pid] = (f"{name} process", used)
    for row in await bench.conn.fetch(SQL_BACKENDS):
        pid = row["pid"]
        if not _is_postgres(pid):
            continue
        used = _cpu_or_none(pid)
        if used is not None:
            who = (row["application_name"] or "").partition(":")[0] or "unnamed"
            taken[pid] = (f"postgres ({who})", used)
    return taken


def cpu_used(
    before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds per group between two snapshots; a session opened in between from 0."""
    used: dict[str, float] = {}
    for pid, (group, seconds) in after.items():
        start = before.get(pid, (group, 0.0))[1]
        used[group] = used.get(group, 0.0) + seconds - start
    return used


def sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


async def ring(bench: Bench, integration: Integration, run: ScoutRun) -> None:
    body = run.doorbell_body()
    headers = {"X-Scout-Signature": sign(body), "Content-Type": "application/json"}
    url = f"{bench.doorbell_url}/doorbell/{integration.code}"
    try:
        async with bench.http.post(
            url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=DOORBELL_SECONDS)
        ) as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BenchError(f"the doorbell for run {run.id} failed: {exc!r}") from None
    if response.status != 200:
        raise BenchError(f"the doorbell for run {run.id} answered {response.status}: {text}")
    answer = json.loads(text)
    if answer.get("queued") is not True:
        raise BenchError(f"the doorbell did not queue run {run.id}: {text}")


async def timed_run(
    bench: Bench,
    integration: Integration,
    rows: Sequence[bytes],
    expect: Mapping[str, int],
    within: float,
) -> Timed:
    """Make a Scout run, ring, and time it to `done`; check its outcomes are `expect`."""
    run = bench.scout.make_run(integration.job, rows)
    cpu_before = await cpu_snapshot(bench)
    start = time.perf_counter()
    await ring(bench, integration, run)
    deadline = time.monotonic() + within
    poll = await bench.conn.prepare(SQL_POLL)
    while True:
        state = await poll.fetchrow(integration.id, run.id)
        if state is not None and (
            state["status"] in FINISHED or state["job_status"] in ("done", "failed")
        ):
            break
        if time.monotonic() > deadline:
            raise BenchError(
                f"{integration.code}: Scout run {run.id} ({len(rows):,} rows) did not finish "
                f"within {within:.0f} s; last seen {dict(state) if state else 'no job'}"
            )
        await asyncio.sleep(POLL_SECONDS)
    seconds = time.perf_counter() - start
    cpu = cpu_used(cpu_before, await cpu_snapshot(bench))
    if state["status"] != "done":
        raise BenchError(
            f"{integration.code}: Scout run {run.id} ended {state['status'] or 'unrecorded'} "
            f"(job {state['job_status']}), not done: {state['reason'] or state['error']}"
        )
    counters = {k: int(v) for k, v in (state["outcomes"] or {}).items() if v}
    outcomes = {k: v for k, v in counters.items() if k in ROW_OUTCOMES}
    # A row the fast path skipped is counted once, as fast_path (shown too): it is unchanged.
    if counters.get("fast_path"):
        outcomes["unchanged"] = outcomes.get("unchanged", 0) + counters["fast_path"]
    if outcomes != dict(expect):
        raise BenchError(
            f"{integration.code}: Scout run {run.id} is done but its outcomes are {outcomes}, "
            f"not the expected {dict(expect)}"
        )
    # Not timed: the job's own close, so the next run starts on an idle queue.
    await wait_jobs_idle(bench.conn, 30)
    phases = await bench.conn.fetchrow(SQL_PHASES, integration.id, run.id)
    return Timed(
        rows=len(rows),
        seconds=seconds,
        outcomes=outcomes,
        extra={k: v for k, v in counters.items() if k not in ROW_OUTCOMES},
        phases={
            k: float(phases[k])
            for k in ("queue", "fetch", "map", "batches", "server")
            if phases[k] is not None
        },
        batches=int(phases["batch_total"] or 0),
        cpu=cpu,
    )


async def wait_jobs_idle(conn: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        busy = await conn.fetchval(
            "SELECT count(*) FROM integration_job WHERE status IN ('queued', 'running')"
        )
        if busy == 0:
            return
        await asyncio.sleep(0.02)
    jobs = await conn.fetch(
        "SELECT id, kind, status, scout_run_id FROM integration_job "
        "WHERE status IN ('queued', 'running')"
    )
    raise BenchError(
        f"the import queue did not empty within {within:.0f} s: {list(map(dict, jobs))}"
    )


# --- the database ----------------------------------------------------------------------------


async def setup_database(
    conn: Any, reference: Mapping[str, Any], base_url: str
) -> tuple[Integration, Integration, int]:
    """Migrations, the simulator's Games, and one schedule integration per unit set."""
    applied = await apply_migrations(conn)
    if applied:
        say(f"migrations applied: {applied}")
    feeds = [Feed(code, job, name=f"Bench Scout: {job}") for code, job, _ in (SMALL, BIG)]
    found = await demo_integrations(
        conn, reference, base_url, SECRET, feeds, check_seconds=CHECK_SECONDS
    )
    small, big = (Integration(feed.code, feed.job, found.ids[feed.code]) for feed in feeds)
    return small, big, len(found.competitors)


async def check_small_landed(conn: Any, rows: Sequence[Mapping[str, Any]]) -> str:
    """Every small row's values as Scout sent them last: venue, status, first result."""
    found = await conn.fetch(
        """
        SELECT u.code, u.venue, u.status,
               (SELECT s.result FROM unit_competitor s
                 WHERE s.unit_id = u.id ORDER BY s.sort_order LIMIT 1) AS result
          FROM unit u WHERE u.code = ANY($1::text[])
        """,
        [r["rsc"] for r in rows],
    )
    by_code = {r["code"]: r for r in found}
    wrong = []
    for row in rows:
        have = by_code.get(row["rsc"])
        want = (row["venue"], row["status"], row["competitors"][0]["result"])
        if have is None or (have["venue"], have["status"], have["result"]) != want:
            wrong.append(f"{row['rsc']}: have {dict(have) if have else None}, want {want}")
    if wrong:
        raise BenchError(f"{len(wrong)} small units differ from Scout's last run: {wrong[0]}")
    return f"ok: all {len(rows):,} small units hold Scout's last values"


# --- the run ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Results:
    competitors: int = 0
    disciplines: int = 0
    scout_url: str = ""
    initial: Timed | None = None
    small: list[Timed] = field(default_factory=list)
    big: Timed | None = None
    rerun: Timed | None = None
    imports_hwm_mb: float = 0.0
    imports_rss_mb: float = 0.0
    command_rss_mb: float = 0.0
    command_hwm_mb: float = 0.0
    imports_idle_mb: float = 0.0
    command_idle_mb: float = 0.0
    scout_requests: int = 0
    scout_pages: int = 0
    checks: list[str] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


@contextlib.asynccontextmanager
async def services_running(
    db_url: str, args: argparse.Namespace, results: Results, logdir: Path
) -> AsyncIterator[tuple[Service, Service, int]]:
    command_port, doorbell_port = free_port(), free_port()
    command = await start_service(
        "command",
        "omnium_command",
        service_env(
            {
                "OMNIUM_DATABASE_URL": db_url,
                "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
                "OMNIUM_COMMAND_PORT": str(command_port),
            }
        ),
        logdir,
    )
    results.services.append(command)
    imports: Service | None = None
    try:
        await wait_listening(command, command_port, START_SECONDS)
        extra = {
            "OMNIUM_DATABASE_URL": db_url,
            "OMNIUM_GRPC_TOKEN": TOKEN,
            "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
            "OMNIUM_IMPORTS_PORT": str(free_port()),
            "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{command_port}",
            "OMNIUM_DOORBELL_PORT": str(doorbell_port),
            "OMNIUM_IMPORTS_NICE": "0",
        }
        if args.big_rows > DEFAULT_MAX_ROWS:
            extra["OMNIUM_SCOUT_MAX_ROWS"] = str(args.big_rows)
            results.notes.append(
                f"OMNIUM_SCOUT_MAX_ROWS={args.big_rows} (default {DEFAULT_MAX_ROWS:,}) "
                "so the big run is read at all"
            )
        imports = await start_service("imports", "omnium_imports", service_env(extra), logdir)
        results.services.append(imports)
        await wait_listening(imports, doorbell_port, START_SECONDS)
        yield command, imports, doorbell_port
    finally:
        # Imports first: it calls the command service, never the other way round.
        for service in (imports, command):
            if service is not None:
                await stop_service(service)


async def measure(
    bench: Bench,
    small: Integration,
    big: Integration,
    maker: RowMaker,
    args: argparse.Namespace,
    results: Results,
) -> None:
    rng = random.Random(args.seed)
    say(f"making rows: {SMALL_ROWS:,} small and {args.big_rows:,} big ...")
    small_rows = maker.rows(SMALL[2], SMALL_ROWS)
    small_bytes = [encode(r) for r in small_rows]
    big_bytes = tuple(encode(maker.row(BIG[2], n)) for n in range(1, args.big_rows + 1))

    say(f"initial load: {SMALL_ROWS:,} rows ...")
    results.initial = await timed_run(
        bench, small, small_bytes, {"accepted": SMALL_ROWS}, SMALL_RUN_SECONDS * 3
    )
    say(f"  done in {results.initial.ms:.0f} ms")

    say(f"{args.repeats} runs of {SMALL_ROWS:,} rows, {CHANGED_ROWS} changed in each ...")
    expect = {"accepted": CHANGED_ROWS, "unchanged": SMALL_ROWS - CHANGED_ROWS}
    for n in range(1, args.repeats + 1):
        for j, i in enumerate(sorted(rng.sample(range(SMALL_ROWS), CHANGED_ROWS))):
            small_rows[i] = change(small_rows[i], j % 3, f"{n}-{j}")
            small_bytes[i] = encode(small_rows[i])
        timed = await timed_run(bench, small, small_bytes, expect, SMALL_RUN_SECONDS)
        results.small.append(timed)
        say(f"  run {n:>2}: {timed.ms:7.1f} ms")
    results.checks.append(await check_small_landed(bench.conn, small_rows))

    say(f"initial load of {args.big_rows:,} new units (a second integration) ...")
    within = big_run_seconds(args.big_rows)
    results.big = await timed_run(bench, big, big_bytes, {"accepted": args.big_rows}, within)
    say(f"  done in {results.big.seconds:.2f} s")
    say(f"the same {args.big_rows:,} rows again, unchanged ...")
    results.rerun = await timed_run(bench, big, big_bytes, {"unchanged": args.big_rows}, within)
    say(f"  done in {results.rerun.seconds:.2f} s")

    units = await bench.conn.fetchval("SELECT count(*) FROM unit")
    if units != SMALL_ROWS + args.big_rows:
        raise BenchError(f"{units:,} units in the table, not {SMALL_ROWS + args.big_rows:,}")
    results.checks.append(f"ok: {units:,} units in the table, one per Scout row")


async def run(server_url: str, args: argparse.Namespace) -> Results:
    results = Results()
    started = time.perf_counter()
    db_url = database_url_for(server_url, DB_NAME)
    reference = ScoutSimulator().reference()
    maker = RowMaker(reference)
    results.disciplines = len(reference["disciplines"])
    scout = BenchScout([SMALL[1], BIG[1]])
    await recreate(server_url, DB_NAME)
    try:
        results.scout_url = await scout.start()
        conn = await asyncpg.connect(db_url, server_settings={"application_name": "bench:poll"})
        try:
            await init_connection(conn)
            small, big, results.competitors = await setup_database(conn, reference, scout.base_url)
            with tempfile.TemporaryDirectory(prefix="bench-imports-") as tmp:
                try:
                    async with (
                        services_running(db_url, args, results, Path(tmp)) as (
                            command,
                            imports,
                            doorbell_port,
                        ),
                        aiohttp.ClientSession() as http,
                    ):
                        say(
                            f"services: command pid {command.proc.pid}, imports pid "
                            f"{imports.proc.pid} (OMNIUM_IMPORTS_NICE=0), bench Scout at "
                            f"{scout.base_url}"
                        )
                        # The scheduler's start-up check of each integration (Scout has no
                        # runs yet: nothing new) must be over before anything is timed.
                        await wait_jobs_idle(conn, 30)
                        await asyncio.sleep(1)
                        results.command_idle_mb = proc_mb(command.proc.pid, "VmRSS")
                        results.imports_idle_mb = proc_mb(imports.proc.pid, "VmRSS")
                        bench = Bench(
                            conn,
                            scout,
                            http,
                            f"http://127.0.0.1:{doorbell_port}",
                            {"imports": imports.proc.pid, "command": command.proc.pid},
                        )
                        await measure(bench, small, big, maker, args, results)
                        results.imports_hwm_mb = proc_mb(imports.proc.pid, "VmHWM")
                        results.imports_rss_mb = proc_mb(imports.proc.pid, "VmRSS")
                        results.command_hwm_mb = proc_mb(command.proc.pid, "VmHWM")
                        results.command_rss_mb = proc_mb(command.proc.pid, "VmRSS")
                except BenchError as exc:
                    tails = "".join(
                        f"\n--- {s.name} log (tail) ---\n{s.tail()}" for s in results.services
                    )
                    raise BenchError(f"{exc}{tails}") from None
                finally:
                    # The logs live in the temporary folder: read them before it goes.
                    for service in results.services:
                        service.keep_log()
        finally:
            await conn.close()
    finally:
        results.scout_requests, results.scout_pages = scout.requests, scout.pages
        await scout.stop()
        if not args.keep:
            await drop(server_url, DB_NAME)
    results.wall_seconds = time.perf_counter() - started
    return results


# --- the report ------------------------------------------------------------------------------


def _met(value: float, target: float) -> str:
    return "met" if value <= target else "NOT met"


def _phases(timed: Sequence[Timed]) -> str:
    names = ("queue", "fetch", "map", "batches")
    parts = []
    for name in names:
        values = [t.phases[name] for t in timed if name in t.phases]
        if values:
            parts.append(f"{name} {statistics.median(values) * 1000:.0f}")
    server = [t.phases["server"] for t in timed if "server" in t.phases]
    if server:
        rest = statistics.median(t.seconds for t in timed) - statistics.median(server)
        parts.append(f"doorbell+detect {rest * 1000:.0f}")
    return ", ".join(parts) + " ms"


def _cpu(timed: Sequence[Timed]) -> str:
    """CPU seconds per group (median over the runs), busiest first."""
    groups = {name for t in timed for name in t.cpu}
    medians = {g: statistics.median(t.cpu.get(g, 0.0) for t in timed) for g in groups}
    # /proc counts in clock ticks (10 ms): groups that used none are left out.
    ordered = sorted(((g, v) for g, v in medians.items() if v > 0), key=lambda item: -item[1])
    unit = 1000 if max(medians.values(), default=0) < 1 else 1
    shown = ", ".join(f"{g} {v * unit:.0f}" if unit > 1 else f"{g} {v:.2f}" for g, v in ordered)
    return f"CPU ({'ms' if unit > 1 else 's'}): {shown}" if shown else "CPU: not measured"


def _extra(timed: Sequence[Timed]) -> str:
    """Counters beside the row outcomes (a fast path's skips, say), median over the runs."""
    names = sorted({name for t in timed for name in t.extra})
    shown = [f"{n} {statistics.median(t.extra.get(n, 0) for t in timed):,.0f}" for n in names]
    return f"; other counters: {', '.join(shown)}" if shown else ""


def report(args: argparse.Namespace, results: Results) -> list[str]:
    assert results.initial and results.big and results.rerun and results.small
    small_ms = [t.ms for t in results.small]
    median_ms = statistics.median(small_ms)
    big_s, rerun_s = results.big.seconds, results.rerun.seconds
    hwm = results.imports_hwm_mb
    lines = [
        "",
        "== imports run benchmark ==",
        f"setup: the simulator's Games ({results.disciplines} disciplines, "
        f"{results.competitors:,} competitors) in a fresh {DB_NAME}; two schedule integrations "
        f"(scout_units mapping, creates units); bench Scout pages of {PAGE_ROWS}",
        "services: python -m omnium_command and python -m omnium_imports, each its own process, "
        "default settings except OMNIUM_IMPORTS_NICE=0 (deployed: 10) so the measurement is "
        "not starved of CPU",
        *(f"  note: {note}" for note in results.notes),
        "timing: wall clock from just before the doorbell POST to integration_run.status = "
        f"done, polled every {POLL_SECONDS * 1000:.0f} ms",
        f"initial load {SMALL_ROWS:,} rows: {results.initial.ms:.0f} ms "
        f"({results.initial.batches} batches; {_phases([results.initial])}"
        f"{_extra([results.initial])})",
        f"runs of {SMALL_ROWS:,} rows, {CHANGED_ROWS} changed: n={len(small_ms)}  "
        f"median {median_ms:.1f}  p90 {percentile(small_ms, 90):.1f}  max {max(small_ms):.1f}  "
        f"min {min(small_ms):.1f} ms; {results.small[0].batches} batches each"
        f"{_extra(results.small)}",
        f"  where it goes (medians, database clock): {_phases(results.small)}",
        f"  {_cpu(results.small)}",
        f"initial load {args.big_rows:,} new units: {big_s:.2f} s "
        f"({results.big.batches:,} batches, {args.big_rows / big_s:,.0f} rows/s; "
        f"{_phases([results.big])}{_extra([results.big])})",
        f"  {_cpu([results.big])}",
        f"rerun {args.big_rows:,} unchanged: {rerun_s:.2f} s "
        f"({results.rerun.batches:,} batches, {args.big_rows / rerun_s:,.0f} rows/s; "
        f"{_phases([results.rerun])}{_extra([results.rerun])})",
        f"  {_cpu([results.rerun])}",
        f"imports process: VmHWM {hwm:.1f} MB, VmRSS {results.imports_rss_mb:.1f} MB "
        f"(idle {results.imports_idle_mb:.1f} MB)",
        f"command process: VmRSS {results.command_rss_mb:.1f} MB, VmHWM "
        f"{results.command_hwm_mb:.1f} MB (idle {results.command_idle_mb:.1f} MB)",
        f"bench Scout: {results.scout_requests:,} requests, {results.scout_pages:,} item pages",
    ]
    lines.extend(f"checks: {c}" for c in results.checks)
    lines.append(
        "checks: ok: every run done with the expected outcomes "
        f"({SMALL_ROWS:,} accepted; {CHANGED_ROWS} accepted + {SMALL_ROWS - CHANGED_ROWS:,} "
        f"unchanged x{len(small_ms)}; {args.big_rows:,} accepted; {args.big_rows:,} unchanged)"
    )
    for service in results.services:
        stopped = (
            f"SIGTERM -> exit {service.stop_code} in {service.stop_seconds:.2f} s"
            if service.stop_seconds is not None
            else f"killed after {STOP_SECONDS:.0f} s (exit {service.stop_code})"
            if service.killed
            else f"exited {service.stop_code}"
        )
        noisy = service.noisy()
        first = f"; first: {noisy[0][:200]}" if noisy else ""
        lines.append(f"{service.name}: {stopped}; {len(noisy)} warning/error log lines{first}")
    lines.append(f"whole bench: {results.wall_seconds:.0f} s")
    figures = [
        (f"run_{SMALL_ROWS}_rows_{CHANGED_ROWS}_changed_ms", median_ms, TARGET_SMALL_MS, "ms"),
        (f"initial_load_{args.big_rows}_rows_s", big_s, TARGET_BIG_S, "s"),
        (f"rerun_{args.big_rows}_unchanged_s", rerun_s, TARGET_RERUN_S, "s"),
        ("imports_peak_rss_mb", hwm, TARGET_RSS_MB, "MB"),
    ]
    lines.append("targets:")
    lines.extend(
        f"  {name:<34} {value:10.2f} {unit:<2}  target <= {target:g} {unit}: {_met(value, target)}"
        for name, value, target, unit in figures
    )
    lines += [
        "",
        f"{figures[0][0]}: {median_ms:.1f}",
        f"{figures[1][0]}: {big_s:.2f}",
        f"{figures[2][0]}: {rerun_s:.2f}",
        f"{figures[3][0]}: {hwm:.1f}",
    ]
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.imports_run", description=__doc__)
    parser.add_argument(
        "--repeats", type=int, default=15, help="timed runs of 1,240 rows, 50 changed (15)"
    )
    parser.add_argument(
        "--big-rows", type=int, default=50_000, help="rows of the big load and rerun (50,000)"
    )
    parser.add_argument("--seed", type=int, default=SEED, help="random seed for the changes")
    parser.add_argument("--keep", action="store_true", help=f"keep {DB_NAME} at the end")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT / ".omnium" / "bench",
        help="private PostgreSQL's folder when OMNIUM_DATABASE_URL is unset (%(default)s)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not 1 <= args.big_rows <= 9_999_999:
        parser.error("--big-rows must be 1 to 9,999,999")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        with database_server(args.data_dir) as server_url:
            results = asyncio.run(run(server_url, args))
    except BenchError as exc:
        print(f"bench.imports_run: {exc}", file=sys.stderr, flush=True)
        return 1
    # Printed after the servers stopped, so the figures are the last lines.
    for line in report(args, results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
