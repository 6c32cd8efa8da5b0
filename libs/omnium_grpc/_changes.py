"""Diff entries (as the road logs them) to contract FieldChange messages, for every service."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from google.protobuf import struct_pb2

from omnium.command.v1 import command_pb2


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
