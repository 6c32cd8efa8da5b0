"""The road's rows by their keys: what the read gives and what a plan writes.

TypedDicts, so a reader (and mypy) sees which keys each one has. What a plan writes is plain
dicts; what the read gives is asyncpg records of the road_* row types, read by the same keys.
"""

from __future__ import annotations

from datetime import datetime
from typing import NotRequired, TypedDict


class SideRead(TypedDict):
    """One side of a unit, as the read gives it (a road_side record)."""

    unit_id: str
    id: str
    order: int
    competitor_id: str | None
    score: str | None
    result: str | None
    rank: int | None
    medal: str | None
    pinned: list[str]


class UnitRead(TypedDict):
    """A unit as the read gives it (a road_unit record)."""

    id: str
    code: str
    event_id: str
    name: str
    phase: str | None
    start_at: datetime | None
    venue: str | None
    status: str
    pinned: list[str]
    changed_seq: int
    match_seq: int


class Unit(TypedDict):
    """A unit as the planner holds it: start_at a datetime, with its sides."""

    id: str
    code: str
    event_id: str
    name: str
    phase: str | None
    start_at: datetime | None
    venue: str | None
    status: str
    pinned: list[str]
    changed_seq: int
    match_seq: int
    sides: list[SideRead]


class CompetitorRead(TypedDict):
    id: str
    code: str
    event_id: str
    name: str
    noc: str
    pinned: list[str]
    changed_seq: int


class MedalRowRead(TypedDict):
    id: str
    ref: str  # "<discipline code or empty>:<NOC>"
    event_id: str
    gold: int
    silver: int
    bronze: int
    total: int
    rank: int | None
    pinned: list[str]
    changed_seq: int


class Versioned(TypedDict):
    """What the lock and the write's checks need of any record read."""

    id: str
    changed_seq: int


class ReadState(TypedDict):
    """The read's one row; the columns of a part the command did not need are None."""

    previous_answer: bytes | None
    previous_hash: bytes | None
    seq: int
    units: list[UnitRead] | None
    sides: list[SideRead] | None
    competitors: list[CompetitorRead] | None
    medal_rows: list[MedalRowRead] | None
    known_competitors: list[str] | None
    known_nocs: list[str] | None
    disciplines: dict[str, str] | None
    integration_id: str | None
    run_integration_id: str | None
    run_status: str | None
    run_batch_done: int | None
    event_id: str | None


class Change(TypedDict):
    """One field a command changes (or would, and a pin kept), as the timeline logs it."""

    kind: str
    id: str
    code: str
    field: str
    old: object
    new: object
    kept_by_hand: NotRequired[bool]


class RecordUpdate(TypedDict):
    """An update of one record: the fields to set, and its new pin list (None: unchanged)."""

    id: str
    set: dict[str, object]
    pinned: list[str] | None


class OutboxRow(TypedDict):
    event_id: str | None
    kind: str
    subject_kind: str
    subject_id: str
    unit_id: str | None
    payload: dict[str, object]


class MatchAction(TypedDict):
    unit_id: str
    seq: int
    kind: str
    side: int | None
    fields: object
    undoes: int | None
    client_at: str | None


class Match(TypedDict):
    """A scoring action to record, and the match state it leads to."""

    expected_seq: int
    kind: str
    side: int | None
    fields: object
    undoes: int | None
    client_at: str | None
    state: dict[str, object]


class RowLogEntry(TypedDict):
    """One batch row in the row log; the diff and the kept fields only for a placed row."""

    position: int
    key: str
    kind: str
    subject_id: str | None
    hash: str
    outcome: str
    reason: str | None
    diff: NotRequired[list[Change]]
    kept: NotRequired[list[Change]]
