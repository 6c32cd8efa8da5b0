"""The one road's planner without a database: a command parsed as the service parses it, a read
state made by hand as the read statement gives it, and the plan: what is written, what a pin
keeps, what a row answers (the fast tier under tests/integration/test_command_*.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from omnium.command.v1 import command_pb2
from omnium_command import Planner, ReadState, parse_batch, parse_command, refs
from tests.support.command import command, import_batch, unit_row

EVENT_ID = str(uuid.uuid4())
UNIT_ID = str(uuid.uuid4())
SIDE_ID = str(uuid.uuid4())
RUN_ID = str(uuid.uuid4())
KICK_OFF = datetime(2026, 9, 20, 12, 0, tzinfo=UTC)


def state(*, pinned: list[str] | None = None, score: str = "1", **unit: Any) -> ReadState:
    """A read of one football unit with one side, as the road's read statement gives it."""
    return {
        "previous_answer": None,
        "previous_hash": None,
        "seq": 100,
        "units": [
            {
                "id": UNIT_ID,
                "code": "FBLMTEAM11------------FNL-000100--",
                "event_id": EVENT_ID,
                "name": "Final",
                "phase": "Final",
                "start_at": KICK_OFF,
                "venue": "Toyota Stadium",
                "status": "RUNNING",
                "pinned": pinned or [],
                "changed_seq": 90,
                "match_seq": 3,
                **unit,
            }
        ],
        "sides": [
            {
                "unit_id": UNIT_ID,
                "id": SIDE_ID,
                "order": 1,
                "competitor_id": None,
                "score": score,
                "result": None,
                "rank": None,
                "medal": None,
                "pinned": [],
            }
        ],
        "competitors": [],
        "medal_rows": [],
        "known_competitors": [],
        "known_nocs": [],
        "disciplines": {},
        "integration_id": str(uuid.uuid4()),
        "run_integration_id": None,
        "run_status": "running",
        "run_batch_done": 0,
        "event_id": EVENT_ID,
    }


def plan_of(message: command_pb2.Command | command_pb2.ImportBatch, read: ReadState) -> Any:
    if isinstance(message, command_pb2.ImportBatch):
        request = parse_batch(message, max_units=25)
    else:
        request = parse_command(message)
    return Planner(request, refs(read), read).plan()


def test_a_person_s_edit_writes_the_change_and_pins_the_field() -> None:
    edit = command("c-1", "units.set_fields", {"fields": {"venue": "Nagoya Dome"}}, unit_id=UNIT_ID)
    plan = plan_of(edit, state())
    assert [(c["field"], c["old"], c["new"]) for c in plan.writes.diff] == [
        ("venue", "Toyota Stadium", "Nagoya Dome")
    ]
    [update] = plan.writes.unit_updates
    assert update["pinned"] == ["venue"]
    assert plan.changed and len(plan.writes.outbox) == 1


def test_the_same_value_again_writes_nothing() -> None:
    edit = command(
        "c-2", "units.set_fields", {"fields": {"venue": "Toyota Stadium"}}, unit_id=UNIT_ID
    )
    plan = plan_of(edit, state(pinned=["venue"]))
    assert not plan.changed
    assert plan.writes.unit_updates == [] and plan.writes.outbox == []


def test_an_import_never_overwrites_a_pinned_field() -> None:
    batch = import_batch(
        RUN_ID, 1, [unit_row(1, UNIT_ID, venue="Scout's Venue", status="OFFICIAL")]
    )
    plan = plan_of(batch, state(pinned=["venue"]))
    [(_, outcome)] = plan.outcomes
    assert outcome.row_outcome == command_pb2.ROW_OUTCOME_ACCEPTED
    assert [c["field"] for c in outcome.changes] == ["status"]
    assert [(c["field"], c["new"]) for c in outcome.kept] == [("venue", "Scout's Venue")]
    [update] = plan.writes.unit_updates
    assert update["set"] == {"status": "OFFICIAL"} and update["pinned"] is None


def test_an_import_of_only_a_pinned_field_is_kept_by_hand() -> None:
    batch = import_batch(RUN_ID, 1, [unit_row(1, UNIT_ID, venue="Scout's Venue")])
    plan = plan_of(batch, state(pinned=["venue"]))
    [(_, outcome)] = plan.outcomes
    assert outcome.row_outcome == command_pb2.ROW_OUTCOME_KEPT_BY_HAND
    assert plan.writes.unit_updates == []


def test_an_import_row_for_a_unit_we_do_not_have_is_not_placed() -> None:
    batch = import_batch(RUN_ID, 1, [unit_row(1, str(uuid.uuid4()), venue="Anywhere")])
    plan = plan_of(batch, state())
    [(_, outcome)] = plan.outcomes
    assert outcome.row_outcome == command_pb2.ROW_OUTCOME_NOT_PLACED
    assert not plan.changed
