"""What the drills share: the load (scorers, public API readers, a webhook receiver), processes,
the database's state and the checks at the end (taps lost or doubled, import batches applied twice,
changes no client got).

A drill runs in phases (the failover drill's `failover` and `restart`, the copies drill's
`kill_copy` and `rolling_release`); whatever the load sees is counted for the phase current at
the time, and what the database holds is split by when it happened (`Load.phase_at`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import io
import json
import logging
import os
import random
import shutil
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from bench._common import BenchError, add_scored_match, percentile, say
from omnium_accounts import hash_password
from omnium_devstack.ha import PatroniCluster
from omnium_devstack.roles import grant_services, prepare_migrator
from omnium_devstack.stack import dev_process_environ

ROOT = Path(__file__).resolve().parents[1]
EVENT = "AG2026"
TOKEN = "drill-grpc-token"
READER_KEY = "drill-reader-key-0123"
PASSWORD = "drill password 1"
SCHEDULE = "scout-schedule"
RESULT_STATUSES = ("RUNNING", "INTERRUPTED", "UNOFFICIAL", "OFFICIAL", "PROTESTED")
IN_FLIGHT = ("received", "applying")


# --- what the load saw -------------------------------------------------------------------------


@dataclass
class Tap:
    client_id: str
    case: str  # the phase it was tapped in
    body: dict[str, Any]
    tapped: float
    sent_first: float | None = None
    sends: int = 0
    saved: float | None = None  # monotonic, when the answer said saved (or duplicate)
    outcome: str = "queued"


@dataclass
class Load:
    """What the load saw, shared by the scorers, the readers and the fault script."""

    phases: Sequence[str]
    current: str = ""
    taps: list[Tap] = field(default_factory=list)
    answers: dict[str, Counter[str]] = field(init=False)
    syncs: dict[str, Counter[str]] = field(init=False)
    began_wall: dict[str, float] = field(default_factory=dict)
    sign_ins_again: int = 0
    refusals: list[str] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # The webhook client's newest body of each (client, feed), and every message id it got.
    hooks: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    hook_ids: Counter[str] = field(default_factory=Counter)
    # Every answer that was not a success: (monotonic, "api" or "sync", the status).
    misses: list[tuple[float, str, str]] = field(default_factory=list)
    # Each client's history, when a drill keeps one: every tap, try and read, as the fault
    # checker reads it (bench/faults/checker.py), times monotonic.
    history: list[dict[str, Any]] | None = None

    def note(self, record: dict[str, Any]) -> None:
        if self.history is not None:
            self.history.append({**record, "phase": self.current})

    def __post_init__(self) -> None:
        self.current = self.current or self.phases[0]
        self.answers = {n: Counter[str]() for n in self.phases}
        self.syncs = {n: Counter[str]() for n in self.phases}

    def begin(self, phase: str) -> float:
        """From now on the load counts for `phase`; its wall-clock start is returned."""
        self.current = phase
        self.began_wall[phase] = time.time()
        return self.began_wall[phase]

    def phase_at(self, wall: float) -> str:
        """The phase a change saved at `wall` (epoch seconds) belongs to; before any, the first."""
        found = self.phases[0]
        for name in self.phases:
            began = self.began_wall.get(name)
            if began is not None and wall >= began:
                found = name
        return found


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Service:
    name: str
    proc: asyncio.subprocess.Process
    log: Path


def command_line(spec: Any, extra_args: Sequence[str] = ()) -> list[str]:
    """A dev-stack ServiceSpec's command: its program (HAProxy), else `python -m module`."""
    if spec.program:
        return list(spec.program)
    return [sys.executable, "-m", spec.module, *spec.args, *extra_args]


async def start_service(
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    logs: Path,
    *,
    append: bool = False,
    cwd: Path = ROOT,
) -> Service:
    """`argv` in its own process group (in `cwd`), its output in logs/<name>.log (added to with
    `append`).

    No niceness here: each service lowers its own priority from its settings."""
    logfile = logs / f"{name}.log"
    with logfile.open("ab" if append else "wb") as out:
        if append:
            out.write(f"\n=== drill: {name} started again at {time.ctime()} ===\n".encode())
            out.flush()
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=dict(env),
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            # Own group: Ctrl-C reaches the drill only, which stops these in its own order.
            process_group=0,
        )  # fmt: skip
    return Service(name, proc, logfile)


async def stop_service(service: Service, grace: float = 20.0) -> None:
    if service.proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(service.proc.wait(), grace)
    except TimeoutError:
        say(f"{service.name} did not stop within {grace:.0f} s of SIGTERM; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.proc.pid, signal.SIGKILL)
        await service.proc.wait()


def noisy_lines(logfile: Path) -> list[str]:
    words = ("ERROR", "Traceback", "CRITICAL", "incident")
    text = logfile.read_text(errors="replace") if logfile.exists() else ""
    return [line for line in text.splitlines() if any(w in line for w in words)]


def child_env(settings_env: Mapping[str, str]) -> dict[str, str]:
    env = dev_process_environ()
    env["PYTHONUNBUFFERED"] = "1"
    return env | dict(settings_env)


@contextlib.asynccontextmanager
async def database(data_dir: Path, **options: Any) -> AsyncIterator[Any]:
    """A Patroni pair (synchronous standby) and etcd under data_dir/ha; their logs copied to
    data_dir/logs when it stops. `options` go to PatroniCluster (etcd_members, cuttable)."""
    cluster = PatroniCluster(data_dir / "ha", fsync=True, **options)
    members = len(cluster.etcd.members)
    say(f"database: starting a Patroni pair (synchronous standby) and etcd ({members} members)")
    began = time.monotonic()
    try:
        await asyncio.to_thread(cluster.start)
        say(f"database: {cluster.leader_name()} leads after {time.monotonic() - began:.0f} s")
        yield cluster
    finally:
        await asyncio.to_thread(cluster.stop)
        logs = data_dir / "logs"
        for node in cluster.nodes:
            with contextlib.suppress(OSError):
                shutil.copy(node.logfile, logs / f"patroni-{node.name}.log")
        for member in cluster.etcd.members:
            with contextlib.suppress(OSError):
                shutil.copy(member.logfile, logs / member.logfile.name)


# --- set-up ------------------------------------------------------------------------------------


async def migration_step(
    superuser_url: str,
    env: Mapping[str, str],
    logs: Path,
    *,
    cwd: Path = ROOT,
    name: str = "migrate",
) -> float:
    """The release's migration step as the Job runs it: `python -m omnium_db migrate` (of the
    code `env` and `cwd` give) as the migration login, then the services' roles and logins
    (roles.sql); its output in logs/<name>.log. Returns its seconds; BenchError if it failed."""
    began = time.monotonic()
    migrate_url = await prepare_migrator(superuser_url)
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "omnium_db", "migrate",
            cwd=cwd, env={**env, "OMNIUM_DATABASE_URL": migrate_url},
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        code = await proc.wait()
    if code != 0:
        raise BenchError(f"the migration step exited {code}: {log.read_text()[-1500:]}")
    await grant_services(superuser_url)
    return time.monotonic() - began


async def connect(url: str) -> asyncpg.Connection:
    conn: asyncpg.Connection = await asyncpg.connect(url, timeout=5.0)
    return conn


async def fetch(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await connect(url)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(query, *args, timeout=30)
        return rows
    finally:
        await conn.close()


async def seed_scorers(url: str, scorers: int) -> list[tuple[str, str]]:
    """One football match per scorer, outside Scout's units, and an account per scorer."""
    conn = await connect(url)
    try:
        event, discipline = await conn.fetchrow(
            "SELECT e.id, d.id FROM event e JOIN discipline d ON d.event_id = e.id "
            "WHERE e.code = $1 AND d.code = 'FBL'",
            EVENT,
        )
        teams = [
            r["id"]
            for r in await conn.fetch(
                "SELECT id FROM competitor WHERE discipline_id = $1 AND kind = 'team' "
                "ORDER BY code LIMIT 2",
                discipline,
            )
        ]
        if len(teams) < 2:
            raise BenchError("the Scout reference has no two football teams to score")
        hashed = await asyncio.to_thread(hash_password, PASSWORD)
        units = []
        for n in range(scorers):
            code = f"FBLMDRILL-------------FNL-{n + 1:0>8}"
            unit = await add_scored_match(
                conn,
                n,
                event=event,
                discipline=discipline,
                teams=teams,
                code=code,
                name=f"Drill match {n + 1}",
                password_hash=hashed,
                starts_now=True,
            )
            units.append((unit, code))
        return units
    finally:
        await conn.close()


# --- the load ----------------------------------------------------------------------------------


@dataclass
class Device:
    """One scorer's phone: its signed-in session and the queue of taps not yet answered."""

    load: Load
    http: aiohttp.ClientSession
    n: int
    unit: str
    queue: list[Tap] = field(default_factory=list)
    csrf: str = ""
    numbers: Iterator[int] = field(default_factory=lambda: iter(range(1_000_000)))

    async def sign_in(self) -> bool:
        try:
            async with self.http.post(
                "/score/api/sign-in", json={"login": f"scorer{self.n}", "password": PASSWORD}
            ) as response:
                if response.status != 200:
                    return False
                self.csrf = (await response.json())["csrf"]
                return True
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False

    def tap(self, action: dict[str, Any]) -> None:
        load = self.load
        item = Tap(f"drill{self.n}:{next(self.numbers)}", load.current, action, time.monotonic())
        item.body = {
            "client_id": item.client_id,
            "unit_id": self.unit,
            "client_at": time.time() * 1000,
            **action,
        }
        load.taps.append(item)
        self.queue.append(item)
        # The tap as the scorer made it: its wait counts from here, even if a sync hangs.
        load.note({"kind": "tap", "id": item.client_id, "client": f"drill{self.n}",
                   "sent": item.tapped, "outcome": "queued"})  # fmt: skip

    async def flush(self) -> None:
        """One sync of the queue; what is not answered stays queued for the next."""
        load = self.load
        items = self.queue[:100]
        now = time.monotonic()
        for item in items:
            item.sends += 1
            item.sent_first = item.sent_first or now
        case = load.current
        try:
            async with self.http.post(
                "/score/api/sync",
                json={"actions": [item.body for item in items]},
                headers={"X-CSRF-Token": self.csrf},
            ) as response:
                status = response.status
                body = await response.json(content_type=None) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            load.syncs[case]["connection error"] += 1
            load.misses.append((time.monotonic(), "sync", "connection error"))
            self.note_tries(items, now, {})
            return
        load.syncs[case][str(status)] += 1
        if status != 200:
            load.misses.append((time.monotonic(), "sync", str(status)))
            self.note_tries(items, now, {})
        if status == 401:
            load.sign_ins_again += 1
            await self.sign_in()
            return
        if body is not None:
            answers = body.get("answers", [])
            self.note_tries(items, now, {a.get("client_id"): a.get("outcome") for a in answers})
            self.take_answers(items, answers)

    def note_tries(self, items: Sequence[Tap], sent: float, outcomes: Mapping[str, Any]) -> None:
        """One history record per tap of a sync: sent when, answered what (error: nothing)."""
        answered = time.monotonic()
        for item in items:
            self.load.note({
                "kind": "tap", "id": item.client_id, "client": f"drill{self.n}", "sent": sent,
                "answered": answered, "outcome": str(outcomes.get(item.client_id) or "error"),
            })  # fmt: skip

    def take_answers(self, items: Sequence[Tap], answers: Sequence[Any]) -> None:
        """Each answered tap leaves the queue, in order, up to the first try_again."""
        answered = time.monotonic()
        for answer in answers:
            found = next((i for i in items if i.client_id == answer.get("client_id")), None)
            if found is None:
                continue
            item = found
            outcome = answer.get("outcome")
            if outcome == "try_again":
                break
            item.outcome = outcome
            if outcome in ("saved", "duplicate"):
                item.saved = answered
            else:
                self.load.refusals.append(f"{item.client_id}: {answer.get('reason')}")
            self.queue.remove(item)


async def scorer(
    load: Load, base: str, n: int, unit: str, think_s: float, rng: random.Random
) -> None:
    """Taps at a scorer's pace; every tap goes into the device's queue first, and the queue is
    sent in order (/score/api/sync, as the console does) until each is answered."""
    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(base_url=base, cookie_jar=jar, timeout=timeout) as http:
        device = Device(load, http, n, unit)
        while not await device.sign_in():
            if load.stopping.is_set():
                return
            await asyncio.sleep(1)
        await tap_until_stopped(device, think_s, rng)
        await send_what_is_queued(device)


async def tap_until_stopped(device: Device, think_s: float, rng: random.Random) -> None:
    """Taps at random intervals around `think_s`, syncing the queue between, until the load
    stops."""
    queue = device.queue
    device.tap({"kind": "start_period"})
    next_tap = time.monotonic() + rng.expovariate(1 / think_s)
    while not device.load.stopping.is_set():
        if time.monotonic() >= next_tap:
            device.tap({"kind": "goal", "side": rng.choice((1, 2)), "fields": {"player": "9"}})
            next_tap = time.monotonic() + rng.expovariate(1 / think_s)
        if queue:
            before = len(queue)
            await device.flush()
            if len(queue) >= before and queue:
                # Nothing got through: the console tries again a second later.
                await asyncio.sleep(1.0)
                continue
        await asyncio.sleep(max(0.0, min(0.05, next_tap - time.monotonic())))


async def send_what_is_queued(device: Device) -> None:
    """Load over: what is still queued on the device is sent until it is answered."""
    queue = device.queue
    deadline = time.monotonic() + 90
    while queue and time.monotonic() < deadline:
        before = len(queue)
        await device.flush()
        if len(queue) >= before:
            await asyncio.sleep(1.0)


async def reader(load: Load, base: str, paths: Sequence[str]) -> None:
    """The public API read over and over with ETags; every answer but 200/304 counts."""
    etags: dict[str, str] = {}
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(base_url=base, timeout=timeout) as http:
        i = 0
        while not load.stopping.is_set():
            path = paths[i % len(paths)]
            i += 1
            headers = {"X-API-Key": READER_KEY}
            if path in etags:
                headers["If-None-Match"] = etags[path]
            case, sent = load.current, time.monotonic()
            try:
                async with http.get(path, headers=headers) as response:
                    await response.read()
                    status = str(response.status)
                    if response.status == 200 and "ETag" in response.headers:
                        etags[path] = response.headers["ETag"]
            except (aiohttp.ClientError, TimeoutError):
                status = "connection error"
            load.answers[case][status] += 1
            load.note({
                "kind": "read", "client": "fan", "path": path, "sent": sent,
                "status": int(status) if status.isdigit() else 0,
            })  # fmt: skip
            if status not in ("200", "304"):
                load.misses.append((time.monotonic(), "api", status))
            await asyncio.sleep(0.05)


def receivers_app(load: Load) -> web.Application:
    """The webhook client's side: keeps the newest body of each feed."""

    async def hook(request: web.Request) -> web.Response:
        load.hook_ids[request.headers.get("webhook-id", "")] += 1
        data = json.loads(await request.read())["data"]
        key = (request.match_info["client"], int(data["feed"]))
        if data["version"] >= load.hooks.get(key, {}).get("version", -1):
            load.hooks[key] = data
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks/{client}", hook)
    return app


# --- the database's state, waited for a look at a time (so Ctrl-C stops a wait at once) ----


# --- the database's state, waited for a look at a time (so Ctrl-C stops a wait at once) ----


async def until(what: str, within: float, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = await asyncio.to_thread(check)
        if found:
            return found
        if time.monotonic() > deadline:
            raise BenchError(f"{what} within {within:.0f} s")
        await asyncio.sleep(0.2)


async def run_in_flight(url: str, scout: str, within: float) -> tuple[str | None, str | None]:
    """A Scout schedule run being applied, as soon as one is: (our run id, None). When the
    replay's own runs are not in flight, the simulator is asked for one (a full build, its
    doorbell rung as usual); if none is applied within, (None, the Scout run id asked for)."""
    deadline = time.monotonic() + within
    asked: str | None = None
    ask_at = time.monotonic() + 3
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, asyncpg.PostgresError, TimeoutError):
                rows = await fetch(
                    url,
                    "SELECT r.id::text FROM integration_run r "
                    "JOIN integration i ON i.id = r.integration_id "
                    "WHERE i.code = $1 AND r.status = ANY($2::text[]) "
                    "AND (r.batch_total IS NULL OR r.batch_done < r.batch_total) "
                    "ORDER BY r.received_at DESC LIMIT 1",
                    SCHEDULE,
                    list(IN_FLIGHT),
                )
                if rows:
                    return str(rows[0]["id"]), None
            if asked is None and time.monotonic() >= ask_at:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, KeyError, ValueError):
                    async with http.post(
                        f"{scout}/control/runs", json={"job": "schedule"}
                    ) as response:
                        asked = str((await response.json())["run"]["id"])
                        say(f"asked the Scout simulator for run {asked}")
            await asyncio.sleep(0.1)
    return None, asked


async def job_status(url: str, scout_run_id: str) -> str:
    """What became of a Scout run that never got in flight: its pull job's status."""
    rows = await fetch(
        url,
        "SELECT j.status, r.status AS run FROM integration_job j "
        "LEFT JOIN integration_run r ON r.id = j.run_id "
        "WHERE j.scout_run_id = $1 AND j.kind = 'pull' ORDER BY j.id DESC LIMIT 1",
        scout_run_id,
    )
    if not rows:
        return "not_queued"
    return str(rows[0]["run"]) if rows[0]["run"] else f"job_{rows[0]['status']}"


async def steady(load: Load, at_least: float) -> None:
    """Every scorer has had taps saved, and the load ran for `at_least` seconds."""
    began = time.monotonic()
    while True:
        scorers = {t.client_id.split(":")[0] for t in load.taps if t.saved is not None}
        if time.monotonic() - began >= at_least and len(scorers) >= len(
            {t.client_id.split(":")[0] for t in load.taps}
        ):
            return
        await asyncio.sleep(0.2)


# --- the checks --------------------------------------------------------------------------------


async def run_status(url: str, run_id: str) -> str:
    rows = await fetch(url, "SELECT status FROM integration_run WHERE id = $1::uuid", run_id)
    return str(rows[0]["status"]) if rows else "missing"


def _same_instant(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str):
        a = datetime.fromisoformat(a)
    if isinstance(b, str):
        b = datetime.fromisoformat(b)
    return bool(a == b)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


async def delivery_misses(url: str, sftp: Path, load: Load) -> dict[str, list[str]]:
    """What the clients hold that is not what the database holds, by case: (unit or NOC)
    keys whose newest saved change no delivered file or webhook carries."""
    conn = await connect(url)
    try:
        units = await conn.fetch(
            "SELECT u.id, u.code, u.name, u.start_at, u.venue, u.status, "
            "       coalesce(extract(epoch FROM (SELECT max(d.saved_at) FROM domain_event d "
            "                 WHERE d.unit_id = u.id)), 0)::float8 AS changed, "
            "       coalesce((SELECT jsonb_agg(jsonb_build_array(s.sort_order, s.score, s.result,"
            "                 s.rank, s.medal) ORDER BY s.sort_order) FROM unit_competitor s "
            "                 WHERE s.unit_id = u.id), '[]') AS sides "
            "  FROM unit u JOIN event e ON e.id = u.event_id WHERE e.code = $1",
            EVENT,
        )
        medals = await conn.fetch(
            "SELECT m.noc, m.gold, m.silver, m.bronze, m.total, m.rank, "
            "       coalesce(extract(epoch FROM (SELECT max(d.saved_at) FROM domain_event d "
            "                 WHERE d.subject_id = m.id)), 0)::float8 AS changed "
            "  FROM medal_row m JOIN event e ON e.id = m.event_id "
            " WHERE e.code = $1 AND m.discipline_id IS NULL "
            " ORDER BY m.rank NULLS LAST, m.gold DESC, m.silver DESC, m.bronze DESC, m.noc",
            EVENT,
        )
        dailyhunt_feed = await conn.fetchval(
            "SELECT f.id FROM client_feed f JOIN client c ON c.id = f.client_id "
            "WHERE c.code = 'dailyhunt' AND f.kind = 'medals'"
        )
    finally:
        await conn.close()
    missed: dict[str, list[str]] = {n: [] for n in load.phases}

    def miss(what: str, changed: float) -> None:
        missed[load.phase_at(changed)].append(what)

    def document(pattern: str) -> Any:
        found = sorted((sftp / "ndtv").glob(pattern))
        if not found:
            return None
        text = found[0].read_text()
        return json.loads(text) if found[0].suffix == ".json" else text

    results = document("*_DT_RESULT.json")
    schedule = document("*_DT_SCHEDULE.json")
    by_code = {u["code"]: u for u in (results or {}).get("units", [])}
    planned = {u["code"]: u for u in (schedule or {}).get("units", [])}
    for unit in units:
        sides = json.loads(unit["sides"])
        has_results = unit["status"] in RESULT_STATUSES or any(s[1] or s[2] for s in sides)
        if has_results:
            got = by_code.get(unit["code"])
            want = [[s[0], _text(s[1]), _text(s[2]), _text(s[3]), _text(s[4])] for s in sides]
            have = (
                [
                    [s["order"], *(_text(s[k]) for k in ("score", "result", "rank", "medal"))]
                    for s in got["sides"]
                ]
                if got
                else None
            )
            if got is None or got["status"] != unit["status"] or have != want:
                miss(f"results {unit['code']}", unit["changed"])
        got = planned.get(unit["code"])
        if (
            got is None
            or got["status"] != unit["status"]
            or got["venue"] != unit["venue"]
            or not _same_instant(got["start_at"], unit["start_at"])
        ):
            miss(f"schedule {unit['code']}", unit["changed"])
    table = document("*_DT_MEDALS.csv")
    have_rows = {r["noc"]: r for r in csv.DictReader(io.StringIO(table or ""))}
    for row in medals:
        line = have_rows.get(row["noc"])
        counts = ("rank", "gold", "silver", "bronze", "total")
        if line is None or [line[k] for k in counts] != [_text(row[k]) for k in counts]:
            miss(f"medals csv {row['noc']}", row["changed"])
    hook = load.hooks.get(("dailyhunt", int(dailyhunt_feed or 0)), {})
    top = (hook.get("document") or {}).get("medals", [])
    for n, row in enumerate(medals[:5]):
        want = [row[k] for k in ("rank", "noc", "gold", "silver", "bronze", "total")]
        got = top[n] if n < len(top) else {}
        if [got.get(k) for k in ("rank", "noc", "gold", "silver", "bronze", "total")] != want:
            miss(f"medals webhook {row['noc']}", row["changed"])
    return missed


async def diagnosis(url: str) -> list[str]:
    """How delivery and imports stand at the end, for the report when something was missed."""
    lines = []
    cursor = await fetch(
        url,
        "SELECT c.last_id, (SELECT max(id) FROM domain_event) AS outbox_top, "
        "       round(extract(epoch FROM now() - c.updated_at)) AS idle_s "
        "  FROM delivery_cursor c",
    )
    lines.append(f"delivery cursor: {[dict(r) for r in cursor]}")
    for row in await fetch(
        url,
        "SELECT c.code, c.leased_by, round(extract(epoch FROM c.lease_until - now())) AS lease_s, "
        "       f.kind, f.format, f.marks, f.built_marks, f.wanted_id, f.built_id, f.version, "
        "       f.delivered_version, round(extract(epoch FROM now() - f.delivered_at)) AS ago_s, "
        "       round(extract(epoch FROM f.due_at - now())) AS due_s "
        "  FROM client_feed f JOIN client c ON c.id = f.client_id ORDER BY c.code, f.id",
    ):
        lines.append(f"feed: {dict(row)}")
    sends = await fetch(
        url,
        "SELECT outcome, count(*) AS n, round(extract(epoch FROM now() - max(finished_at))) "
        "AS last_s FROM delivery_attempt GROUP BY 1",
    )
    lines.append(f"delivery sends: {[dict(r) for r in sends]}")
    jobs = await fetch(
        url,
        "SELECT kind, via, status, count(*) AS n, "
        "       round(extract(epoch FROM now() - min(created_at))) AS oldest_s "
        "  FROM integration_job GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    )
    lines.append(f"import jobs: {[dict(r) for r in jobs]}")
    runs = await fetch(
        url,
        "SELECT status, count(*) AS n, sum(batch_done) AS batches_done, "
        "       sum(batch_total) AS batches FROM integration_run GROUP BY 1",
    )
    lines.append(f"import runs: {[dict(r) for r in runs]}")
    return lines


async def deliveries_settled(
    url: str, sftp: Path, load: Load, began: float, settle_seconds: float
) -> dict[str, list[str]]:
    """delivery_misses, asked again every 2 s until none is left or `settle_seconds` have
    passed since `began` (monotonic); what is still missed is said, by case."""
    missed = await delivery_misses(url, sftp, load)
    while any(missed.values()) and time.monotonic() - began < settle_seconds:
        await asyncio.sleep(2)
        missed = await delivery_misses(url, sftp, load)
    for name, items in missed.items():
        if items:
            say(f"{name}: not delivered: {items[:8]}{' ...' if len(items) > 8 else ''}")
    return missed


async def say_diagnosis(url: str, load: Load) -> None:
    """The end-of-run diagnosis, then the taps refused and the scorers signed in again."""
    for line in await diagnosis(url):
        say(line)
    if load.refusals:
        say(f"refused taps: {len(load.refusals)}, first: {load.refusals[0]}")
    if load.sign_ins_again:
        say(f"scorers signed in again {load.sign_ins_again} times (answered 401)")


# --- one run -----------------------------------------------------------------------------------


async def first_save_after(load: Load, since: float, within: float) -> float | None:
    """When a tap first sent after `since` (monotonic) was answered saved; None if none was
    within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        saved = [
            t.saved
            for t in load.taps
            if t.saved is not None and t.sent_first is not None and t.sent_first > since
        ]
        if saved:
            return min(saved)
        await asyncio.sleep(0.1)
    return None


# --- the checks --------------------------------------------------------------------------------


async def tap_checks(
    url: str, load: Load, outages: Mapping[str, tuple[float, float]] | None = None
) -> dict[str, dict[str, float]]:
    """Per phase: taps answered saved and not stored, stored twice, re-sent; the tap latency
    outside the phase's outage (monotonic start and end, when given)."""
    rows = await fetch(url, "SELECT command_id FROM match_action WHERE command_id LIKE 'drill%'")
    stored = {r["command_id"] for r in rows}
    twice = await fetch(
        url,
        "SELECT command_id FROM ("
        "  SELECT command_id, count(*) AS n FROM match_action "
        "   WHERE command_id LIKE 'drill%' GROUP BY 1"
        "  UNION ALL "
        "  SELECT command_id, count(*) FROM timeline_item "
        "   WHERE command_id LIKE 'drill%' GROUP BY 1) c WHERE n > 1",
    )
    doubled = {r["command_id"] for r in twice}
    out: dict[str, dict[str, float]] = {}
    for name in load.phases:
        taps = [t for t in load.taps if t.case == name]
        saved = [t for t in taps if t.saved is not None]
        lost = [t.client_id for t in saved if t.client_id not in stored]
        if lost:
            say(f"{name}: taps answered saved, not in match_action: {lost[:10]}")
        outage = (outages or {}).get(name, (float("inf"), float("inf")))
        calm = [
            (t.saved - t.tapped) * 1000
            for t in saved
            if t.saved is not None and (t.saved < outage[0] or t.tapped > outage[1])
        ]
        out[name] = {
            "acked_lost": len(lost),
            "duplicates": len({t.client_id for t in taps} & doubled),
            "taps": len(taps),
            "taps_saved": len(saved),
            "taps_stored_unanswered": len(
                [t for t in taps if t.saved is None and t.client_id in stored]
            ),
            "scorer_retries": sum(max(0, t.sends - 1) for t in taps),
            "taps_resent": sum(t.sends > 1 for t in taps),
            "tap_p50_ms": percentile(calm, 50),
            "tap_p99_ms": percentile(calm, 99),
        }
    return out


async def import_checks(url: str, load: Load) -> dict[str, int]:
    """Batches applied more than once, per phase (a run counts for the phase it was received
    in)."""
    runs = await fetch(
        url,
        "SELECT r.id::text, extract(epoch FROM r.received_at)::float8 AS received, "
        "       r.batch_done, r.batch_total, r.status FROM integration_run r",
    )
    twice = await fetch(
        url,
        "SELECT split_part(command_id, ':', 1) AS run_id, count(*) AS n FROM timeline_item "
        " WHERE command_id ~ '^[0-9a-f-]{36}:[0-9]+$' GROUP BY command_id HAVING count(*) > 1",
    )
    doubled = Counter(str(r["run_id"]) for r in twice)
    out = dict.fromkeys(load.phases, 0)
    for run in runs:
        extra = doubled.get(run["id"], 0)
        if run["batch_total"] is not None and run["batch_done"] > run["batch_total"]:
            extra += run["batch_done"] - run["batch_total"]
        if extra:
            say(f"run {run['id']}: {extra} batches applied twice ({dict(run)})")
        out[load.phase_at(run["received"])] += extra
    return out


# --- figures -----------------------------------------------------------------------------------


def show(name: str, value: float | str) -> str:
    if isinstance(value, str):
        return f"{name}: {value}"
    if isinstance(value, int) or float(value).is_integer():
        return f"{name}: {int(value)}"
    return f"{name}: {value:.1f}" if name.endswith("_s") else f"{name}: {value:.0f}"


def median(values: list[float | str]) -> float | str:
    words = [v for v in values if isinstance(v, str)]
    if words:
        return Counter(words).most_common(1)[0][0]
    numbers = [float(v) for v in values if not isinstance(v, str)]
    return statistics.median(numbers)


def print_figures(runs: Sequence[Mapping[str, float | str]]) -> None:
    """Each run's figures when there are several, then (as the last lines) their medians."""
    print()
    if len(runs) > 1:
        for n, figures in enumerate(runs, start=1):
            print(f"# run {n}")
            for name, value in figures.items():
                print(show(f"run{n}_{name}", value))
        print("# median of the runs")
    for name in runs[0]:
        print(show(name, median([r[name] for r in runs])))


def add_load_options(
    parser: argparse.ArgumentParser, *, seconds: float, seconds_help: str, steady: float
) -> None:
    """The options every drill's load takes (the drill adds its own after these)."""
    parser.add_argument("--runs", type=int, default=1, help="whole drills, one after another")
    parser.add_argument("--seconds", type=float, default=seconds, help=seconds_help)
    parser.add_argument("--scorers", type=int, default=20)
    parser.add_argument("--readers", type=int, default=4, help="public API readers at once")
    parser.add_argument("--think-ms", type=float, default=1000.0, help="mean pause between taps")
    parser.add_argument(
        "--steady-seconds", type=float, default=steady, help="load before the first fault"
    )
    parser.add_argument(
        "--run-wait", type=float, default=25.0, help="longest wait for a Scout run in flight"
    )
    parser.add_argument(
        "--replay-seconds-per-hour", type=float, default=20.0, help="the Scout replay's clock"
    )


def add_run_options(
    parser: argparse.ArgumentParser, *, settle: float, seed: int, data_dir: Path
) -> None:
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=settle,
        help="longest wait after the load for runs and deliveries to settle",
    )
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=data_dir,
        help="removed at the start of each run; logs under logs/ (%(default)s)",
    )


def run_drills(
    name: str,
    args: argparse.Namespace,
    one_run: Callable[[argparse.Namespace, int], Coroutine[Any, Any, dict[str, float | str]]],
) -> int:
    """Each run in turn, then the figures (each run's, and medians); 130 on Ctrl-C."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    runs: list[dict[str, float | str]] = []
    try:
        for n in range(1, args.runs + 1):
            say(f"--- run {n} of {args.runs}")
            runs.append(asyncio.run(one_run(args, n)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"{name}: stopped; everything it started is stopped", flush=True)
        return 130
    except BenchError as exc:
        print(f"{name}: {exc}", file=sys.stderr, flush=True)
        return 1
    print_figures(runs)
    return 0


def start_load(
    load: Load, base: str, units: Sequence[tuple[str, str]], args: argparse.Namespace
) -> list[asyncio.Task[None]]:
    """A scorer on each unit and `--readers` public readers, each a task (cancel to stop)."""
    rng = random.Random(args.seed)
    paths = [
        "/v1/events",
        f"/v1/events/{EVENT}/schedule",
        f"/v1/events/{EVENT}/units/{units[0][1]}",
        f"/v1/events/{EVENT}/medals",
    ]
    tasks = [
        asyncio.create_task(
            scorer(load, base, n, unit, args.think_ms / 1000, random.Random(rng.random()))
        )
        for n, (unit, _) in enumerate(units)
    ]
    tasks += [
        asyncio.create_task(reader(load, base, paths[n:] + paths[:n])) for n in range(args.readers)
    ]
    return tasks
