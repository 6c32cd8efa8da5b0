"""Which parts of road.sql a command needs, and their arguments: the read, the lock, the write."""

from __future__ import annotations

from collections.abc import Sequence

from omnium.command.v1 import command_pb2
from omnium_command._intent import ReadKeys, Request
from omnium_command._plan import Plan
from omnium_command._rows import ReadState, UnitRead, Versioned
from omnium_command._sql import QUERIES
from omnium_grpc import row_outcome_word
from omnium_telemetry import current_traceparent

Row = command_pb2.RowOutcome
# A statement as asyncpg takes it: its text and its arguments, in order.
Bound = tuple[str, list[object]]

# Every column of the read; those of the parts a command leaves out are None.
NOTHING_READ: dict[str, object] = dict.fromkeys(
    [
        "previous_answer",
        "previous_hash",
        "seq",
        "units",
        "sides",
        "competitors",
        "medal_rows",
        "known_competitors",
        "known_nocs",
        "disciplines",
        "integration_id",
        "run_integration_id",
        "run_status",
        "run_batch_done",
        "event_id",
    ]
)

# A batch row placed on a record: its key state keeps its hash and the seq it was applied at.
_PLACED = (
    command_pb2.ROW_OUTCOME_ACCEPTED,
    command_pb2.ROW_OUTCOME_UNCHANGED,
    command_pb2.ROW_OUTCOME_KEPT_BY_HAND,
)


def read(keys: ReadKeys) -> Bound:
    """The read of the records these keys name, with only the parts they need."""
    statement = QUERIES.compose("read", keys.parts())
    return statement.text, statement.args(keys.args())


def lock(state: ReadState) -> Bound:
    """The locks, taken first under contention, of every record the read found."""
    statement = QUERIES.statement("lock")
    return statement.text, statement.args(
        {
            "unit_ids": _guard(state["units"])[0],
            "competitor_ids": _guard(state["competitors"])[0],
            "medal_row_ids": _guard(state["medal_rows"])[0],
        }
    )


def refs(state: ReadState) -> dict[str, dict[str, str]]:
    """How each record was named (id, code or medal row ref) -> its id, per kind."""
    found: dict[str, dict[str, str]] = {"unit": {}, "competitor": {}, "medal_row": {}}
    for unit in state["units"] or ():
        found["unit"][unit["id"]] = found["unit"][unit["code"]] = unit["id"]
    for competitor in state["competitors"] or ():
        found["competitor"][competitor["id"]] = found["competitor"][competitor["code"]] = (
            competitor["id"]
        )
    for medal_row in state["medal_rows"] or ():
        found["medal_row"][medal_row["ref"]] = medal_row["id"]
    return found


def write(request: Request, plan: Plan, state: ReadState, answer: bytes) -> Bound:
    """The one write of a command: the parts it has something for, with their arguments.
    `answer` is the answer as stored, for a repeat of the command id."""
    if request.batch is not None:
        _batch_rows(request, plan)
    units = _written_units(state, plan)
    statement = QUERIES.compose("write", _write_parts(request, plan, state, units))
    return statement.text, statement.args(_write_args(request, plan, state, units, answer))


def _guard(rows: Sequence[Versioned] | None) -> tuple[list[str], list[int]]:
    """The ids read and the changed_seq each had: the write locks them and checks them."""
    rows = rows or ()
    return [row["id"] for row in rows], [row["changed_seq"] for row in rows]


_Units = tuple[list[UnitRead], list[UnitRead]]


def _written_units(state: ReadState, plan: Plan) -> _Units:
    """The units read that the plan writes (the write locks them) and those it only read
    (the write checks they are unchanged since the read, without a lock)."""
    units = state["units"] or ()
    if not units:
        return [], []
    ids = {update["id"] for update in plan.writes.unit_updates}
    return (
        [row for row in units if row["id"] in ids],
        [row for row in units if row["id"] not in ids],
    )


def _write_parts(request: Request, plan: Plan, state: ReadState, units: _Units) -> list[str]:
    """The parts of the write this command has something for."""
    writes = plan.writes
    written, only_read = units
    parts = [
        name
        for name, present in (
            ("unit_locks", written),
            ("unit_checks", only_read),
            ("competitor_locks", state["competitors"]),
            ("medal_locks", state["medal_rows"]),
            ("unit_inserts", writes.unit_inserts),
            ("unit_updates", writes.unit_updates),
            ("side_updates", writes.side_updates),
            ("side_inserts", writes.side_inserts),
            ("medal_updates", writes.medal_updates),
            ("medal_inserts", writes.medal_inserts),
            ("competitor_updates", writes.competitor_updates),
            ("outbox", writes.outbox),
            ("key_states", writes.key_states),
            ("row_log", writes.row_log),
            ("match_actions", writes.match_actions),
        )
        if present
    ]
    if any(action.get("undoes") for action in writes.match_actions):
        parts.append("match_undos")
    if request.batch is not None:
        parts.append("run")
    return parts


def _write_args(
    request: Request,
    plan: Plan,
    state: ReadState,
    units: _Units,
    answer: bytes,
) -> dict[str, object]:
    writes = plan.writes
    written, only_read = units
    actor = request.actor
    timeline = {
        "event_id": plan.event_id or state["event_id"],
        "subject_kind": request.subject_kind,
        "subject_id": request.batch.run_id if request.batch else plan.subject_id,
        "unit_ids": writes.unit_ids,
        "actor_kind": request.actor_kind,
        "actor_name": actor.name,
        "source_code": actor.source_code or None,
        "screen": actor.screen or None,
        "payload": request.payload,
        "diff": writes.diff,
    }
    batch = request.batch
    locked_unit_ids, locked_unit_seqs = _guard(written)
    checked_unit_ids, checked_unit_seqs = _guard(only_read)
    competitor_ids, competitor_seqs = _guard(state["competitors"])
    medal_row_ids, medal_row_seqs = _guard(state["medal_rows"])
    # The key states as columns: key, kind, subject id, hash, applied_seq.
    key_states = [list(column) for column in zip(*writes.key_states, strict=True)]
    keys, kinds, subject_ids, hashes, applied_seqs = key_states or ([], [], [], [], [])
    return {
        "seq": state["seq"],
        "command_id": request.command_id,
        "code": request.code,
        "source_code": actor.source_code or None,
        "request_hash": request.request_hash,
        "answer": answer,
        "timeline": timeline,
        "locked_unit_ids": locked_unit_ids,
        "locked_unit_seqs": locked_unit_seqs,
        "checked_unit_ids": checked_unit_ids,
        "checked_unit_seqs": checked_unit_seqs,
        "competitor_ids": competitor_ids,
        "competitor_seqs": competitor_seqs,
        "medal_row_ids": medal_row_ids,
        "medal_row_seqs": medal_row_seqs,
        "unit_inserts": writes.unit_inserts,
        "unit_updates": writes.unit_updates,
        "side_updates": writes.side_updates,
        "side_inserts": writes.side_inserts,
        "medal_updates": writes.medal_updates,
        "medal_inserts": writes.medal_inserts,
        "competitor_updates": writes.competitor_updates,
        "outbox": writes.outbox,
        # The command's trace, once per command, for whoever reads its outbox rows.
        "trace_context": current_traceparent() if writes.outbox else None,
        "match_actions": writes.match_actions,
        "integration_id": state["integration_id"],
        "run_id": batch.run_id if batch else None,
        "batch_no": batch.batch_no if batch else None,
        "row_log": writes.row_log,
        "key_state_keys": keys,
        "key_state_kinds": kinds,
        "key_state_subject_ids": subject_ids,
        "key_state_hashes": hashes,
        "key_state_applied_seqs": applied_seqs,
    }


def _batch_rows(request: Request, plan: Plan) -> None:
    """A batch's key states and row log, one per row (refused ones too)."""
    writes = plan.writes
    for position, (key, row_hash, reason) in request.refused_rows.items():
        writes.key_states.append((key, "unknown", None, None, None))
        writes.row_log.append(
            {
                "position": position,
                "key": key,
                "kind": "unknown",
                "subject_id": None,
                "hash": row_hash.hex(),
                "outcome": "refused",
                "reason": reason,
            }
        )
    for intent, outcome in plan.outcomes:
        row = intent.row
        assert row is not None
        placed = outcome.row_outcome in _PLACED
        writes.key_states.append(
            (
                row.key,
                intent.kind,
                outcome.subject_id,
                row.hash if placed else None,
                outcome.applied_seq if placed else None,
            )
        )
        if outcome.row_outcome != command_pb2.ROW_OUTCOME_UNCHANGED:
            writes.row_log.append(
                {
                    "position": row.position,
                    "key": row.key,
                    "kind": intent.kind,
                    "subject_id": outcome.subject_id,
                    "hash": row.hash.hex(),
                    "outcome": row_outcome_word(outcome.row_outcome),
                    "reason": outcome.reason or None,
                    "diff": outcome.changes,
                    "kept": outcome.kept,
                }
            )
