"""The batches: the mapped rows cut into numbered batches, and sent through the command
service a few at a time, each answer counted as it comes.

In a context that does not write, the batches are cut afresh (no plan is kept) and the
command service only compares them (a dry run).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from omnium.command.v1 import command_pb2
from omnium_grpc import ROW_OUTCOMES
from omnium_imports import _batches, _runs, _send
from omnium_imports._keystate import KeyStateCache
from omnium_imports._runs import Batch, Integration
from omnium_imports.mapping import MappedRow
from omnium_imports.run._context import Context, HandedOver
from omnium_imports.run._map import Mapped, Ready
from omnium_telemetry import tracer

log = logging.getLogger(__name__)

# One batch's answer, as it comes: its number, its rows, the answer (None when it could not be
# saved) and what went wrong.
Count = Callable[[int, list[command_pb2.BatchRow], command_pb2.BatchAnswer | None, str], None]

_PLACED = frozenset({"accepted", "unchanged", "kept_by_hand"})
# The command service's reason for a row naming a unit we do not have (and may not create).
_NO_UNIT = "there is no unit"


@dataclass(frozen=True, slots=True)
class Planned:
    """The run's numbered batches."""

    batches: list[Batch]


@dataclass(slots=True)
class Sent:
    """Each row's outcome by its position, the reasons of the rows held, and the batches that
    could not be saved. The answers are counted into it, and into the key state, as they come."""

    counted: dict[int, str]
    key_state: KeyStateCache
    held_reasons: dict[int, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(
        self,
        batch_no: int,
        rows: list[command_pb2.BatchRow],
        answer: command_pb2.BatchAnswer | None,
        problem: str,
    ) -> None:
        """One batch's answer in the run's outcomes and its key state."""
        key_state = self.key_state
        if answer is None:
            self.failures.append(f"batch {batch_no}: {problem}")
            for row in rows:
                self.counted[row.position] = "not_sent"
                key_state.forget(row.key)
            return
        hashes = {row.key: row.hash for row in rows}
        for row_answer in answer.rows:
            outcome = ROW_OUTCOMES.get(row_answer.outcome, "problem")
            if outcome == "not_placed" and row_answer.reason.startswith(_NO_UNIT):
                # An unknown unit is held with a clear question, and tried again by itself on
                # every later run (its key state is forgotten below, so it is sent again).
                outcome = "held"
                self.held_reasons[row_answer.position] = (
                    f"Scout's row {row_answer.key} names a unit we do not have "
                    f"({row_answer.reason.removeprefix(_NO_UNIT).strip()}). Which of our units "
                    f"is this? Add a unit lookup from {row_answer.key} to ours (python -m "
                    "omnium_imports lookups add), or create the unit; the row then goes "
                    "through by itself on the next run."
                )
            self.counted[row_answer.position] = outcome
            if outcome == "held" and row_answer.position not in self.held_reasons:
                self.held_reasons[row_answer.position] = row_answer.reason
            if outcome in _PLACED:
                key_state.written(
                    row_answer.key,
                    hashes.get(row_answer.key),
                    row_answer.subject_id,
                    row_answer.applied_seq,
                )
            else:
                key_state.forget(row_answer.key)


def first_counts(rows: list[MappedRow], ready: Ready) -> dict[int, str]:
    """Each mapped row's outcome before the batches, by its position."""
    # Each row is counted once, by its position, whatever the attempts: a resumed run sends
    # its saved batches again (they answer duplicate, with their rows' answers), and by then
    # the fast path would skip those rows too. A row's answer replaces what it was before.
    # The fast path's rows are "fast_path" (unchanged, skipped early) and nothing else.
    sent = {row.position for row in ready.rows}
    return {
        row.position: row.outcome
        if row.outcome != "ok"
        else (
            "not_sent"
            if row.position in sent
            else ("older" if row.key in ready.newer else "fast_path")
        )
        for row in rows
    }


async def cut_batches(
    ctx: Context,
    integration: Integration,
    run_id: str,
    scout_run_id: str,
    rows: list[MappedRow],
    ready: Ready,
) -> Planned:
    """The mapping's held and problem rows logged, and the ready ones cut into numbered
    batches (as first cut, when the run was tried before)."""
    size = ctx.settings.database.batch_max_units
    if not ctx.writes:
        ordered = _batches.ordered(ready.rows, integration.target, ready.unit_ids)
        return Planned(_batches.chunks(ordered, size))
    label = f"run {scout_run_id}"
    await ctx.db(
        f"{label}: row log",
        lambda conn: _runs.log_mapping(conn, integration, run_id, rows),
        transaction=True,
    )
    batches = await ctx.db(
        f"{label}: batches",
        lambda conn: _runs.plan(
            conn,
            run_id,
            integration.target,
            rows,
            ready.rows,
            ready.unit_ids,
            size,
            set(ready.newer),
        ),
    )
    if ready.newer:
        log.info(
            "run %s: %d keys were written by newer runs (%s) and are left as they are",
            scout_run_id,
            len(ready.newer),
            ", ".join(sorted(set(ready.newer.values()))[:3]),
        )
    return Planned(batches)


async def send(
    ctx: Context,
    integration: Integration,
    run_id: str,
    mapped: Mapped,
    planned: Planned,
    counted: dict[int, str],
) -> Sent:
    """The batches through the command service, each answer counted into `counted` (each
    row's outcome by its position, first_counts) and the key state."""
    sent = Sent(counted, mapped.key_state)
    await send_batches(ctx, integration, run_id, planned.batches, mapped.clearing, sent.count)
    mapped.key_state.loaded_for_run = run_id
    return sent


async def send_batches(
    ctx: Context,
    integration: Integration,
    run_id: str,
    batches: list[Batch],
    clearing: _batches.Clearing,
    count: Count,
) -> None:
    """The batches through the command service, a few in flight at once.

    A run's batches name disjoint units, so the command service and PostgreSQL work on one
    while this process prepares the next. Each batch's messages are built when it is sent
    and dropped once `count` has its answer, so a big run never holds them all. Once the
    process is stopping no batch is started: the run is handed over (HandedOver).
    """
    queue = iter(enumerate(batches))
    handed_over = False

    async def sender() -> None:
        nonlocal handed_over
        for batch_no, group in queue:
            if not group:
                # A planned batch whose every key a newer run wrote since: nothing to send.
                continue
            if ctx.stopping.is_set():
                # The batches in flight finish; this one and the rest are another copy's.
                handed_over = True
                return
            with tracer("omnium.imports").start_as_current_span(
                "imports.batch", attributes={"omnium.batch.no": batch_no}
            ) as span:
                rows = [
                    _batches.batch_row(row, integration.target, uid, clearing) for row, uid in group
                ]
                span.set_attribute("omnium.batch.rows", len(rows))
                answer, problem = await _send.batch(
                    ctx.command,
                    ctx.settings,
                    integration,
                    run_id,
                    batch_no,
                    rows,
                    dry_run=not ctx.writes,
                )
                if problem:
                    span.set_attribute("omnium.batch.problem", problem)
            count(batch_no, rows, answer, problem)

    await asyncio.gather(*(sender() for _ in range(ctx.settings.imports.batches_in_flight)))
    if handed_over:
        raise HandedOver(run_id)
