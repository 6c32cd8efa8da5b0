"""The matches one scoring process last read or saved, so the next action on a match is checked
without reading PostgreSQL. Only a hint: the road takes an action only if the match is still at
the match_seq it was checked against, and anything but a clean save goes the long way (a fresh
read), so a stale copy costs one retry, never a wrong write."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

# What a known match keeps of the `match` row: all but the client id's saved seq.
_FIELDS = (
    "id",
    "code",
    "name",
    "status",
    "match_state",
    "match_seq",
    "discipline",
    "sport_file",
    "side_count",
    "side_names",
)


class KnownMatches:
    """Matches by unit id, each kept `seconds` (0: none kept)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._known: dict[str, tuple[float, dict[str, Any]]] = {}
        self._prune_at = 0.0

    def get(self, unit_id: str) -> dict[str, Any] | None:
        hit = self._known.get(unit_id)
        if hit is None or hit[0] <= time.monotonic():
            return None
        return hit[1]

    def remember(self, unit: Mapping[str, Any]) -> None:
        """Keep a match as read or saved; an older copy (a slower reader) never replaces a newer."""
        if self.seconds <= 0:
            return
        now = time.monotonic()
        if now >= self._prune_at:
            self._known = {k: hit for k, hit in self._known.items() if hit[0] > now}
            self._prune_at = now + self.seconds
        kept = self._known.get(unit["id"])
        if kept is not None and kept[0] > now and kept[1]["match_seq"] > unit["match_seq"]:
            return
        copy = {k: unit[k] for k in _FIELDS}
        self._known[copy["id"]] = (now + self.seconds, copy)

    def forget(self, unit_id: str) -> None:
        self._known.pop(unit_id, None)
