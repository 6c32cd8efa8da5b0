"""The answers built from a plan: accepted with what changed, row by row for a batch."""

from __future__ import annotations

from omnium.command.v1 import command_pb2
from omnium_command._intent import Request, RowRef
from omnium_command._plan import Outcome, Plan
from omnium_grpc import field_changes, timestamp_now


def render(
    answer: command_pb2.Answer | command_pb2.BatchAnswer,
    request: Request,
    plan: Plan,
    seq: int,
    run_batch_done: int,
) -> None:
    """The answer to a command or batch its plan makes, in place: accepted, with what
    changed and what was kept by hand, or row by row for a batch."""
    answer.outcome = command_pb2.OUTCOME_ACCEPTED
    if plan.changed:
        answer.seq = seq
    if isinstance(answer, command_pb2.Answer):
        changes = [d for d in plan.writes.diff if not d.get("kept_by_hand")]
        kept = [d for d in plan.writes.diff if d.get("kept_by_hand")]
        answer.changes.extend(field_changes(changes))
        answer.kept_by_hand.extend(field_changes(kept))
        answer.saved_at.CopyFrom(timestamp_now())
        return
    # Built in place, in position order: extending from separate messages copies each one.
    rows: list[tuple[int, tuple[RowRef, Outcome] | tuple[str, str]]] = [
        (position, (key, reason)) for position, (key, _hash, reason) in request.refused_rows.items()
    ]
    for intent, outcome in plan.outcomes:
        assert intent.row is not None
        rows.append((intent.row.position, (intent.row, outcome)))
    rows.sort(key=lambda r: r[0])
    add = answer.rows.add
    for position, item in rows:
        if isinstance(item[1], Outcome):
            row, outcome = item
            add(
                position=position,
                key=row.key,
                outcome=outcome.row_outcome,
                reason=outcome.reason,
                subject_id=outcome.subject_id or "",
                changed_fields=[c["field"] for c in outcome.changes],
                kept_by_hand=[k["field"] for k in outcome.kept],
                applied_seq=outcome.applied_seq or 0,
            )
        else:
            key, reason = item
            add(
                position=position,
                key=key,
                outcome=command_pb2.ROW_OUTCOME_REFUSED,
                reason=reason,
            )
    answer.batch_done = run_batch_done + 1


def show_dry_run(answer: command_pb2.BatchAnswer, plan: Plan) -> None:
    """A dry run's answer: what it would do, row by row, with the changes."""
    by_position = {a.position: a for a in answer.rows}
    for intent, outcome in plan.outcomes:
        if intent.row is not None and intent.row.position in by_position:
            by_position[intent.row.position].changes.extend(field_changes(outcome.changes))
