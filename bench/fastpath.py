"""The imports fast path: our key-state cache against the seed's one query, 1,000 keys a check."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench._common import (
    BenchError,
    database_server,
    database_url_for,
    drop,
    percentile,
    recreate,
    rss_mb,
)
from bench.command_batch import EVENT, build, describe
from omnium_db import apply_migrations, init_connection
from omnium_imports._keystate import KeyStateCache
from omnium_settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench_fastpath"
INTEGRATION = "bench-fast"
SEED = 20261006
BLOCK = 30  # checks per side per block; the sides take turns block by block, ours first
EDITED_PER_CHECK = 5  # units a person edits before every timed check (either side's)
CHANGED_HASH_SHARE = 0.01  # keys per check whose run hash differs from the stored one
LAG_SECONDS = Settings.from_env({}).imports.fastpath_lag_seconds  # as the imports service runs it
TARGET_SPEEDUP = 5.0

log = logging.getLogger("bench.fastpath")

# One key state per unit: key 'K' || unit number, hash = sha256 of the key, applied_seq = the
# unit's changed_seq, so every key starts skippable.
SQL_KEY_STATES = """
INSERT INTO integration_key_state (integration_id, subject_key, subject_kind, subject_id,
                                   last_hash, applied_seq)
SELECT $1::uuid, v.key, 'unit', v.id, sha256(convert_to(v.key, 'UTF8')), v.changed_seq
  FROM (SELECT 'K' || substr(u.code, 27)::int AS key, u.id, u.changed_seq
          FROM unit u
         WHERE u.event_id = (SELECT event_id FROM integration WHERE id = $1::uuid)) AS v
"""
# The seed's fast path ("The fast path", Section 3), with `fixture` as our `unit`; last_hash is
# returned so code can match each key's hash to the run's hash for that same key.
SQL_SEED = """
SELECT k.subject_key, k.last_hash
  FROM integration_key_state k
  JOIN unit f ON f.id = k.subject_id
 WHERE k.integration_id = $1::uuid
   AND k.subject_key = ANY($2::text[])
   AND k.last_hash = ANY($3::bytea[])
   AND f.changed_seq = k.applied_seq
"""
# A person's edit.
SQL_EDIT = (
    "UPDATE unit SET changed_seq = nextval('change_seq'), updated_at = now() "
    "WHERE id = ANY($1::uuid[])"
)
# --keep: a kept database carries the last run's edits; make every key skippable again.
SQL_RESET = """
UPDATE integration_key_state k
   SET applied_seq = u.changed_seq
  FROM unit u
 WHERE u.id = k.subject_id AND k.integration_id = $1::uuid
   AND k.applied_seq IS DISTINCT FROM u.changed_seq
"""


def say(message: str) -> None:
    print(message, flush=True)


def key_of(number: int) -> str:
    return f"K{number}"


def stored_hash(number: int) -> bytes:
    return hashlib.sha256(key_of(number).encode()).digest()


def new_hash(number: int) -> bytes:
    return hashlib.sha256(f"{key_of(number)}:changed".encode()).digest()


# --- the workload ----------------------------------------------------------------------------


@dataclass(slots=True)
class Check:
    """One check: the run's keys with their hashes, and what should be skippable."""

    number: int
    units: list[int]
    keys: list[tuple[str, bytes]]
    names: list[str]
    hashes: list[bytes]
    want: dict[str, bytes]
    changed_units: frozenset[int]
    # Skippable by the rule, from the bench's own record of edits; the same for both sides.
    expected: frozenset[str] = frozenset()


@dataclass(slots=True)
class Workload:
    checks: list[Check]
    # Units edited before each timed check: ours_edits[i] before ours runs check i, and
    # seed_edits[i] before the seed's query runs check i.
    ours_edits: list[list[int]]
    seed_edits: list[list[int]]
    edited_units: int = 0


def make_check(number: int, units: int, keys: int, rng: random.Random) -> Check:
    chosen = rng.sample(range(1, units + 1), keys)
    changed = set(rng.sample(range(keys), max(1, round(keys * CHANGED_HASH_SHARE))))
    pairs = [
        (key_of(n), new_hash(n) if i in changed else stored_hash(n)) for i, n in enumerate(chosen)
    ]
    return Check(
        number=number,
        units=chosen,
        keys=pairs,
        names=[k for k, _ in pairs],
        hashes=[h for _, h in pairs],
        want=dict(pairs),
        changed_units=frozenset(chosen[i] for i in changed),
    )


def pick_edits(
    units: int,
    avoid: set[int],
    named_by: Sequence[int],
    touched: set[int],
    rng: random.Random,
) -> list[int]:
    """EDITED_PER_CHECK units, none in `avoid`; one named by a coming check when there is one.

    A unit in `avoid` is named by a check one side has run and the other has not yet: editing
    it now would give the two sides different truths for that check.
    """
    edits: list[int] = []
    fresh = [n for n in named_by if n not in avoid and n not in touched]
    if fresh:
        edits.append(rng.choice(fresh))
    tries = 0
    while len(edits) < EDITED_PER_CHECK:
        tries += 1
        if tries > 100_000:
            raise BenchError(
                f"cannot find units to edit outside the block's checks: use more --units "
                f"than {units:,} or fewer --keys"
            )
        n = rng.randint(1, units)
        if n not in avoid and n not in edits:
            edits.append(n)
    return edits


def skippable_by_rule(check: Check, touched: set[int]) -> frozenset[str]:
    return frozenset(
        key_of(n) for n in check.units if n not in check.changed_units and n not in touched
    )


def make_workload(units: int, checks: int, keys: int, rng: random.Random) -> Workload:
    """The checks and the edits between them, in the order the measured part runs them."""
    if keys > units:
        raise BenchError(f"--keys {keys:,} is more than --units {units:,}")
    if units <= keys * min(BLOCK, checks) + EDITED_PER_CHECK:
        raise BenchError(
            f"a block names up to {keys * min(BLOCK, checks):,} units and edits need units "
            f"outside it: use more --units than {units:,} or fewer --keys"
        )
    all_checks = [make_check(i, units, keys, rng) for i in range(checks)]
    workload = Workload(all_checks, [[] for _ in all_checks], [[] for _ in all_checks])
    touched: set[int] = set()
    for first in range(0, checks, BLOCK):
        block = all_checks[first : first + BLOCK]
        following = all_checks[first + BLOCK : first + 2 * BLOCK]
        # Ours: before check k, a unit named by check k itself, so ours must see an edit made
        # just before the check; never a unit of checks 0..k-1, which the seed has yet to run.
        seen: set[int] = set()
        for check in block:
            named = [n for n in check.units if n not in check.changed_units]
            edits = pick_edits(units, seen, named, touched, rng)
            workload.ours_edits[check.number] = edits
            touched.update(edits)
            check.expected = skippable_by_rule(check, touched)
            seen.update(check.units)
        # The seed: never a unit of this block (ours has run them all); one of the next block's.
        named_next = [n for c in following for n in c.units if n not in c.changed_units]
        for check in block:
            edits = pick_edits(units, seen, named_next, touched, rng)
            workload.seed_edits[check.number] = edits
            touched.update(edits)
            if skippable_by_rule(check, touched) != check.expected:
                raise BenchError(f"bench bug: check {check.number} differs between the sides")
    workload.edited_units = len(touched)
    return workload


# --- the database ----------------------------------------------------------------------------


async def reusable(server_url: str, units: int) -> bool:
    admin = await asyncpg.connect(server_url)
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DB_NAME)
    finally:
        await admin.close()
    if not exists:
        return False
    conn = await asyncpg.connect(database_url_for(server_url, DB_NAME))
    try:
        if await conn.fetchval("SELECT to_regclass('integration_key_state') IS NULL"):
            return False
        counted = await conn.fetchrow(
            """
            SELECT (SELECT count(*) FROM unit u JOIN event e ON e.id = u.event_id
                     WHERE e.code = $1) AS units,
                   (SELECT count(*) FROM integration_key_state k
                      JOIN integration i ON i.id = k.integration_id
                     WHERE i.code = $2) AS key_states
            """,
            EVENT,
            INTEGRATION,
        )
        return bool(counted["units"] == units and counted["key_states"] == units)
    finally:
        await conn.close()


async def setup_integration(conn: asyncpg.Connection) -> str:
    """The integration row on the event `build` made (kept on reuse)."""
    integration_id: str = await conn.fetchval(
        "INSERT INTO integration (code, event_id, name) "
        "SELECT $1, id, 'Bench Fast Path' FROM event WHERE code = $2 "
        "ON CONFLICT (code) DO UPDATE SET state = 'on' RETURNING id::text",
        INTEGRATION,
        EVENT,
    )
    if integration_id is None:
        raise BenchError(f"no event {EVENT} to put the integration on")
    return integration_id


async def fill_key_states(conn: asyncpg.Connection, integration_id: str) -> dict[str, float]:
    took: dict[str, float] = {}
    mark = time.perf_counter()
    async with conn.transaction():
        await conn.execute(SQL_KEY_STATES, integration_id)
    took["key_states"] = time.perf_counter() - mark
    mark = time.perf_counter()
    await conn.execute("VACUUM ANALYZE")
    took["vacuum_analyze"] = time.perf_counter() - mark
    try:
        await conn.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        log.warning("no CHECKPOINT privilege; the fill's checkpoint may land in the run")
    return took


async def unit_ids(
    conn: asyncpg.Connection, integration_id: str, numbers: set[int]
) -> dict[int, str]:
    rows = await conn.fetch(
        "SELECT subject_key, subject_id::text AS id FROM integration_key_state "
        "WHERE integration_id = $1::uuid AND subject_key = ANY($2::text[])",
        integration_id,
        [key_of(n) for n in numbers],
    )
    found = {int(row["subject_key"][1:]): row["id"] for row in rows}
    missing = numbers - found.keys()
    if missing:
        raise BenchError(f"{len(missing)} units to edit have no key state (e.g. {min(missing)})")
    return found


async def wait_out_lag(conn: asyncpg.Connection) -> float:
    """Wait until the newest unit write is older than the cache's lag window.

    Every refresh reads again each unit written within `lag_seconds` before its last look, so
    a cache loaded right after the build would read the whole table on every check for a
    minute: that is the build's cost, not the steady state these checks measure.
    """
    left: float = await conn.fetchval(
        "SELECT greatest(0, extract(epoch FROM max(updated_at) - now()) + $1::float8) FROM unit",
        LAG_SECONDS,
    )
    if left > 0:
        say(f"waiting {left + 1:.0f} s until the newest unit write leaves the lag window ...")
        await asyncio.sleep(left + 1)
        return left + 1
    return 0.0


# --- the run ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Results:
    build: dict[str, float] | None = None
    fill: dict[str, float] | None = None
    reused: bool = False
    reset_keys: int = 0
    waited_seconds: float = 0.0
    workload: Workload | None = None
    load_seconds: float = 0.0
    cache_keys: int = 0
    cache_rss_mb: float = 0.0
    ours_ms: list[float] = field(default_factory=list)
    seed_ms: list[float] = field(default_factory=list)
    refresh_rows: list[int] = field(default_factory=list)
    refresh_ms: list[float] = field(default_factory=list)
    skippable: list[int] = field(default_factory=list)
    wall_seconds: float = 0.0


def disagreement(check: Check, what: str, got: set[str], other: frozenset[str] | set[str]) -> str:
    extra = sorted(got - other)[:5]
    short = sorted(other - got)[:5]
    return (
        f"check {check.number}: {what} ({len(got)} vs {len(other)} skippable keys; "
        f"only in the first: {extra}; only in the second: {short})"
    )


async def measure(
    db_url: str,
    integration_id: str,
    workload: Workload,
    ids: dict[int, str],
    results: Results,
) -> None:
    ours = await asyncpg.connect(db_url)
    seed = await asyncpg.connect(db_url)
    editor = await asyncpg.connect(db_url)
    try:
        await init_connection(ours)
        await init_connection(seed)
        cache = KeyStateCache(integration_id, target="unit", lag_seconds=LAG_SECONDS)
        rss_before = rss_mb(os.getpid())
        mark = time.perf_counter()
        await cache.load(ours)
        results.load_seconds = time.perf_counter() - mark
        results.cache_rss_mb = rss_mb(os.getpid()) - rss_before
        results.cache_keys = len(cache.keys)
        say(
            f"cache loaded: {len(cache.keys):,} keys in {results.load_seconds:.2f} s "
            f"(RSS +{results.cache_rss_mb:.0f} MB)"
        )
        checks = workload.checks
        clock = time.perf_counter
        say(f"measuring: {len(checks)} checks each side, in blocks of {BLOCK}, ours first")
        ours_got: dict[int, set[str]] = {}
        start = clock()
        for first in range(0, len(checks), BLOCK):
            block = checks[first : first + BLOCK]
            for check in block:
                await editor.execute(SQL_EDIT, [ids[n] for n in workload.ours_edits[check.number]])
                t0 = clock()
                results.refresh_rows.append(await cache.refresh(ours))
                t1 = clock()
                flags = [cache.skippable(k, h) for k, h in check.keys]
                t2 = clock()
                results.ours_ms.append((t2 - t0) * 1000)
                results.refresh_ms.append((t1 - t0) * 1000)
                ours_got[check.number] = {
                    k for (k, _), skip in zip(check.keys, flags, strict=True) if skip
                }
            for check in block:
                await editor.execute(SQL_EDIT, [ids[n] for n in workload.seed_edits[check.number]])
                want = check.want
                t0 = clock()
                rows = await seed.fetch(SQL_SEED, integration_id, check.names, check.hashes)
                seed_got = {
                    r["subject_key"] for r in rows if r["last_hash"] == want[r["subject_key"]]
                }
                results.seed_ms.append((clock() - t0) * 1000)
                got = ours_got.pop(check.number)
                if got != seed_got:
                    raise BenchError(
                        "ours and the seed disagree on what to skip: "
                        + disagreement(check, "ours vs seed", got, seed_got)
                    )
                if got != check.expected:
                    raise BenchError(
                        "ours and the seed agree, but not with the edits this bench made: "
                        + disagreement(check, "both vs the bench's record", got, check.expected)
                    )
                results.skippable.append(len(got))
            say(
                f"  {len(results.ours_ms):>4}/{len(checks)}  "
                f"ours p50 {percentile(results.ours_ms, 50):.3f} ms  "
                f"seed p50 {percentile(results.seed_ms, 50):.3f} ms  "
                f"(refresh read {results.refresh_rows[-1]:,} units last)"
            )
        results.wall_seconds = clock() - start
    finally:
        await editor.close()
        await seed.close()
        await ours.close()


async def run(server_url: str, args: argparse.Namespace) -> Results:
    results = Results()
    db_url = database_url_for(server_url, DB_NAME)
    try:
        if args.keep and await reusable(server_url, args.units):
            results.reused = True
            say(f"reusing {DB_NAME}: it already holds {args.units:,} units and key states")
        else:
            await recreate(server_url, DB_NAME)
        conn = await asyncpg.connect(db_url)
        try:
            applied = await apply_migrations(conn)
            if applied:
                say(f"migrations applied: {applied}")
            if results.reused:
                integration_id = await setup_integration(conn)
                status = await conn.execute(SQL_RESET, integration_id)
                results.reset_keys = int(status.split()[-1])
                if results.reset_keys:
                    say(f"  {results.reset_keys:,} keys edited by the last run made skippable")
                    await conn.execute("VACUUM ANALYZE unit, integration_key_state")
            else:
                say(f"building {args.units:,} units with two sides each ...")
                results.build = await build(conn, args.units)
                say(f"  built in {results.build['total']:.1f} s")
                integration_id = await setup_integration(conn)
                say(f"writing {args.units:,} key states for {INTEGRATION} ...")
                results.fill = await fill_key_states(conn, integration_id)
                say(
                    f"  written in {results.fill['key_states']:.1f} s, "
                    f"vacuum analyze {results.fill['vacuum_analyze']:.1f} s"
                )
            mark = time.perf_counter()
            workload = make_workload(args.units, args.checks, args.keys, random.Random(SEED))
            edited = {n for edits in workload.ours_edits + workload.seed_edits for n in edits}
            ids = await unit_ids(conn, integration_id, edited)
            results.workload = workload
            say(f"inputs ready in {time.perf_counter() - mark:.1f} s")
            results.waited_seconds = await wait_out_lag(conn)
        finally:
            await conn.close()
        await measure(db_url, integration_id, workload, ids, results)
    finally:
        if not args.keep:
            await drop(server_url, DB_NAME)
    return results


# --- figures ---------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: Results) -> list[str]:
    assert results.workload is not None
    workload = results.workload
    lines = ["", "== fast path benchmark =="]
    if results.reused:
        lines.append(
            f"table: reused {args.units:,} units and key states from a kept {DB_NAME} (--keep); "
            f"{results.reset_keys:,} keys reset to skippable"
        )
    elif results.build and results.fill:
        b, f = results.build, results.fill
        lines.append(
            f"build: {args.units:,} units and {2 * args.units:,} sides in {b['total']:.1f} s; "
            f"{args.units:,} key states in {f['key_states']:.1f} s, "
            f"vacuum analyze {f['vacuum_analyze']:.1f} s"
        )
    changed = statistics.fmean(len(c.changed_units) for c in workload.checks)
    if results.waited_seconds:
        lines.append(
            f"waited {results.waited_seconds:.0f} s before loading the cache, until the newest "
            f"unit write was older than the {LAG_SECONDS:g} s lag window (not timed)"
        )
    lines.append(
        f"workload: {args.checks} checks of {args.keys:,} keys per side (seed {SEED}), "
        f"{changed:.0f} keys a check with a changed hash; {EDITED_PER_CHECK} units edited before "
        f"every timed check, one of them named by a coming check; blocks of {BLOCK}, ours first; "
        f"measured part took {results.wall_seconds:.1f} s"
    )
    # Keys with the stored hash that the rule still may not skip: their unit was edited.
    held = [len(c.units) - len(c.changed_units) - len(c.expected) for c in workload.checks]
    lines.append(
        f"edits: {workload.edited_units:,} units edited in all; keys not skippable only because "
        f"their unit was edited: {sum(held):,} in all, {statistics.fmean(held):.1f} a check "
        f"(max {max(held)})"
    )
    rows = results.refresh_rows
    lines.append(
        f"ours: KeyStateCache(lag_seconds={LAG_SECONDS:g}) of {results.cache_keys:,} keys, "
        f"loaded once in {results.load_seconds:.2f} s "
        f"(process RSS +{results.cache_rss_mb:.0f} MB); "
        f"each refresh read {statistics.fmean(rows):.0f} units on average "
        f"(median {statistics.median(rows):.0f}, max {max(rows):,})"
    )
    lines.append(f"fastpath_load_s: {results.load_seconds:.2f}")
    lines.append(describe("ours (refresh + skippable)", results.ours_ms))
    lines.append(describe("  of which refresh", results.refresh_ms))
    lines.append(describe("seed (query + hash match)", results.seed_ms))
    skip = results.skippable
    lines.append(
        f"checks: ok: ours and the seed agreed on all {len(skip)} checks, and with the bench's "
        f"record of edits; skippable keys a check: mean {statistics.fmean(skip):.1f}, "
        f"min {min(skip)}, max {max(skip)}"
    )
    ours_p50 = percentile(results.ours_ms, 50)
    seed_p50 = percentile(results.seed_ms, 50)
    speedup = seed_p50 / ours_p50 if ours_p50 > 0 else math.inf
    met = "met" if speedup >= TARGET_SPEEDUP else "NOT met"
    lines.append(f"target: seed p50 / ours p50 >= {TARGET_SPEEDUP:g}: {met} ({speedup:.2f})")
    lines += [
        "",
        f"fastpath_p50_ms: {ours_p50:.3f}",
        f"fastpath_p99_ms: {percentile(results.ours_ms, 99):.3f}",
        f"seed_fastpath_p50_ms: {seed_p50:.3f}",
        f"fastpath_speedup: {speedup:.2f}",
    ]
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fastpath", description=__doc__)
    parser.add_argument("--units", type=int, default=1_000_000, help="units and key states")
    parser.add_argument("--checks", type=int, default=300, help="measured checks per side")
    parser.add_argument("--keys", type=int, default=1_000, help="keys per check")
    parser.add_argument(
        "--keep",
        action="store_true",
        help=f"keep {DB_NAME} at the end; a later run reuses a table of the same size",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT / ".omnium" / "bench",
        help="private PostgreSQL's folder when OMNIUM_DATABASE_URL is unset (%(default)s)",
    )
    args = parser.parse_args(argv)
    for name in ("units", "checks", "keys"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        with database_server(args.data_dir) as server_url:
            results = asyncio.run(run(server_url, args))
    except BenchError as exc:
        print(f"bench.fastpath: {exc}", file=sys.stderr, flush=True)
        return 1
    # Printed after the servers stopped, so the figures are the last lines.
    for line in report(args, results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
