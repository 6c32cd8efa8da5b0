"""The no-code mapping on whole rows: the key and the hash, damaged rows that never raise,
the spec's checks, and the default mappings on the simulator's rows."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import omnium_imports.mapping as module
from omnium_db import UNIT_STATUSES
from omnium_imports.mapping import (
    OPS,
    MappingContext,
    MappingSpecError,
    MappingVersion,
    load_default,
)
from omnium_scout_sim import ScoutSimulator
from tests.support.mapping import TOKYO, Step, one, our_id, version

OUR_STATUSES = set(UNIT_STATUSES)


# -- key, hash and never raising --------------------------------------------------------------


def test_the_key_comes_from_the_input_row() -> None:
    v = version({"op": "set", "to": "x", "value": 1}, key_fields=["disciplineCode", "rsc"])
    assert v.map_row(0, {"disciplineCode": "ATH", "rsc": "M100M"}, TOKYO).key == "ATH:M100M"
    assert version({"op": "set", "to": "x", "value": 1}).key_of({"externalId": 42}) == "42"


@pytest.mark.parametrize("row", [{}, {"externalId": None}, {"externalId": ""}])
def test_a_row_with_no_key_is_a_problem(row: Mapping[str, Any]) -> None:
    mapped = version({"op": "set", "to": "x", "value": 1}).map_row(3, row, TOKYO)
    assert (mapped.key, mapped.outcome) == (None, "problem")
    assert mapped.reason.startswith(
        "the row has no externalId: it cannot be followed from run to run"
    )


def test_the_hash_is_sha256_of_the_sorted_mapped_value() -> None:
    mapped = one([{"op": "read", "path": "venue", "to": "venue"}], {"venue": "Toyota Stadium"})
    expected = hashlib.sha256(json.dumps({"venue": "Toyota Stadium"}).encode()).digest()
    assert mapped.hash == expected


def test_same_value_same_hash_and_input_order_does_not_matter(
    unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    units = load_default("scout_units")
    row = unit_rows[0]
    reordered = {name: row[name] for name in reversed(list(row))}
    reordered["competitors"] = [
        {name: c[name] for name in sorted(c, reverse=True)} for c in row["competitors"]
    ]
    first = units.map_row(0, row, context)
    again = units.map_row(7, copy.deepcopy(row), context)
    other_order = units.map_row(0, reordered, context)
    assert first.hash == again.hash == other_order.hash
    assert first.value == other_order.value


def test_a_change_in_any_mapped_field_changes_the_hash(
    unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    units = load_default("scout_units")
    row = next(r for r in unit_rows if r["status"] == "OFFICIAL" and r["competitors"][0]["medal"])
    base = units.map_row(0, row, context)
    changes: dict[str, Any] = {
        "rsc": "ATHM100M--------------FNL-000200--",
        "disciplineCode": "XXX",
        "unitName": row["unitName"] + " (replayed)",
        "phase": row["phase"] + " (replayed)",
        "startLocal": "2026-09-30T10:00:00",
        "venue": row["venue"] + " Annex",
        "status": "UNOFFICIAL",
    }
    hashes = {"unchanged": base.hash}
    for name, value in changes.items():
        changed = units.map_row(0, {**row, name: value}, context)
        assert changed.outcome == "ok", name
        hashes[name] = changed.hash
    first = row["competitors"][0]
    side_changes: dict[str, Any] = {
        "externalId": row["competitors"][1]["externalId"],
        "order": 9,
        "result": "1:59.99",
        "rank": first["rank"] + 10,
        "medal": "BRONZE" if first["medal"] != "BRONZE" else "GOLD",
    }
    for name, value in side_changes.items():
        competitors = copy.deepcopy(row["competitors"])
        competitors[0][name] = value
        changed = units.map_row(0, {**row, "competitors": competitors}, context)
        assert changed.outcome == "ok", name
        hashes[f"competitors.0.{name}"] = changed.hash
    assert len(set(hashes.values())) == len(hashes) == 1 + len(changes) + len(side_changes)


@pytest.mark.parametrize(
    "row", [None, "SC-000123", 12, ["externalId", "SC-1"], {"externalId": {"nested": True}}]
)
def test_a_row_that_is_not_a_row_is_a_problem(row: Any) -> None:
    mapped = load_default("scout_units").map_row(4, row, TOKYO)
    assert mapped.outcome == "problem"
    assert mapped.reason


def test_a_key_that_is_not_an_id_is_a_problem() -> None:
    mapped = version(READ).map_row(0, {"externalId": {"id": 1}}, TOKYO)
    assert (mapped.key, mapped.outcome) == (None, "problem")
    assert mapped.reason.startswith("the row's externalId is an object, not an id")


class _Flaky(dict[str, Any]):
    """A row that fails when read, as no JSON row can: the fault must not escape."""

    def __getitem__(self, name: str) -> Any:
        if name == "venue":
            raise RuntimeError("disk on fire")
        return super().__getitem__(name)


def test_a_fault_in_mapping_is_a_problem_not_an_exception() -> None:
    mapped = version(READ).map_row(0, _Flaky(externalId="SC-1", venue="X"), TOKYO)
    assert (mapped.key, mapped.outcome) == ("SC-1", "problem")
    assert mapped.reason == (
        "mapping stopped on something it did not expect (RuntimeError: disk on fire); "
        "this is a fault in omnium's mapping: report it with this row"
    )
    # Keys of mixed types cannot be sorted for the hash; still no exception.
    odd = version({"op": "read", "path": "extra", "to": "extra"})
    assert odd.map_row(1, {"externalId": "SC-2", "extra": {1: "a", "b": 2}}, TOKYO).outcome == (
        "problem"
    )


def test_mapping_never_raises_on_damaged_rows(
    unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    units = load_default("scout_units")
    junk: list[Any] = [None, "", "x", -1, 1.5, True, [], {}, [None], {"a": 1}, "2026-13-40T99:00"]
    rng = random.Random(7)
    outcomes = set()
    for _ in range(2_000):
        row = copy.deepcopy(rng.choice(unit_rows))
        name = rng.choice([*row, "competitors"])
        if name == "competitors" and row["competitors"] and rng.random() < 0.7:
            side = rng.choice(row["competitors"])
            side[rng.choice(list(side))] = rng.choice(junk)
        else:
            row[name] = rng.choice(junk)
        mapped = units.map_row(0, row, context)
        outcomes.add(mapped.outcome)
        assert mapped.outcome == "ok" or mapped.reason
    assert {"ok", "problem", "held"} <= outcomes


# -- checking the spec ------------------------------------------------------------------------


READ: Step = {"op": "read", "path": "venue", "to": "venue"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["read"], "a mapping is an object with target and steps, not a list"),
        ({"target": "unit", "steps": [READ], "stpes": []}, "the mapping has 'stpes'"),
        ({"target": "units", "steps": [READ]}, "target must be unit or medal_row, not 'units'"),
        ({"target": "unit", "steps": [READ], "key_fields": "externalId"}, "key_fields must be"),
        ({"target": "unit", "steps": [READ], "key_fields": []}, "key_fields must be"),
        ({"target": "unit", "steps": []}, "the mapping needs 'steps'"),
        ({"target": "unit"}, "the mapping needs 'steps'"),
        ({"target": "unit", "steps": [READ, "read"]}, "step 2 must be an object"),
        ({"target": "unit", "steps": [{"path": "a"}]}, "step 1 has no 'op'; say which it is"),
        ({"target": "unit", "steps": [READ, {"op": "reed"}]}, "step 2 has op 'reed', which we"),
        (
            {"target": "unit", "steps": [{"op": "read", "to": "venue"}]},
            "step 1 (read): it needs 'path': a dot path into the row",
        ),
        (
            {"target": "unit", "steps": [{"op": "read", "path": 5, "to": "venue"}]},
            "step 1 (read): 'path' must be a text",
        ),
        (
            {"target": "unit", "steps": [{"op": "read", "path": "a..b", "to": "venue"}]},
            "step 1 (read): 'path' 'a..b' has an empty part",
        ),
        (
            {"target": "unit", "steps": [{**READ, "form": "x"}]},
            "step 1 (read): it does not take 'form'; read takes path, to, required",
        ),
        (
            {"target": "unit", "steps": [{**READ, "required": "yes"}]},
            "step 1 (read): 'required' must be true or false",
        ),
        (
            {"target": "unit", "steps": [{"op": "map", "field": "s", "table": []}]},
            "step 1 (map): 'table' must be an object",
        ),
        (
            {
                "target": "unit",
                "steps": [{"op": "map", "field": "s", "table": {"A": "B"}, "unknown": "use"}],
            },
            "step 1 (map): with unknown 'use' it needs 'value'",
        ),
        (
            {
                "target": "unit",
                "steps": [{"op": "map", "field": "s", "table": {"A": "B"}, "unknown": "drop"}],
            },
            "step 1 (map): 'unknown' must be 'keep' or 'use' or 'problem', not 'drop'",
        ),
        (
            {
                "target": "unit",
                "steps": [{"op": "lookup", "path": "id", "kind": "team", "to": "x"}],
            },
            "step 1 (lookup): 'kind' 'team' is not one we look up; use competitor or unit",
        ),
        (
            {
                "target": "unit",
                "steps": [
                    {"op": "lookup", "path": "id", "kind": "unit", "to": "x", "describe": "name"}
                ],
            },
            "step 1 (lookup): 'describe' must be a list of paths",
        ),
        (
            {"target": "unit", "steps": [{"op": "skip_if", "path": "a", "equals": 1, "in": [1]}]},
            "step 1 (skip_if): give exactly one test",
        ),
        (
            {"target": "unit", "steps": [{"op": "skip_if", "equals": 1}]},
            "step 1 (skip_if): give exactly one of 'path'",
        ),
        (
            {"target": "unit", "steps": [{"op": "template", "to": "n", "template": "{event"}]},
            "step 1 (template): 'template' '{event' has braces that do not pair",
        ),
        (
            {"target": "unit", "steps": [{"op": "template", "to": "n", "template": "{a!r}"}]},
            "step 1 (template): 'template' '{a!r}' has {a!r}; write plain names",
        ),
        (
            {"target": "unit", "steps": [{"op": "default", "field": "n", "value": None}]},
            "step 1 (default): 'value' is null",
        ),
        (
            {"target": "unit", "steps": [{"op": "set", "to": "n"}]},
            "step 1 (set): it needs 'value'",
        ),
        (
            {
                "target": "unit",
                "steps": [
                    READ,
                    {"op": "each", "path": "c", "to": "s", "steps": [READ, {"op": "integer"}]},
                ],
            },
            "step 2 (each), inner step 2 (integer): it needs 'field'",
        ),
        (
            {"target": "unit", "steps": [{"op": "each", "path": "c", "to": "s", "steps": []}]},
            "step 1 (each) needs 'steps'",
        ),
    ],
)
def test_a_broken_spec_is_refused_with_the_step_and_what_is_wrong(spec: Any, message: str) -> None:
    with pytest.raises(MappingSpecError) as refused:
        MappingVersion.parse(spec)
    assert message in str(refused.value)


def test_every_op_is_documented() -> None:
    readme = (Path(module.__file__).parents[2] / "README-mapping.md").read_text()
    assert module.__doc__ is not None
    for op in OPS:
        assert f"| `{op}` |" in readme
        assert f"\n    {op} " in module.__doc__


def test_key_fields_default_to_external_id() -> None:
    assert version(READ).key_fields == ("externalId",)
    assert version(READ).target == "unit"


def test_an_unknown_default_mapping_is_named_plainly() -> None:
    with pytest.raises(ValueError, match="there is no default mapping 'scout'; there are"):
        load_default("scout")


# -- the default mappings on the simulator's rows ---------------------------------------------


@pytest.fixture(scope="module")
def simulator() -> ScoutSimulator:
    """The seeded Games part played: results, officials with medals, a cancel, live units."""
    sim = ScoutSimulator()
    ids = list(sim.games.units)
    for external_id in ids[:500]:
        sim.mark_official(external_id)
    for external_id in ids[500:520]:
        sim.post_result(external_id, status="UNOFFICIAL")
    for external_id in ids[520:540]:
        sim.post_result(external_id, status="RUNNING")
    sim.cancel(ids[540])
    return sim


@pytest.fixture(scope="module")
def context(simulator: ScoutSimulator) -> MappingContext:
    reference = simulator.reference()
    return MappingContext(
        reference["event"]["timeZone"],
        {
            "competitor": {
                c["externalId"]: our_id(c["externalId"]) for c in reference["competitors"]
            }
        },
    )


@pytest.fixture
async def unit_rows(simulator: ScoutSimulator) -> list[dict[str, Any]]:
    run = await simulator.make_run("schedule")
    return [dict(row) for row in run.rows]


async def test_every_simulator_unit_row_maps(
    simulator: ScoutSimulator, unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    mapped = load_default("scout_units").map_rows(unit_rows, context)
    assert len(mapped) == 1_252
    assert [m.outcome for m in mapped if m.outcome != "ok"] == []
    assert [m.position for m in mapped] == list(range(1_252))
    assert len({m.key for m in mapped}) == 1_252
    assert {m.value["status"] for m in mapped} == {
        "SCHEDULED",
        "RUNNING",
        "UNOFFICIAL",
        "OFFICIAL",
        "CANCELLED",
    }
    medals = set()
    for row, m in zip(unit_rows, mapped, strict=True):
        assert m.key == row["externalId"]
        assert len(m.value["code"]) == 34
        assert m.value["start_at"].endswith("+09:00")
        assert m.value["start_at"].startswith(row["startLocal"])
        assert m.value["status"] in OUR_STATUSES
        assert "unit_id" not in m.value  # no unit lookups given: placed by code
        assert set(m.value) == {
            "code",
            "discipline_code",
            "name",
            "phase",
            "start_at",
            "venue",
            "status",
            "sides",
        }
        for side, competitor in zip(m.value["sides"], row["competitors"], strict=True):
            assert side["competitor_id"] == our_id(competitor["externalId"])
            assert side["order"] == competitor["order"]
            assert side["rank"] is None or isinstance(side["rank"], int)
            medals.add(side["medal"])
    assert medals == {None, "GOLD", "SILVER", "BRONZE"}


async def test_the_unit_id_is_looked_up_when_we_have_it(
    simulator: ScoutSimulator, unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    units = {u["externalId"]: our_id(u["externalId"]) for u in simulator.reference()["units"]}
    with_units = MappingContext(context.time_zone, {**context.lookups, "unit": units})
    mapped = load_default("scout_units").map_row(0, unit_rows[0], with_units)
    assert mapped.value["unit_id"] == our_id(unit_rows[0]["externalId"])


async def test_a_competitor_scout_added_holds_the_unit(context: MappingContext) -> None:
    sim = ScoutSimulator()
    external_id = next(iter(sim.games.units))
    row = sim.swap_competitor(
        external_id, order=2, competitor_id="SC-P-77777", name="KIM Minjun", noc="KOR"
    )
    mapped = load_default("scout_units").map_row(0, row, context)
    assert mapped.outcome == "held"
    assert mapped.reason == (
        f"Scout names competitor SC-P-77777 (KIM Minjun, KOR) in unit {external_id}; we have "
        "no such competitor. Add it, or map SC-P-77777 to one we have."
    )


async def test_a_status_scout_never_sent_before_is_a_problem(
    unit_rows: list[dict[str, Any]], context: MappingContext
) -> None:
    mapped = load_default("scout_units").map_row(0, {**unit_rows[0], "status": "FINISHED"}, context)
    assert mapped.outcome == "problem"
    assert mapped.reason.startswith("status 'FINISHED' is not in the mapping's table")


@pytest.mark.parametrize(
    "spell", [str.upper, str.lower, str.title], ids=["UPPER", "lower", "Title"]
)
async def test_the_default_unit_mapping_takes_the_words_a_scout_commonly_sends(
    unit_rows: list[dict[str, Any]], context: MappingContext, spell: Any
) -> None:
    """An external Scout sends "Scheduled", and medals as G/S/B or 1/2/3: none is a problem."""
    units = load_default("scout_units")
    sent = copy.deepcopy(unit_rows)
    shorts = {"GOLD": ["G", 1], "SILVER": ["S", "2"], "BRONZE": ["B", 3]}
    for n, row in enumerate(sent):
        row["status"] = spell(row["status"])
        for side in row["competitors"]:
            if side["medal"] is not None:
                word = [side["medal"], *shorts[side["medal"]]][n % 3]
                side["medal"] = spell(word) if isinstance(word, str) else word
    mapped = units.map_rows(sent, context)
    expected = units.map_rows(unit_rows, context)
    assert [m.reason for m in mapped if m.outcome != "ok"] == []
    assert [m.value for m in mapped] == [m.value for m in expected]
    # Every status we hold, in the site's own case, is in the table.
    for status in UNIT_STATUSES:
        row = {**unit_rows[0], "status": spell(status)}
        assert units.map_row(0, row, context).value["status"] == status


async def test_every_simulator_medal_row_maps(simulator: ScoutSimulator) -> None:
    run = await simulator.make_run("medals")
    assert len(run.rows) > 10
    mapped = load_default("scout_medals").map_rows(list(run.rows), TOKYO)
    assert [m.outcome for m in mapped] == ["ok"] * len(run.rows)
    for row, m in zip(run.rows, mapped, strict=True):
        assert m.key == row["noc"]
        assert m.value == {
            "noc": row["noc"],
            "gold": row["gold"],
            "silver": row["silver"],
            "bronze": row["bronze"],
            "total": row["total"],
            "rank": row["rank"],
        }
        assert all(type(m.value[name]) is int for name in m.value if name != "noc")
    assert load_default("scout_medals").key_fields == ("noc",)
    assert load_default("scout_medals").target == "medal_row"
