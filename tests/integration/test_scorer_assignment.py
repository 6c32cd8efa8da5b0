"""Scorers are assigned: a scorer scores only its matches, by match or by venue and
day; a match handed over keeps what was saved and refuses the first scorer's queued actions;
a whole schedule comes from a CSV, checked line by line before anything is written."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_accounts import AccountError, Assignments
from omnium_db import PoolRoad, create_pool
from omnium_devstack.stack import dev_process_environ
from omnium_settings import Settings
from tests.support.games import make_games
from tests.support.scoring import ScoringClient, action, assign, running_scoring, scorer
from tests.support.waiting import eventually

SAVED = scoring_pb2.OUTCOME_SAVED
DUPLICATE = scoring_pb2.OUTCOME_DUPLICATE
REFUSED = scoring_pb2.OUTCOME_REFUSED
MINA = scorer("Mina Park", "account:00000000-0000-4000-8000-0000000000a1")
BEN = scorer("Ben Ode", "account:00000000-0000-4000-8000-0000000000b2", "scorer-app")
VENUE, DAY = "Nagoya Stadium", "2026-09-20"


async def _accounts(db: asyncpg.Connection) -> None:
    """Mina and Ben, scorers; Olga, an operator (logins mina, ben, olga)."""
    for login, actor, role in (("mina", MINA, "scorer"), ("ben", BEN, "scorer")):
        await db.execute(
            "INSERT INTO account (id, login, name, role, password_hash) "
            "VALUES ($1, $2, $3, $4, 'no sign-in here')",
            actor.source_code.removeprefix("account:"),
            login,
            actor.name,
            role,
        )
    await db.execute(
        "INSERT INTO account (id, login, name, role, password_hash) VALUES "
        "('00000000-0000-4000-8000-0000000000c3', 'olga', 'Olga Op', 'operator', 'none'), "
        "('00000000-0000-4000-8000-0000000000d4', 'vic', 'Vic Viewer', 'viewer', 'none')"
    )


async def _listed(scoring: ScoringClient, actor: actor_pb2.Actor) -> list[str]:
    answer = await scoring.stub.ListMatches(scoring_pb2.ListMatchesRequest(actor=actor), timeout=10)
    return [m.name for m in answer.matches]


async def _assignments(database_url: str) -> tuple[Assignments, asyncpg.Pool]:
    settings = Settings.from_env({}, database_url=database_url)
    pool = await create_pool(settings, PoolRoad.PEOPLE, application_name="test", size=2)
    return Assignments(pool), pool


async def test_a_scorer_scores_only_assigned_matches_and_a_refusal_is_recorded(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=3)
    one, two, _three = games.units
    await _accounts(db)
    await assign(db, [one], MINA)
    olga = scorer("Olga Op", "account:00000000-0000-4000-8000-0000000000c3", "admin:score")
    async with running_scoring(database_url) as scoring:
        assert (await scoring.act(one, "m:1", "start_period", actor=MINA)).outcome == SAVED
        refused = await scoring.act(two, "m:2", "start_period", actor=MINA)
        assert refused.outcome == REFUSED
        assert refused.reason == (
            "Match 2 is not assigned to you (no scorer has it yet): this action was not saved. "
            "Ask an operator to assign it to you."
        )
        # Operators may score any match (they may edit any on the console too).
        assert (await scoring.act(two, "o:1", "start_period", actor=olga)).outcome == SAVED
        assert await _listed(scoring, MINA) == ["Match 1"]
        assert await _listed(scoring, BEN) == []
        assert await _listed(scoring, olga) == ["Match 1", "Match 2", "Match 3"]
        # A caller that names no one (another team's tool) reads every match, as before.
        every = await scoring.stub.ListMatches(scoring_pb2.ListMatchesRequest(), timeout=10)
        assert len(every.matches) == 3
        # A viewer's account scores nothing, whatever it is sent with.
        vic = scorer("Vic Viewer", "account:00000000-0000-4000-8000-0000000000d4")
        viewer = await scoring.act(one, "v:1", "goal", 1, actor=vic)
        assert viewer.reason == "your account is a viewer, who does not score"
    assert await db.fetchval("SELECT count(*) FROM match_action WHERE unit_id = $1", two) == 1
    rows = await db.fetch(
        "SELECT client_id, unit_id::text, account_id::text, actor_name, screen, kind, reason "
        "FROM scorer_refusal ORDER BY id"
    )
    assert [(r["client_id"], r["unit_id"], r["actor_name"], r["kind"]) for r in rows] == [
        ("m:2", two, "Mina Park", "start_period"),
        ("v:1", one, "Vic Viewer", "goal"),
    ]
    assert rows[0]["account_id"] == MINA.source_code.removeprefix("account:")
    assert rows[0]["reason"] == refused.reason


async def test_a_match_handed_over_keeps_what_was_saved_and_refuses_the_first_scorers_queue(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=1)
    unit = games.units[0]
    await _accounts(db)
    assignments, pool = await _assignments(database_url)
    try:
        await assignments.assign("mina", unit=games.unit_codes[unit], by=("Olga Op", "test"))
        async with running_scoring(database_url) as scoring:
            await scoring.act(unit, "m:1", "start_period", actor=MINA)
            assert (await scoring.act(unit, "m:2", "goal", 1, actor=MINA)).seq == 2
            assigned = scoring.app.assigned
            assert assigned is not None
            told = assigned.forgotten
            said = await assignments.assign(
                "ben", unit=games.unit_codes[unit], hand_over=True, by=("Olga Op", "test")
            )
            assert said == "Ben Ode (ben) scores Match 1; handed over from 1 other scorer(s)"

            # The scoring copy keeps what it last answered (Mina may score this match) until
            # the hand-over's NOTIFY, which comes within milliseconds of the commit.
            async def told_again() -> bool:
                return assigned.forgotten > told

            await eventually(told_again, within=10, what="the hand-over's NOTIFY")
            # Mina's tablet was offline: it sends its queue when the network is back.
            queue = [
                action(unit, "m:2", "goal", 1),  # saved before; its answer was lost
                action(unit, "m:3", "goal", 1),
                action(unit, "m:4", "goal", 2),
            ]
            synced = await scoring.stub.Sync(
                scoring_pb2.SyncRequest(actions=queue, actor=MINA), timeout=30
            )
            ben = await scoring.act(unit, "b:1", "goal", 2, actor=BEN)
            assert await _listed(scoring, MINA) == []
            assert await _listed(scoring, BEN) == ["Match 1"]
    finally:
        await pool.close()
    outcomes = [(a.outcome, a.seq) for a in synced.answers]
    assert outcomes == [(DUPLICATE, 2), (REFUSED, 0), (REFUSED, 0)]
    assert synced.answers[1].reason == (
        "Match 1 is assigned to Ben Ode, not to you: this action was not saved. "
        "Tell them or an operator what it was."
    )
    assert ben.outcome == SAVED and ben.seq == 3
    rows = await db.fetch("SELECT seq, command_id, actor_name FROM match_action ORDER BY seq")
    assert [tuple(r) for r in rows] == [
        (1, "m:1", "Mina Park"),
        (2, "m:2", "Mina Park"),
        (3, "b:1", "Ben Ode"),
    ]
    refused = await db.fetch("SELECT client_id FROM scorer_refusal ORDER BY id")
    assert [r["client_id"] for r in refused] == ["m:3", "m:4"]
    changes = await db.fetch("SELECT login, change, by_name FROM account_change ORDER BY id")
    code = games.unit_codes[unit]
    assert [tuple(c) for c in changes] == [
        ("mina", f"assigned {code}", "Olga Op"),
        ("ben", f"assigned {code}", "Olga Op"),
    ]


async def test_a_venue_and_day_gives_its_matches_and_a_match_of_its_own_wins(
    db: asyncpg.Connection, database_url: str
) -> None:
    games = await make_games(db, units=4)
    first, second, third, late = games.units
    # 01:00 UTC on the 21st is 10:00 on the 21st in Tokyo, the event's time zone; 14:30 UTC on
    # the 20th is 23:30 on the 20th there.
    await db.execute("UPDATE unit SET start_at = '2026-09-20 14:30+00' WHERE id = $1", third)
    await db.execute("UPDATE unit SET start_at = '2026-09-20 15:30+00' WHERE id = $1", late)
    await _accounts(db)
    assignments, pool = await _assignments(database_url)
    try:
        said = await assignments.assign("mina", venue=VENUE, day=DAY, by=("Olga Op", "test"))
        assert said == f"Mina Park (mina) scores {VENUE} on {DAY}"
        async with running_scoring(database_url) as scoring:
            assert await _listed(scoring, MINA) == ["Match 1", "Match 2", "Match 3"]
            assert (await scoring.act(third, "m:1", "start_period", actor=MINA)).outcome == SAVED
            other_day = await scoring.act(late, "m:2", "start_period", actor=MINA)
            assert other_day.reason.startswith("Match 4 is not assigned to you")
            # One match of the day handed to Ben: his alone now; the day's others stay Mina's.
            await assignments.assign(
                "ben", unit=games.unit_codes[second], hand_over=True, by=("Olga Op", "test")
            )
            assert await _listed(scoring, MINA) == ["Match 1", "Match 3"]
            assert await _listed(scoring, BEN) == ["Match 2"]
            taken = await scoring.act(second, "m:3", "start_period", actor=MINA)
            assert taken.reason.startswith("Match 2 is assigned to Ben Ode, not to you")
            assert (await scoring.act(first, "m:4", "start_period", actor=MINA)).outcome == SAVED
        with pytest.raises(AccountError, match=f"day: no unit at '{VENUE}' starts on 2026-09-22"):
            await assignments.assign("mina", venue=VENUE, day="2026-09-22")
        with pytest.raises(AccountError, match="login: 'vic' is a viewer, who cannot score"):
            await assignments.assign("vic", unit=games.unit_codes[first])
        views = await assignments.overview()
        assert [(v.login, v.unit_code, v.venue) for v in views] == [
            ("ben", games.unit_codes[second], None),
            ("mina", None, VENUE),
        ]
        assert (await assignments.remove(views[0].id)) == (
            f"ben no longer scores {games.unit_codes[second]}"
        )
    finally:
        await pool.close()


def _cli(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = dev_process_environ()
    env["OMNIUM_DATABASE_URL"] = database_url
    return subprocess.run(
        [sys.executable, "-m", "omnium_accounts", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_schedule_from_a_csv_is_written_whole_or_not_at_all(
    db: asyncpg.Connection, database_url: str, tmp_path: Path
) -> None:
    games = await make_games(db, units=3)
    codes = [games.unit_codes[u] for u in games.units]
    await _accounts(db)
    good = tmp_path / "day1.csv"
    good.write_text(
        "login,unit,venue,day\n"
        f"mina,{codes[0]},,\n"
        f"ben,{codes[0]},,\n"
        "# the afternoon\n"
        f"ben,,{VENUE},{DAY}\n"
        "\n"
    )
    done = await asyncio.to_thread(_cli, database_url, "assign", str(good))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3 assignment(s) of AG2026: 1 match(es) and 1 venue day(s) set"
    before = await db.fetch(
        "SELECT a.login, s.unit_id::text, s.venue, s.day::text, s.assigned_by "
        "FROM scorer_assignment s JOIN account a ON a.id = s.account_id ORDER BY a.login, s.id"
    )
    assert [tuple(r)[:4] for r in before] == [
        ("ben", games.units[0], None, None),
        ("ben", None, VENUE, DAY),
        ("mina", games.units[0], None, None),
    ]
    assert before[0]["assigned_by"].startswith("the command line (")

    bad = tmp_path / "day2.csv"
    bad.write_text(
        "login,unit,venue,day\n"
        f"mina,{codes[1]},,\n"  # good, but not written: the file has bad lines
        f"bob,{codes[1]},,\n"
        "mina,FBLMEVENT-------------FNL-00000099,,\n"
        f"mina,,{VENUE},20/09/2026\n"
        f"mina,,Nagoya Stadum,{DAY}\n"
        f"mina,{codes[2]},{VENUE},{DAY}\n"
        f"vic,{codes[2]},,\n"
        f",{codes[2]},,\n"
        "mina,,,\n"
        "mina,x\n"
    )
    refused = await asyncio.to_thread(_cli, database_url, "assign", str(bad))
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        "accounts: nothing was written: 5 problem(s) in the schedule",
        "line 5, day: '20/09/2026' is not a date; write it as YYYY-MM-DD",
        "line 7, unit: give a unit, or a venue and a day, not both",
        "line 9, login: empty; give the scorer's login",
        "line 10, unit: empty; give a unit code, or a venue and a day",
        "line 11: 2 fields; the header has 4",
    ]
    # The file's own mistakes come first; fixed, the database's are named too, each by line.
    fixed = tmp_path / "day2-fixed.csv"
    fixed.write_text(
        "login,unit,venue,day\n"
        f"mina,{codes[1]},,\n"
        f"bob,{codes[1]},,\n"
        "mina,FBLMEVENT-------------FNL-00000099,,\n"
        f"mina,,Nagoya Stadum,{DAY}\n"
        f"mina,,{VENUE},2026-09-22\n"
        f"vic,{codes[2]},,\n"
    )
    still = await asyncio.to_thread(_cli, database_url, "assign", str(fixed))
    assert still.returncode == 2
    assert still.stderr.splitlines() == [
        "accounts: nothing was written: 5 problem(s) in the schedule",
        "line 3, login: there is no account 'bob'",
        "line 4, unit: AG2026 has no unit 'FBLMEVENT-------------FNL-00000099'",
        "line 5, venue: no unit of AG2026 is at 'Nagoya Stadum' (it is spelt as in the schedule)",
        f"line 6, day: no unit at '{VENUE}' starts on 2026-09-22",
        "line 7, login: 'vic' is a viewer, who cannot score; make it a scorer first",
    ]
    after = await db.fetch(
        "SELECT a.login, s.unit_id::text, s.venue, s.day::text, s.assigned_by "
        "FROM scorer_assignment s JOIN account a ON a.id = s.account_id ORDER BY a.login, s.id"
    )
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    # A file for the same match again sets its scorers: Mina alone now, Ben's day stays.
    again = tmp_path / "day1-again.csv"
    again.write_text(f"unit,login\n{codes[0]},MINA\n")
    assert (await asyncio.to_thread(_cli, database_url, "assign", str(again))).returncode == 0
    rows = await db.fetch(
        "SELECT a.login, s.unit_id::text, s.venue FROM scorer_assignment s "
        "JOIN account a ON a.id = s.account_id ORDER BY a.login, s.id"
    )
    assert [tuple(r) for r in rows] == [("ben", None, VENUE), ("mina", games.units[0], None)]
