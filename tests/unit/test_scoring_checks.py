"""The scorer's decisions without a database or a network: who may send an action, its client
id, the state after it, and an undo's replay of the actions that stand (the fast tier under
tests/integration/test_scoring.py, which takes the same actions through the real road)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import struct_pb2

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_scoring._checks import check_actor, client_id_problem, step, undo
from omnium_sports import SPORTS_DIR, UNDO, ActionRefused, load_sports

FOOTBALL = load_sports(SPORTS_DIR)["football"]
KICK_OFF = datetime(2026, 9, 20, 12, 0, tzinfo=UTC)


def saved(
    seq: int, kind: str, side: int | None = None, undone_by: int | None = None, **fields: Any
) -> dict[str, Any]:
    """One saved action as the road's actions_after query reads it."""
    return {
        "seq": seq,
        "kind": kind,
        "side": side,
        "fields": fields,
        "client_at": KICK_OFF,
        "undone_by": undone_by,
    }


def action(kind: str, side: int = 0, undo_seq: int = 0, **fields: Any) -> scoring_pb2.Action:
    out = scoring_pb2.Action(client_id="dev-1:42", kind=kind, side=side, undo_seq=undo_seq)
    out.fields.CopyFrom(struct_pb2.Struct())
    out.fields.update(fields)
    return out


def goals(state: dict[str, Any]) -> list[str]:
    return [str(v["score"]) for v in FOOTBALL.side_values(state)]


MATCH = [
    saved(1, "start_period"),
    saved(2, "goal", 1, player="9", minute=10),
    saved(3, "goal", 2, player="7", minute=20),
    saved(4, "goal", 1, player="10", minute=30),
]


def test_an_undo_replays_every_standing_action_but_its_target() -> None:
    state, record = undo(FOOTBALL, 2, MATCH, action(UNDO, undo_seq=3))
    assert goals(state) == ["2", "0"]
    assert record["undoes"] == 3 and record["fields"] == {"seq": 3}


def test_an_undo_with_no_target_takes_back_the_last_standing_action() -> None:
    rows = [*MATCH[:3], saved(4, "goal", 1, undone_by=5), saved(5, UNDO)]
    state, record = undo(FOOTBALL, 2, rows, action(UNDO))
    assert record["undoes"] == 3
    assert goals(state) == ["1", "0"]


@pytest.mark.parametrize(
    ("rows", "target", "said"),
    [
        ([], 0, "there is nothing to undo in this match"),
        (MATCH, 9, "there is no action 9 in this match"),
        ([*MATCH, saved(5, UNDO)], 5, "an undo cannot be undone"),
        ([*MATCH[:3], saved(4, "goal", 1, undone_by=5)], 4, "action 4 was already undone"),
    ],
)
def test_an_undo_that_cannot_be_is_refused_with_why(
    rows: list[dict[str, Any]], target: int, said: str
) -> None:
    with pytest.raises(ActionRefused, match=said):
        undo(FOOTBALL, 2, rows, action(UNDO, undo_seq=target))


def test_an_undo_that_would_make_a_later_action_impossible_is_refused() -> None:
    # Without the kick-off, the goals after it could not have been scored.
    with pytest.raises(ActionRefused, match=re.escape("would make action 2 (goal) impossible")):
        undo(FOOTBALL, 2, MATCH, action(UNDO, undo_seq=1))


def test_a_step_applies_the_sport_and_records_the_action() -> None:
    unit = {"match_state": FOOTBALL.replay(2, [{"kind": "start_period"}]), "side_count": 2}
    state, record = step(FOOTBALL, unit, action("goal", side=2, player="7", minute=3))
    assert goals(state) == ["0", "1"]
    assert record == {"kind": "goal", "side": 2, "fields": {"player": "7", "minute": 3.0}}


def test_a_step_the_rules_refuse_says_why() -> None:
    unit = {"match_state": None, "side_count": 2}
    with pytest.raises(ActionRefused, match="the clock is stopped"):
        step(FOOTBALL, unit, action("goal", side=1, player="9", minute=1))


def test_who_may_send_and_which_client_ids_are_taken() -> None:
    anonymous = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_SCORER, screen="score")
    _, problem = check_actor(anonymous, sign_in_required=True)
    assert problem == "sign in first: every action records the account that sent it"
    recorded, problem = check_actor(anonymous, sign_in_required=False)
    assert problem is None and recorded.name == "scorer (not signed in)"
    nameless = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_SCORER, source_code="ana")
    assert check_actor(nameless, sign_in_required=True)[1] is not None
    assert client_id_problem(action("goal")) is None
    bad = scoring_pb2.Action(client_id="has spaces")
    assert "no usable client id" in (client_id_problem(bad) or "")
