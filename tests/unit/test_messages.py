"""The contract's messages built one way: actors, commands, times, outcome words and ids."""

from __future__ import annotations

from datetime import UTC, datetime

from omnium.command.v1 import command_pb2
from omnium.common.v1 import actor_pb2
from omnium.scoring.v1 import scoring_pb2
from omnium_grpc import (
    ROW_OUTCOMES,
    account_actor,
    act_outcome_word,
    actor_as_sent,
    actor_message,
    canonical_id,
    command_message,
    is_id,
    row_outcome_word,
    source_actor,
    timestamp,
)

UNIT = "6f1c2d7e-0000-4000-8000-0000000000aa"


class _Account:
    id = 7
    name = "Ana Silva"


def test_an_actor_kind_is_read_by_its_word() -> None:
    assert actor_message("person", "Ana").kind == actor_pb2.Actor.KIND_PERSON
    assert actor_message("nobody knows", "x").kind == actor_pb2.Actor.KIND_UNSPECIFIED


def test_a_signed_in_actor_names_its_account() -> None:
    made = account_actor("scorer", _Account(), "scorer-console")
    assert (made.kind, made.name, made.source_code, made.screen) == (
        actor_pb2.Actor.KIND_SCORER,
        "Ana Silva",
        "account:7",
        "scorer-console",
    )


def test_an_integration_is_named_by_its_code() -> None:
    made = source_actor("integration", "scout-fbl", "imports")
    assert (made.name, made.source_code) == ("integration:scout-fbl", "scout-fbl")


def test_an_actor_as_sent_keeps_its_kind_and_fills_an_unset_one() -> None:
    sent = actor_pb2.Actor(kind=actor_pb2.Actor.KIND_PERSON, name="Ana")
    assert actor_as_sent(sent, "scorer").kind == actor_pb2.Actor.KIND_PERSON
    unset = actor_as_sent(actor_pb2.Actor(name="x"), "scorer")
    assert unset.kind == actor_pb2.Actor.KIND_SCORER


def test_a_command_is_on_a_unit_unless_a_subject_is_given() -> None:
    who = actor_message("person", "Ana")
    on_unit = command_message("c1", "results.set_status", {"status": "RUNNING"}, who, unit_id=UNIT)
    assert (on_unit.subject.kind, on_unit.subject.id) == ("unit", UNIT)
    assert dict(on_unit.payload) == {"status": "RUNNING"}
    row = command_pb2.Subject(kind="medal_row", code=":KOR", event_code="AG2026")
    on_row = command_message("c2", "medals.set_row", {"fields": {"gold": 1}}, who, subject=row)
    assert on_row.subject == row


def test_a_timestamp_keeps_the_moment_and_none_stays_none() -> None:
    moment = datetime(2026, 9, 19, 14, 30, tzinfo=UTC)
    assert timestamp(moment).ToDatetime(tzinfo=UTC) == moment
    assert timestamp(None) is None


def test_outcomes_are_lowered_words() -> None:
    assert row_outcome_word(command_pb2.ROW_OUTCOME_KEPT_BY_HAND) == "kept_by_hand"
    assert act_outcome_word(scoring_pb2.OUTCOME_TRY_AGAIN) == "try_again"
    assert "unspecified" not in ROW_OUTCOMES.values()
    assert ROW_OUTCOMES[command_pb2.ROW_OUTCOME_ACCEPTED] == "accepted"


def test_an_id_is_a_uuid_in_any_form_and_comes_back_canonical() -> None:
    assert canonical_id(UNIT) == UNIT
    assert canonical_id(UNIT.upper().replace("-", "")) == UNIT
    assert canonical_id("unit-1") is None
    assert is_id(UNIT) and not is_id("")
