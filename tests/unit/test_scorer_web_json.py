"""The scorer console's hand-built answer JSON says exactly what the general conversion says."""

from __future__ import annotations

import json

import pytest
from google.protobuf import struct_pb2

from omnium.scoring.v1 import scoring_pb2
from omnium_scorer_web._routes import _answered_match_json, _match


def _state(**extra: object) -> scoring_pb2.MatchState:
    document = {"sport": "football", "sides": [{"goals": 2}, {"goals": 0}], "note": 'é "q"'}
    values: dict[str, object] = {
        "unit_id": "0b7c6f1e-0000-4000-8000-000000000001",
        "unit_code": "FBLMTEAM11------------FNL-000100--",
        "name": "Final \u2013 KOR v JPN",
        "status": "RUNNING",
        "sport": "football",
        "seq": 7,
        "state_json": json.dumps(document, separators=(",", ":")),
        "summary": "2 - 0",
    }
    state = scoring_pb2.MatchState(**(values | extra))  # type: ignore[arg-type]
    state.sides.append(scoring_pb2.SideScore(order=1, name="Korea", noc="KOR", score="2"))
    state.sides.append(scoring_pb2.SideScore(order=2, name="", noc="", score="0", rank=2))
    return state


@pytest.mark.parametrize(
    "state",
    [
        _state(),
        _state(finished=True, winner=1, status="UNOFFICIAL"),
        scoring_pb2.MatchState(unit_id="x", seq=0),
        _state(
            sport_actions=struct_pb2.Struct(fields={"code": struct_pb2.Value(string_value="f")})
        ),
    ],
)
def test_answered_match_json_is_the_general_conversion(state: scoring_pb2.MatchState) -> None:
    assert json.loads(_answered_match_json(state)) == _match(state)


def test_recent_actions_take_the_general_conversion() -> None:
    state = _state()
    state.recent.append(scoring_pb2.SavedAction(seq=7, kind="goal", side=1, actor_name="Ana"))
    assert json.loads(_answered_match_json(state)) == _match(state)
