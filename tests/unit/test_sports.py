"""The shipped sport files: every sport's rules, refusals with reasons, undo by replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from omnium_sports import (
    SPORTS_DIR,
    ActionRefused,
    Sport,
    SportFileError,
    load_sport_text,
    load_sports,
    sport_for_discipline,
)

SPORTS = load_sports(SPORTS_DIR)


def act(action: str, side: int | None = None, **fields: Any) -> dict[str, Any]:
    return {"kind": action, "side": side, "fields": fields}


def play(sport: Sport, actions: list[dict[str, Any]], sides: int = 2) -> dict[str, Any]:
    return sport.replay(sides, actions)


def refused(sport: Sport, state: dict[str, Any], action: dict[str, Any]) -> str:
    with pytest.raises(ActionRefused) as caught:
        sport.apply(state, action)
    return str(caught.value)


def scores(sport: Sport, state: dict[str, Any]) -> list[str]:
    return [v["score"] for v in sport.side_values(state)]


def test_every_shipped_sport_loads_and_is_found_by_discipline() -> None:
    assert set(SPORTS) >= {"football", "basketball", "badminton", "cricket", "athletics_jump"}
    assert sport_for_discipline(SPORTS, "FBL") is SPORTS["football"]
    assert sport_for_discipline(SPORTS, "ATH") is SPORTS["athletics_jump"]


def test_football_goals_own_goals_cards_and_the_end() -> None:
    football = SPORTS["football"]
    state = play(
        football,
        [
            act("start_period"),
            act("goal", 1, player="9", minute=12),
            act("own_goal", 1, player="4", minute=30),
            act("yellow_card", 2, player="6"),
            act("end_period"),
            act("start_period"),
            act("goal", 2, player="10"),
            act("yellow_card", 2, player="6"),
            act("substitution", 1, player="9", player_in="14"),
            act("end_period"),
        ],
    )
    assert scores(football, state) == ["1", "2"]
    assert state["players"]["2:6"] == {"goals": 0, "yellow": 2, "red": 1, "off": True}
    assert state["sides"][1]["red"] == 1
    assert refused(football, state, act("goal", 1)) == (
        "the clock is stopped: start period 3 first"
    )
    state = football.apply(state, act("end_match"))
    assert state["finished"] and state["winner"] == 2
    assert [v["rank"] for v in football.side_values(state)] == [2, 1]
    assert refused(football, state, act("start_period")).startswith("the match is over (1 - 2)")


def test_football_keeps_the_clock_from_the_taps() -> None:
    football = SPORTS["football"]
    state = football.replay(
        2,
        [
            {**act("start_period"), "at": 1000.0},
            {**act("goal", 1), "at": 1600.0},
            {**act("end_period"), "at": 3700.5},
            {**act("start_period"), "at": 4600.0},
        ],
    )
    assert state["match"]["played_seconds"] == 2700.5
    assert state["match"]["period_started_at"] == 4600.0


def test_a_match_begun_under_an_older_file_gets_the_new_values() -> None:
    football = SPORTS["football"]
    state = football.replay(2, [act("start_period"), act("goal", 2)])
    del state["match"]["played_seconds"], state["match"]["period_started_at"]
    del state["sides"][0]["subs"]
    state = football.apply(state, {**act("end_period"), "at": 100.0})
    assert state["match"]["played_seconds"] == 0 and state["sides"][0]["subs"] == 0


def test_a_value_the_rules_cannot_use_is_refused_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "netball.toml").write_text(
        NETBALL.replace('effects = "side.goals += 1"', 'effects = "side.goals += action.at / 0"')
    )
    netball = load_sports(tmp_path)["netball"]
    state = netball.new_state(2)
    assert refused(netball, state, act("goal", 1)).startswith(
        "Goal: Netball's rules cannot use this (line 1: cannot work out"
    )


def test_football_refuses_a_player_who_is_off_and_an_early_end() -> None:
    football = SPORTS["football"]
    state = play(football, [act("start_period"), act("red_card", 1, player="5")])
    assert refused(football, state, act("goal", 1, player="5")) == "player 5 is off the field"
    assert refused(football, state, act("yellow_card", 1)) == "Yellow card: Shirt number is missing"
    assert refused(football, state, act("goal", 3)) == "Goal: there is no side 3"
    assert refused(football, state, act("kick", 1)).startswith("Football has no action 'kick'")
    state = football.apply(state, act("end_period"))
    assert refused(football, state, act("end_match")) == "only 1 of 2 periods are played"


def test_basketball_points_fouls_quarters_and_overtime() -> None:
    basketball = SPORTS["basketball"]
    actions = [act("start_quarter"), act("point3", 1, player="23"), act("point2", 2)]
    actions += [act("foul", 2, player="5")] * 5
    state = play(basketball, actions)
    assert scores(basketball, state) == ["3", "2"]
    assert refused(basketball, state, act("foul", 2, player="5")) == (
        "player 5 has fouled out (5 fouls)"
    )
    for _ in range(3):
        state = basketball.apply(state, act("end_quarter"))
        state = basketball.apply(state, act("start_quarter"))
    state = basketball.apply(state, act("point1", 2))
    state = basketball.apply(state, act("end_quarter"))
    assert not state["finished"], "a tie after four quarters goes to overtime"
    state = basketball.apply(state, act("start_quarter"))
    assert state["sides"][0]["fouls"] == 0, "team fouls start again each quarter"
    state = basketball.apply(state, act("point2", 2))
    state = basketball.apply(state, act("end_quarter"))
    assert state["finished"] and state["winner"] == 2


def test_badminton_games_win_by_two_with_a_cap() -> None:
    badminton = SPORTS["badminton"]
    state = play(badminton, [act("point", 1)] * 20 + [act("point", 2)] * 20)
    state = badminton.apply(state, act("point", 1))
    assert not state["match"]["game_over"], "21-20 is not won: win by two"
    state = badminton.apply(state, act("point", 1))
    assert state["match"]["game_over"] and state["sides"][0]["games"] == 1
    assert refused(badminton, state, act("point", 2)) == "game 1 is over: start game 2 first"
    state = badminton.apply(state, act("start_game"))
    for _ in range(29):
        state = badminton.apply(state, act("point", 1))
        state = badminton.apply(state, act("point", 2))
    state = badminton.apply(state, act("point", 2))
    assert state["sides"][1]["games"] == 1, "30-29 wins: the cap"
    assert state["match"]["game_scores"] == "22-20 29-30"
    state = badminton.apply(state, act("start_game"))
    for _ in range(21):
        state = badminton.apply(state, act("point", 1))
    assert state["finished"] and state["winner"] == 1
    assert scores(badminton, state) == ["2", "1"]


def test_cricket_ball_by_ball_extras_wickets_overs_and_innings() -> None:
    cricket = SPORTS["cricket"]
    over = [act("runs", runs=4), act("extra", kind="wide"), act("runs", runs=1)]
    over += [act("wicket", how="bowled"), act("extra", kind="leg_bye", runs=2)]
    over += [act("runs", runs=6), act("runs", runs=0)]
    state = play(cricket, over)
    first = cricket.side_values(state)[0]
    assert first == {"order": 1, "score": "14/1", "result": "1.0 overs"}
    assert state["sides"][0]["extras"] == 3
    assert refused(cricket, state, act("start_innings")) == "innings 1 is still going: 14/1"
    assert refused(cricket, state, act("extra", kind="beamer")).startswith(
        "Extra: Kind must be one of"
    )
    state = cricket.apply(state, act("end_innings"))
    assert refused(cricket, state, act("runs", runs=1)) == (
        "innings 1 is over: start innings 2 first"
    )
    state = cricket.apply(state, act("start_innings"))
    state = cricket.apply(state, act("runs", runs=6))
    state = cricket.apply(state, act("runs", runs=6))
    assert not state["finished"]
    state = cricket.apply(state, act("runs", runs=4))
    assert state["finished"] and state["winner"] == 2
    assert scores(cricket, state) == ["14/1", "16/0"]


def test_cricket_innings_closes_itself_after_its_overs() -> None:
    cricket = SPORTS["cricket"]
    short = load_sport_text(
        (SPORTS_DIR / "cricket.toml").read_text().replace("overs = 20", "overs = 1"),
        "cricket.toml",
    )
    state = play(short, [act("runs", runs=1)] * 6)
    assert state["match"]["innings_over"]
    assert cricket.side_values(state)[0]["result"] == "1.0 overs"


def test_athletics_marks_become_ranks_with_ties() -> None:
    jump = SPORTS["athletics_jump"]
    actions = [
        act("mark", 1, metres=7.95),
        act("mark", 2, metres=8.10),
        act("foul", 3),
        act("mark", 4, metres=7.95),
        act("mark", 1, metres=8.02),
    ]
    state = jump.replay(4, actions)
    assert state["ranks"] == [2, 1, None, 3]
    values = jump.side_values(state)
    assert values[0]["score"] == "8.02" and values[2]["score"] == ""
    for _ in range(4):
        state = jump.apply(state, act("foul", 3))
    state = jump.apply(state, act("foul", 3))
    assert refused(jump, state, act("mark", 3, metres=6.0)) == (
        "this athlete has had all 6 attempts"
    )
    assert (
        refused(jump, state, act("mark", 1, metres=-1)) == "Mark: Metres must be 0 or more, not -1"
    )
    state = jump.apply(state, act("end_event"))
    assert state["finished"]


def test_undo_is_a_replay_without_the_undone_action() -> None:
    football = SPORTS["football"]
    actions = [act("start_period"), act("goal", 1), act("goal", 2), act("goal", 1)]
    kept = [a for i, a in enumerate(actions) if i != 2]
    assert scores(football, play(football, kept)) == ["2", "0"]
    badminton = SPORTS["badminton"]
    won = [act("point", 1)] * 21
    assert play(badminton, won)["match"]["game_over"]
    assert not play(badminton, won[:-1])["match"]["game_over"], "undo re-opens the game"


NETBALL = """\
code = "netball"
name = "Netball"
disciplines = ["NTB"]
sides = 2

[match]
quarter = 1
ended = false

[side]
goals = 0

[actions.goal]
label = "Goal"
side = true
effects = "side.goals += 1"

[actions.end_match]
effects = "ended = true"

[finish]
when = "ended"
winner = "1 if sides[1].goals > sides[2].goals else 2"

[output]
score = "{side.goals}"
"""


def test_a_new_sport_is_a_new_file_only(tmp_path: Path) -> None:
    (tmp_path / "netball.toml").write_text(NETBALL)
    sports = load_sports(tmp_path)
    netball = sports["netball"]
    state = netball.replay(2, [act("goal", 2), act("goal", 2), act("goal", 1), act("end_match")])
    assert scores(netball, state) == ["1", "2"] and state["winner"] == 2
    assert sport_for_discipline(sports, "NTB") is netball


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ('effects = "side.goals += 1"', 'effects = "side.gaols += 1"'),
            "netball.toml, line 16, actions.goal.effects: side.gaols is unknown; [side] has goals",
        ),
        (
            ('effects = "ended = true"', 'effects = "import os"'),
            "netball.toml, line 19, actions.end_match.effects: an effect is",
        ),
        (
            ('when = "ended"', 'when = "__import__(1)"'),
            "netball.toml, line 22, finish.when: the functions are min, max, abs, text",
        ),
        (
            ('score = "{side.goals}"', 'score = "{side.goals.__class__}"'),
            "netball.toml, line 26, output.score: write side.x",
        ),
        (('code = "netball"', 'code = "handball"'), "is 'handball' but the file is netball.toml"),
        (("[side]", "[sidez]"), "sidez: is not a sport file key"),
    ],
)
def test_a_bad_sport_file_names_its_line_and_field(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = tmp_path / "netball.toml"
    path.write_text(NETBALL.replace(*change))
    with pytest.raises(SportFileError) as caught:
        load_sports(tmp_path)
    assert message in str(caught.value)


def test_football_tells_the_console_its_period_clock_and_what_to_ask() -> None:
    console = load_sports(SPORTS_DIR)["football"].describe()["console"]
    assert console.pop("period")[0][0] == "if"  # "Before kick-off", else "Period 1"...
    assert console == {
        "clock": True,
        "minute": "minute",
        "ask": ["goal", "own_goal"],
        "confirm": ["end_period", "end_match"],
        "numbers": ["player", "player_in"],
    }


@pytest.mark.parametrize(
    ("console", "message"),
    [
        ('ask = ["gaol"]', "console.ask: 'gaol' is not an action here; there are"),
        ('numbers = ["shirt"]', "console.numbers: 'shirt' is not a field here"),
        ("clock = true", "add running, period_started_at, played_seconds to [match]"),
        ('minute = "minute"', "console.minute: 'minute' is not a field of any action"),
        ('period = "Period {period}"', "console.period:"),
        ("colour = 1", "console.colour: is not a console key; they are ask, clock"),
    ],
)
def test_a_bad_console_table_names_its_line_and_key(
    tmp_path: Path, console: str, message: str
) -> None:
    path = tmp_path / "netball.toml"
    path.write_text(f"{NETBALL}\n[console]\n{console}\n")
    with pytest.raises(SportFileError) as caught:
        load_sports(tmp_path)
    assert message in str(caught.value)
