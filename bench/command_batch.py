"""Import batches of 25 units: the command service over gRPC against the seed's bare SQL, with
the floor measured in the same run: a bare gRPC echo of each batch's bytes (bench/grpc_echo.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from grpc import aio

from bench._common import (
    BenchError,
    database_server,
    database_url_for,
    drop,
    free_port,
    percentile,
    recreate,
    rss_mb,
    say,
    wait_for_port,
)
from bench.grpc_echo import echo_call
from omnium.command.v1 import command_pb2, command_pb2_grpc
from omnium_db import apply_migrations
from omnium_devstack.stack import dev_process_environ
from omnium_grpc import open_channel
from omnium_settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "omnium_bench"
EVENT = "AG2026"
INTEGRATION = "bench-scout"
TOKEN = "bench"
SEED = 20261006
BATCH_UNITS = 25
CHANGED_PER_BATCH = 5
# Batches sent to the separate command process after the run, to read its RSS under use.
POST_LOAD_BATCHES = 100
DISCIPLINES = (("ATH", "Athletics"), ("BKB", "Basketball"), ("FBL", "Football"), ("SWM", "Swim"))
NOCS = ("KOR", "JPN", "CHN", "IND", "THA", "VIE", "PHI", "INA", "MAS", "SGP", "KAZ", "UZB")
COMPETITORS = 400
NEW_STATUS = {"RUNNING": "UNOFFICIAL"}  # current -> new; any other current becomes RUNNING
# The import road's session settings (omnium_db._pool.server_settings for PoolRoad.IMPORTS).
ANCHOR_SESSION = {
    "application_name": "bench:anchor",
    "synchronous_commit": "on",
    "lock_timeout": "5000",
    "statement_timeout": "30000",
    "idle_in_transaction_session_timeout": "30000",
}

log = logging.getLogger("bench.command_batch")


# --- inputs ----------------------------------------------------------------------------------


@dataclass(slots=True)
class UnitNow:
    """One unit as it stands before the workload."""

    id: str
    code: str
    status: str
    scores: dict[int, str]


@dataclass(slots=True)
class RowIn:
    """One import row: the values a feed brings for one unit."""

    position: int
    key: str
    hash: bytes
    unit_id: str
    status: str
    scores: dict[int, str]
    changed: bool


@dataclass(slots=True)
class BatchIn:
    run_id: str
    rows: list[RowIn]

    @property
    def command_id(self) -> str:
        return f"{self.run_id}:0"

    @property
    def changed(self) -> int:
        return sum(row.changed for row in self.rows)


@dataclass(slots=True)
class Workload:
    ours_warmup: list[BatchIn]
    ours: list[BatchIn]
    anchor_warmup: list[BatchIn]
    anchor: list[BatchIn]
    post_load: list[BatchIn]

    def every(self) -> list[BatchIn]:
        return [
            *self.ours_warmup,
            *self.ours,
            *self.anchor_warmup,
            *self.anchor,
            *self.post_load,
        ]


def row_hash(status: str, scores: dict[int, str]) -> bytes:
    mapped = {
        "status": status,
        "sides": [{"order": o, "score": s} for o, s in sorted(scores.items())],
    }
    return hashlib.sha256(json.dumps(mapped, sort_keys=True).encode()).digest()


def make_row(position: int, unit: UnitNow, change: bool, rng: random.Random) -> RowIn:
    status, scores = unit.status, dict(unit.scores)
    if change:
        status = NEW_STATUS.get(unit.status, "RUNNING")
        old = scores.get(1)
        scores[1] = str(rng.choice([n for n in range(1, 10) if str(n) != old]))
    return RowIn(
        position=position,
        key=f"{unit.code[:3]}:{unit.code}",
        hash=row_hash(status, scores),
        unit_id=unit.id,
        status=status,
        scores=scores,
        changed=change,
    )


def make_batches(
    units: Sequence[UnitNow], runs: Sequence[str], rng: random.Random
) -> list[BatchIn]:
    batches = []
    for n, run_id in enumerate(runs):
        chosen = units[n * BATCH_UNITS : (n + 1) * BATCH_UNITS]
        changing = set(rng.sample(range(BATCH_UNITS), CHANGED_PER_BATCH))
        rows = [make_row(i + 1, unit, i in changing, rng) for i, unit in enumerate(chosen)]
        batches.append(BatchIn(run_id, rows))
    return batches


def grpc_batch(batch: BatchIn) -> command_pb2.ImportBatch:
    rows = []
    for row in batch.rows:
        values = command_pb2.UnitValues(status=row.status)
        for order, score in sorted(row.scores.items()):
            values.sides.append(command_pb2.SideValues(order=order, score=score))
        rows.append(
            command_pb2.BatchRow(
                position=row.position,
                key=row.key,
                hash=row.hash,
                subject=command_pb2.Subject(kind="unit", id=row.unit_id),
                unit=values,
            )
        )
    return command_pb2.ImportBatch(
        command_id=batch.command_id,
        integration_code=INTEGRATION,
        run_id=batch.run_id,
        batch_no=0,
        event_code=EVENT,
        rows=rows,
    )


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
        if await conn.fetchval("SELECT to_regclass('unit') IS NULL"):
            return False
        counted = await conn.fetchval(
            "SELECT count(*) FROM unit u JOIN event e ON e.id = u.event_id WHERE e.code = $1",
            EVENT,
        )
        sides = await conn.fetchval("SELECT count(*) FROM unit_competitor")
        return bool(counted == units and sides == 2 * units)
    finally:
        await conn.close()


async def build(conn: asyncpg.Connection, units: int) -> dict[str, float]:
    """The Games, with set-based SQL: `units` units, two sides each."""
    took: dict[str, float] = {}
    start = time.perf_counter()
    async with conn.transaction():
        event_id = await conn.fetchval(
            "INSERT INTO event (code, name, time_zone, starts_on, ends_on) "
            "VALUES ($1, 'Bench Games', 'Asia/Tokyo', '2026-09-19', '2026-10-04') RETURNING id",
            EVENT,
        )
        await conn.execute(
            "INSERT INTO discipline (event_id, code, name) "
            "SELECT $1, d.code, d.name FROM unnest($2::text[], $3::text[]) AS d(code, name)",
            event_id,
            [d[0] for d in DISCIPLINES],
            [d[1] for d in DISCIPLINES],
        )
        await conn.execute(
            """
            INSERT INTO competitor (event_id, discipline_id, kind, code, name, noc)
            SELECT $1, d.ids[1 + g % d.n], 'team', 'BENCH-' || lpad(g::text, 4, '0'),
                   'Team ' || g, ($3::text[])[1 + g % cardinality($3::text[])]
              FROM generate_series(1, $2::int) AS g,
                   (SELECT array_agg(id ORDER BY code) AS ids, count(*)::int AS n
                      FROM discipline WHERE event_id = $1) AS d
            """,
            event_id,
            COMPETITORS,
            list(NOCS),
        )
        took["reference"] = time.perf_counter() - start
        mark = time.perf_counter()
        # Code: discipline (3) + gender (1) + event (18) + phase (4) + unit number (8) = 34.
        await conn.execute(
            """
            INSERT INTO unit (event_id, discipline_id, code, name, phase, start_at, venue, status)
            SELECT $1, d.ids[1 + g % d.n],
                   d.codes[1 + g % d.n] || 'M' || 'EVENT-------------' || 'FNL-'
                     || lpad(g::text, 8, '0'),
                   'Unit ' || g, 'Group ' || chr(65 + g % 8),
                   timestamptz '2026-09-19 00:00+00' + (g % 20000) * interval '1 minute',
                   'Venue ' || g % 40,
                   CASE g % 10 WHEN 0 THEN 'OFFICIAL' WHEN 1 THEN 'RUNNING' ELSE 'SCHEDULED' END
              FROM generate_series(1, $2::int) AS g,
                   (SELECT array_agg(id ORDER BY code) AS ids,
                           array_agg(code ORDER BY code) AS codes, count(*)::int AS n
                      FROM discipline WHERE event_id = $1) AS d
            """,
            event_id,
            units,
        )
        took["units"] = time.perf_counter() - mark
        mark = time.perf_counter()
        await conn.execute(
            """
            INSERT INTO unit_competitor (unit_id, sort_order, competitor_id, score)
            SELECT u.id, s.o, c.ids[1 + (substr(u.code, 27)::int * 2 + s.o) % c.n],
                   (substr(u.code, 27)::int % 4)::text
              FROM unit u
             CROSS JOIN (VALUES (1), (2)) AS s(o)
             CROSS JOIN (SELECT array_agg(id ORDER BY code) AS ids, count(*)::int AS n
                           FROM competitor WHERE event_id = $1) AS c
             WHERE u.event_id = $1
            """,
            event_id,
        )
        took["sides"] = time.perf_counter() - mark
    mark = time.perf_counter()
    await conn.execute("VACUUM ANALYZE")
    took["vacuum_analyze"] = time.perf_counter() - mark
    mark = time.perf_counter()
    try:
        # The build's WAL should not be checkpointed in the middle of the measured run.
        await conn.execute("CHECKPOINT")
    except asyncpg.InsufficientPrivilegeError:
        log.warning("no CHECKPOINT privilege; the build's checkpoint may land in the run")
    took["checkpoint"] = time.perf_counter() - mark
    took["total"] = time.perf_counter() - start
    return took


async def setup_integration(conn: asyncpg.Connection) -> tuple[str, str]:
    """The integration row (kept on reuse) and a clean log, so every run starts alike."""
    await conn.execute(
        "TRUNCATE command, timeline_item, domain_event, integration_row, "
        "integration_key_state, integration_run CASCADE"
    )
    event_id: str = await conn.fetchval("SELECT id::text FROM event WHERE code = $1", EVENT)
    integration_id: str = await conn.fetchval(
        "INSERT INTO integration (code, event_id, name) VALUES ($1, $2, 'Bench Scout') "
        "ON CONFLICT (code) DO UPDATE SET state = 'on' RETURNING id::text",
        INTEGRATION,
        event_id,
    )
    return event_id, integration_id


async def make_runs(conn: asyncpg.Connection, integration_id: str, count: int) -> list[str]:
    rows = await conn.fetch(
        "INSERT INTO integration_run (integration_id, scout_run_id, status, scout_status, build) "
        "SELECT $1, 'bench-' || $2 || '-' || g, 'received', 'passed', 'all' "
        "FROM generate_series(1, $3::int) AS g ORDER BY g RETURNING id::text",
        integration_id,
        uuid.uuid4().hex,
        count,
    )
    return [row["id"] for row in rows]


async def read_units(conn: asyncpg.Connection, numbers: list[int]) -> list[UnitNow]:
    rows = await conn.fetch(
        """
        SELECT u.id::text AS id, u.code, u.status, substr(u.code, 27)::int AS n,
               (SELECT array_agg(s.score ORDER BY s.sort_order)
                  FROM unit_competitor s WHERE s.unit_id = u.id) AS scores
          FROM unit u
         WHERE substr(u.code, 27)::int = ANY($1::int[])
        """,
        numbers,
    )
    by_number = {
        row["n"]: UnitNow(
            row["id"], row["code"], row["status"], dict(enumerate(row["scores"], start=1))
        )
        for row in rows
    }
    missing = [n for n in numbers if n not in by_number]
    if missing:
        raise BenchError(f"{len(missing)} sampled units are not in the table (e.g. {missing[0]})")
    return [by_number[n] for n in numbers]


async def prepare_workload(
    conn: asyncpg.Connection, integration_id: str, args: argparse.Namespace
) -> Workload:
    rng = random.Random(args.seed)
    counts = {
        "ours_warmup": args.warmup,
        "ours": args.batches,
        "anchor_warmup": args.warmup,
        "anchor": args.batches,
        "post_load": POST_LOAD_BATCHES,
    }
    needed = sum(counts.values()) * BATCH_UNITS
    if needed > args.units:
        raise BenchError(
            f"the workload touches {needed:,} distinct units but the table has {args.units:,}: "
            f"use --units {needed} or more, or fewer --batches"
        )
    # Distinct across the whole workload: each row's "unchanged" values are the ones read here.
    numbers = rng.sample(range(1, args.units + 1), needed)
    units = await read_units(conn, numbers)
    runs = await make_runs(conn, integration_id, sum(counts.values()))
    parts: dict[str, list[BatchIn]] = {}
    offset = 0
    for name, count in counts.items():
        parts[name] = make_batches(
            units[offset * BATCH_UNITS : (offset + count) * BATCH_UNITS],
            runs[offset : offset + count],
            rng,
        )
        offset += count
    return Workload(**parts)


# --- the anchor: the seed's statement list on a bare connection -------------------------------

SQL_LOCK = (
    "SELECT id, changed_seq FROM unit WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE"
)
SQL_REPEAT = "SELECT outcome, answer FROM command WHERE command_id = $1"
# nextval rides on the read of current values, so the anchor pays no extra round trip for it.
SQL_CURRENT = """
WITH s AS MATERIALIZED (SELECT nextval('change_seq') AS seq)
SELECT u.id AS unit_id, u.code, u.status, u.pinned AS unit_pinned,
       c.id AS side_id, c.sort_order, c.score, c.pinned AS side_pinned, s.seq
  FROM unit u
  JOIN unit_competitor c ON c.unit_id = u.id
 CROSS JOIN s
 WHERE u.id = ANY($1::uuid[])
"""
SQL_UNIT = "UPDATE unit SET status = $2, changed_seq = $3, updated_at = now() WHERE id = $1"
SQL_SIDE = "UPDATE unit_competitor SET score = $2, changed_seq = $3 WHERE id = $1"
SQL_TIMELINE = """
INSERT INTO timeline_item (command_id, code, event_id, subject_kind, subject_id, unit_ids,
                           actor_kind, actor_name, source_code, payload, diff, seq)
VALUES ($1, 'imports.apply_batch', $2, 'integration_run', $3, $4::uuid[], 'integration',
        'integration:bench-scout', 'bench-scout', $5::jsonb, $6::jsonb, $7)
"""
SQL_KEY_STATE = """
INSERT INTO integration_key_state AS k (integration_id, subject_key, subject_kind, subject_id,
                                        last_hash, applied_seq, last_seen_run, missing_runs)
SELECT $1, v.key, 'unit', v.subject_id, v.hash, v.applied_seq, $2, 0
  FROM unnest($3::text[], $4::uuid[], $5::bytea[], $6::bigint[])
       AS v(key, subject_id, hash, applied_seq)
ON CONFLICT (integration_id, subject_key)
DO UPDATE SET last_hash = EXCLUDED.last_hash, applied_seq = EXCLUDED.applied_seq,
              last_seen_run = EXCLUDED.last_seen_run, missing_runs = 0
"""
SQL_ROW_LOG = """
INSERT INTO integration_row (run_id, integration_id, batch_no, position, subject_key,
                             subject_kind, subject_id, row_hash, outcome, diff)
SELECT $1, $2, 0, v.position, v.key, 'unit', v.subject_id, v.hash, 'accepted', v.diff::jsonb
  FROM unnest($3::int[], $4::text[], $5::uuid[], $6::bytea[], $7::text[])
       AS v(position, key, subject_id, hash, diff)
"""
SQL_OUTBOX = """
INSERT INTO domain_event (event_id, kind, subject_kind, subject_id, unit_id, seq, command_id,
                          payload)
SELECT $1, 'unit.changed', 'unit', v.id, v.id, $2, $3, v.payload::jsonb
  FROM unnest($4::uuid[], $5::text[]) AS v(id, payload)
"""
SQL_COMMAND = """
INSERT INTO command (command_id, code, source_code, request_hash, outcome, answer, seq)
VALUES ($1, 'imports.apply_batch', 'bench-scout', NULL, 'accepted', $2, $3)
"""
SQL_RUN = "UPDATE integration_run SET batch_done = batch_done + 1 WHERE id = $1"


@dataclass(slots=True)
class Current:
    code: str
    status: str
    pinned: list[str]
    sides: dict[int, tuple[uuid.UUID, str | None, list[str]]] = field(default_factory=dict)


def _entry(unit_id: str, code: str, name: str, old: Any, new: Any) -> dict[str, Any]:
    return {"kind": "unit", "id": unit_id, "code": code, "field": name, "old": old, "new": new}


async def anchor_batch(
    conn: asyncpg.Connection, batch: BatchIn, event_id: str, integration_id: str
) -> int:
    """One batch, statement by statement; returns how many rows changed something."""
    ids = sorted(uuid.UUID(row.unit_id) for row in batch.rows)
    command_id = batch.command_id
    async with conn.transaction():
        locked = await conn.fetch(SQL_LOCK, ids)
        if await conn.fetchrow(SQL_REPEAT, command_id) is not None:
            raise BenchError(f"anchor batch {command_id} was applied before")
        current_rows = await conn.fetch(SQL_CURRENT, ids)
        seq: int = current_rows[0]["seq"]
        current: dict[str, Current] = {}
        for r in current_rows:
            unit_id = str(r["unit_id"])
            unit = current.get(unit_id)
            if unit is None:
                unit = current[unit_id] = Current(r["code"], r["status"], r["unit_pinned"])
            unit.sides[r["sort_order"]] = (r["side_id"], r["score"], r["side_pinned"])
        changed_seq = {str(r["id"]): r["changed_seq"] for r in locked}
        # In code: diff = incoming values - current values - pinned fields.
        unit_sets: list[tuple[str, str]] = []
        side_sets: list[tuple[uuid.UUID, str]] = []
        diff: list[dict[str, Any]] = []
        row_log: list[tuple[RowIn, list[dict[str, Any]]]] = []
        answers: list[command_pb2.RowAnswer] = []
        applied: list[int] = []
        for row in batch.rows:
            unit = current[row.unit_id]
            changes: list[dict[str, Any]] = []
            if row.status != unit.status and "status" not in unit.pinned:
                unit_sets.append((row.unit_id, row.status))
                changes.append(_entry(row.unit_id, unit.code, "status", unit.status, row.status))
            for order, score in row.scores.items():
                side_id, old, pinned = unit.sides[order]
                if score != old and "score" not in pinned:
                    side_sets.append((side_id, score))
                    changes.append(
                        _entry(row.unit_id, unit.code, f"sides[{order}].score", old, score)
                    )
            if changes and not any(u == row.unit_id for u, _ in unit_sets):
                unit_sets.append((row.unit_id, unit.status))
            applied.append(seq if changes else changed_seq[row.unit_id])
            if changes:
                diff.extend(changes)
                row_log.append((row, changes))
            answers.append(
                command_pb2.RowAnswer(
                    position=row.position,
                    key=row.key,
                    outcome=(
                        command_pb2.ROW_OUTCOME_ACCEPTED
                        if changes
                        else command_pb2.ROW_OUTCOME_UNCHANGED
                    ),
                    subject_id=row.unit_id,
                    changed_fields=[c["field"] for c in changes],
                    applied_seq=applied[-1],
                )
            )
        for unit_id, status in unit_sets:
            await conn.execute(SQL_UNIT, unit_id, status, seq)
        for side_id, score in side_sets:
            await conn.execute(SQL_SIDE, side_id, score, seq)
        changed_units = [r.unit_id for r, _ in row_log]
        payload = {
            "integration": INTEGRATION,
            "run_id": batch.run_id,
            "batch_no": 0,
            "rows": len(batch.rows),
        }
        await conn.execute(
            SQL_TIMELINE,
            command_id,
            event_id,
            batch.run_id,
            changed_units,
            json.dumps(payload),
            json.dumps(diff),
            seq,
        )
        await conn.execute(
            SQL_KEY_STATE,
            integration_id,
            batch.run_id,
            [row.key for row in batch.rows],
            [row.unit_id for row in batch.rows],
            [row.hash for row in batch.rows],
            applied,
        )
        if row_log:
            await conn.execute(
                SQL_ROW_LOG,
                batch.run_id,
                integration_id,
                [r.position for r, _ in row_log],
                [r.key for r, _ in row_log],
                changed_units,
                [r.hash for r, _ in row_log],
                [json.dumps(c) for _, c in row_log],
            )
            await conn.execute(
                SQL_OUTBOX,
                event_id,
                seq,
                command_id,
                changed_units,
                [
                    json.dumps(
                        {
                            "code": current[r.unit_id].code,
                            "changes": [
                                {"field": c["field"], "old": c["old"], "new": c["new"]}
                                for c in changes
                            ],
                        }
                    )
                    for r, changes in row_log
                ],
            )
        answer = command_pb2.BatchAnswer(
            command_id=command_id,
            outcome=command_pb2.OUTCOME_ACCEPTED,
            rows=answers,
            seq=seq if row_log else 0,
        )
        await conn.execute(SQL_COMMAND, command_id, answer.SerializeToString(), seq)
        await conn.execute(SQL_RUN, batch.run_id)
    return len(row_log)


# --- ours: the command service over gRPC ------------------------------------------------------


def check_answer(batch: BatchIn, answer: command_pb2.BatchAnswer, where: str) -> None:
    if answer.outcome != command_pb2.OUTCOME_ACCEPTED:
        raise BenchError(
            f"{where}: batch {batch.command_id} answered "
            f"{command_pb2.Outcome.Name(answer.outcome)}, not OUTCOME_ACCEPTED: {answer.reason}"
        )
    outcomes = [row.outcome for row in answer.rows]
    accepted = outcomes.count(command_pb2.ROW_OUTCOME_ACCEPTED)
    unchanged = outcomes.count(command_pb2.ROW_OUTCOME_UNCHANGED)
    if len(outcomes) != len(batch.rows) or accepted != batch.changed:
        others = sorted(
            {command_pb2.RowOutcome.Name(o) for o in outcomes}
            - {"ROW_OUTCOME_ACCEPTED", "ROW_OUTCOME_UNCHANGED"}
        )
        raise BenchError(
            f"{where}: batch {batch.command_id} sent {len(batch.rows)} rows with "
            f"{batch.changed} real changes, but the answer has {len(outcomes)} rows: "
            f"{accepted} ROW_OUTCOME_ACCEPTED, {unchanged} ROW_OUTCOME_UNCHANGED"
            + (f", others {others}" if others else "")
        )


async def ours_batch(
    stub: command_pb2_grpc.CommandServiceStub, message: command_pb2.ImportBatch
) -> command_pb2.BatchAnswer:
    answer: command_pb2.BatchAnswer = await stub.ApplyImportBatch(message, timeout=60)
    return answer


# --- the run ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Results:
    build: dict[str, float] | None = None
    reused: bool = False
    ours_ms: list[float] = field(default_factory=list)
    anchor_ms: list[float] = field(default_factory=list)
    echo_ms: list[float] = field(default_factory=list)
    request_bytes: int = 0
    answer_bytes: int = 0
    wall_seconds: float = 0.0
    checks: list[str] = field(default_factory=list)
    idle_rss_mb: float = 0.0
    loaded_rss_mb: float | None = None
    stop_seconds: float | None = None
    stop_code: int | None = None
    service_log: str = ""


async def measure(
    db_url: str,
    workload: Workload,
    event_id: str,
    integration_id: str,
    block: int,
    results: Results,
    port: int,
) -> None:
    settings = Settings.from_env({}, grpc_token=TOKEN)
    channel = open_channel(f"127.0.0.1:{port}", settings)
    stub = command_pb2_grpc.CommandServiceStub(channel)
    anchor = await asyncpg.connect(db_url, server_settings=ANCHOR_SESSION)
    ours_msgs = [grpc_batch(b) for b in workload.ours]
    ours_warm_msgs = [grpc_batch(b) for b in workload.ours_warmup]
    try:
        say(f"warm-up: {len(ours_warm_msgs)} batches each side (not counted)")
        answer_bytes = 0
        for batch, message in zip(workload.ours_warmup, ours_warm_msgs, strict=True):
            answer = await ours_batch(stub, message)
            check_answer(batch, answer, "warm-up (ours)")
            answer_bytes = answer.ByteSize()
        for batch in workload.anchor_warmup:
            await anchor_batch(anchor, batch, event_id, integration_id)
        results.request_bytes = round(statistics.fmean(m.ByteSize() for m in ours_msgs))
        results.answer_bytes = answer_bytes
        async with echo_process(results.answer_bytes) as echo_port:
            echo_channel = open_channel(f"127.0.0.1:{echo_port}", settings)
            try:
                await _measured(
                    stub, echo_call(echo_channel), anchor, workload, ours_msgs, event_id,
                    integration_id, block, results,
                )  # fmt: skip
            finally:
                await echo_channel.close()
    finally:
        await anchor.close()
        await channel.close()


async def _measured(
    stub: command_pb2_grpc.CommandServiceStub,
    echo: aio.UnaryUnaryMultiCallable[bytes, bytes],
    anchor: asyncpg.Connection,
    workload: Workload,
    ours_msgs: list[command_pb2.ImportBatch],
    event_id: str,
    integration_id: str,
    block: int,
    results: Results,
) -> None:
    """Blocks in turn: the echo of each batch's bytes, the batches through the road, the
    anchor's; so a machine that gets busier moves all three alike."""
    echo_bytes = [m.SerializeToString() for m in ours_msgs]
    for data in echo_bytes[:20]:
        await echo(data, timeout=60)
    say(f"measuring: {len(ours_msgs)} batches each side, in blocks of {block}")
    start = time.perf_counter()
    clock = time.perf_counter
    for first in range(0, max(len(ours_msgs), len(workload.anchor)), block):
        for data in echo_bytes[first : first + block]:
            t0 = clock()
            await echo(data, timeout=60)
            results.echo_ms.append((clock() - t0) * 1000)
        for batch, message in zip(
            workload.ours[first : first + block], ours_msgs[first : first + block], strict=True
        ):
            t0 = clock()
            answer = await stub.ApplyImportBatch(message, timeout=60)
            results.ours_ms.append((clock() - t0) * 1000)
            check_answer(batch, answer, "ours")
        for batch in workload.anchor[first : first + block]:
            t0 = clock()
            changed = await anchor_batch(anchor, batch, event_id, integration_id)
            results.anchor_ms.append((clock() - t0) * 1000)
            if changed != batch.changed:
                raise BenchError(
                    f"anchor: batch {batch.command_id} changed {changed} rows, "
                    f"expected {batch.changed}"
                )
        done = len(results.ours_ms)
        say(
            f"  {done:>4}/{len(ours_msgs)}  ours p50 {percentile(results.ours_ms, 50):.3f} ms"
            f"  anchor p50 {percentile(results.anchor_ms, 50):.3f} ms"
            f"  echo p50 {percentile(results.echo_ms, 50):.3f} ms"
        )
    results.wall_seconds = time.perf_counter() - start


@contextlib.asynccontextmanager
async def echo_process(answer_bytes: int) -> AsyncIterator[int]:
    """bench/grpc_echo.py in its own process, as the command service runs in its own."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.grpc_echo", "--port", str(port),
        "--answer-bytes", str(answer_bytes),
        cwd=ROOT, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if b"listening" not in line:
            raise BenchError(f"the gRPC echo did not start: {line!r}")
        yield port
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def verify(db_url: str, workload: Workload, results: Results) -> None:
    """Every change landed, each once; unchanged rows wrote no log rows."""
    batches = workload.every()
    rows = [r for b in batches for r in b.rows]
    changed = [r for r in rows if r.changed]
    conn = await asyncpg.connect(db_url)
    try:
        landed = await conn.fetchval(
            """
            SELECT count(*)
              FROM unnest($1::uuid[], $2::text[], $3::text[]) AS v(id, status, score)
              JOIN unit u ON u.id = v.id AND u.status = v.status
              JOIN unit_competitor s ON s.unit_id = u.id AND s.sort_order = 1
                                    AND s.score = v.score
            """,
            [r.unit_id for r in changed],
            [r.status for r in changed],
            [r.scores[1] for r in changed],
        )
        counts = await conn.fetchrow(
            """
            SELECT (SELECT count(*) FROM command) AS commands,
                   (SELECT count(*) FROM timeline_item) AS timeline,
                   (SELECT count(*) FROM domain_event) AS events,
                   (SELECT count(*) FROM integration_row) AS row_log,
                   (SELECT count(*) FROM integration_key_state) AS key_state,
                   (SELECT count(*) FROM integration_run WHERE batch_done = 1) AS runs_done
            """
        )
    finally:
        await conn.close()
    expected = {
        "commands": len(batches),
        "timeline": len(batches),
        "events": len(changed),
        "row_log": len(changed),
        "key_state": len(rows),
        "runs_done": len(batches),
    }
    problems = [
        f"{name} {counts[name]} (expected {want})"
        for name, want in expected.items()
        if counts[name] != want
    ]
    if landed != len(changed):
        problems.append(f"changed values in place {landed} (expected {len(changed)})")
    if problems:
        results.checks.append("MISMATCH: " + "; ".join(problems))
    else:
        results.checks.append(
            f"ok: {len(changed):,} changes in place; {len(batches)} commands, "
            f"{len(changed):,} outbox and row-log rows, {len(rows):,} key states"
        )


# --- memory: the command service as its own process ------------------------------------------


async def post_load(port: int, batches: list[BatchIn]) -> None:
    settings = Settings.from_env({}, grpc_token=TOKEN)
    channel = open_channel(f"127.0.0.1:{port}", settings)
    try:
        stub = command_pb2_grpc.CommandServiceStub(channel)
        for batch in batches:
            check_answer(batch, await ours_batch(stub, grpc_batch(batch)), "command process")
    finally:
        await channel.close()


async def with_command_process(
    db_url: str, results: Results, work: Callable[[int], Awaitable[None]]
) -> None:
    """Run `work(port)` against `python -m omnium_command` in its own process, as deployed.

    Its idle RSS is read after start-up, before any call; its RSS after the work too.
    """
    port = free_port()
    env = dev_process_environ()
    env |= {
        "OMNIUM_DATABASE_URL": db_url,
        "OMNIUM_GRPC_CALLERS": f"bench:service:{TOKEN}",
        "OMNIUM_COMMAND_PORT": str(port),
        # Served metrics cost what they cost in production; a free port, not the default.
        "OMNIUM_COMMAND_METRICS_PORT": str(free_port()),
    }
    with tempfile.TemporaryDirectory(prefix="bench-command-") as tmp:
        logfile = Path(tmp) / "command.log"
        with logfile.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "omnium_command",
                cwd=ROOT,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        try:
            await wait_for_port(proc, port, logfile, within=60, name="the command process")
            await asyncio.sleep(2)
            results.idle_rss_mb = rss_mb(proc.pid)
            await work(port)
            results.loaded_rss_mb = rss_mb(proc.pid)
        finally:
            if proc.returncode is None:
                stopping = time.perf_counter()
                proc.send_signal(signal.SIGTERM)
                try:
                    results.stop_code = await asyncio.wait_for(proc.wait(), 30)
                    results.stop_seconds = time.perf_counter() - stopping
                except TimeoutError:
                    proc.kill()
                    results.stop_code = await proc.wait()
            results.service_log = await asyncio.to_thread(logfile.read_text, errors="replace")


# --- figures ---------------------------------------------------------------------------------


def describe(name: str, values: Sequence[float]) -> str:
    return (
        f"{name:<28} n={len(values)}  p50 {percentile(values, 50):7.3f}  "
        f"p90 {percentile(values, 90):7.3f}  p99 {percentile(values, 99):7.3f}  "
        f"mean {statistics.fmean(values):7.3f}  min {min(values):7.3f}  max {max(values):7.3f} ms"
    )


def report(args: argparse.Namespace, results: Results) -> list[str]:
    lines = ["", "== command batch benchmark =="]
    if results.reused:
        lines.append(f"table: reused {args.units:,} units from a kept {DB_NAME} (--keep)")
    elif results.build:
        b = results.build
        lines.append(
            f"build: {args.units:,} units and {2 * args.units:,} sides in {b['total']:.1f} s "
            f"(units {b['units']:.1f} s, sides {b['sides']:.1f} s, "
            f"vacuum analyze {b['vacuum_analyze']:.1f} s, checkpoint {b['checkpoint']:.1f} s)"
        )
    lines.append(
        f"workload: {args.batches} batches of {BATCH_UNITS} units per side, "
        f"{CHANGED_PER_BATCH} changed per batch, seed {args.seed}, blocks of {args.block}, "
        f"{args.warmup} warm-up batches per side; measured part took {results.wall_seconds:.1f} s"
    )
    lines.append(describe("ours (gRPC ApplyImportBatch)", results.ours_ms))
    lines.append(describe("anchor (bare asyncpg SQL)", results.anchor_ms))
    lines.append(describe("floor (bare gRPC echo)", results.echo_ms))
    lines.extend(f"checks: {c}" for c in results.checks)
    loaded = (
        f"; {results.loaded_rss_mb:.1f} MB after {POST_LOAD_BATCHES} batches"
        if results.loaded_rss_mb is not None
        else ""
    )
    stopped = (
        f"; SIGTERM -> exit {results.stop_code} in {results.stop_seconds:.2f} s"
        if results.stop_seconds is not None
        else f"; did not stop on SIGTERM (exit {results.stop_code} after kill)"
    )
    lines.append(f"command process RSS: idle {results.idle_rss_mb:.1f} MB{loaded}{stopped}")
    noisy = [
        line
        for line in results.service_log.splitlines()
        if any(w in line for w in ("WARNING", "ERROR", "Traceback", "incident"))
    ]
    if noisy:
        lines.append(f"command process log: {len(noisy)} warning/error lines, first: {noisy[0]}")
    grpc_p50 = percentile(results.ours_ms, 50)
    sql_p50 = percentile(results.anchor_ms, 50)
    echo_p50 = percentile(results.echo_ms, 50)
    lines += [
        "",
        f"batch25_grpc_p50_ms: {grpc_p50:.3f}",
        f"batch25_grpc_p99_ms: {percentile(results.ours_ms, 99):.3f}",
        f"batch25_sql_p50_ms: {sql_p50:.3f}",
        f"batch25_sql_p99_ms: {percentile(results.anchor_ms, 99):.3f}",
        f"batch25_ratio: {grpc_p50 / sql_p50:.3f}",
        # The floor: a bare gRPC call of the same bytes each way. The road's own cost is
        # ours - echo (statements and Python); the anchor pays no gRPC at all.
        f"grpc_echo_p50_ms: {echo_p50:.3f}",
        f"grpc_echo_p99_ms: {percentile(results.echo_ms, 99):.3f}",
        f"batch25_request_bytes: {results.request_bytes}",
        f"batch25_answer_bytes: {results.answer_bytes}",
        f"batch25_road_minus_floor_p50_ms: {grpc_p50 - echo_p50:.3f}",
        f"batch25_road_minus_floor_ratio: {(grpc_p50 - echo_p50) / sql_p50:.3f}",
        f"command_idle_rss_mb: {results.idle_rss_mb:.1f}",
    ]
    return lines


async def run(server_url: str, args: argparse.Namespace) -> Results:
    results = Results()
    db_url = database_url_for(server_url, DB_NAME)
    try:
        if args.keep and await reusable(server_url, args.units):
            results.reused = True
            say(f"reusing {DB_NAME}: it already holds {args.units:,} units")
        else:
            await recreate(server_url, DB_NAME)
        conn = await asyncpg.connect(db_url)
        try:
            applied = await apply_migrations(conn)
            if applied:
                say(f"migrations applied: {applied}")
            if not results.reused:
                say(f"building {args.units:,} units with two sides each ...")
                results.build = await build(conn, args.units)
                say(f"  built in {results.build['total']:.1f} s")
            event_id, integration_id = await setup_integration(conn)
            mark = time.perf_counter()
            workload = await prepare_workload(conn, integration_id, args)
            say(f"inputs ready in {time.perf_counter() - mark:.1f} s")
        finally:
            await conn.close()
        say("command service: its own process, as deployed")

        async def work(port: int) -> None:
            await measure(db_url, workload, event_id, integration_id, args.block, results, port)
            await post_load(port, workload.post_load)

        await with_command_process(db_url, results, work)
        await verify(db_url, workload, results)
    finally:
        if not args.keep:
            await drop(server_url, DB_NAME)
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.command_batch", description=__doc__)
    parser.add_argument("--units", type=int, default=1_000_000, help="units in the table")
    parser.add_argument("--batches", type=int, default=300, help="measured batches per side")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up batches per side")
    parser.add_argument("--block", type=int, default=30, help="batches per side per block")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed for the workload")
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
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    try:
        with database_server(args.data_dir) as server_url:
            results = asyncio.run(run(server_url, args))
    except BenchError as exc:
        print(f"bench.command_batch: {exc}", file=sys.stderr, flush=True)
        return 1
    # Printed after the servers stopped, so the figures are the last lines.
    for line in report(args, results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
