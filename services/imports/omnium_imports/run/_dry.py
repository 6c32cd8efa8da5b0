"""A dry run: a stored Scout run against today's data, through the same stages as a run, in
a context that writes nothing; the command service compares each batch with its own diff."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

from omnium.command.v1 import command_pb2
from omnium_grpc import ROW_OUTCOMES
from omnium_imports import _batches, _runs
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutError
from omnium_imports.mapping import MappingVersion
from omnium_imports.run._context import Context
from omnium_imports.run._map import ready
from omnium_imports.run._write import cut_batches, send_batches

_MAPPING_OUTCOMES = {
    "held": command_pb2.ROW_OUTCOME_HELD,
    "problem": command_pb2.ROW_OUTCOME_PROBLEM,
}


@dataclass(slots=True)
class Compared:
    """The answers that are not unchanged, how many rows had each outcome, and the batches
    the command service would not answer."""

    answers: list[command_pb2.RowAnswer] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    unanswered: list[tuple[int, str]] = field(default_factory=list)

    def count(
        self,
        batch_no: int,
        rows: list[command_pb2.BatchRow],
        answer: command_pb2.BatchAnswer | None,
        problem: str,
    ) -> None:
        """One batch's answer."""
        if answer is None:
            self.unanswered.append((batch_no, problem))
            return
        for row_answer in answer.rows:
            self.outcomes[ROW_OUTCOMES.get(row_answer.outcome, "problem")] += 1
            if row_answer.outcome != command_pb2.ROW_OUTCOME_UNCHANGED:
                self.answers.append(row_answer)


async def dry_run(
    ctx: Context,
    integration: Integration,
    scout_run_id: str,
    *,
    version: MappingVersion | None = None,
    items: list[object] | None = None,
) -> tuple[list[command_pb2.RowAnswer], dict[str, int]]:
    """What each row of the run would do: the answers that are not unchanged, and how many
    rows had each outcome. Every row is compared: a dry run takes no fast path."""
    ctx = ctx.reading()
    if items is None:
        scout_run = await ctx.scout.run(integration.base_url, scout_run_id)
        items = await ctx.scout.items(integration.base_url, scout_run)
    if version is None:
        version = MappingVersion.parse(integration.spec or {})
    what = f"dry run of {scout_run_id}"
    rows = await ctx.db(
        f"{what}: mapping", lambda conn: _runs.mapped(conn, integration, version, items)
    )
    compared = Compared(
        [
            command_pb2.RowAnswer(
                position=row.position,
                key=row.key or "",
                reason=row.reason,
                outcome=_MAPPING_OUTCOMES[row.outcome],
            )
            for row in rows
            if row.outcome in _MAPPING_OUTCOMES
        ],
        Counter(row.outcome for row in rows if row.outcome != "ok"),
    )
    pretend = str(uuid.uuid4())
    ok = await ready(ctx, integration, rows, f"{what}: units")
    planned = await cut_batches(ctx, integration, pretend, scout_run_id, rows, ok)
    clearing = _batches.Clearing.of(version)
    await send_batches(ctx, integration, pretend, planned.batches, clearing, compared.count)
    if compared.unanswered:
        _, problem = min(compared.unanswered)
        raise ScoutError(f"the command service would not say: {problem}")
    compared.answers.sort(key=lambda a: a.position)
    return compared.answers, dict(compared.outcomes)
