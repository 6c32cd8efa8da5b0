"""Turning gRPC messages into road requests, before any database is touched."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium_command._parse import (
    Refusal,
    guess_batch_keys,
    guess_command_keys,
    parse_batch,
    parse_command,
    request_hash,
)

RUN = "6f1c2d7e-0000-4000-8000-000000000001"
UNIT = "6f1c2d7e-0000-4000-8000-0000000000aa"


def _cmd(**payload: object) -> command_pb2.Command:
    struct = struct_pb2.Struct()
    struct.update(payload)
    return command_pb2.Command(
        command_id="c1",
        code="units.set_fields",
        payload=struct,
        subject=command_pb2.Subject(kind="unit", id=UNIT),
        actor=actor_pb2.Actor(kind=actor_pb2.Actor.KIND_PERSON, name="Ana", screen="s"),
    )


def test_set_fields_becomes_one_pinning_intent() -> None:
    request = parse_command(_cmd(fields={"status": "delayed"}, sides=[{"order": 2, "score": "3"}]))
    (intent,) = request.intents
    assert intent.fields == {"status": "DELAYED"}
    assert intent.sides == {2: {"score": "3"}}
    assert request.pins


def test_the_sender_is_not_part_of_what_makes_a_command_the_same() -> None:
    a = _cmd(fields={"status": "DELAYED"})
    b = _cmd(fields={"status": "DELAYED"})
    b.actor.screen = "another-tab"
    b.command_id = "c2"
    assert request_hash(a) == request_hash(b)
    c = _cmd(fields={"status": "RUNNING"})
    assert request_hash(a) != request_hash(c)


def test_a_subject_of_the_wrong_kind_is_refused() -> None:
    cmd = _cmd(fields={"status": "DELAYED"})
    cmd.subject.kind = "competitor"
    with pytest.raises(Refusal, match="acts on a unit, but its subject is a competitor"):
        parse_command(cmd)


def _batch(rows: list[command_pb2.BatchRow]) -> command_pb2.ImportBatch:
    return command_pb2.ImportBatch(
        command_id=f"{RUN}:0",
        integration_code="scout",
        run_id=RUN,
        batch_no=0,
        event_code="AG2026",
        rows=rows,
    )


def test_batch_rows_with_bad_values_are_refused_one_by_one() -> None:
    good = command_pb2.BatchRow(
        position=0,
        key="a",
        subject=command_pb2.Subject(id=UNIT),
        unit=command_pb2.UnitValues(status="RUNNING"),
    )
    bad_time = command_pb2.BatchRow(
        position=1,
        key="b",
        subject=command_pb2.Subject(code="X"),
        unit=command_pb2.UnitValues(start_at="noon"),
    )
    twice = command_pb2.BatchRow(
        position=2,
        key="a",
        subject=command_pb2.Subject(code="Y"),
        unit=command_pb2.UnitValues(status="RUNNING"),
    )
    empty = command_pb2.BatchRow(position=3, key="d", subject=command_pb2.Subject(code="Z"))
    request = parse_batch(_batch([good, bad_time, twice, empty]), max_units=25)
    assert [i.row.position for i in request.intents if i.row] == [0]
    reasons = {pos: reason for pos, (_, _, reason) in request.refused_rows.items()}
    assert "is not a date and time" in reasons[1]
    assert "key 'a' is also row 0" in reasons[2]
    assert "carries no values" in reasons[3]
    assert request.actor.kind == actor_pb2.Actor.KIND_INTEGRATION
    assert request.actor.name == "integration:scout"
    assert not request.pins


def test_a_batch_row_clears_the_fields_it_names_and_refuses_what_cannot_be_cleared() -> None:
    def row(position: int, unit: command_pb2.UnitValues) -> command_pb2.BatchRow:
        return command_pb2.BatchRow(
            position=position, key=f"k{position}", subject=command_pb2.Subject(code="X"), unit=unit
        )

    rows = [
        row(
            0,
            command_pb2.UnitValues(
                status="OFFICIAL",
                clear=["venue"],
                sides=[command_pb2.SideValues(order=1, result="DSQ", clear=["rank", "medal"])],
            ),
        ),
        row(1, command_pb2.UnitValues(clear=["status"])),
        row(2, command_pb2.UnitValues(venue="Hall A", clear=["venue"])),
        row(3, command_pb2.UnitValues(clear=["colour"])),
        row(4, command_pb2.UnitValues(sides=[command_pb2.SideValues(order=1, clear=["name"])])),
    ]
    request = parse_batch(_batch(rows), max_units=25)
    (intent,) = request.intents
    assert intent.fields == {"status": "OFFICIAL", "venue": None}
    assert intent.sides == {1: {"result": "DSQ", "rank": None, "medal": None}}
    reasons = {pos: reason for pos, (_, _, reason) in request.refused_rows.items()}
    assert reasons[1] == "status cannot be cleared: a unit always has one"
    assert reasons[2] == "venue is both set and cleared; send one or the other"
    assert "colour is not a field of a unit" in reasons[3]
    assert "sides[1].name is not a field of a side" in reasons[4]


# -- the keys the road reads with before the parse ------------------------------------------

COMPETITOR = "6f1c2d7e-0000-4000-8000-0000000000cc"


def _unit_row(position: int, **subject: str) -> command_pb2.BatchRow:
    return command_pb2.BatchRow(
        position=position,
        key=f"k{position}",
        hash=b"h",
        subject=command_pb2.Subject(kind="unit", **subject),
        unit=command_pb2.UnitValues(
            status="RUNNING",
            sides=[command_pb2.SideValues(order=1, competitor_id=COMPETITOR, score="1")],
        ),
    )


def test_a_batch_guess_asks_what_the_parsed_batch_asks() -> None:
    batch = _batch(
        [
            _unit_row(1, id=UNIT),
            _unit_row(2, code="SWMM100MFR------------FNL-000100--"),
            command_pb2.BatchRow(
                position=3,
                key="m",
                hash=b"h",
                subject=command_pb2.Subject(kind="medal_row", code="SWM"),
                medal_row=command_pb2.MedalRowValues(noc="kor", gold=1),
            ),
        ]
    )
    guess = guess_batch_keys(batch)
    assert guess is not None
    assert guess == parse_batch(batch, max_units=25).read_keys()
    assert guess.medal_refs == ("SWM:KOR",) and guess.disciplines
    assert guess.referenced_competitors == (COMPETITOR,)


def test_a_batch_guess_that_the_parse_disagrees_with_is_not_kept() -> None:
    # Row 2 names the same unit again: the parse refuses it, so the read it asks for differs.
    batch = _batch([_unit_row(1, id=UNIT), _unit_row(2, id=UNIT)])
    assert guess_batch_keys(batch) != parse_batch(batch, max_units=25).read_keys()


def test_no_guess_where_the_read_would_fail() -> None:
    assert guess_batch_keys(_batch([_unit_row(1, id="not-a-uuid")])) is None
    bad_run = _batch([_unit_row(1, id=UNIT)])
    bad_run.run_id = "run-1"
    assert guess_batch_keys(bad_run) is None
    assert guess_command_keys(command_pb2.Command(command_id="c", code="nope")) is None


def test_a_command_guess_asks_what_the_parsed_command_asks() -> None:
    command = _cmd(fields={"status": "DELAYED"})
    assert guess_command_keys(command) == parse_command(command).read_keys()
    by_code = _cmd(fields={"status": "DELAYED"})
    by_code.subject.CopyFrom(
        command_pb2.Subject(kind="unit", code="SWMM100MFR------------FNL-000100--", event_code="AG")
    )
    assert guess_command_keys(by_code) == parse_command(by_code).read_keys()


def _withdrawal(**payload: object) -> command_pb2.Command:
    struct = struct_pb2.Struct()
    struct.update(payload)
    return command_pb2.Command(
        command_id="w1",
        code="medals.withdraw_row",
        payload=struct,
        subject=command_pb2.Subject(kind="medal_row", code=":kor", event_code="AG2026"),
        actor=actor_pb2.Actor(kind=actor_pb2.Actor.KIND_PERSON, name="Mei", screen="admin"),
    )


def test_a_medal_withdrawal_zeroes_the_row_it_names() -> None:
    intent = parse_command(_withdrawal()).intents[0]
    assert (intent.kind, intent.ref_code, intent.withdraw) == ("medal_row", ":KOR", True)
    assert intent.fields == {"gold": 0, "silver": 0, "bronze": 0, "total": 0, "rank": None}


def test_a_medal_withdrawal_takes_no_payload() -> None:
    with pytest.raises(Refusal, match="takes no payload"):
        parse_command(_withdrawal(fields={"gold": 1}))
