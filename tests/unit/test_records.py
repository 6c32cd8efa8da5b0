"""The pure diff and value checks of the road."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from omnium_command._records import MEDAL_ROW, SIDE, UNIT, BadValue, diff


def test_diff_keeps_only_real_changes() -> None:
    current = {"status": "SCHEDULED", "venue": "A", "name": "M1"}
    d = diff(current, {"status": "RUNNING", "venue": "A"}, [], respect_pins=True)
    assert d.changes == {"status": ("SCHEDULED", "RUNNING")}
    assert d.kept_by_hand == {}


def test_pinned_fields_are_kept_by_hand_only_when_they_would_change() -> None:
    current = {"status": "POSTPONED", "venue": "A"}
    d = diff(current, {"status": "RUNNING", "venue": "A"}, ["status", "venue"], respect_pins=True)
    assert d.changes == {}
    assert d.kept_by_hand == {"status": ("POSTPONED", "RUNNING")}


def test_a_person_may_change_a_pinned_field() -> None:
    d = diff({"status": "POSTPONED"}, {"status": "RUNNING"}, ["status"], respect_pins=False)
    assert d.changes == {"status": ("POSTPONED", "RUNNING")}


def test_times_compare_as_instants() -> None:
    stored = "2026-09-20T01:00:00+00:00"
    same = datetime(
        2026, 9, 20, 10, 0, tzinfo=datetime.fromisoformat("2026-01-01T00:00+09:00").tzinfo
    )
    assert diff({"start_at": stored}, {"start_at": same}, [], respect_pins=True).changes == {}
    later = datetime(2026, 9, 20, 2, 0, tzinfo=UTC)
    assert (
        "start_at" in diff({"start_at": stored}, {"start_at": later}, [], respect_pins=True).changes
    )


def test_values_are_checked() -> None:
    assert UNIT.clean({"status": "running"}) == {"status": "RUNNING"}
    assert SIDE.clean({"rank": 2.0}, prefix="sides[1].") == {"rank": 2}
    assert MEDAL_ROW.clean({"gold": "3"}) == {"gold": 3}
    with pytest.raises(BadValue, match="name cannot be empty"):
        UNIT.clean({"name": "  "})
    with pytest.raises(BadValue, match="at most 200 fit"):
        UNIT.clean({"name": "x" * 201})
    with pytest.raises(BadValue, match=r"sides\[1\]\.medal 'TIN' is not one of GOLD"):
        SIDE.clean({"medal": "TIN"}, prefix="sides[1].")
    with pytest.raises(BadValue, match="must be 0 or more"):
        MEDAL_ROW.clean({"gold": -1})
    with pytest.raises(BadValue, match="is not an id"):
        SIDE.clean({"competitor_id": "KOR"})
