"""An action checked against its sport, with no I/O: who may send it, its client id, the match
state after it, and an undo's replay of the actions that stand. The Scorer reads and sends;
these decide, so they are tested alone (tests/unit/test_scoring_checks.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from google.protobuf import json_format, struct_pb2

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_grpc import actor_as_sent
from omnium_sports import UNDO, ActionRefused, Sport

_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")
Outcome = scoring_pb2.Outcome


def act_answer(action: scoring_pb2.Action, outcome: int, reason: str = "") -> scoring_pb2.ActAnswer:
    return scoring_pb2.ActAnswer(client_id=action.client_id, outcome=outcome, reason=reason)  # type: ignore[arg-type]


def as_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    json_format.ParseDict(dict(value), struct)
    return struct


def check_actor(
    actor: actor_pb2.Actor, *, sign_in_required: bool
) -> tuple[actor_pb2.Actor, str | None]:
    """The actor to record, or the reason the action cannot be taken from this sender."""
    out = actor_as_sent(actor, "scorer")
    if out.kind == actor_pb2.Actor.KIND_SCORER and not out.source_code:
        if sign_in_required:
            return out, "sign in first: every action records the account that sent it"
        out.name = out.name or "scorer (not signed in)"
    if not out.name:
        return out, "actor.name is empty: every action says who sent it"
    if not out.screen:
        return out, "actor.screen is empty: say which screen or app the action came from"
    return out, None


def client_id_problem(action: scoring_pb2.Action) -> str | None:
    if _CLIENT_ID.match(action.client_id):
        return None
    return "the action has no usable client id: 1 to 200 letters, digits or . _ : @ / -"


def record_of(action: scoring_pb2.Action) -> dict[str, Any]:
    """The action as recorded, with "at" (seconds by the device's clock; 0 when unknown)."""
    record: dict[str, Any] = {"kind": action.kind, "at": 0.0}
    if action.HasField("client_at"):
        tapped = action.client_at.ToDatetime(tzinfo=UTC)
        record["client_at"] = tapped.isoformat()
        record["at"] = tapped.timestamp()
    return record


def step(
    sport: Sport, unit: Mapping[str, Any], action: scoring_pb2.Action
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state after an action that is not an undo, and the action as recorded."""
    record = record_of(action)
    fields = json_format.MessageToDict(action.fields)
    record.update(side=action.side or None, fields=fields)
    state = unit["match_state"] or sport.new_state(unit["side_count"])
    taken = {
        "kind": action.kind,
        "side": action.side or None,
        "fields": fields,
        "at": record.pop("at"),
    }
    return sport.apply(state, taken), record


def undo(
    sport: Sport, side_count: int, rows: Sequence[Mapping[str, Any]], action: scoring_pb2.Action
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The state once `action` (an undo) takes back its target, replayed from `rows` (every
    saved action of the match, in order: seq, kind, side, fields, client_at, undone_by), and the
    undo as recorded. Refused when there is nothing to undo, the target is unknown, an undo, or
    undone already, or when a later action would no longer be possible without it."""
    record = record_of(action)
    del record["at"]
    standing = [r for r in rows if r["kind"] != UNDO and r["undone_by"] is None]
    if not standing:
        raise ActionRefused("there is nothing to undo in this match")
    target = action.undo_seq or standing[-1]["seq"]
    by_seq = {r["seq"]: r for r in rows}
    if target not in by_seq:
        raise ActionRefused(f"there is no action {target} in this match")
    if by_seq[target]["kind"] == UNDO:
        raise ActionRefused("an undo cannot be undone: score the action again")
    if by_seq[target]["undone_by"] is not None:
        raise ActionRefused(f"action {target} was already undone")
    replayed = sport.new_state(side_count)
    for row in standing:
        if row["seq"] == target:
            continue
        tapped = row["client_at"]
        try:
            replayed = sport.apply(
                replayed,
                {
                    "kind": row["kind"],
                    "side": row["side"],
                    "fields": row["fields"],
                    "at": tapped.timestamp() if tapped is not None else 0.0,
                },
            )
        except ActionRefused as exc:
            raise ActionRefused(
                f"undoing action {target} would make action {row['seq']} ({row['kind']}) "
                f"impossible: {exc}. Undo the later actions first."
            ) from None
    record.update(undoes=target, fields={"seq": target})
    return replayed, record
