"""Contract messages built one way for every service: who sent a command, the command itself,
times, outcome words, ids, and diff entries as FieldChange messages."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol, TypedDict, overload

from google.protobuf import struct_pb2, timestamp_pb2

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2

# -- who sent it ----------------------------------------------------------------------------

# An actor's kind by the word the timeline stores ("person", "integration"...).
ACTOR_KIND_NAMES = {
    actor_pb2.Actor.KIND_PERSON: "person",
    actor_pb2.Actor.KIND_INTEGRATION: "integration",
    actor_pb2.Actor.KIND_SCORER: "scorer",
    actor_pb2.Actor.KIND_PROVIDER: "provider",
    actor_pb2.Actor.KIND_SYSTEM: "system",
}
_KIND_BY_NAME = {name: kind for kind, name in ACTOR_KIND_NAMES.items()}


class SignedIn(Protocol):
    """An account as the consoles know it: enough to say who acted."""

    @property
    def id(self) -> object: ...
    @property
    def name(self) -> str: ...


def actor_message(
    kind: str, name: str, *, source_code: str = "", screen: str = ""
) -> actor_pb2.Actor:
    """Who sends a command, with the kind by its word; a word it does not know is unspecified."""
    return actor_pb2.Actor(
        kind=_KIND_BY_NAME.get(kind, actor_pb2.Actor.KIND_UNSPECIFIED),
        name=name,
        source_code=source_code,
        screen=screen,
    )


def account_actor(kind: str, account: SignedIn, screen: str) -> actor_pb2.Actor:
    """A signed-in person or scorer: the log shows the account's name, its source the account."""
    return actor_message(kind, account.name, source_code=f"account:{account.id}", screen=screen)


def source_actor(kind: str, code: str, screen: str) -> actor_pb2.Actor:
    """An integration or a provider: named "<kind>:<code>", its source the code."""
    return actor_message(kind, f"{kind}:{code}", source_code=code, screen=screen)


def actor_as_sent(sent: actor_pb2.Actor, kind: str) -> actor_pb2.Actor:
    """A copy of the actor a call carried, of that kind when the sender left the kind unset."""
    out = actor_pb2.Actor()
    out.CopyFrom(sent)
    if out.kind == actor_pb2.Actor.KIND_UNSPECIFIED:
        out.kind = _KIND_BY_NAME[kind]
    return out


# -- the command ----------------------------------------------------------------------------


def payload_struct(payload: Mapping[str, Any]) -> struct_pb2.Struct:
    """A command's payload of plain JSON values: Struct.update, several times faster than
    ParseDict, which also reads JSON forms of every message type."""
    struct = struct_pb2.Struct()
    struct.update(payload)
    return struct


def command_message(
    command_id: str,
    code: str,
    payload: Mapping[str, Any],
    actor: actor_pb2.Actor,
    *,
    unit_id: str = "",
    subject: command_pb2.Subject | None = None,
) -> command_pb2.Command:
    """One command for the one road: on the unit with that id, or on the subject given."""
    return command_pb2.Command(
        command_id=command_id,
        code=code,
        subject=subject or command_pb2.Subject(kind="unit", id=unit_id),
        payload=payload_struct(payload),
        actor=actor,
    )


# -- times ----------------------------------------------------------------------------------


@overload
def timestamp(moment: datetime) -> timestamp_pb2.Timestamp: ...
@overload
def timestamp(moment: None) -> None: ...
def timestamp(moment: datetime | None) -> timestamp_pb2.Timestamp | None:
    """A moment as a protobuf Timestamp; no moment, no Timestamp."""
    if moment is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def timestamp_now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


# -- outcome words --------------------------------------------------------------------------


def row_outcome_word(value: int) -> str:
    """A batch row's outcome as runs and the row log name it: "accepted", "kept_by_hand"."""
    return command_pb2.RowOutcome.Name(value).removeprefix("ROW_OUTCOME_").lower()  # type: ignore[arg-type]


def act_outcome_word(value: int) -> str:
    """A scorer's action's outcome as the console names it: "saved", "try_again"."""
    return scoring_pb2.Outcome.Name(value).removeprefix("OUTCOME_").lower()  # type: ignore[arg-type]


# Every row outcome but unspecified, by its word.
ROW_OUTCOMES = {
    value: row_outcome_word(value) for value in command_pb2.RowOutcome.values() if value
}


# -- ids ------------------------------------------------------------------------------------

# An id already in its canonical form (what our own services send) needs no uuid.UUID round trip.
_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_canonical_id(value: str) -> bool:
    """Whether the value is an id already in the form our own services send (lower-case, dashed)."""
    return _CANONICAL_ID.fullmatch(value) is not None


def canonical_id(value: str) -> str | None:
    """The id (a UUID) in its canonical form, or None when the value is not an id."""
    if is_canonical_id(value):
        return value
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def is_id(value: str) -> bool:
    """Whether the value is an id (a UUID), in any of the forms uuid.UUID reads."""
    return canonical_id(value) is not None


# -- what changed ---------------------------------------------------------------------------


class LoggedChange(TypedDict):
    """One change as the road logs it (the command service's rows have more keys)."""

    kind: str
    id: str
    field: str
    old: object
    new: object


def json_value(value: object) -> struct_pb2.Value:
    """A JSON scalar as a protobuf Value; anything else becomes its text."""
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int | float):
        out.number_value = value
    else:
        out.string_value = str(value)
    return out


def field_changes(entries: Iterable[LoggedChange] | None) -> list[command_pb2.FieldChange]:
    """`{"kind", "id", "field", "old", "new"}` entries, from timeline diffs or the row log."""
    return [
        command_pb2.FieldChange(
            subject_kind=e.get("kind") or "",
            subject_id=e.get("id") or "",
            field=e["field"],
            old=json_value(e.get("old")),
            new=json_value(e.get("new")),
        )
        for e in entries or ()
    ]
