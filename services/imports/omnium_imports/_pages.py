"""The fast path before mapping: a page Scout sends again byte for byte is not mapped again.

Mapping is pure: the same rows, the same mapping version, time zone and lookups give the same
mapped rows. So for each page whose every row mapped ok, this process remembers the page's
digest and, for each row, its key, its hash and the few fields later stages read (`KEPT`).
When a run brings a page with the same digest under the same mapping (the fingerprint), and
the key state says every one of its rows may be skipped (same hash as last written and the
record untouched since, the fast path's own test), the page is neither decoded nor mapped: its
rows come back as they were. A page with any other row is decoded and mapped as usual.

Never for a run that is resumed: its saved batches are sent again with their rows' whole values,
so every row is mapped. What is remembered is one run's pages per integration, replaced at
each run, so it stays as big as the integration's largest run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from omnium_imports._scout import ScoutPage
from omnium_imports.mapping import MappedRow, MappingContext, MappingVersion

# The fields of a mapped value read after the fast path for rows it skips: where the row is
# placed (unit_id, code) and whether it opens a settle window (status).
KEPT = ("unit_id", "code", "status")


@dataclass(frozen=True, slots=True)
class _Page:
    fingerprint: bytes
    offset: int
    # The page's rows as a later run gets them: key, hash and only the KEPT fields' values.
    rows: tuple[MappedRow, ...]


@dataclass(slots=True)
class PageMemory:
    """One integration's pages from its last run, in this process."""

    pages: dict[bytes, _Page] = field(default_factory=dict)
    # How many rows the last run took from memory and did not map (shown in its counters).
    reused: int = 0

    def seen(self) -> dict[bytes, int]:
        """Digests of pages read and checked before, with their row counts, for ScoutClient."""
        return {digest: len(page.rows) for digest, page in self.pages.items()}

    def map(
        self,
        pages: list[ScoutPage],
        version: MappingVersion,
        spec: Mapping[str, object],
        context: MappingContext,
        skippable: Callable[[str | None, bytes], bool] | None,
    ) -> list[MappedRow]:
        """The run's rows mapped: from memory where a page allows it, else mapped now
        (skippable is None for a resumed run: nothing from memory). Memory then holds this
        run's pages whose rows all mapped ok."""
        mark = fingerprint(spec, context)
        map_part = version.mapper(context)
        mapped: list[MappedRow] = []
        remembered: dict[bytes, _Page] = {}
        self.reused = 0
        for page in pages:
            known = self.pages.get(page.digest)
            if (
                skippable is not None
                and known is not None
                and known.fingerprint == mark
                and all(skippable(row.key, row.hash) for row in known.rows)
            ):
                if known.offset != page.offset:
                    known = _Page(mark, page.offset, _moved(known.rows, page.offset))
                mapped.extend(known.rows)
                remembered[page.digest] = known
                self.reused += len(known.rows)
                continue
            rows = map_part(page.decoded(), page.offset)
            mapped.extend(rows)
            if all(row.outcome == "ok" and row.key is not None for row in rows):
                remembered[page.digest] = _Page(mark, page.offset, tuple(map(_kept, rows)))
        self.pages = remembered
        return mapped


def _kept(row: MappedRow) -> MappedRow:
    value = row.value
    kept = {name: value[name] for name in KEPT if name in value}
    return MappedRow(row.position, row.key, row.hash, kept, "ok", "")


def _moved(rows: tuple[MappedRow, ...], offset: int) -> tuple[MappedRow, ...]:
    """The same rows where Scout now sends the page at another offset."""
    return tuple(replace(row, position=offset + i) for i, row in enumerate(rows))


def fingerprint(spec: Mapping[str, object], context: MappingContext) -> bytes:
    """What a mapping's answer depends on besides the row: the version (as its JSON), the time
    zone and the lookups. The mapping code itself is the process's own: memory dies with it."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    digest.update(f"\0{context.time_zone}\0".encode())
    for kind in sorted(context.lookups):
        for external, ours in sorted(context.lookups[kind].items()):
            digest.update(f"{kind}\0{external}\0{ours}\n".encode())
    return digest.digest()
