"""scoring.act on the one road: the match action, the state, and a stale check refused."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from tests.support.command import running_command
from tests.support.games import make_games

SCORER = actor_pb2.Actor(
    kind=actor_pb2.Actor.KIND_SCORER, name="Mina Park", source_code="account:11", screen="app"
)


def act(expected: int, goals: int, **extra: Any) -> dict[str, Any]:
    state = {"match": {}, "sides": [{"goals": goals}, {"goals": 0}], "finished": False}
    return {
        "expected_seq": expected,
        "action": {"kind": "goal", "side": 1, "fields": {"minute": 3}},
        "state_json": json.dumps(state),
        "status": "RUNNING",
        "sides": [{"order": 1, "score": str(goals)}, {"order": 2, "score": "0"}],
        **extra,
    }


async def test_a_stale_expected_seq_writes_nothing_and_says_try_again(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    async with running_command(database_url) as command:
        first = await command.submit(
            command_id="a:1", code="scoring.act", payload=act(0, 1), unit_id=unit, actor=SCORER
        )
        stale = await command.submit(
            command_id="b:1", code="scoring.act", payload=act(0, 1), unit_id=unit, actor=SCORER
        )
        second = await command.submit(
            command_id="a:2", code="scoring.act", payload=act(1, 2), unit_id=unit, actor=SCORER
        )
        again = await command.submit(
            command_id="a:2", code="scoring.act", payload=act(1, 2), unit_id=unit, actor=SCORER
        )
        bad = await command.submit(
            command_id="a:3",
            code="scoring.act",
            payload=act(2, 3, state_json="not json"),
            unit_id=unit,
            actor=SCORER,
        )
    assert first.outcome == command_pb2.OUTCOME_ACCEPTED
    assert stale.outcome == command_pb2.OUTCOME_TRY_AGAIN
    assert stale.reason.startswith("Nothing was saved: the match moved on")
    assert (second.outcome, again.outcome) == (
        command_pb2.OUTCOME_ACCEPTED,
        command_pb2.OUTCOME_DUPLICATE,
    )
    assert bad.outcome == command_pb2.OUTCOME_REFUSED
    assert bad.reason == "payload.state_json is the match state after the action, as JSON"
    rows = await db.fetch("SELECT seq, command_id, fields FROM match_action ORDER BY seq")
    assert [(r["seq"], r["command_id"], r["fields"]) for r in rows] == [
        (1, "a:1", {"minute": 3}),
        (2, "a:2", {"minute": 3}),
    ]
    unit_row = await db.fetchrow(
        "SELECT match_seq, match_state, pinned FROM unit WHERE id = $1", unit
    )
    assert unit_row["match_seq"] == 2 and unit_row["match_state"]["sides"][0]["goals"] == 2
    diff = await db.fetchval("SELECT diff FROM timeline_item WHERE command_id = 'a:2'")
    assert {d["field"]: (d["old"], d["new"]) for d in diff} == {
        "sides[1].score": ("1", "2"),
        "match_seq": (1, 2),
    }
