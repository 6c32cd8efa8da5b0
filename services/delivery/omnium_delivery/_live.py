"""Live push from delivery: saved changes wait here until Redis takes them, in order."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from omnium_live import REDIS_ERRORS, LivePublisher
from omnium_settings import Settings
from omnium_telemetry import continued_span

log = logging.getLogger(__name__)

_CHUNK = 500  # changes per XADD pipeline: one round trip, and the loop stays responsive


# A side's results: what a checker holds until a person approves them.
_HELD_FIELD = re.compile(r"^sides\[\d+\]\.(score|result|rank|medal)$")
_RESULT_FIELDS = ("score", "result", "rank", "medal")


# Outbox rows that change no data a listener shows: a client's checker switched on or off
# (the gateway's relay drops its cached copies from the outbox itself; the row names a media
# client and its settings, which are not the fans' business).
_NOT_FOR_LISTENERS = frozenset({"checker.changed"})


def live_item(row: asyncpg.Record) -> dict[str, Any] | None:
    """One outbox row as listeners see it; None when the checker holds all it says, or when
    it changes nothing a listener shows.

    While the checker holds a unit's results (`row["held"]`), its sides' results are left out
    of its changes, and its approval carries them as the person approved them: fans see what
    the client files show, never before. While the public medal table is held (a medal waits
    for approval), a medal row's change is left out whole, as /medals leaves out the rows; the
    approval that frees the table says so (its changes carry the medals as approved)."""
    if row["kind"] in _NOT_FOR_LISTENERS:
        return None
    payload = row["payload"] or {}
    changes = payload.get("changes", [])
    if row["held"] and row["subject_kind"] == "medal_row":
        return None
    if row["held"]:
        if row["kind"] == "results.approved":
            changes = _approved_changes(payload.get("unit") or {})
        else:
            kept = [c for c in changes if not _HELD_FIELD.match(str(c.get("field", "")))]
            if changes and not kept:
                return None
            changes = kept
    return {
        "id": row["id"],
        "kind": row["kind"],
        "subject_kind": row["subject_kind"],
        "unit": payload.get("code") if row["subject_kind"] == "unit" else None,
        "code": payload.get("code"),
        "changes": changes,
        "saved_at": row["saved_at"].isoformat(),
    }


def _approved_changes(unit: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"field": f"sides[{side['order']}].{name}", "new": side.get(name)}
        for side in unit.get("sides") or ()
        for name in _RESULT_FIELDS
    ]


class LivePush:
    """The outbox pass only queues here and never waits on Redis, so feeds and files go out
    while Redis is down. One task publishes each Games' changes in the order they were read,
    and drops them only once Redis took them; back from an outage it publishes the backlog.

    The backlog is bounded per Games (`live_backlog_length`): past it, the oldest changes are
    dropped and a `gap` entry goes into the stream before the rest, so every listener learns
    that it must read the data again.
    """

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.settings = settings
        self.publisher = LivePublisher(redis, max_length=settings.live.stream_length)
        # Per Games: (order, the item listeners see, its change's traceparent).
        self.waiting: dict[str, deque[tuple[int, dict[str, Any], str | None]]] = {}
        self.lost: dict[str, int] = {}
        self.wake = asyncio.Event()
        self.published = 0
        self._numbers = itertools.count()
        self._down_since: float | None = None

    def add(self, rows: Iterable[asyncpg.Record]) -> None:
        limit = self.settings.live.backlog_length
        for row in rows:
            item = live_item(row)
            if item is None:
                continue
            queue = self.waiting.setdefault(row["event_code"], deque())
            queue.append((next(self._numbers), item, row["trace_context"]))
            if len(queue) > limit:
                queue.popleft()
                self.lost[row["event_code"]] = self.lost.get(row["event_code"], 0) + 1
        self.wake.set()

    @property
    def backlog(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            if not self.backlog and not self.lost:
                self.wake.clear()
                waiters = [asyncio.ensure_future(e.wait()) for e in (self.wake, stopping)]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
                continue
            try:
                await self.publish_waiting()
            except REDIS_ERRORS as exc:
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning(
                        "delivery: Redis does not take live pushes (%s); holding them and "
                        "trying again every %s s",
                        exc,
                        self.settings.live.retry_seconds,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.settings.live.retry_seconds)
                continue
            if self._down_since is not None:
                log.info(
                    "delivery: Redis takes live pushes again after %.0f s; the held ones went out",
                    time.monotonic() - self._down_since,
                )
                self._down_since = None

    async def publish_waiting(self) -> None:
        """Publish what waits, a chunk per Games at a time, until nothing waits."""
        while self.backlog or self.lost:
            for event_code in list(self.waiting.keys() | self.lost.keys()):
                await self._publish_chunk(event_code)

    async def _publish_chunk(self, event_code: str) -> None:
        queue = self.waiting.get(event_code, deque())
        lost = self.lost.get(event_code, 0)
        chunk = list(itertools.islice(queue, _CHUNK))
        items = [item for _, item, _ in chunk]
        traces = [trace for _, _, trace in chunk]
        if lost:
            items.insert(0, {"kind": "gap", "lost": lost, "message": _lost_message(lost)})
            traces.insert(0, None)
        # The push continues the first change's trace (and links the others); each stream entry
        # carries its own change's trace on to the gateways' SSE fan-out.
        with continued_span("live.publish", traces, attributes={"omnium.live.items": len(items)}):
            await self.publisher.publish(event_code, items, traces)
        # Only now are they off the backlog. `add` may have dropped some of this chunk from
        # the head meanwhile (counted as lost: a gap too many, never one too few).
        newest = chunk[-1][0] if chunk else -1
        while queue and queue[0][0] <= newest:
            queue.popleft()
        self.published += len(chunk)
        if lost:
            left = self.lost.get(event_code, 0) - lost
            if left > 0:
                self.lost[event_code] = left
            else:
                self.lost.pop(event_code, None)
        if not queue:
            self.waiting.pop(event_code, None)

    def forget(self) -> None:
        """At shutdown: say what is given up (nobody else holds it)."""
        if self.backlog:
            log.warning(
                "delivery: stopping with %s live pushes Redis never took; listeners that "
                "miss them must read the data again",
                self.backlog,
            )


def _lost_message(lost: int) -> str:
    return (
        f"{lost} live updates could not be kept while Redis was down; "
        "read the data again from the API"
    )
