"""Which fields an import clears: those its mapping owns, when they map to nothing."""

from __future__ import annotations

from typing import Any

import pytest

from omnium_imports._batches import Clearing, unit_row
from omnium_imports.mapping import MappedRow, MappingSpecError, MappingVersion, load_default

STEPS: list[dict[str, Any]] = [
    {"op": "read", "path": "rsc", "to": "code", "required": True},
    {"op": "read", "path": "venue", "to": "venue"},
    {"op": "read", "path": "status", "to": "status"},
    {
        "op": "each",
        "path": "competitors",
        "to": "sides",
        "steps": [
            {"op": "read", "path": "order", "to": "order", "required": True},
            {"op": "read", "path": "rank", "to": "rank"},
            {"op": "read", "path": "medal", "to": "medal"},
        ],
    },
]


def version(**more: Any) -> MappingVersion:
    return MappingVersion.parse({"target": "unit", "steps": STEPS, **more})


def row(value: dict[str, Any]) -> MappedRow:
    return MappedRow(0, "k", b"h", value, "ok", "")


def test_by_default_a_mapping_owns_what_its_steps_write() -> None:
    clearing = Clearing.of(version())
    assert clearing == Clearing(unit=("venue",), side=("rank", "medal"), absent=False)
    # The starting mapping owns every field it reads, so a withdrawn medal is cleared.
    starting = Clearing.of(load_default("scout_units"))
    assert starting.unit == ("phase", "start_at", "venue")
    assert starting.side == ("competitor_id", "result", "rank", "medal")


def test_a_null_clears_an_owned_field_and_a_left_out_one_only_when_the_mapping_says() -> None:
    value = {"code": "X", "status": "OFFICIAL", "sides": [{"order": 1, "medal": None}]}
    kept = unit_row(row(value), None, Clearing.of(version()))
    assert list(kept.unit.clear) == []
    assert list(kept.unit.sides[0].clear) == ["medal"]  # rank left out: not compared
    cleared = unit_row(row(value), None, Clearing.of(version(absent="clear")))
    assert list(cleared.unit.clear) == ["venue"]
    assert list(cleared.unit.sides[0].clear) == ["rank", "medal"]


def test_a_mapping_may_narrow_what_it_owns() -> None:
    narrow = Clearing.of(version(owns=["code", "status", "sides.medal"]))
    assert narrow == Clearing(unit=(), side=("medal",), absent=False)
    value = {"code": "X", "venue": None, "sides": [{"order": 1, "rank": None, "medal": None}]}
    sent = unit_row(row(value), None, narrow)
    assert list(sent.unit.clear) == []
    assert list(sent.unit.sides[0].clear) == ["medal"]


@pytest.mark.parametrize(
    ("more", "words"),
    [
        ({"owns": ["sides.score"]}, "owns 'sides.score', but no step writes it"),
        ({"owns": "venue"}, "owns lists the fields it answers for"),
        ({"absent": "drop"}, "absent says what a field the row leaves out means"),
    ],
)
def test_a_wrong_owns_or_absent_is_refused_in_plain_words(more: dict[str, Any], words: str) -> None:
    with pytest.raises(MappingSpecError, match=words):
        version(**more)
