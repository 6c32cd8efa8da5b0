"""The scoring service: actions checked by the sport file, saved once through the one road."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import grpc
import pytest
from grpc import aio

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_sports import SPORTS_DIR
from tests.support.games import make_games
from tests.support.scoring import MINA, action, add_match, assign, running_scoring, scorer

SAVED = scoring_pb2.OUTCOME_SAVED
DUPLICATE = scoring_pb2.OUTCOME_DUPLICATE
REFUSED = scoring_pb2.OUTCOME_REFUSED


async def test_an_action_is_saved_with_who_and_from_where(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        assert (await scoring.act(unit, "dev1:1", "start_period")).outcome == SAVED
        answer = await scoring.act(unit, "dev1:2", "goal", 1, player="9", minute=12)
        assert answer.outcome == SAVED and answer.seq == 2
        assert [s.score for s in answer.state.sides] == ["1", "0"]
        assert answer.state.status == "RUNNING" and answer.state.sport == "football"
        state = await scoring.state(unit, recent=5)
    assert [s.score for s in state.sides] == ["1", "0"]
    assert [s.noc for s in state.sides] == ["KOR", "JPN"]
    assert [(a.seq, a.kind, a.actor_name, a.screen) for a in state.recent] == [
        (2, "goal", "Mina Park", "scorer-console"),
        (1, "start_period", "Mina Park", "scorer-console"),
    ]
    row = await db.fetchrow(
        "SELECT kind, side, fields, actor_kind, actor_name, source_code, screen "
        "FROM match_action WHERE command_id = 'dev1:2'"
    )
    assert dict(row) == {
        "kind": "goal",
        "side": 1,
        "fields": {"player": "9", "minute": 12},
        "actor_kind": "scorer",
        "actor_name": "Mina Park",
        "source_code": f"account:{MINA}",
        "screen": "scorer-console",
    }
    timeline = await db.fetchrow(
        "SELECT code, actor_kind, actor_name, source_code, screen FROM timeline_item "
        "WHERE command_id = 'dev1:2'"
    )
    assert tuple(timeline) == (
        "scoring.act",
        "scorer",
        "Mina Park",
        f"account:{MINA}",
        "scorer-console",
    )
    sides = await db.fetch(
        "SELECT score FROM unit_competitor WHERE unit_id = $1 ORDER BY sort_order", unit
    )
    assert [s["score"] for s in sides] == ["1", "0"]
    unit_row = await db.fetchrow(
        "SELECT status, match_seq, match_state FROM unit WHERE id = $1", unit
    )
    assert unit_row["status"] == "RUNNING" and unit_row["match_seq"] == 2
    assert unit_row["match_state"]["sides"][0]["goals"] == 1
    events = await db.fetchval(
        "SELECT count(*) FROM domain_event WHERE unit_id = $1 AND command_id = 'dev1:2'", unit
    )
    assert events == 1


async def test_an_action_that_breaks_the_rules_is_refused_and_writes_nothing(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        answer = await scoring.act(unit, "dev1:1", "goal", 1)
        assert answer.outcome == REFUSED
        assert answer.reason == "the clock is stopped: start period 1 first"
        answer = await scoring.act(unit, "dev1:2", "penalty_shootout", 1)
        assert answer.reason.startswith("Football has no action 'penalty_shootout'")
        answer = await scoring.act(unit, "dev1:3", "goal", 7)
        assert answer.reason == "Goal: there is no side 7"
    assert await db.fetchval("SELECT count(*) FROM match_action") == 0
    assert await db.fetchval("SELECT count(*) FROM command") == 0
    assert await db.fetchval("SELECT match_seq FROM unit WHERE id = $1", unit) == 0


async def test_undo_is_an_action_that_recomputes_the_match(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        await scoring.act(unit, "d:1", "start_period")
        await scoring.act(unit, "d:2", "goal", 1)
        await scoring.act(unit, "d:3", "goal", 2)
        await scoring.act(unit, "d:4", "goal", 1)
        undo = await scoring.act(unit, "d:5", "undo", undo_seq=3)
        assert undo.outcome == SAVED and undo.seq == 5
        assert [s.score for s in undo.state.sides] == ["2", "0"]
        last = await scoring.act(unit, "d:6", "undo")
        assert [s.score for s in last.state.sides] == ["1", "0"], "undo takes back goal 4"
        again = await scoring.act(unit, "d:7", "undo", undo_seq=3)
        assert again.outcome == REFUSED and again.reason == "action 3 was already undone"
        undo_undo = await scoring.act(unit, "d:8", "undo", undo_seq=5)
        assert undo_undo.reason == "an undo cannot be undone: score the action again"
        early = await scoring.act(unit, "d:9", "undo", undo_seq=1)
        assert early.outcome == REFUSED
        assert early.reason.startswith("undoing action 1 would make action 2 (goal) impossible")
    rows = await db.fetch("SELECT seq, kind, undoes, undone_by FROM match_action ORDER BY seq")
    assert [tuple(r) for r in rows] == [
        (1, "start_period", None, None),
        (2, "goal", None, None),
        (3, "goal", None, 5),
        (4, "goal", None, 6),
        (5, "undo", 3, None),
        (6, "undo", 4, None),
    ]


async def test_a_resent_action_is_applied_once(db: asyncpg.Connection, database_url: str) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        await scoring.act(unit, "d:1", "start_period")
        first = await scoring.act(unit, "d:2", "goal", 1)
        await scoring.act(unit, "d:3", "goal", 2)
        again = await scoring.act(unit, "d:2", "goal", 1)
        assert (first.outcome, again.outcome, again.seq) == (SAVED, DUPLICATE, 2)
        assert [s.score for s in again.state.sides] == ["1", "1"]
    assert await db.fetchval("SELECT count(*) FROM match_action WHERE kind = 'goal'") == 2


async def test_a_resent_action_the_rules_would_now_refuse_is_a_duplicate(
    db: asyncpg.Connection, database_url: str
) -> None:
    """Scoring's copy of the match already has the action: the answer is still DUPLICATE."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        first = await scoring.act(unit, "d:1", "start_period")
        again = await scoring.act(unit, "d:1", "start_period")
        other = await scoring.act(unit, "d:2", "start_period")
    assert (first.outcome, again.outcome, again.seq) == (SAVED, DUPLICATE, 1)
    assert (other.outcome, other.reason) == (REFUSED, "period 1 is still running: end it first")
    assert await db.fetchval("SELECT count(*) FROM match_action") == 1


async def test_a_match_moved_on_elsewhere_is_read_afresh(
    db: asyncpg.Connection, database_url: str
) -> None:
    """Two scoring processes on one match: each one's copy goes stale, nothing is lost."""
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as one, running_scoring(database_url) as two:
        assert (await one.act(unit, "d:1", "start_period")).outcome == SAVED
        assert (await two.act(unit, "d:2", "goal", 1)).seq == 2
        # One's copy says action 1: the road refuses that, so it reads the match and goes on.
        third = await one.act(unit, "d:3", "goal", 2)
        again = await one.act(unit, "d:2", "goal", 1)
        fourth = await two.act(unit, "d:4", "goal", 2)
    assert (third.outcome, third.seq, [s.score for s in third.state.sides]) == (
        SAVED,
        3,
        ["1", "1"],
    )
    assert (again.outcome, again.seq) == (DUPLICATE, 2)
    assert (fourth.outcome, fourth.seq, [s.score for s in fourth.state.sides]) == (
        SAVED,
        4,
        ["1", "2"],
    )
    rows = await db.fetch("SELECT seq, command_id FROM match_action ORDER BY seq")
    assert [(r["seq"], r["command_id"]) for r in rows] == [
        (1, "d:1"),
        (2, "d:2"),
        (3, "d:3"),
        (4, "d:4"),
    ]


async def test_concurrent_duplicates_are_applied_once(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        await scoring.act(unit, "d:1", "start_period")
        answers = await asyncio.gather(*(scoring.act(unit, "d:2", "goal", 1) for _ in range(12)))
    outcomes = sorted(scoring_pb2.Outcome.Name(a.outcome) for a in answers)
    assert outcomes == ["OUTCOME_DUPLICATE"] * 11 + ["OUTCOME_SAVED"]
    assert {a.seq for a in answers} == {2}
    assert await db.fetchval("SELECT count(*) FROM match_action WHERE command_id = 'd:2'") == 1
    assert (
        await db.fetchval(
            "SELECT score FROM unit_competitor WHERE unit_id = $1 AND sort_order = 1", unit
        )
        == "1"
    )


async def test_two_scorers_on_one_match_never_act_on_the_same_state(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url, scoring_attempts=20) as scoring:
        await scoring.act(unit, "d:0", "start_period")
        ana = scorer("Ana", "account:00000000-0000-4000-8000-00000000000a")
        ben = scorer("Ben", "account:00000000-0000-4000-8000-00000000000b", "scorer-app")
        await assign(db, games.units, ana, ben)
        answers = await asyncio.gather(
            *(scoring.act(unit, f"a:{i}", "goal", 1, actor=ana) for i in range(6)),
            *(scoring.act(unit, f"b:{i}", "goal", 2, actor=ben) for i in range(6)),
        )
        state = await scoring.state(unit)
    assert {a.outcome for a in answers} == {SAVED}
    assert sorted(a.seq for a in answers) == list(range(2, 14))
    assert [s.score for s in state.sides] == ["6", "6"]
    rows = await db.fetch("SELECT seq, actor_name, screen FROM match_action ORDER BY seq")
    assert [r["seq"] for r in rows] == list(range(1, 14))
    assert {(r["actor_name"], r["screen"]) for r in rows[1:]} == {
        ("Ana", "scorer-console"),
        ("Ben", "scorer-app"),
    }


async def test_saved_is_answered_only_after_the_commit(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        await scoring.act(unit, "d:1", "start_period")
        blocker = await asyncpg.connect(database_url)
        try:
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute("SELECT 1 FROM unit WHERE id = $1 FOR UPDATE", unit)
            pending = asyncio.create_task(scoring.act(unit, "d:2", "goal", 1))
            await asyncio.sleep(1.0)
            assert not pending.done(), "saved must wait for the commit"
            seen = await db.fetchval("SELECT count(*) FROM match_action WHERE command_id = 'd:2'")
            assert seen == 0
            await transaction.rollback()
        finally:
            await blocker.close()
        answer = await pending
    assert answer.outcome == SAVED
    assert await db.fetchval("SELECT count(*) FROM match_action WHERE command_id = 'd:2'") == 1


async def test_sign_in_is_required_by_default(db: asyncpg.Connection, database_url: str) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    anonymous = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_SCORER, screen="scorer-console")
    async with running_scoring(database_url) as scoring:
        answer = await scoring.act(unit, "d:1", "start_period", actor=anonymous)
        assert answer.outcome == REFUSED
        assert answer.reason == "sign in first: every action records the account that sent it"
        no_screen = scorer(screen="")
        answer = await scoring.act(unit, "d:1", "start_period", actor=no_screen)
        assert answer.reason.startswith("actor.screen is empty")
    async with running_scoring(database_url, scorer_sign_in_required=False) as scoring:
        # Matches are assigned to accounts: a scorer without one scores none.
        answer = await scoring.act(unit, "d:1", "start_period", actor=anonymous)
        assert answer.reason == "sign in first: matches are assigned to scorers by their account"
    # A small event: no sign-in, no assignment.
    async with running_scoring(
        database_url, scorer_sign_in_required=False, scorer_assignment_required=False
    ) as scoring:
        answer = await scoring.act(unit, "d:1", "start_period", actor=anonymous)
        assert answer.outcome == SAVED
    row = await db.fetchrow("SELECT actor_name, source_code, screen FROM match_action")
    assert tuple(row) == ("scorer (not signed in)", None, "scorer-console")


async def test_sync_applies_a_queue_in_order(db: asyncpg.Connection, database_url: str) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    queue = [action(unit, "q:0", "start_period")]
    queue += [action(unit, f"q:{i}", "goal", 1 + i % 2) for i in range(1, 6)]
    queue += [action(unit, "q:6", "red_card", 1)]  # no player: refused, the rest go on
    queue += [action(unit, "q:7", "end_period")]
    async with running_scoring(database_url) as scoring:
        answer = await scoring.stub.Sync(
            scoring_pb2.SyncRequest(actions=queue, actor=scorer()), timeout=30
        )
        again = await scoring.stub.Sync(
            scoring_pb2.SyncRequest(actions=queue, actor=scorer()), timeout=30
        )
    assert [scoring_pb2.Outcome.Name(a.outcome)[8:] for a in answer.answers] == [
        "SAVED", "SAVED", "SAVED", "SAVED", "SAVED", "SAVED", "REFUSED", "SAVED",
    ]  # fmt: skip
    assert answer.answers[6].reason == "Red card: Shirt number is missing"
    assert [s.score for s in answer.state.sides] == ["2", "3"]
    assert {a.outcome for a in again.answers} == {DUPLICATE, REFUSED}
    rows = await db.fetch("SELECT command_id FROM match_action ORDER BY seq")
    assert [r["command_id"] for r in rows] == [f"q:{i}" for i in (0, 1, 2, 3, 4, 5, 7)]


async def test_watch_match_streams_each_change(db: asyncpg.Connection, database_url: str) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await assign(db, games.units)
    async with running_scoring(database_url, scoring_watch_poll_seconds=30.0) as scoring:
        stream = scoring.stub.WatchMatch(scoring_pb2.GetMatchStateRequest(unit_id=unit))
        first = await stream.read()
        assert first.seq == 0 and [s.score for s in first.sides] == ["0", "0"]
        await scoring.act(unit, "d:1", "start_period")
        second = await asyncio.wait_for(stream.read(), 10)
        assert second.seq == 1
        await scoring.act(unit, "d:2", "goal", 2)
        third = await asyncio.wait_for(stream.read(), 10)
        assert third.seq == 2 and [s.score for s in third.sides] == ["0", "1"]
        stream.cancel()
        with pytest.raises(aio.AioRpcError) as missing:
            await scoring.stub.GetMatchState(
                scoring_pb2.GetMatchStateRequest(unit_id="00000000-0000-0000-0000-000000000000")
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


async def test_every_shipped_sport_scores_through_the_service(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=0)
    basketball = await add_match(db, games, "BKB")
    badminton = await add_match(db, games, "BDM")
    cricket = await add_match(db, games, "CRI")
    jump = await add_match(db, games, "ATH", sides=3)
    await assign(db, games.units)
    async with running_scoring(database_url) as scoring:
        await scoring.act(basketball, "k:1", "start_quarter")
        answer = await scoring.act(basketball, "k:2", "point3", 2, player="30")
        assert [s.score for s in answer.state.sides] == ["0", "3"]
        for i in range(21):
            answer = await scoring.act(badminton, f"b:{i}", "point", 1)
        assert answer.state.sides[0].score == "1"
        refused = await scoring.act(badminton, "b:x", "point", 2)
        assert refused.reason == "game 1 is over: start game 2 first"
        await scoring.act(cricket, "c:1", "runs", runs=4)
        answer = await scoring.act(cricket, "c:2", "extra", kind="wide")
        assert answer.state.sides[0].score == "5/0"
        await scoring.act(jump, "j:1", "mark", 1, metres=7.5)
        answer = await scoring.act(jump, "j:2", "mark", 3, metres=8.25)
        assert [s.rank for s in answer.state.sides] == [2, 0, 1]
        done = await scoring.act(jump, "j:3", "end_event")
        assert done.state.finished and done.state.status == "UNOFFICIAL"
        over = await scoring.act(jump, "j:4", "mark", 2, metres=9.0)
        assert over.reason.startswith("the match is over")
    ranks = await db.fetch(
        "SELECT rank FROM unit_competitor WHERE unit_id = $1 ORDER BY sort_order", jump
    )
    assert [r["rank"] for r in ranks] == [2, None, 1]
    assert await db.fetchval("SELECT status FROM unit WHERE id = $1", jump) == "UNOFFICIAL"


NETBALL = """\
code = "netball"
name = "Netball"
disciplines = ["NTB"]

[match]
ended = false

[side]
goals = 0

[actions.goal]
side = true
effects = "side.goals += 1"

[finish]
when = "ended"

[output]
score = "{side.goals}"
"""


async def test_a_new_sport_is_added_by_a_file_only(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    for path in SPORTS_DIR.glob("*.toml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "netball.toml").write_text(NETBALL)
    games = await make_games(db, units=0)
    unit = await add_match(db, games, "NTB")
    await assign(db, games.units)
    async with running_scoring(database_url, scoring_sports_dir=str(tmp_path)) as scoring:
        await scoring.act(unit, "n:1", "goal", 2)
        answer = await scoring.act(unit, "n:2", "goal", 2)
        listed = await scoring.stub.ListMatches(scoring_pb2.ListMatchesRequest(event_code="AG2026"))
    assert answer.outcome == SAVED and [s.score for s in answer.state.sides] == ["0", "2"]
    assert [(m.unit_id, m.sport, m.summary) for m in listed.matches] == [(unit, "netball", "0 - 2")]
