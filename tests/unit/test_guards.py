"""The I12 guard counts records, not values, and leaves out what a person pinned."""

from __future__ import annotations

from typing import Any

from omnium_imports._batches import Clearing
from omnium_imports._guards import Limits, cleared_and_reopened, too_few
from omnium_imports.mapping import MappedRow

LIMITS = Limits(
    min_share=0.5,
    usual_runs=5,
    max_not_placed=0.1,
    max_refused=0.1,
    max_cleared=2,
    max_reopened=1,
)


def _row(n: int, **value: Any) -> MappedRow:
    return MappedRow(n, f"K{n}", b"", {"unit_id": f"u{n}", "code": f"U{n}", **value}, "ok", "")


def _ours(status: str = "SCHEDULED", pinned: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"status": status, "venue": "Hall", "phase": "Final", "pinned": list(pinned)}


def test_a_unit_with_several_values_cleared_counts_once() -> None:
    clearing = Clearing(unit=("phase", "venue"))
    rows = [_row(n, venue=None, phase=None) for n in range(2)]
    current = {f"u{n}": _ours() for n in range(2)}
    # Four values, two records: within a limit of two records.
    assert cleared_and_reopened(rows, current, {}, clearing, LIMITS) is None
    rows.append(_row(2, venue=None))
    current["u2"] = _ours()
    stop = cleared_and_reopened(rows, current, {}, clearing, LIMITS)
    assert stop is not None and "would clear 3 records we hold" in stop


def test_a_status_a_person_pinned_is_not_counted_as_reopened() -> None:
    rows = [_row(n, status="RUNNING") for n in range(2)]
    current = {f"u{n}": _ours("OFFICIAL", pinned=("status",)) for n in range(2)}
    assert cleared_and_reopened(rows, current, {}, Clearing(), LIMITS) is None
    current["u1"] = _ours("OFFICIAL")
    current["u0"] = _ours("OFFICIAL")
    stop = cleared_and_reopened(rows, current, {}, Clearing(), LIMITS)
    assert stop is not None and "reopen 2 finished units" in stop


def test_too_few_rows_says_one_row_not_one_rows() -> None:
    said = too_few(1, 14, LIMITS)
    assert said is not None and said.startswith("Scout sent 1 row; it usually sends about 14.")
