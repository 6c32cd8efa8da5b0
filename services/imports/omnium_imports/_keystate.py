"""The fast path: skip a key only when its hash is the same AND nobody touched its record since.

Key state is cached per integration in this process. Each run asks PostgreSQL one question —
which records changed since the last look — so its cost grows with what changed, not with how
many keys the run lists. "Since the last look" is by changed_seq, and by write time for what
was not yet committed then: a command takes its changed_seq before it commits, so a late commit
can carry a number below the watermark. Each look notes when the oldest transaction still open
began; the next look also reads records written since then (less `fastpath_lag_seconds` of
margin), which is little when nothing is in flight, and misses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import asyncpg

from omnium_imports._runs import Integration
from omnium_imports._sql import QUERIES
from omnium_settings import Settings


@dataclass(slots=True)
class _Key:
    hash: bytes | None
    subject_id: str | None
    applied_seq: int | None


@dataclass(slots=True)
class KeyStateCache:
    """One integration's key state, as this process last knew it."""

    integration_id: str
    target: str
    lag_seconds: float
    blind_seconds: float = 60.0
    keys: dict[str, _Key] = field(default_factory=dict)
    subject_keys: dict[str, set[str]] = field(default_factory=dict)
    # Records whose changed_seq differs from the applied_seq of a key that names them.
    touched: set[str] = field(default_factory=set)
    # The last look: the sequence's value then, and from when writes may still have been open.
    watermark: int = 0
    since: datetime | None = None
    loaded_for_run: str | None = None
    # Keys' missing_runs where above zero (keys no longer listed by full runs), and keys whose
    # missing question a person answered.
    missing: dict[str, int] = field(default_factory=dict)

    async def load(self, conn: asyncpg.Connection) -> None:
        """Everything from the database: at first use, or when another process ran a run."""
        await conn.execute(QUERIES["fill_from_row_log"], self.integration_id)
        self.keys = {}
        self.subject_keys = {}
        # Read too, so a key missing before this load is reset when a run lists it again.
        self.missing = {}
        for row in await conn.fetch(QUERIES["load_key_state"], self.integration_id):
            self._set(
                row["subject_key"], _Key(row["last_hash"], row["subject_id"], row["applied_seq"])
            )
            if row["missing_runs"] or row["missing_answered"]:
                # An answered key counts as missing here, so a run listing it again sends it
                # back and its answer is forgotten (it may be asked about once more).
                self.missing[row["subject_key"]] = max(row["missing_runs"], 1)
        look = await conn.fetchrow(QUERIES["look_now"])
        touched = "touched_medal_rows" if self.target == "medal_row" else "touched_units"
        self.touched = {
            row["subject_id"] for row in await conn.fetch(QUERIES[touched], self.integration_id)
        }
        self._looked(look)

    async def refresh(self, conn: asyncpg.Connection) -> int:
        """Read the records changed since the last look; returns how many there were."""
        assert self.since is not None, "load() first"
        query = "changed_medal_rows_since" if self.target == "medal_row" else "changed_units_since"
        look = await conn.fetchrow(QUERIES["look_now"])
        rows = await conn.fetch(
            *QUERIES.bind(
                query,
                integration_id=self.integration_id,
                watermark=self.watermark,
                since=self.since,
            )
        )
        for row in rows:
            subject_id, changed_seq = row["id"], row["changed_seq"]
            names = self.subject_keys.get(subject_id, ())
            if any(self.keys[name].applied_seq != changed_seq for name in names):
                self.touched.add(subject_id)
            else:
                self.touched.discard(subject_id)
        self._looked(look)
        return len(rows)

    def _looked(self, look: asyncpg.Record) -> None:
        start = look["at"] if look["oldest"] is None else min(look["at"], look["oldest"])
        if look["hidden"]:
            # Some sessions' transactions cannot be seen: assume one may have been open for as
            # long as any command may take.
            start = min(start, look["at"] - timedelta(seconds=self.blind_seconds))
        self.watermark = look["seq"]
        self.since = start - timedelta(seconds=self.lag_seconds)

    def _set(self, name: str, key: _Key) -> None:
        old = self.keys.get(name)
        if old is not None and old.subject_id is not None and old.subject_id != key.subject_id:
            self.subject_keys.get(old.subject_id, set()).discard(name)
        self.keys[name] = key
        if key.subject_id is not None:
            self.subject_keys.setdefault(key.subject_id, set()).add(name)

    def skippable(self, key: str | None, row_hash: bytes) -> bool:
        """Same hash as last written AND the record untouched since: both, never one alone."""
        if key is None:
            return False
        state = self.keys.get(key)
        return (
            state is not None
            and state.hash == row_hash
            and state.applied_seq is not None
            and state.subject_id is not None
            and state.subject_id not in self.touched
        )

    def written(self, key: str, row_hash: bytes | None, subject_id: str, applied_seq: int) -> None:
        """What a batch answer says now holds, so the next run knows it without asking."""
        self._set(key, _Key(row_hash, subject_id or None, applied_seq or None))
        if subject_id:
            self.touched.discard(subject_id)

    def forget(self, key: str) -> None:
        self._set(key, _Key(None, None, None))


async def up_to_date(
    states: dict[str, KeyStateCache],
    conn: asyncpg.Connection,
    integration: Integration,
    settings: Settings,
) -> KeyStateCache:
    """This process's key state of the integration (kept in `states`), brought up to date.

    Loaded whole when first used or when the last applied run was not ours (another copy
    of this process ran it); otherwise only the records changed since are read.
    """
    cache = states.get(integration.id)
    last = await conn.fetchval(QUERIES["last_applied_run"], integration.id)
    if cache is None or cache.loaded_for_run != last or cache.target != integration.target:
        cache = KeyStateCache(
            integration.id,
            integration.target,
            settings.imports.fastpath_lag_seconds,
            settings.imports.fastpath_blind_seconds,
        )
        await cache.load(conn)
        cache.loaded_for_run = last
        states[integration.id] = cache
    await cache.refresh(conn)
    return cache
