"""The protos' comments on their Struct payloads name what the code reads: every command code
and every field a command may set, and every field type a sport file may give an action."""

from __future__ import annotations

import re
from pathlib import Path

from omnium_command._parse import HANDLERS
from omnium_command._records import KINDS, MEDALS
from omnium_db import UNIT_STATUSES
from omnium_sports._sport import FIELD_TYPES

PROTOS = Path(__file__).resolve().parents[2] / "protos" / "omnium"


def _comment_above(proto: str, field: str) -> str:
    """The // lines right above the line that declares `field`."""
    lines = (PROTOS / proto).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if re.search(rf"\b{field} = \d+;", line))
    above = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("//"):
            break
        above.append(line.strip().removeprefix("//"))
    return "\n".join(reversed(above))


def test_command_payload_names_every_command_and_every_field_it_sets() -> None:
    comment = _comment_above("command/v1/command.proto", "google.protobuf.Struct payload")
    for code in HANDLERS:
        assert f'"{code}"' in comment, code
    for kind in KINDS.values():
        for name in kind.fields:
            assert re.search(rf"\b{name}:", comment), (kind.name, name)
    for word in (*UNIT_STATUSES, *MEDALS):
        assert word in comment, word


def test_an_action_s_fields_name_every_type_a_sport_file_may_give() -> None:
    comment = _comment_above("scoring/v1/scoring.proto", "google.protobuf.Struct fields")
    described = _comment_above("scoring/v1/scoring.proto", "google.protobuf.Struct sport_actions")
    for kind in FIELD_TYPES:
        assert kind in comment and f'"{kind}"' in described, kind
