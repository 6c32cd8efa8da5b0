"""A dry run: a stored Scout run against today's data, through the command service's own diff.
Nothing is written."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import TYPE_CHECKING

from omnium.command.v1 import command_pb2
from omnium_grpc import ROW_OUTCOMES
from omnium_imports import _batches, _runs, _send
from omnium_imports._runs import Integration
from omnium_imports._scout import ScoutError
from omnium_imports.mapping import MappingVersion

if TYPE_CHECKING:
    from omnium_imports._pipeline import Pipeline

_MAPPING_OUTCOMES = {
    "held": command_pb2.ROW_OUTCOME_HELD,
    "problem": command_pb2.ROW_OUTCOME_PROBLEM,
}


async def dry_run(
    pipeline: Pipeline,
    integration: Integration,
    scout_run_id: str,
    *,
    version: MappingVersion | None = None,
    items: list[object] | None = None,
) -> tuple[list[command_pb2.RowAnswer], dict[str, int]]:
    """What each row of the run would do: the answers that are not unchanged, and how many
    rows had each outcome. Every row is compared: a dry run takes no fast path."""
    if items is None:
        scout_run = await pipeline.scout.run(integration.base_url, scout_run_id)
        items = await pipeline.scout.items(integration.base_url, scout_run)
    if version is None:
        version = MappingVersion.parse(integration.spec or {})
    async with pipeline.pool.acquire() as conn:
        mapped = await _runs.mapped(conn, integration, version, items)
        ready = [row for row in mapped if row.outcome == "ok"]
        unit_ids = await _runs.unit_ids(conn, integration, ready)
    answers: list[command_pb2.RowAnswer] = [
        command_pb2.RowAnswer(
            position=row.position,
            key=row.key or "",
            reason=row.reason,
            outcome=_MAPPING_OUTCOMES[row.outcome],
        )
        for row in mapped
        if row.outcome in _MAPPING_OUTCOMES
    ]
    outcomes: Counter[str] = Counter(row.outcome for row in mapped if row.outcome != "ok")
    pretend = str(uuid.uuid4())
    settings = pipeline.settings
    groups = _batches.chunks(
        _batches.ordered(ready, integration.target, unit_ids), settings.database.batch_max_units
    )
    clearing = _batches.Clearing.of(version)
    for batch_no, group in enumerate(groups):
        rows = [_batches.batch_row(row, integration.target, uid, clearing) for row, uid in group]
        answer, problem = await _send.batch(
            pipeline.command, settings, integration, pretend, batch_no, rows, dry_run=True
        )
        if answer is None:
            raise ScoutError(f"the command service would not say: {problem}")
        for row_answer in answer.rows:
            outcomes[ROW_OUTCOMES.get(row_answer.outcome, "problem")] += 1
            if row_answer.outcome != command_pb2.ROW_OUTCOME_UNCHANGED:
                answers.append(row_answer)
    answers.sort(key=lambda a: a.position)
    return answers, dict(outcomes)
