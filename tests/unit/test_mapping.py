"""The no-code mapping's steps: every op, alone and together, on one row at a time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from omnium_imports.mapping import (
    MappingContext,
    MappingSpecError,
    read_path,
)
from tests.support.mapping import TOKYO, Step, one, version

# -- read, rename, set, default ----------------------------------------------------------------


def test_read_follows_dot_paths_and_list_indices() -> None:
    row = {"competitors": [{"name": "KIM Minjun"}, {"name": "LEE Ji-ho"}], "venue": None}
    mapped = one(
        [
            {"op": "read", "path": "competitors.1.name", "to": "second"},
            {"op": "read", "path": "venue", "to": "venue"},
            {"op": "read", "path": "competitors.5.name", "to": "sixth"},
            {"op": "read", "path": "venue.name", "to": "venue_name"},
        ],
        row,
    )
    assert mapped.outcome == "ok"
    # Null is kept as null; a missing value leaves the field out, so it is not compared.
    assert mapped.value == {"second": "LEE Ji-ho", "venue": None}
    assert read_path(row, "competitors.0.name") == "KIM Minjun"
    assert read_path(row, "competitors.x") is None


def test_read_required_makes_a_missing_value_a_problem() -> None:
    mapped = one([{"op": "read", "path": "rsc", "to": "code", "required": True}], {})
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith("the row has no rsc, which this mapping needs")


def test_read_copies_lists_so_scouts_row_is_never_changed() -> None:
    row = {"externalId": "SC-1", "tags": ["a"]}
    mapped = version({"op": "read", "path": "tags", "to": "tags"}).map_row(0, row, TOKYO)
    mapped.value["tags"].append("b")
    assert row["tags"] == ["a"]


def test_rename_moves_a_field_and_ignores_an_absent_one() -> None:
    steps: list[Step] = [
        {"op": "read", "path": "unitName", "to": "title"},
        {"op": "rename", "from": "title", "to": "name"},
        {"op": "rename", "from": "nothing", "to": "something"},
    ]
    assert one(steps, {"unitName": "Final"}).value == {"name": "Final"}


def test_set_writes_a_constant_that_rows_do_not_share() -> None:
    v = version({"op": "set", "to": "tags", "value": ["scout"]})
    first, second = v.map_rows([{"externalId": "A"}, {"externalId": "B"}], TOKYO)
    first.value["tags"].append("changed")
    assert second.value == {"tags": ["scout"]}


def test_default_fills_only_missing_or_null_fields() -> None:
    steps: list[Step] = [
        {"op": "read", "path": "venue", "to": "venue"},
        {"op": "default", "field": "venue", "value": "to be announced"},
    ]
    assert one(steps, {}).value == {"venue": "to be announced"}
    assert one(steps, {"venue": None}).value == {"venue": "to be announced"}
    assert one(steps, {"venue": "Toyota Stadium"}).value == {"venue": "Toyota Stadium"}


# -- map --------------------------------------------------------------------------------------


STATUS: Step = {"op": "read", "path": "status", "to": "status"}


def test_map_translates_values_through_the_table() -> None:
    steps: list[Step] = [
        STATUS,
        {"op": "map", "field": "status", "table": {"FINISHED": "OFFICIAL"}},
    ]
    assert one(steps, {"status": "FINISHED"}).value == {"status": "OFFICIAL"}
    # Null means "none yet", not a value to translate.
    assert one(steps, {"status": None}).value == {"status": None}


def test_map_what_to_do_with_a_value_not_in_the_table() -> None:
    table = {"FINISHED": "OFFICIAL"}
    keep: list[Step] = [STATUS, {"op": "map", "field": "status", "table": table, "unknown": "keep"}]
    assert one(keep, {"status": "LIVE"}).value == {"status": "LIVE"}

    use: list[Step] = [
        STATUS,
        {"op": "map", "field": "status", "table": table, "unknown": "use", "value": "RUNNING"},
    ]
    assert one(use, {"status": "LIVE"}).value == {"status": "RUNNING"}

    problem: list[Step] = [STATUS, {"op": "map", "field": "status", "table": table}]
    mapped = one(problem, {"status": "LIVE"})
    assert mapped.outcome == "problem"
    assert mapped.reason == (
        "status 'LIVE' is not in the mapping's table (it knows FINISHED); "
        "add it to the table, or ask Scout what it means"
    )


def test_map_looks_up_numbers_by_their_json_text() -> None:
    steps: list[Step] = [
        {"op": "read", "path": "rank", "to": "medal"},
        {"op": "map", "field": "medal", "table": {"1": "GOLD"}, "unknown": "use", "value": None},
    ]
    assert one(steps, {"rank": 1}).value == {"medal": "GOLD"}
    assert one(steps, {"rank": 4}).value == {"medal": None}


def test_map_with_case_any_takes_a_word_in_any_case() -> None:
    steps: list[Step] = [
        STATUS,
        {"op": "map", "field": "status", "table": {"SCHEDULED": "SCHEDULED"}, "case": "any"},
    ]
    for sent in ("Scheduled", "scheduled", "SCHEDULED", "sCHEDULED"):
        assert one(steps, {"status": sent}).value == {"status": "SCHEDULED"}, sent
    mapped = one(steps, {"status": "Finished"})
    assert mapped.outcome == "problem"
    assert mapped.reason == (
        "status 'Finished' is not in the mapping's table (it knows SCHEDULED, in any case); "
        "add it to the table, or ask Scout what it means"
    )
    # Numbers are still looked up by their JSON text.
    medal: list[Step] = [
        {"op": "read", "path": "medal", "to": "medal"},
        {"op": "map", "field": "medal", "table": {"g": "GOLD", "1": "GOLD"}, "case": "any"},
    ]
    assert [one(medal, {"medal": sent}).value["medal"] for sent in ("G", "g", 1, "1")] == [
        "GOLD"
    ] * 4


def test_a_map_without_case_matches_exactly_as_versions_made_before_it_did() -> None:
    table = {"SCHEDULED": "SCHEDULED"}
    for step in (
        {"op": "map", "field": "status", "table": table},
        {"op": "map", "field": "status", "table": table, "case": "exact"},
    ):
        assert one([STATUS, step], {"status": "SCHEDULED"}).outcome == "ok"
        mapped = one([STATUS, step], {"status": "Scheduled"})
        assert mapped.outcome == "problem"
        assert "(it knows SCHEDULED);" in mapped.reason


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            {"op": "map", "field": "s", "table": {"A": "B"}, "case": "lower"},
            "step 1 (map): 'case' must be 'exact' or 'any', not 'lower'",
        ),
        (
            {"op": "map", "field": "s", "table": {"Gold": "GOLD", "GOLD": "SILVER"}, "case": "any"},
            "step 1 (map): with case 'any' the keys 'Gold' and 'GOLD' are one, but the table "
            "gives 'GOLD' and 'SILVER'; keep one of them",
        ),
    ],
)
def test_a_map_case_that_cannot_work_is_refused(step: Step, message: str) -> None:
    with pytest.raises(MappingSpecError) as refused:
        version(step)
    assert str(refused.value) == message
    # Two spellings of one key that mean the same are fine.
    version({"op": "map", "field": "s", "table": {"Gold": "GOLD", "GOLD": "GOLD"}, "case": "any"})


# -- local_time -------------------------------------------------------------------------------


START: Step = {"op": "read", "path": "startLocal", "to": "start_at"}
LOCAL: Step = {"op": "local_time", "field": "start_at"}


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("2026-09-21T09:30:00", "2026-09-21T09:30:00+09:00"),
        ("2026-09-21 21:05", "2026-09-21T21:05:00+09:00"),
        # A time that already has an offset keeps its instant and its offset.
        ("2026-09-21T00:30:00+00:00", "2026-09-21T00:30:00+00:00"),
        ("2026-09-21T00:30:00.000Z", "2026-09-21T00:30:00+00:00"),
        (None, None),
    ],
)
def test_local_time_in_the_events_zone(sent: str | None, expected: str | None) -> None:
    mapped = one([START, LOCAL], {"startLocal": sent})
    assert mapped.outcome == "ok"
    assert mapped.value == {"start_at": expected}


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        (
            "2026-09-31T09:30:00",
            "start_at '2026-09-31T09:30:00' is not a time like 2026-09-21T09:30:00; "
            "check what Scout shows for it",
        ),
        ("half past nine", "start_at 'half past nine' is not a time like 2026-09-21T09:30:00"),
        ("2026-09-21", "start_at '2026-09-21' has no time of day"),
        (930, "start_at is a number (930), not a time like 2026-09-21T09:30:00"),
    ],
)
def test_a_bad_time_is_a_problem_naming_the_field_and_value(sent: Any, reason: str) -> None:
    mapped = one([START, LOCAL], {"startLocal": sent})
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith(reason)


def test_a_wall_clock_time_the_clocks_skip_is_a_problem() -> None:
    berlin = MappingContext("Europe/Berlin", {})
    skipped = one([START, LOCAL], {"startLocal": "2026-03-29T02:30:00"}, berlin)
    assert skipped.outcome == "problem"
    assert "does not exist in Europe/Berlin" in skipped.reason
    summer = one([START, LOCAL], {"startLocal": "2026-03-29T03:30:00"}, berlin)
    assert summer.value == {"start_at": "2026-03-29T03:30:00+02:00"}


def test_the_context_refuses_a_time_zone_that_is_not_one() -> None:
    with pytest.raises(ValueError, match="'Asia/Tokio' is not an IANA zone name"):
        MappingContext("Asia/Tokio", {})


# -- lookup -----------------------------------------------------------------------------------


COMPETITORS: dict[str, dict[str, str]] = {
    "competitor": {"SC-P-00001": "11111111-1111-1111-1111-111111111111"}
}
SIDES: Step = {
    "op": "each",
    "path": "competitors",
    "to": "sides",
    "steps": [
        {"op": "read", "path": "order", "to": "order"},
        {
            "op": "lookup",
            "path": "externalId",
            "kind": "competitor",
            "to": "competitor_id",
            "describe": ["name", "noc"],
        },
    ],
}


def test_lookup_gives_our_id() -> None:
    row = {"competitors": [{"externalId": "SC-P-00001", "order": 1}]}
    mapped = one([SIDES], row, MappingContext("Asia/Tokyo", COMPETITORS))
    assert mapped.outcome == "ok"
    assert mapped.value == {
        "sides": [{"order": 1, "competitor_id": "11111111-1111-1111-1111-111111111111"}]
    }


def test_an_unknown_competitor_holds_the_row_with_a_question() -> None:
    row = {
        "competitors": [
            {"externalId": "SC-P-00001", "order": 1},
            {"externalId": "SC-P-00123", "name": "KIM Minjun", "noc": "KOR", "order": 2},
            {"externalId": "SC-P-00999", "order": 3},
        ]
    }
    mapped = one([SIDES], row, MappingContext("Asia/Tokyo", COMPETITORS))
    assert mapped.outcome == "held"
    assert mapped.key == "SC-000123"
    assert mapped.reason == (
        "Scout names competitor SC-P-00123 (KIM Minjun, KOR) in unit SC-000123; we have no "
        "such competitor. Add it, or map SC-P-00123 to one we have. "
        "Scout names competitor SC-P-00999 in unit SC-000123; we have no such competitor. "
        "Add it, or map SC-P-00999 to one we have."
    )
    # What could be mapped is there; the unknown ids are left out, never guessed.
    assert [side.get("competitor_id") for side in mapped.value["sides"]] == [
        "11111111-1111-1111-1111-111111111111",
        None,
        None,
    ]


def test_an_unknown_unit_is_held_or_left_out_as_the_step_says() -> None:
    hold = {"op": "lookup", "path": "externalId", "kind": "unit", "to": "unit_id"}
    held = one([hold], {})
    assert held.outcome == "held"
    assert held.reason == (
        "Scout sends unit SC-000123; we have no such unit. Add it, or map SC-000123 to one we have."
    )
    leave_out = {**hold, "unknown": "leave_out"}
    assert one([leave_out], {}).outcome == "ok"
    assert one([leave_out], {}).value == {}
    known = MappingContext("Asia/Tokyo", {"unit": {"SC-000123": "u-1"}})
    assert one([leave_out], {}, known).value == {"unit_id": "u-1"}


def test_a_row_with_no_id_to_look_up_is_a_problem() -> None:
    mapped = one([SIDES], {"competitors": [{"order": 1, "name": "BYE"}]})
    assert mapped.outcome == "problem"
    assert mapped.reason == (
        "competitors.0 has no externalId to find the competitor by; ask Scout to send it"
    )


# -- skip_if ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "row", "reason"),
    [
        (
            {"op": "skip_if", "path": "disciplineCode", "equals": "CRI"},
            {"disciplineCode": "CRI"},
            "disciplineCode is 'CRI', which this mapping skips",
        ),
        (
            {"op": "skip_if", "path": "status", "in": ["CANCELLED", "POSTPONED"]},
            {"status": "POSTPONED"},
            "status is 'POSTPONED', one of those this mapping skips",
        ),
        (
            {"op": "skip_if", "path": "rsc", "missing": True},
            {"rsc": None},
            "the row has no rsc, and this mapping skips such rows",
        ),
        (
            {
                "op": "skip_if",
                "path": "phase",
                "equals": "Exhibition",
                "reason": "not a medal event",
            },
            {"phase": "Exhibition"},
            "not a medal event",
        ),
    ],
)
def test_skip_if_skips_the_row_with_the_reason(
    step: Mapping[str, Any], row: Mapping[str, Any], reason: str
) -> None:
    mapped = one([step, {"op": "set", "to": "after", "value": 1}], row)
    assert (mapped.outcome, mapped.reason, mapped.key) == ("skipped", reason, "SC-000123")
    assert "after" not in mapped.value


def test_skip_if_lets_other_rows_through_and_can_test_an_output_field() -> None:
    steps: list[Step] = [
        STATUS,
        {"op": "map", "field": "status", "table": {"ENDED": "OFFICIAL"}, "unknown": "keep"},
        {"op": "skip_if", "field": "status", "equals": "OFFICIAL"},
    ]
    assert one(steps, {"status": "ENDED"}).outcome == "skipped"
    assert one(steps, {"status": "RUNNING"}).outcome == "ok"
    assert one(steps, {}).outcome == "ok"


def test_skip_if_can_skip_a_keyless_row_rather_than_call_it_a_problem() -> None:
    v = version({"op": "skip_if", "path": "externalId", "missing": True})
    assert v.map_row(0, {"heading": "Day 3"}, TOKYO).outcome == "skipped"


# -- template and integer ---------------------------------------------------------------------


def test_template_builds_text_from_output_then_input() -> None:
    steps: list[Step] = [
        {"op": "read", "path": "phase", "to": "phase"},
        {"op": "map", "field": "phase", "table": {"FNL": "Final"}, "unknown": "keep"},
        {"op": "template", "to": "name", "template": "{event} {phase} {{{competitors.0.noc}}}"},
    ]
    row = {"event": "Men's 100m", "phase": "FNL", "competitors": [{"noc": "JPN"}]}
    assert one(steps, row).value == {"phase": "Final", "name": "Men's 100m Final {JPN}"}


def test_a_template_name_that_is_missing_makes_a_problem() -> None:
    mapped = one([{"op": "template", "to": "name", "template": "{event} {phase}"}], {"event": "X"})
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith("the template for name needs {phase}, but the row has no phase")


@pytest.mark.parametrize(
    ("sent", "expected"), [(3, 3), ("3", 3), (" 12 ", 12), (4.0, 4), ("2.0", 2), (None, None)]
)
def test_integer_makes_whole_numbers(sent: Any, expected: int | None) -> None:
    steps: list[Step] = [
        {"op": "read", "path": "rank", "to": "rank"},
        {"op": "integer", "field": "rank"},
    ]
    assert one(steps, {"rank": sent}).value == {"rank": expected}


@pytest.mark.parametrize("sent", ["3.5", "abc", 2.5, True, "", [1], float("nan")])
def test_a_value_that_is_not_a_whole_number_is_a_problem(sent: Any) -> None:
    steps: list[Step] = [
        {"op": "read", "path": "rank", "to": "rank"},
        {"op": "integer", "field": "rank"},
    ]
    mapped = one(steps, {"rank": sent})
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith("rank ")
    assert "is not a whole number; check what Scout shows for it" in mapped.reason


# -- each -------------------------------------------------------------------------------------


RANKS: Step = {
    "op": "each",
    "path": "competitors",
    "to": "sides",
    "steps": [
        {"op": "skip_if", "path": "externalId", "equals": "BYE"},
        {"op": "read", "path": "order", "to": "order"},
        {"op": "read", "path": "rank", "to": "rank"},
        {"op": "integer", "field": "rank"},
    ],
}


def test_each_maps_every_element_and_skip_if_leaves_out_one() -> None:
    row = {
        "competitors": [
            {"externalId": "A", "order": 1, "rank": "2"},
            {"externalId": "BYE", "order": 2},
            {"externalId": "B", "order": 3, "rank": 1},
        ]
    }
    mapped = one([RANKS], row)
    assert mapped.outcome == "ok"
    assert mapped.value == {"sides": [{"order": 1, "rank": 2}, {"order": 3, "rank": 1}]}
    assert one([RANKS], {}).value == {}
    assert one([RANKS], {"competitors": []}).value == {"sides": []}


@pytest.mark.parametrize(
    ("competitors", "reason"),
    [
        ("KOR v JPN", "competitors is a text, not a list; check what Scout sends"),
        ([{"order": 1}, "JPN"], "competitors.1 is a text, not an object"),
        (
            [{"order": 1, "rank": "first"}],
            "in competitors.0, rank 'first' is not a whole number; check what Scout shows for it",
        ),
    ],
)
def test_a_bad_element_makes_a_problem_that_says_where(competitors: Any, reason: str) -> None:
    mapped = one([RANKS], {"competitors": competitors})
    assert (mapped.outcome, mapped.reason) == ("problem", reason)


def test_each_nests() -> None:
    step = {
        "op": "each",
        "path": "teams",
        "to": "teams",
        "steps": [
            {
                "op": "each",
                "path": "players",
                "to": "players",
                "steps": [
                    {"op": "read", "path": "bib", "to": "bib"},
                    {"op": "integer", "field": "bib"},
                ],
            }
        ],
    }
    row = {"teams": [{"players": [{"bib": "7"}]}, {"players": [{"bib": "x"}]}]}
    mapped = one([step], row)
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith("in teams.1.players.0, bib 'x' is not a whole number")
    assert one([step], {"teams": [{"players": [{"bib": "7"}]}]}).value == {
        "teams": [{"players": [{"bib": 7}]}]
    }
