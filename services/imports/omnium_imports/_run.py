"""One run on its way through the pipeline's stages (_pipeline.py), and what it ends with."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import asyncpg

from omnium.command.v1 import command_pb2
from omnium_grpc import ROW_OUTCOMES
from omnium_imports import _batches, _runs
from omnium_imports._keystate import KeyStateCache
from omnium_imports._queue import Job
from omnium_imports._runs import Batch, Integration
from omnium_imports._scout import ScoutPage, ScoutRun
from omnium_imports.mapping import MappedRow, MappingVersion
from omnium_settings import Settings

if TYPE_CHECKING:
    from omnium_imports._pipeline import Pipeline

_T = TypeVar("_T")
log = logging.getLogger(__name__)


class HandedOver(Exception):
    """This process is stopping: its run stopped between batches, to go back to the queue
    with its run kept, so another copy continues it at once (saved batches answer duplicate)."""


class StageError(Exception):
    """A stage could not do its work: the run ends failed with this message as its reason, so
    it says what happened and what to do."""


def failure_reason(run_id: str | None, stage: str, exc: Exception) -> str:
    """What a failed run's record says: a StageError's own words, or what happened where."""
    if isinstance(exc, StageError):
        log.warning("run %s: %s", run_id, exc)
        return str(exc)
    log.exception("run %s: the %s step failed", run_id, stage)
    return (
        f"Something went wrong on our side in the {stage} step ({type(exc).__name__}: {exc}). "
        "What was saved stays; the run is read again on the next check, or press Run now."
    )


@dataclass(slots=True)
class RunResult:
    """What one job did, for its log line, the job row and the tests."""

    status: str
    run_id: str | None = None
    reason: str | None = None
    outcomes: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class Run:
    """One run on its way through the stages: each stage sets what the later ones read."""

    pipeline: Pipeline
    integration: Integration
    job: Job
    # fetch: Scout's run, the mapping version it is read with, and its pages of rows
    scout_run: ScoutRun = field(init=False)
    version: MappingVersion = field(init=False)
    pages: list[ScoutPage] = field(init=False)
    # record: our run's id in integration_run
    id: str = field(init=False)
    # map
    mapped: list[MappedRow] = field(init=False)
    clearing: _batches.Clearing = field(init=False)
    # fast path: the ok rows it did not skip, and our ids of the units they name by code
    key_state: KeyStateCache = field(init=False)
    ready: list[MappedRow] = field(init=False)
    # keys a run newer than this one wrote, with its Scout id: left as they are ("older")
    newer: dict[str, str] = field(default_factory=dict)
    unit_ids: dict[str, str] = field(init=False)
    # guards: a full run that passed the size check by itself lists every key
    complete: bool = field(init=False)
    # batches and send: each row's outcome by its position, and the batches not saved
    groups: list[Batch] = field(init=False)
    counted: dict[int, str] = field(init=False)
    held_reasons: dict[int, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return self.pipeline.settings

    async def db(
        self,
        what: str,
        work: Callable[[asyncpg.Connection], Awaitable[_T]],
        *,
        transaction: bool = False,
    ) -> _T:
        """`work` on a connection of its own, tried again while the database is out."""
        return await self.pipeline.db(
            f"run {self.scout_run.id}: {what}", work, transaction=transaction
        )

    async def end(self, status: str, reason: str | None) -> RunResult:
        """Close the run with this status before its batches: nothing of it was written."""
        await self.pipeline.finish(self.id, status, reason, Counter())
        return RunResult(status, self.id, reason)

    async def on_record(self, status: str, reason: str | None) -> str:
        """The run on record with this status (and reason); our id of it."""
        integration, job, scout_run = self.integration, self.job, self.scout_run
        return await self.pipeline.db(
            f"recording run {scout_run.id}",
            lambda conn: _runs.record(conn, integration, job, scout_run, status, reason),
            transaction=True,
        )


_PLACED = frozenset({"accepted", "unchanged", "kept_by_hand"})
# The command service's reason for a row naming a unit we do not have (and may not create).
_NO_UNIT = "there is no unit"


def count_batch(
    run: Run,
    batch_no: int,
    rows: list[command_pb2.BatchRow],
    answer: command_pb2.BatchAnswer | None,
    problem: str,
) -> None:
    """One batch's answer in the run's outcomes and its key state."""
    key_state = run.key_state
    if answer is None:
        run.failures.append(f"batch {batch_no}: {problem}")
        for row in rows:
            run.counted[row.position] = "not_sent"
            key_state.forget(row.key)
        return
    hashes = {row.key: row.hash for row in rows}
    for row_answer in answer.rows:
        outcome = ROW_OUTCOMES.get(row_answer.outcome, "problem")
        if outcome == "not_placed" and row_answer.reason.startswith(_NO_UNIT):
            # Seed: "Unknown ids are held ... with a clear question", tried again by itself
            # on every later run (its key state is forgotten below, so it is sent again).
            outcome = "held"
            run.held_reasons[row_answer.position] = (
                f"Scout's row {row_answer.key} names a unit we do not have "
                f"({row_answer.reason.removeprefix(_NO_UNIT).strip()}). Which of our units is "
                f"this? Add a unit lookup from {row_answer.key} to ours (python -m "
                "omnium_imports lookups add), or create the unit; the row then goes through "
                "by itself on the next run."
            )
        run.counted[row_answer.position] = outcome
        if outcome == "held" and row_answer.position not in run.held_reasons:
            run.held_reasons[row_answer.position] = row_answer.reason
        if outcome in _PLACED:
            key_state.written(
                row_answer.key,
                hashes.get(row_answer.key),
                row_answer.subject_id,
                row_answer.applied_seq,
            )
        else:
            key_state.forget(row_answer.key)
