"""The fault matrix: every fault under the same load, each judged by a checker of its own.

The HA profile as the copies drill runs it (a Patroni pair with a synchronous standby, three etcd
members reached through a cuttable relay per Patroni, HAProxy routing writes where Patroni says,
Redis, two copies of every service behind HAProxy), and one load throughout: 20 scorers tapping
through the load balancer as the console does, a Scout import run that is mid-run at each fault
(the drill waits for a batch to be applied before it strikes), the SFTP and webhook clients, public
readers of cached paths (the event, its schedule and medals) and of paths whose copy every tap
drops (the scored units), and a fence probe that writes straight through the services' database
route and notes which node answered.

Every client keeps its history (what it sent, when, what it was answered; the probe: by which
node), and a watcher notes who holds Patroni's leader key in etcd. The faults (--faults, in
bench/faults/inject.py) are the database's (leader_killed, postmaster_killed, patroni_killed,
primary_frozen, switchover, standby_slowed, link_stalled_leader_killed), etcd's (etcd_member_lost:
its raft leader killed, one of three, and started again; no failover may follow;
primary_cut_from_etcd: the leader's Patroni partitioned from etcd, which must demote it before the
standby is promoted), Redis's (redis_killed) and the copies' (copy_killed). After each fault the
checker (bench/faults/checker.py, which shares no code with the services) reads the fault's
histories and every node's tables. Per fault it prints `<fault>_acked_lost`, `_split_writes`,
`_duplicates`, `_tap_max_wait_s`, `_write_gap_s`, `_api_errors`, `_delivery_missed` and
`_import_in_flight`, and exits 1 when any misses its target. `--break async` (synchronous
replication off) and `--break no-fence` (services connect to the nodes directly, not through
Patroni's /primary check) take a protection away: the checker must then report loss or split
writes. A drill, not a test; docs/high-availability.md says how to read it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import random
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import asyncpg

from bench._common import BenchError, say
from bench._drill import (
    EVENT,
    IN_FLIGHT,
    ROOT,
    SCHEDULE,
    Load,
    add_load_options,
    add_run_options,
    connect,
    deliveries_settled,
    fetch,
    import_checks,
    reader,
    scorer,
    steady,
    until,
)
from bench.drill_copies import Stack, with_stack
from bench.faults import checker
from bench.faults.inject import FAULTS, Timing, wait_whole, watch_leader

TARGETS = {"tap_max_wait_s": 30.0, "write_gap_s": 20.0}
TAPS_SQL = (
    "SELECT command_id FROM match_action WHERE command_id LIKE 'drill%' "
    "UNION ALL SELECT id FROM drill_probe"
)
BREAKS = ("async", "no-fence")
STIRRED = 250  # Scout units changed before each fault's import run: 10 batches of 25
MID_RUN = """
SELECT r.id::text FROM integration_run r JOIN integration i ON i.id = r.integration_id
 WHERE i.code = $1 AND r.status = 'applying' AND r.batch_total > r.batch_done
 ORDER BY r.received_at DESC LIMIT 1
"""

log = logging.getLogger("bench.drill_faults")


@dataclass
class Strike:
    """One fault's clock and what was in flight when it struck."""

    name: str
    at: float | None = None  # monotonic: the fault made
    led: float | None = None  # another node (or the same, restarted) leads
    whole: float | None = None  # the pair whole again
    run_id: str | None = None
    in_flight: bool = False
    run_status: str = "none"


@dataclass
class Matrix:
    """The run's shared state: the load, the leader records, each fault's clock."""

    load: Load
    leaders: list[dict[str, Any]] = field(default_factory=list)
    strikes: dict[str, Strike] = field(default_factory=dict)
    uncached: set[str] = field(default_factory=set)
    rng: random.Random = field(default_factory=random.Random)


# --- the fence probe ---------------------------------------------------------------------------


async def probe(url: str, nodes: dict[int, str], load: Load, every: float) -> None:
    """A write every `every` s through the services' database route, noting which node
    answered (its port): the one client whose history says by whom, so split writes are
    counted on it."""
    conn: asyncpg.Connection | None = None
    n = 0
    while not load.stopping.is_set():
        if conn is None:
            try:
                conn = await asyncpg.connect(url, timeout=2)
            except (OSError, asyncpg.PostgresError, TimeoutError):
                await asyncio.sleep(0.2)
                continue
        n += 1
        sent, record = time.monotonic(), {"kind": "tap", "id": f"probe:{n}", "client": "probe"}
        try:
            port = await conn.fetchval(
                "INSERT INTO drill_probe (id) VALUES ($1) RETURNING inet_server_port()",
                record["id"],
                timeout=10,
            )
            record |= {"outcome": "saved", "node": nodes.get(int(port), str(port))}
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            record["outcome"] = "error"
            conn.terminate()
            conn = None
        load.note({**record, "sent": sent, "answered": time.monotonic()})
        await asyncio.sleep(every)
    if conn is not None:
        conn.terminate()


# --- the import run ----------------------------------------------------------------------------


async def run_state(url: str, run_id: str) -> tuple[str, int, int | None]:
    rows = await fetch(
        url,
        "SELECT status, batch_done, batch_total FROM integration_run WHERE id = $1::uuid",
        run_id,
    )
    if not rows:
        return "missing", 0, None
    return str(rows[0]["status"]), int(rows[0]["batch_done"] or 0), rows[0]["batch_total"]


def mid_run(state: tuple[str, int, int | None]) -> bool:
    """Being applied, with batches still to go."""
    status, done, total = state
    return status == "applying" and (total is None or done < total)


async def stir_scout(http: aiohttp.ClientSession, scout: str, rng: random.Random, n: int) -> int:
    """`n` of Scout's units moved a minute later, so the next schedule run has that many units
    to apply, in several batches (the replay's own runs change a unit or two: one batch, over
    before a fault could strike it). Returns how many moved."""
    total = (await (await http.get(f"{scout}/control/state")).json())["units"]["total"]
    moved = 0

    async def move(k: int) -> None:
        nonlocal moved
        unit = f"{scout}/control/units/SC-{k:06d}"
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, KeyError, ValueError):
            async with http.get(unit) as answer:
                row = (await answer.json())["unit"]
            start = datetime.fromisoformat(row["startLocal"]) + timedelta(minutes=1)
            body = {"start_local": start.isoformat()}
            async with http.post(f"{unit}/reschedule", json=body) as answer:
                moved += answer.status == 200

    picked = rng.sample(range(1, total + 1), min(n, total))
    for at in range(0, len(picked), 20):
        await asyncio.gather(*(move(k) for k in picked[at : at + 20]))
    return moved


async def import_mid_run(url: str, scout: str, within: float, rng: random.Random) -> str | None:
    """A Scout schedule run being applied with batches still to go: Scout's units stirred,
    a run asked for, and waited for until it is mid-run."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, KeyError, ValueError):
                await stir_scout(http, scout, rng, STIRRED)
                async with http.post(f"{scout}/control/runs", json={"job": "schedule"}) as answer:
                    asked = str((await answer.json())["run"]["id"])
                    say(f"asked the Scout simulator for run {asked}")
            until = min(deadline, time.monotonic() + 30)
            while time.monotonic() < until:
                with contextlib.suppress(OSError, asyncpg.PostgresError, TimeoutError):
                    rows = await fetch(url, MID_RUN, SCHEDULE)
                    if rows:
                        return str(rows[0]["id"])
                await asyncio.sleep(0.05)
    return None


async def run_ended(url: str, run_id: str, within: float) -> str:
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(OSError, asyncpg.PostgresError, TimeoutError):
            status = (await run_state(url, run_id))[0]
            if status not in (*IN_FLIGHT, "partly_done") or time.monotonic() > deadline:
                return status
        await asyncio.sleep(1)


# --- one fault ---------------------------------------------------------------------------------


async def strike(stack: Stack, matrix: Matrix, name: str, timing: Timing) -> None:
    """The fault made mid-run, waited out, the pair whole again, the phase's taps answered."""
    args, load, url = stack.args, stack.load, stack.url
    scout = f"http://127.0.0.1:{stack.settings.dev.scout_simulator_port}"
    one = matrix.strikes[name] = Strike(name)
    load.begin(name)
    await steady(load, args.steady_seconds)
    one.run_id = await import_mid_run(url, scout, args.run_wait, matrix.rng)

    def mark() -> None:
        one.at = time.monotonic()

    state = await run_state(url, one.run_id) if one.run_id is not None else ("none", 0, None)
    one.in_flight = mid_run(state)
    say(f"{name}: striking; import run {one.run_id} {state[0]}, batch {state[1]} of {state[2]}")
    await FAULTS[name](stack, mark, timing)
    led = [r["since"] for r in matrix.leaders if r["node"] and r["since"] > (one.at or 0)]
    one.led = min(led, default=None)
    leader = await wait_whole(stack.cluster, timing, args.whole_wait)
    one.whole = time.monotonic()
    assert one.at is not None
    say(f"{name}: {leader} leads, the pair whole {one.whole - one.at:.1f} s after the fault")
    await asyncio.sleep(args.seconds)
    if one.run_id is not None:
        one.run_status = await run_ended(url, one.run_id, args.settle_seconds)
    deadline = time.monotonic() + args.settle_seconds
    while time.monotonic() < deadline:
        if not any(t.case == name and t.outcome == "queued" for t in load.taps):
            break
        await asyncio.sleep(0.5)


def phase_history(matrix: Matrix, name: str) -> checker.History:
    """The fault's taps (by the phase each was tapped in), reads, and every leader record."""
    records = matrix.load.history or []
    first: dict[str, str] = {}
    for r in records:
        if r["kind"] == "tap":
            first.setdefault(r["id"], r["phase"])
    history = checker.History()
    history.taps = [r for r in records if r["kind"] == "tap" and first[r["id"]] == name]
    history.reads = [
        {**r, "cached": r["path"] not in matrix.uncached}
        for r in records
        if r["kind"] == "read" and r["phase"] == name
    ]
    history.leaders = sorted((r["since"], r["node"]) for r in matrix.leaders)
    return history


def write_gap(history: checker.History, one: Strike) -> float:
    """The longest time, from the fault until the first tap saved after the pair was whole,
    with no tap answered saved (inf: none was saved after the fault)."""
    if one.at is None or one.whole is None:
        return math.nan
    saved = sorted(
        float(t["answered"])
        for t in history.taps
        if t["outcome"] in checker.SAVED and str(t["id"]).startswith("drill") and t["answered"]
    )
    points = [one.at]
    for s in saved:
        if s > one.at:
            points.append(s)
            if s > one.whole:
                break
    if points[-1] <= one.whole:
        return math.inf
    return max(b - a for a, b in itertools.pairwise(points))


async def judge(stack: Stack, matrix: Matrix, name: str) -> tuple[dict[str, Any], list[str]]:
    """The checker over the fault's histories and every node's tables, and the drill's own
    figures; the violations, each said."""
    history = phase_history(matrix, name)
    dsns = {n.name: stack.cluster.node_url(n) for n in stack.cluster.nodes}
    nodes = await checker.read_nodes(dsns, TAPS_SQL, 30.0)
    report = checker.check(history, nodes, max_wait=TARGETS["tap_max_wait_s"])
    one = matrix.strikes[name]
    f = report.figures
    figures: dict[str, Any] = {
        "acked_lost": int(f["acked_lost"]) + int(f["acked_lost_on_standby"]),
        "split_writes": f["split_writes"],
        "duplicates": f["duplicates"],
        "tap_max_wait_s": f["tap_max_wait_s"],
        "write_gap_s": round(write_gap(history, one), 1),
        "api_errors": f["api_errors"],
        "delivery_missed": 0,
        "import_in_flight": "yes" if one.in_flight else "no",
        "api_errors_uncached": f["api_errors_uncached"],
        "taps": f["taps"],
        "taps_acked": f["taps_acked"],
        "taps_unanswered": f["taps_unanswered"],
        "import_run_status": one.run_status,
        "whole_s": round(one.whole - one.at, 1) if one.whole and one.at else math.nan,
        "key_moved_s": round(one.led - one.at, 1) if one.led and one.at else "no",
    }
    violations = list(report.violations)
    if not figures["write_gap_s"] <= TARGETS["write_gap_s"]:
        violations.append(f"no tap was saved for {figures['write_gap_s']} s")
    if not one.in_flight:
        violations.append(f"no import run was mid-run at the fault (run {one.run_id})")
    return figures, violations


async def one_fault(
    stack: Stack, matrix: Matrix, name: str, timing: Timing
) -> tuple[dict[str, Any], list[str]]:
    """The fault struck and judged; judged even when it did not run through."""
    trouble: list[str] = []
    try:
        await strike(stack, matrix, name, timing)
    except BenchError as exc:
        say(f"{name}: the fault did not run through: {exc}")
        trouble.append(f"the fault did not run through: {exc}")
        one = matrix.strikes[name]
        one.whole = one.whole or time.monotonic()
    try:
        figures, violations = await judge(stack, matrix, name)
    except (checker.BadInput, OSError, asyncpg.PostgresError) as exc:
        figures, violations = {}, [f"the checker could not read the nodes: {exc}"]
    say(f"{name}: checked; {len(trouble + violations)} violations")
    keep_history(stack, matrix)
    return figures, trouble + violations


# --- one run -----------------------------------------------------------------------------------


Result = dict[str, tuple[dict[str, Any], list[str]]]


async def matrix_run(stack: Stack, faults: Sequence[str], timing: Timing) -> Result:
    args, load = stack.args, stack.load
    matrix = Matrix(load)
    base = f"http://127.0.0.1:{stack.settings.gateway.port}"  # HAProxy
    conn = await connect(stack.url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS drill_probe (id text PRIMARY KEY)")
    finally:
        await conn.close()
    cached = ["/v1/events", f"/v1/events/{EVENT}/schedule", f"/v1/events/{EVENT}/medals"]
    matrix.uncached = {f"/v1/events/{EVENT}/units/{code}" for _, code in stack.units}
    uncached = sorted(matrix.uncached)
    ports = {n.pg_port: n.name for n in stack.cluster.nodes}
    rng = matrix.rng = random.Random(args.seed)
    tasks = [
        asyncio.create_task(
            scorer(load, base, n, unit, args.think_ms / 1000, random.Random(rng.random()))
        )
        for n, (unit, _) in enumerate(stack.units)
    ]
    tasks += [asyncio.create_task(reader(load, base, cached[n % 3 :] + cached)) for n in range(2)]
    tasks += [asyncio.create_task(reader(load, base, uncached[n::2])) for n in range(2)]
    tasks.append(asyncio.create_task(probe(stack.url, ports, load, args.probe_every)))
    etcd = stack.cluster.etcd.urls
    watcher = asyncio.create_task(watch_leader(etcd, "omnium", matrix.leaders))
    results: Result = {}
    try:
        for name in faults:
            results[name] = await one_fault(stack, matrix, name, timing)
            if results[name][1] and results[name][1][0].startswith("the fault did not"):
                try:
                    await wait_whole(stack.cluster, timing, args.whole_wait)
                except BenchError as exc:
                    say(f"the pair is not whole ({exc}); the faults left are not run")
                    break
    finally:
        load.stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    missed = await deliveries_settled(
        stack.url, stack.data_dir / "sftp", load, time.monotonic(), args.settle_seconds
    )
    twice = await import_checks(stack.url, load)
    for name, (figures, violations) in results.items():
        if figures:
            figures["delivery_missed"] = len(missed.get(name, []))
            violations += [f"not delivered: {m}" for m in missed.get(name, [])]
            figures["import_batches_twice"] = twice.get(name, 0)
            if twice.get(name, 0):
                violations.append(f"{twice[name]} import batches applied twice")
    keep_history(stack, matrix)
    return results


def keep_history(stack: Stack, matrix: Matrix) -> None:
    """Every client's history and the leader records, as the checker reads them from files."""
    records = [*(matrix.load.history or []), *matrix.leaders]
    with contextlib.suppress(OSError):
        lines = "".join(json.dumps(r) + "\n" for r in records)
        (stack.data_dir / "history.jsonl").write_text(lines)


async def one_run(args: argparse.Namespace, run_no: int) -> Result:
    faults = args.faults
    timing = Timing(
        freeze_s=args.freeze_seconds,
        slow_s=args.slow_seconds,
        redis_down_s=args.redis_down_seconds,
        down_s=args.down_seconds,
        stall_s=args.stall_seconds,
        etcd_down_s=args.etcd_down_seconds,
        cut_s=args.cut_seconds,
        synchronous="async" not in args.breaks,
    )
    load = Load(faults)
    load.history = []
    results: Result = {}

    async def then(stack: Stack) -> dict[str, float | str]:
        results.update(await matrix_run(stack, faults, timing))
        return {}

    def direct(cluster: Any) -> str:
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in cluster.nodes)
        return f"postgresql://postgres@{hosts}/omnium?target_session_attrs=read-write"

    async def asynchronous(cluster: Any) -> None:
        leader = cluster.node(cluster.leader_name())
        patch = {"synchronous_mode": False}
        await asyncio.to_thread(_patch_config, leader.rest_url, patch)
        await until(
            "the standby was still synchronous",
            60,
            lambda: not any(m.get("role") == "sync_standby" for m in cluster.members()),
        )
        say("BREAK=async: synchronous replication off")

    await with_stack(
        args,
        run_no,
        load,
        then,
        database_url=direct if "no-fence" in args.breaks else None,
        ready=asynchronous if "async" in args.breaks else None,
        # Three etcd members (one can be lost) and a relay per Patroni (its link can be cut).
        cluster_options={"etcd_members": 3, "cuttable": True},
    )
    return results


def _patch_config(rest_url: str, patch: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{rest_url}/config", data=json.dumps(patch).encode(), method="PATCH"
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


# --- entry -------------------------------------------------------------------------------------


def show(name: str, value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{name}: {value:.1f}"
    return f"{name}: {int(value) if isinstance(value, float) else value}"


def print_results(runs: Sequence[Result], break_: str | None) -> int:
    """Every run's figures (no medians), each violation, and the exit status."""
    print()
    broken = 0
    for n, results in enumerate(runs, start=1):
        print(f"# run {n} of {len(runs)}" + (f" (BREAK={break_})" if break_ else ""))
        for fault, (figures, violations) in results.items():
            for name, value in figures.items():
                print(show(f"{fault}_{name}", value))
            print(show(f"{fault}_violations", len(violations)))
            for v in violations[:20]:
                print(f"  violation: {v}")
            if len(violations) > 20:
                print(f"  ... and {len(violations) - 20} more")
            broken += bool(violations)
    print(f"faults_with_violations: {broken}")
    return 1 if broken else 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill_faults", description=__doc__)
    add_load_options(
        parser, seconds=5.0, seconds_help="load kept going after each fault", steady=8.0
    )
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help="comma-separated, in order (%(default)s)"
    )
    parser.add_argument(
        "--break", dest="break_", default="", help=f"protections taken away: {', '.join(BREAKS)}"
    )
    parser.add_argument("--freeze-seconds", type=float, default=40.0)
    parser.add_argument("--slow-seconds", type=float, default=20.0)
    parser.add_argument("--redis-down-seconds", type=float, default=5.0)
    parser.add_argument("--stall-seconds", type=float, default=3.0)
    parser.add_argument(
        "--etcd-down-seconds",
        type=float,
        default=15.0,
        help="etcd_member_lost: the killed etcd member starts again after (%(default)s)",
    )
    parser.add_argument(
        "--cut-seconds",
        type=float,
        default=40.0,
        help="primary_cut_from_etcd: the link stays cut at least this long, and until the "
        "standby leads (%(default)s)",
    )
    parser.add_argument(
        "--down-seconds", type=float, default=5.0, help="a killed node starts again after"
    )
    parser.add_argument("--whole-wait", type=float, default=150.0)
    parser.add_argument("--probe-every", type=float, default=0.1, help="the fence probe's pace")
    add_run_options(parser, settle=60.0, seed=20261207, data_dir=ROOT / ".omnium" / "drill-faults")
    parser.set_defaults(run_wait=60.0)
    args = parser.parse_args(argv)
    args.faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    args.breaks = {b.strip() for b in args.break_.split(",") if b.strip()}
    if args.breaks - set(BREAKS):
        parser.error(f"unknown BREAK {sorted(args.breaks - set(BREAKS))}; choose from {BREAKS}")
    unknown = [f for f in args.faults if f not in FAULTS]
    if unknown or not args.faults:
        parser.error(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    runs: list[Result] = []
    try:
        for n in range(1, args.runs + 1):
            say(f"--- run {n} of {args.runs}")
            runs.append(asyncio.run(one_run(args, n)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("drill_faults: stopped; everything it started is stopped", flush=True)
        return 130
    except BenchError as exc:
        print(f"drill_faults: {exc}", file=sys.stderr, flush=True)
        return 2
    return print_results(runs, args.break_)


if __name__ == "__main__":
    sys.exit(main())
