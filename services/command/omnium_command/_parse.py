"""Turn a gRPC Command or ImportBatch into a Request for the road, or refuse it plainly."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence

from google.protobuf import json_format
from google.protobuf.message import Message

from omnium.command.v1 import command_pb2
from omnium_command._intent import BatchContext, Intent, ReadKeys, Request, RowRef
from omnium_command._records import COMPETITOR, MEDAL_ROW, SIDE, UNIT, BadValue, Kind, moment
from omnium_command._rows import Match
from omnium_grpc import actor_as_sent, canonical_id, is_canonical_id

_SIDE_FIELD = re.compile(r"^sides\[(\d+)\]\.([a-z_]+)$")
_COMMAND_ID = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")


class Refusal(Exception):
    """The command cannot be applied as sent. The message says why and what to do."""


def _id(value: str, what: str) -> str:
    if (canonical := canonical_id(value)) is None:
        raise Refusal(f"{what} {value!r} is not an id (a UUID)")
    return canonical


def _check_command_id(command_id: str) -> None:
    if not command_id:
        raise Refusal("command_id is empty: give every command its own id, so a re-send is safe")
    if not _COMMAND_ID.match(command_id):
        raise Refusal(
            f"command_id {command_id[:80]!r} is not usable: use 1 to 200 letters, digits "
            "or . _ : @ / -"
        )


def _sides(raw: object, *, prefix: str = "sides") -> dict[int, dict[str, object]]:
    if not isinstance(raw, list):
        raise BadValue(f"{prefix} must be a list of sides, each with its order")
    sides: dict[int, dict[str, object]] = {}
    for index, side in enumerate(raw):
        if not isinstance(side, Mapping) or "order" not in side:
            raise BadValue(f"{prefix}[{index}] needs an order (1 for the first side)")
        order = side["order"]
        if isinstance(order, float) and order.is_integer():
            order = int(order)
        if not isinstance(order, int) or order < 1:
            raise BadValue(f"{prefix}[{index}].order must be 1 or more, not {order!r}")
        if order in sides:
            raise BadValue(f"side {order} is named twice")
        values = {key: value for key, value in side.items() if key != "order"}
        sides[order] = SIDE.clean(values, prefix=f"sides[{order}].")
    return sides


def _subject_ref(subject: command_pb2.Subject, kind: str) -> tuple[str | None, str | None]:
    if subject.kind and subject.kind != kind:
        raise Refusal(f"this command acts on a {kind}, but its subject is a {subject.kind}")
    if subject.id:
        return _id(subject.id, f"the {kind} id"), None
    if subject.code:
        if not subject.event_code:
            raise Refusal(
                f"the {kind} is named by code {subject.code!r}: also give subject.event_code"
            )
        return None, subject.code
    raise Refusal(f"say which {kind}: set subject.id, or subject.code with subject.event_code")


def _fields(payload: Mapping[str, object], kind: Kind) -> dict[str, object]:
    raw = payload.get("fields")
    if not isinstance(raw, Mapping) or not raw:
        raise BadValue(f"payload.fields must name at least one field of the {kind.name} to set")
    return kind.clean(raw)


def _names(payload: Mapping[str, object]) -> list[str]:
    raw = payload.get("fields")
    if not isinstance(raw, list) or not raw or not all(isinstance(n, str) for n in raw):
        raise BadValue('payload.fields must list the field names to unpin, e.g. ["status"]')
    return list(raw)


def _unit_set_fields(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    fields = _fields(payload, UNIT) if "fields" in payload else {}
    sides = _sides(payload["sides"]) if "sides" in payload else {}
    if not fields and not sides:
        raise BadValue("payload must carry fields to set, sides to set, or both")
    return Intent("unit", ref_id, ref_code, fields=fields, sides=sides)


def _unit_set_status(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    if "status" not in payload:
        raise BadValue('payload.status is missing, e.g. {"status": "CANCELLED"}')
    return Intent("unit", ref_id, ref_code, fields=UNIT.clean({"status": payload["status"]}))


def _unit_set_sides(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    if "sides" not in payload:
        raise BadValue("payload.sides is missing: a list of sides, each with its order")
    return Intent("unit", ref_id, ref_code, sides=_sides(payload["sides"]))


def _unit_unpin(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    names = _names(payload)
    for name in names:
        side = _SIDE_FIELD.match(name)
        if side:
            SIDE.check_names([side[2]], prefix=f"sides[{side[1]}].")
        else:
            UNIT.check_names([name])
    return Intent("unit", ref_id, ref_code, unpin=frozenset(names))


def _competitor_set_fields(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "competitor")
    return Intent("competitor", ref_id, ref_code, fields=_fields(payload, COMPETITOR))


def _competitor_unpin(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "competitor")
    names = _names(payload)
    COMPETITOR.check_names(names)
    return Intent("competitor", ref_id, ref_code, unpin=frozenset(names))


def _medal_set_row(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    subject = cmd.subject
    if not subject.event_code:
        raise Refusal("a medal row is named by subject.event_code and subject.code")
    scope, _, noc = subject.code.rpartition(":")
    if len(noc) != 3 or not noc.isalpha():
        raise Refusal(
            f"subject.code {subject.code!r} should be '<discipline>:<NOC>', e.g. 'ATH:KOR', "
            "or ':KOR' for the whole Games table"
        )
    return Intent(
        "medal_row", ref_code=f"{scope}:{noc.upper()}", fields=_fields(payload, MEDAL_ROW)
    )


def _medal_withdraw_row(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    """A medal row taken out of the table (a medal withdrawn after a protest): its counts go to
    0 and its rank to none, so every read and feed leaves it out."""
    if payload:
        raise BadValue(
            "medals.withdraw_row takes no payload: it takes the row named by subject.code out "
            "of the table"
        )
    intent = _medal_set_row(cmd, {"fields": {"gold": 0}})
    return Intent(
        "medal_row",
        ref_code=intent.ref_code,
        fields={"gold": 0, "silver": 0, "bronze": 0, "total": 0, "rank": None},
        withdraw=True,
    )


def _results_approve(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    if payload:
        raise BadValue("results.approve takes no payload: it approves the unit's results as saved")
    return Intent("unit", ref_id, ref_code, approve=True)


def _whole_numbers(value: object) -> object:
    """A Struct carries every number as a double: give whole ones back as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    return value


def _scoring_act(cmd: command_pb2.Command, payload: Mapping[str, object]) -> Intent:
    """A scorer's or provider's action, already checked by scoring against match_seq."""
    ref_id, ref_code = _subject_ref(cmd.subject, "unit")
    if ref_id is None:
        raise Refusal("a scoring action names its unit by subject.id")
    expected = _whole_numbers(payload.get("expected_seq"))
    if not isinstance(expected, int) or expected < 0:
        raise BadValue("payload.expected_seq is the match_seq the action was checked against")
    action = payload.get("action")
    if not isinstance(action, Mapping) or not isinstance(action.get("kind"), str):
        raise BadValue('payload.action needs a kind, e.g. {"kind": "goal", "side": 1}')
    state_json = payload.get("state_json") or "null"
    try:
        state = json.loads(state_json) if isinstance(state_json, str | bytes) else None
    except (TypeError, ValueError):
        state = None
    if not isinstance(state, dict):
        raise BadValue("payload.state_json is the match state after the action, as JSON")
    fields = UNIT.clean({"status": payload["status"]}) if payload.get("status") else {}
    sides = _sides(payload["sides"]) if "sides" in payload else {}
    side = _whole_numbers(action.get("side"))
    undoes = _whole_numbers(action.get("undoes"))
    client_at = moment(action["client_at"]) if action.get("client_at") else None
    match: Match = {
        "expected_seq": expected,
        "kind": action["kind"],
        "side": side if isinstance(side, int) else None,
        "fields": _whole_numbers(dict(action.get("fields") or {})),
        "undoes": undoes if isinstance(undoes, int) else None,
        "client_at": client_at.isoformat() if client_at else None,
        "state": state,
    }
    return Intent("unit", ref_id, ref_code, fields=fields, sides=sides, match=match)


# command code -> (the kind of subject, how to read its payload)
HANDLERS: dict[str, tuple[str, Callable[[command_pb2.Command, Mapping[str, object]], Intent]]] = {
    "units.set_fields": ("unit", _unit_set_fields),
    "units.unpin": ("unit", _unit_unpin),
    "results.set_status": ("unit", _unit_set_status),
    "results.set_sides": ("unit", _unit_set_sides),
    "competitors.set_fields": ("competitor", _competitor_set_fields),
    "competitors.unpin": ("competitor", _competitor_unpin),
    "medals.set_row": ("medal_row", _medal_set_row),
    "medals.withdraw_row": ("medal_row", _medal_withdraw_row),
    "results.approve": ("unit", _results_approve),
    "scoring.act": ("unit", _scoring_act),
}


def request_hash(cmd: command_pb2.Command) -> bytes:
    """What makes two commands the same command: code, subject and payload (not the sender)."""
    bare = command_pb2.Command(code=cmd.code, subject=cmd.subject, payload=cmd.payload)
    return hashlib.sha256(bare.SerializeToString(deterministic=True)).digest()


def parse_command(cmd: command_pb2.Command) -> Request:
    _check_command_id(cmd.command_id)
    handler = HANDLERS.get(cmd.code)
    if handler is None:
        raise Refusal(
            f"{cmd.code!r} is not a command omnium knows; it knows {', '.join(sorted(HANDLERS))}"
        )
    kind, read = handler
    if not cmd.actor.name:
        raise Refusal("actor.name is empty: every command says who sent it")
    payload = json_format.MessageToDict(cmd.payload)
    try:
        intent = read(cmd, payload)
    except BadValue as exc:
        raise Refusal(str(exc)) from None
    return Request(
        command_id=cmd.command_id,
        code=cmd.code,
        actor=cmd.actor,
        event_code=cmd.subject.event_code,
        intents=[intent],
        payload=payload,
        subject_kind=kind,
        request_hash=request_hash(cmd),
    )


def _present(message: Message, kind: Kind) -> dict[str, object]:
    """The kind's fields that the message sets: an unset optional field is not compared."""
    names = kind.fields
    return {
        descriptor.name: value
        for descriptor, value in message.ListFields()
        if descriptor.name in names
    }


def _unit_values(
    values: command_pb2.UnitValues,
) -> tuple[dict[str, object], dict[int, dict[str, object]]]:
    fields = UNIT.clean(_present(values, UNIT))
    if values.clear:
        fields.update(_cleared(values.clear, fields, UNIT, prefix=""))
    sides: dict[int, dict[str, object]] = {}
    for side in values.sides:
        order = side.order
        if order < 1:
            raise BadValue(f"a side has order {order}; orders start at 1")
        if order in sides:
            raise BadValue(f"side {order} is listed twice")
        prefix = f"sides[{order}]."
        sides[order] = SIDE.clean(_present(side, SIDE), prefix=prefix)
        if side.clear:
            sides[order].update(_cleared(side.clear, sides[order], SIDE, prefix=prefix))
    return fields, sides


def _cleared(
    names: Sequence[str], given: Mapping[str, object], kind: Kind, *, prefix: str
) -> dict[str, None]:
    """A row's `clear` list as fields set to nothing: the diff then compares them like any
    other, so a value we hold is cleared, one we do not is unchanged, and a pin keeps it."""
    kind.check_names(names, prefix=prefix)
    cleared: dict[str, None] = {}
    for name in names:
        if name in given:
            raise BadValue(f"{prefix}{name} is both set and cleared; send one or the other")
        try:
            kind.clean({name: None}, prefix=prefix)
        except BadValue:
            raise BadValue(
                f"{prefix}{name} cannot be cleared: a {kind.name} always has one"
            ) from None
        cleared[name] = None
    return cleared


def parse_batch(batch: command_pb2.ImportBatch, *, max_units: int) -> Request:
    _check_command_id(batch.command_id)
    if not batch.integration_code:
        raise Refusal("integration_code is empty: say which integration sent this batch")
    run_id = _id(batch.run_id, "run_id")
    if batch.command_id != f"{batch.run_id}:{batch.batch_no}":
        raise Refusal(
            f"a batch's command_id is '<run_id>:<batch_no>', here "
            f"'{batch.run_id}:{batch.batch_no}', not {batch.command_id!r}"
        )
    if not batch.event_code:
        raise Refusal("event_code is empty: say which Games this batch belongs to")
    if len(batch.rows) > max_units:
        raise Refusal(
            f"this batch has {len(batch.rows)} rows; at most {max_units} are taken in one "
            "batch. Send smaller batches."
        )
    if not batch.rows:
        raise Refusal("this batch has no rows")
    intents: list[Intent] = []
    refused: dict[int, tuple[str, bytes, str]] = {}
    seen_keys: dict[str, int] = {}
    seen_subjects: dict[tuple[str, str], int] = {}
    for row in batch.rows:
        ref = RowRef(row.position, row.key, row.hash)
        try:
            if not row.key:
                raise BadValue("the row has no key")
            if row.key in seen_keys:
                raise BadValue(f"key {row.key!r} is also row {seen_keys[row.key]} of this batch")
            seen_keys[row.key] = row.position
            intent = _row_intent(row, ref)
            subject = (intent.kind, intent.ref_id or intent.ref_code or "")
            if subject in seen_subjects:
                raise BadValue(
                    f"it names the same {intent.kind} as row {seen_subjects[subject]} of this batch"
                )
            seen_subjects[subject] = row.position
        except (BadValue, Refusal) as exc:
            refused[row.position] = (row.key, row.hash, str(exc))
            continue
        intents.append(intent)
    actor = actor_as_sent(batch.actor, "integration")
    actor.name = actor.name or f"integration:{batch.integration_code}"
    actor.source_code = actor.source_code or batch.integration_code
    return Request(
        command_id=batch.command_id,
        code="imports.apply_batch",
        actor=actor,
        event_code=batch.event_code,
        intents=intents,
        payload={
            "integration": batch.integration_code,
            "run_id": run_id,
            "batch_no": batch.batch_no,
            "rows": len(batch.rows),
        },
        subject_kind="integration_run",
        batch=BatchContext(
            batch.integration_code,
            run_id,
            batch.batch_no,
            create_units=batch.create_units,
            dry_run=batch.dry_run,
        ),
        refused_rows=refused,
    )


def _row_intent(row: command_pb2.BatchRow, ref: RowRef) -> Intent:
    which = row.WhichOneof("values")
    if which == "unit":
        fields, sides = _unit_values(row.unit)
        ref_id = _id(row.subject.id, "subject.id") if row.subject.id else None
        if not ref_id and not row.subject.code:
            raise BadValue("the row names no unit: set subject.id or subject.code")
        return Intent(
            "unit",
            ref_id,
            None if ref_id else row.subject.code,
            fields=fields,
            sides=sides,
            row=ref,
            discipline_code=(
                row.unit.discipline_code if row.unit.HasField("discipline_code") else None
            ),
        )
    if which == "medal_row":
        values = row.medal_row
        noc = values.noc.upper()
        if len(noc) != 3 or not noc.isalpha():
            raise BadValue(f"noc {values.noc!r} is not a three-letter NOC code")
        raw = _present(values, MEDAL_ROW)
        return Intent(
            "medal_row", ref_code=f"{row.subject.code}:{noc}", fields=MEDAL_ROW.clean(raw), row=ref
        )
    raise BadValue("the row carries no values (neither unit nor medal_row)")


# -- before the parse: what the read will ask for -------------------------------------------
#
# The road sends its read to PostgreSQL with these keys, taken from the message as it came,
# and parses while PostgreSQL reads. It keeps that read only when the parsed request asks for
# exactly the same keys (Request.read_keys); otherwise it reads again. So a guess can cost a
# second read, never a wrong one. None: no guess (nothing is read before the parse).


def guess_batch_keys(batch: command_pb2.ImportBatch) -> ReadKeys | None:
    if not is_canonical_id(batch.run_id) or not batch.rows:
        return None
    unit_ids: list[str] = []
    unit_codes: list[str] = []
    medal_refs: list[str] = []
    competitors: set[str] = set()
    for row in batch.rows:
        which = row.WhichOneof("values")
        if which == "unit":
            subject = row.subject
            if subject.id:
                if not is_canonical_id(subject.id):
                    return None
                unit_ids.append(subject.id)
            elif subject.code:
                unit_codes.append(subject.code)
            for side in row.unit.sides:
                if side.HasField("competitor_id"):
                    if not is_canonical_id(side.competitor_id):
                        return None
                    competitors.add(side.competitor_id)
        elif which == "medal_row":
            medal_refs.append(f"{row.subject.code}:{row.medal_row.noc.upper()}")
    return ReadKeys(
        command_id=batch.command_id,
        unit_ids=tuple(unit_ids),
        unit_codes=tuple(unit_codes),
        event_code=batch.event_code or None,
        medal_refs=tuple(medal_refs),
        referenced_competitors=tuple(sorted(competitors)),
        integration_code=batch.integration_code,
        run_id=batch.run_id,
        disciplines=bool(medal_refs) or batch.create_units,
    )


def guess_command_keys(cmd: command_pb2.Command) -> ReadKeys | None:
    handler = HANDLERS.get(cmd.code)
    if handler is None or handler[0] == "medal_row":
        return None
    subject = cmd.subject
    ids: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    if subject.id:
        if not is_canonical_id(subject.id):
            return None
        ids = (subject.id,)
    elif subject.code:
        codes = (subject.code,)
    else:
        return None
    event_code = subject.event_code or None
    if handler[0] == "unit":
        return ReadKeys(cmd.command_id, unit_ids=ids, unit_codes=codes, event_code=event_code)
    return ReadKeys(
        cmd.command_id, competitor_ids=ids, competitor_codes=codes, event_code=event_code
    )
