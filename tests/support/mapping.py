"""The no-code mapping in tests: a version from its steps, one row mapped, our id for a key."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from omnium_imports.mapping import MappedRow, MappingContext, MappingVersion

TOKYO = MappingContext("Asia/Tokyo", {})
Step = dict[str, Any]


def version(*steps: Mapping[str, Any], **top: Any) -> MappingVersion:
    return MappingVersion.parse({"target": "unit", "steps": list(steps), **top})


def one(
    steps: Sequence[Mapping[str, Any]],
    row: Mapping[str, Any],
    context: MappingContext = TOKYO,
) -> MappedRow:
    return version(*steps).map_row(0, {"externalId": "SC-000123", **row}, context)


def our_id(external_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, external_id))
