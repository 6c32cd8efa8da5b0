"""The failover drill: kill -9 the database leader under load and count what was lost.

A Patroni pair (synchronous standby), Redis and every service that matters, each in its own
process (command, scoring, imports, delivery, the gateway, the Scout simulator replaying a Games
day and ringing the doorbell, the demo clients' SFTP sink and a webhook receiver). Under load —
20 scorers tapping through the gateway's scorer routes as the console does (a tap not saved stays
queued and is sent again with the same client id), a few public API readers, a Scout run in
flight — the leader is killed (Patroni and PostgreSQL together); the standby takes over, the old
leader rejoins. Then a shorter second case: the leader's postmaster alone is killed and Patroni
restarts it in place. Afterwards everything is checked against the primary: taps answered saved
and not there, actions or import batches applied twice, changes no client got. A drill, not a
test: it prints figures (`name: value`, the second case's prefixed `restart_`) and exits 0 when
it ran.
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
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from bench._common import BenchError, free_port, percentile, say, wait_for_port
from omnium_db import apply_migrations

ROOT = Path(__file__).resolve().parents[1]
EVENT = "AG2026"
TOKEN = "drill-grpc-token"
READER_KEY = "drill-reader-key-0123"
PASSWORD = "drill password 1"
SCHEDULE = "scout-schedule"
# Services the drill runs; the admin console and the provider pull play no part in a failover.
SERVICES = ("command", "scoring", "imports", "delivery", "gateway", "scout-sim", "client-sinks")
RESULT_STATUSES = ("RUNNING", "INTERRUPTED", "UNOFFICIAL", "OFFICIAL", "PROTESTED")
IN_FLIGHT = ("received", "applying")
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


@dataclass
class Tap:
    client_id: str
    case: str
    body: dict[str, Any]
    tapped: float
    sent_first: float | None = None
    sends: int = 0
    saved: float | None = None  # monotonic, when the answer said saved (or duplicate)
    outcome: str = "queued"


@dataclass
class Drill:
    """What the load saw, shared by the scorers, the readers and the fault script."""

    cases: dict[str, Case] = field(default_factory=lambda: {n: Case(n) for n in CASES})
    current: str = CASES[0]
    taps: list[Tap] = field(default_factory=list)
    answers: dict[str, Counter[str]] = field(
        default_factory=lambda: {n: Counter[str]() for n in CASES}
    )
    syncs: dict[str, Counter[str]] = field(
        default_factory=lambda: {n: Counter[str]() for n in CASES}
    )
    sign_ins_again: int = 0
    refusals: list[str] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    hooks: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)

    @property
    def case(self) -> Case:
        return self.cases[self.current]


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Service:
    name: str
    proc: asyncio.subprocess.Process
    log: Path


async def start_service(
    name: str, module: str, args: Sequence[str], env: dict[str, str], logs: Path
) -> Service:
    logfile = logs / f"{name}.log"
    with logfile.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, cwd=ROOT, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
            # Own group: Ctrl-C reaches the drill only, which stops these in its own order.
            process_group=0,
        )  # fmt: skip
    return Service(name, proc, logfile)


async def stop_service(service: Service) -> None:
    if service.proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(service.proc.wait(), 20)
    except TimeoutError:
        say(f"{service.name} did not stop within 20 s of SIGTERM; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.proc.pid, signal.SIGKILL)
        await service.proc.wait()


def noisy_lines(logfile: Path) -> list[str]:
    words = ("ERROR", "Traceback", "CRITICAL", "incident")
    text = logfile.read_text(errors="replace") if logfile.exists() else ""
    return [line for line in text.splitlines() if any(w in line for w in words)]


# --- set-up ------------------------------------------------------------------------------------


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
    from omnium_accounts import hash_password

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
            unit = await conn.fetchval(
                "INSERT INTO unit (event_id, discipline_id, code, name, start_at) "
                "VALUES ($1, $2, $3, $4, now()) RETURNING id::text",
                event, discipline, code, f"Drill match {n + 1}",
            )  # fmt: skip
            await conn.execute(
                "INSERT INTO unit_competitor (unit_id, sort_order, competitor_id) "
                "VALUES ($1, 1, $2), ($1, 2, $3)",
                unit,
                *teams,
            )
            await conn.execute(
                "INSERT INTO account (login, name, role, password_hash) "
                "VALUES ($1, $2, 'scorer', $3)",
                f"scorer{n}",
                f"Scorer {n}",
                hashed,
            )
            units.append((unit, code))
        return units
    finally:
        await conn.close()


# --- the load ----------------------------------------------------------------------------------


async def scorer(
    drill: Drill, base: str, n: int, unit: str, think_s: float, rng: random.Random
) -> None:
    """Taps at a scorer's pace; every tap goes into the device's queue first, and the queue is
    sent in order (/score/api/sync, as the console does) until each is answered."""
    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=30)
    queue: list[Tap] = []
    numbers = iter(range(1_000_000))
    async with aiohttp.ClientSession(base_url=base, cookie_jar=jar, timeout=timeout) as http:
        csrf = ""

        async def sign_in() -> bool:
            nonlocal csrf
            try:
                async with http.post(
                    "/score/api/sign-in", json={"login": f"scorer{n}", "password": PASSWORD}
                ) as response:
                    if response.status != 200:
                        return False
                    csrf = (await response.json())["csrf"]
                    return True
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return False

        while not await sign_in():
            if drill.stopping.is_set():
                return
            await asyncio.sleep(1)

        def tap(action: dict[str, Any]) -> None:
            item = Tap(f"drill{n}:{next(numbers)}", drill.current, action, time.monotonic())
            item.body = {
                "client_id": item.client_id,
                "unit_id": unit,
                "client_at": time.time() * 1000,
                **action,
            }
            drill.taps.append(item)
            queue.append(item)

        async def flush() -> None:
            """One sync of the queue; what is not answered stays queued for the next."""
            items = queue[:100]
            now = time.monotonic()
            for item in items:
                item.sends += 1
                item.sent_first = item.sent_first or now
            case = drill.current
            try:
                async with http.post(
                    "/score/api/sync",
                    json={"actions": [item.body for item in items]},
                    headers={"X-CSRF-Token": csrf},
                ) as response:
                    status = response.status
                    body = await response.json(content_type=None) if status == 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError):
                drill.syncs[case]["connection error"] += 1
                return
            drill.syncs[case][str(status)] += 1
            if status == 401:
                drill.sign_ins_again += 1
                await sign_in()
                return
            if body is None:
                return
            answered = time.monotonic()
            for answer in body.get("answers", []):
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
                    drill.refusals.append(f"{item.client_id}: {answer.get('reason')}")
                queue.remove(item)

        tap({"kind": "start_period"})
        next_tap = time.monotonic() + rng.expovariate(1 / think_s)
        while not drill.stopping.is_set():
            if time.monotonic() >= next_tap:
                tap({"kind": "goal", "side": rng.choice((1, 2)), "fields": {"player": "9"}})
                next_tap = time.monotonic() + rng.expovariate(1 / think_s)
            if queue:
                before = len(queue)
                await flush()
                if len(queue) >= before and queue:
                    # Nothing got through: the console tries again a second later.
                    await asyncio.sleep(1.0)
                    continue
            await asyncio.sleep(max(0.0, min(0.05, next_tap - time.monotonic())))
        # Load over: what is still queued on the device is sent until it is answered.
        deadline = time.monotonic() + 90
        while queue and time.monotonic() < deadline:
            before = len(queue)
            await flush()
            if len(queue) >= before:
                await asyncio.sleep(1.0)


async def reader(drill: Drill, base: str, paths: Sequence[str]) -> None:
    """The public API read over and over with ETags; every answer but 200/304 counts."""
    etags: dict[str, str] = {}
    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(base_url=base, timeout=timeout) as http:
        i = 0
        while not drill.stopping.is_set():
            path = paths[i % len(paths)]
            i += 1
            headers = {"X-API-Key": READER_KEY}
            if path in etags:
                headers["If-None-Match"] = etags[path]
            case = drill.current
            try:
                async with http.get(path, headers=headers) as response:
                    await response.read()
                    status = str(response.status)
                    if response.status == 200 and "ETag" in response.headers:
                        etags[path] = response.headers["ETag"]
            except (aiohttp.ClientError, TimeoutError):
                status = "connection error"
            drill.answers[case][status] += 1
            await asyncio.sleep(0.05)


def receivers_app(drill: Drill) -> web.Application:
    """The webhook client's side: keeps the newest body of each feed."""

    async def hook(request: web.Request) -> web.Response:
        data = json.loads(await request.read())["data"]
        key = (request.match_info["client"], int(data["feed"]))
        if data["version"] >= drill.hooks.get(key, {}).get("version", -1):
            drill.hooks[key] = data
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks/{client}", hook)
    return app


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


# --- the faults --------------------------------------------------------------------------------


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


async def writes_back(drill: Drill, case: Case, within: float) -> None:
    """Until a tap first sent after the kill is answered saved."""
    assert case.kill is not None
    kill = case.kill
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        saved = [
            t.saved
            for t in drill.taps
            if t.saved is not None and t.sent_first is not None and t.sent_first > kill
        ]
        if saved:
            case.outage_end = min(saved)
            return
        await asyncio.sleep(0.1)
    say(f"{case.name}: no tap was saved within {within:.0f} s of the kill")


async def steady(drill: Drill, at_least: float) -> None:
    """Every scorer has had taps saved, and the load ran for `at_least` seconds."""
    began = time.monotonic()
    while True:
        scorers = {t.client_id.split(":")[0] for t in drill.taps if t.saved is not None}
        if time.monotonic() - began >= at_least and len(scorers) >= len(
            {t.client_id.split(":")[0] for t in drill.taps}
        ):
            return
        await asyncio.sleep(0.2)


# --- the checks --------------------------------------------------------------------------------


async def tap_checks(url: str, drill: Drill) -> dict[str, dict[str, float]]:
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
    for name in CASES:
        case = drill.cases[name]
        taps = [t for t in drill.taps if t.case == name]
        saved = [t for t in taps if t.saved is not None]
        lost = [t.client_id for t in saved if t.client_id not in stored]
        if lost:
            say(f"{name}: taps answered saved, not in match_action: {lost[:10]}")
        outage = (case.kill or 0.0, case.outage_end or float("inf"))
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
            "tap_p50_ms": percentile(calm, 50),
            "tap_p99_ms": percentile(calm, 99),
        }
    return out


async def import_checks(url: str, drill: Drill) -> dict[str, int]:
    """Batches applied more than once, per case (runs received after the second case began
    count for it)."""
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
    out = dict.fromkeys(CASES, 0)
    second = drill.cases["restart"].began_wall or float("inf")
    for run in runs:
        name = "restart" if run["received"] >= second else "failover"
        extra = doubled.get(run["id"], 0)
        if run["batch_total"] is not None and run["batch_done"] > run["batch_total"]:
            extra += run["batch_done"] - run["batch_total"]
        if extra:
            say(f"run {run['id']}: {extra} batches applied twice ({dict(run)})")
        out[name] += extra
    return out


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


async def delivery_misses(url: str, sftp: Path, drill: Drill) -> dict[str, list[str]]:
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
    second = drill.cases["restart"].began_wall or float("inf")
    missed: dict[str, list[str]] = {n: [] for n in CASES}

    def miss(what: str, changed: float) -> None:
        missed["restart" if changed >= second else "failover"].append(what)

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
    hook = drill.hooks.get(("dailyhunt", int(dailyhunt_feed or 0)), {})
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


# --- one run -----------------------------------------------------------------------------------


def _env(settings_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNIUM_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env | settings_env


@contextlib.asynccontextmanager
async def database(data_dir: Path) -> AsyncIterator[Any]:
    from omnium_devstack.ha import PatroniCluster

    cluster = PatroniCluster(data_dir / "ha", fsync=True)
    say("database: starting a Patroni pair (synchronous standby) and etcd")
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
        with contextlib.suppress(OSError):
            shutil.copy(cluster.etcd.logfile, logs / "etcd.log")


async def one_run(args: argparse.Namespace, run_no: int) -> dict[str, float | str]:
    from omnium_devstack.games_day import services, set_up_demo
    from omnium_devstack.stack import RedisServer
    from omnium_settings import Settings

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
    conn = await connect(url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
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
        "OMNIUM_GRPC_TOKENS": TOKEN,
        "OMNIUM_GRPC_TOKEN": TOKEN,
        "OMNIUM_COMMAND_ADDRESS": f"127.0.0.1:{ports['command']}",
        "OMNIUM_SCORING_ADDRESS": f"127.0.0.1:{ports['scoring']}",
        "OMNIUM_IMPORTS_ADDRESS": f"127.0.0.1:{ports['imports']}",
        "OMNIUM_GATEWAY_API_KEYS": f"drill:{READER_KEY}:10000:10000",
        "OMNIUM_LOG_LEVEL": "INFO",
    }
    settings = settings_type.from_env(values)
    env = _env(values)
    secret = "drill-scout-secret-" + os.urandom(6).hex()
    (data_dir / "scout-secret").write_text(secret + "\n")
    from omnium_delivery.sinks import ensure_keys

    ensure_keys(data_dir / "sftp-keys")
    (data_dir / "webhook-secret").write_text("whsec_ZHJpbGwtd2ViaG9vay1zZWNyZXQtMDEyMzQ1Njc4OQ==\n")
    # The webhook client is this process (it keeps each body); the sink takes the SFTP files.
    sink_settings = settings.replace(webhook_sink_port=free_port())
    specs = {s.name: s for s in services(settings, data_dir / "scout-secret")}
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
            args_ = list(spec.args)
            if name == "scout-sim":
                args_ += ["--replay-seconds-per-hour", str(args.replay_seconds_per_hour)]
            running.append(await start_service(name, spec.module, args_, env, logs))
        for service, name in zip(running, SERVICES, strict=True):
            from omnium_devstack.launcher import host_port

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
    rng = random.Random(args.seed)
    paths = [
        "/v1/events",
        f"/v1/events/{EVENT}/schedule",
        f"/v1/events/{EVENT}/units/{units[0][1]}",
        f"/v1/events/{EVENT}/medals",
    ]
    load = [
        asyncio.create_task(
            scorer(drill, base, n, unit, args.think_ms / 1000, random.Random(rng.random()))
        )
        for n, (unit, _) in enumerate(units)
    ]
    load += [
        asyncio.create_task(reader(drill, base, paths[n:] + paths[:n])) for n in range(args.readers)
    ]
    began = time.monotonic()
    failover, restart = drill.cases["failover"], drill.cases["restart"]
    failover.began, failover.began_wall = began, time.time()
    try:
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

        drill.current = "restart"
        restart.began, restart.began_wall = time.monotonic(), time.time()
        await steady(drill, args.steady_seconds / 2)
        restart.run_id, restart.asked_run = await run_in_flight(url, scout, args.run_wait)
        leader = cluster.leader_name()
        say(f"restart: kill -9 the postmaster of {leader}, run in flight {restart.run_id}")
        restart.kill = time.monotonic()
        await asyncio.to_thread(cluster.kill_postmaster, leader)
        await writes_back(drill, restart, 120)
        now_leader = await wait_leader(cluster, 120)
        restart.leader = time.monotonic()
        other = next(n.name for n in cluster.nodes if n.name != now_leader)
        await wait_streaming(cluster, other, 120)
        await wait_sync_standby(cluster, 60)
        restart.rejoin_s = time.monotonic() - restart.kill
        say(
            f"restart: {now_leader} leads, {other} streams, {restart.rejoin_s:.1f} s after the kill"
        )
        await asyncio.sleep(args.seconds / 2)
    except BaseException:
        # Stopped (Ctrl-C) or failed: no waiting for queues, straight to stopping everything.
        for task in load:
            task.cancel()
        await asyncio.gather(*load, return_exceptions=True)
        raise
    drill.stopping.set()
    say("load stopped; the scorers send what is still queued")
    await asyncio.gather(*load, return_exceptions=True)
    return await _settle_and_check(args, drill, url, data_dir)


async def _settle_and_check(
    args: argparse.Namespace, drill: Drill, url: str, data_dir: Path
) -> dict[str, float | str]:
    began = time.monotonic()
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
    missed = await delivery_misses(url, data_dir / "sftp", drill)
    while any(missed.values()) and time.monotonic() - began < args.settle_seconds:
        await asyncio.sleep(2)
        missed = await delivery_misses(url, data_dir / "sftp", drill)
    for name, items in missed.items():
        if items:
            say(f"{name}: not delivered: {items[:8]}{' ...' if len(items) > 8 else ''}")
    taps = await tap_checks(url, drill)
    twice = await import_checks(url, drill)
    for line in await diagnosis(url):
        say(line)
    if drill.refusals:
        say(f"refused taps: {len(drill.refusals)}, first: {drill.refusals[0]}")
    if drill.sign_ins_again:
        say(f"scorers signed in again {drill.sign_ins_again} times (answered 401)")
    figures: dict[str, float | str] = {}
    for name in CASES:
        case = drill.cases[name]
        prefix = "failover_" if name == "failover" else "restart_"
        answers = drill.answers[name]
        errors = sum(n for status, n in answers.items() if status not in ("200", "304"))
        say(f"{name}: public API answers {dict(answers)}")
        say(f"{name}: scorer sync answers (HTTP) {dict(drill.syncs[name])}")
        say(
            f"{name}: taps saved without an answer saying so {taps[name]['taps_stored_unanswered']}"
        )
        gap = (
            case.outage_end - case.kill
            if case.outage_end is not None and case.kill is not None
            else float("nan")
        )
        figures |= {
            f"{prefix}acked_lost": taps[name]["acked_lost"],
            f"{prefix}duplicates": taps[name]["duplicates"],
            f"{prefix}write_gap_s": gap,
            f"{prefix}api_errors": errors,
            f"{prefix}import_batches_twice": twice[name],
            f"{prefix}import_run_status": case.run_status,
            f"{prefix}delivery_missed": len(missed[name]),
            f"{prefix}rejoin_s": case.rejoin_s if case.rejoin_s is not None else float("nan"),
            f"{prefix}taps": taps[name]["taps"],
            f"{prefix}taps_saved": taps[name]["taps_saved"],
            f"{prefix}scorer_retries": taps[name]["scorer_retries"],
            f"{prefix}tap_p50_ms": taps[name]["tap_p50_ms"],
            f"{prefix}tap_p99_ms": taps[name]["tap_p99_ms"],
        }
    return figures


# --- entry -------------------------------------------------------------------------------------


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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_failover", description=__doc__)
    parser.add_argument("--runs", type=int, default=1, help="whole drills, one after another")
    parser.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="load kept going after writes came back (the second case: half)",
    )
    parser.add_argument("--scorers", type=int, default=20)
    parser.add_argument("--readers", type=int, default=4, help="public API readers at once")
    parser.add_argument("--think-ms", type=float, default=1000.0, help="mean pause between taps")
    parser.add_argument("--steady-seconds", type=float, default=15.0, help="load before a fault")
    parser.add_argument(
        "--run-wait", type=float, default=25.0, help="longest wait for a Scout run in flight"
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=90.0,
        help="longest wait after the load for runs and deliveries to settle",
    )
    parser.add_argument(
        "--replay-seconds-per-hour", type=float, default=20.0, help="the Scout replay's clock"
    )
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT / ".omnium" / "drill-failover",
        help="removed at the start of each run; logs under logs/ (%(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    runs: list[dict[str, float | str]] = []
    try:
        for n in range(1, args.runs + 1):
            say(f"--- run {n} of {args.runs}")
            runs.append(asyncio.run(one_run(args, n)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("drill_failover: stopped; everything it started is stopped", flush=True)
        return 130
    except BenchError as exc:
        print(f"drill_failover: {exc}", file=sys.stderr, flush=True)
        return 1
    print()
    if len(runs) > 1:
        for n, figures in enumerate(runs, start=1):
            print(f"# run {n}")
            for name, value in figures.items():
                print(show(f"run{n}_{name}", value))
        print("# median of the runs")
    for name in runs[0]:
        print(show(name, median([r[name] for r in runs])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
