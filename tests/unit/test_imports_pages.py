"""The fast path before mapping (omnium_imports._pages): a page Scout sends again byte for byte
is not mapped again, and only while the key state would skip every one of its rows. The key
state here is the real KeyStateCache, told what was written as a batch answer tells it; the
whole pipeline over a real simulator is in tests/integration/test_imports_fast_path.py."""

from __future__ import annotations

import json
from typing import Any

from omnium_imports._keystate import KeyStateCache
from omnium_imports._pages import PageMemory
from omnium_imports._scout import ScoutPage, page_digest
from omnium_imports.mapping import MappedRow, MappingContext, load_default

VERSION = load_default("scout_units")
SPEC: dict[str, Any] = {"target": "unit", "steps": "as loaded"}  # only its JSON is compared
CONTEXT = MappingContext("Asia/Shanghai", {})
PAGE = 3


def _row(n: int, *, status: str = "SCHEDULED", venue: str = "Hall 1") -> dict[str, Any]:
    return {
        "externalId": f"SC-{n:04d}",
        "rsc": f"ATHM100METRES----------FNL-{n:06d}",
        "disciplineCode": "ATH",
        "unitName": f"Final {n}",
        "startLocal": "2026-09-20T10:00:00",
        "venue": venue,
        "status": status,
    }


def _pages(rows: list[dict[str, Any]], memory: PageMemory) -> list[ScoutPage]:
    """The pages as ScoutClient.pages makes them: pages seen before are not decoded."""
    seen = memory.seen()
    pages = []
    for offset in range(0, len(rows), PAGE):
        body = json.dumps({"items": rows[offset : offset + PAGE]}).encode()
        digest = page_digest(body)
        if digest in seen:
            pages.append(ScoutPage(offset, digest, seen[digest], None, body))
        else:
            items = json.loads(body)["items"]
            pages.append(ScoutPage(offset, digest, len(items), items))
    return pages


def _written(state: KeyStateCache, mapped: list[MappedRow]) -> None:
    for n, row in enumerate(mapped, start=1):
        assert row.key is not None
        state.written(row.key, row.hash, f"unit-{row.key}", n)


def _first_run(rows: list[dict[str, Any]]) -> tuple[PageMemory, KeyStateCache, list[MappedRow]]:
    memory, state = PageMemory(), KeyStateCache("i1", "unit", 0.0)
    first = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, state.skippable)
    _written(state, first)
    return memory, state, first


def _same(a: list[MappedRow], b: list[MappedRow]) -> None:
    assert [(r.position, r.key, r.hash, r.outcome) for r in a] == [
        (r.position, r.key, r.hash, r.outcome) for r in b
    ]


def test_a_run_sent_again_unchanged_is_not_mapped_again() -> None:
    rows = [_row(n) for n in range(7)]
    memory, state, first = _first_run(rows)
    assert memory.reused == 0 and all(r.outcome == "ok" for r in first)

    pages = _pages(rows, memory)
    assert all(page.items is None for page in pages), "pages seen before are not decoded"
    again = memory.map(pages, VERSION, SPEC, CONTEXT, state.skippable)
    assert memory.reused == 7
    _same(again, first)
    # Later stages read where a row is placed and whether it settles: those fields are kept.
    assert [r.value for r in again] == [
        {"code": r.value["code"], "status": r.value["status"]} for r in first
    ]
    assert all(state.skippable(r.key, r.hash) for r in again)


def test_a_page_with_a_changed_row_is_mapped_and_the_others_come_from_memory() -> None:
    rows = [_row(n) for n in range(7)]
    memory, state, first = _first_run(rows)
    rows[4] = _row(4, status="RUNNING")
    again = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, state.skippable)
    assert memory.reused == 4  # pages 0-2 and 6; the page of rows 3-5 is mapped
    assert again[4].value["status"] == "RUNNING" and again[4].hash != first[4].hash
    assert again[3].value["venue"] == "Hall 1", "a mapped page's rows have their whole values"
    _same(again[:3], first[:3])


def test_a_page_whose_record_was_touched_by_hand_is_mapped_again() -> None:
    rows = [_row(n) for n in range(6)]
    memory, state, first = _first_run(rows)
    state.touched.add(f"unit-{first[1].key}")
    again = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, state.skippable)
    assert memory.reused == 3
    assert again[1].value["venue"] == "Hall 1"


def test_new_lookups_or_another_mapping_version_map_everything_again() -> None:
    rows = [_row(n) for n in range(6)]
    memory, state, _ = _first_run(rows)
    other = MappingContext("Asia/Shanghai", {"competitor": {"C1": "ours-1"}})
    memory.map(_pages(rows, memory), VERSION, SPEC, other, state.skippable)
    assert memory.reused == 0
    memory.map(_pages(rows, memory), VERSION, {**SPEC, "version": 2}, other, state.skippable)
    assert memory.reused == 0
    memory.map(_pages(rows, memory), VERSION, {**SPEC, "version": 2}, other, state.skippable)
    assert memory.reused == 6


def test_a_resumed_run_maps_every_row() -> None:
    rows = [_row(n) for n in range(6)]
    memory, _, first = _first_run(rows)
    again = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, None)
    assert memory.reused == 0
    assert [r.value for r in again] == [r.value for r in first]


def test_a_page_with_a_row_that_is_not_ok_is_never_taken_from_memory() -> None:
    rows = [_row(n) for n in range(6)]
    rows[1] = {**rows[1], "externalId": None}  # no key: a problem row
    memory, state = PageMemory(), KeyStateCache("i1", "unit", 0.0)
    first = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, state.skippable)
    assert first[1].outcome == "problem"
    _written(state, [r for r in first if r.key is not None])
    again = memory.map(_pages(rows, memory), VERSION, SPEC, CONTEXT, state.skippable)
    assert memory.reused == 3
    assert again[1].outcome == "problem"


def test_a_page_sent_again_at_another_offset_keeps_its_rows_positions_true() -> None:
    rows = [_row(n) for n in range(9)]
    memory, state, first = _first_run(rows)
    again = memory.map(_pages(rows[3:], memory), VERSION, SPEC, CONTEXT, state.skippable)
    assert memory.reused == 6
    assert [(r.position, r.key) for r in again] == [(p - 3, r.key) for p, r in enumerate(first)][3:]
