"""Publish live events to one Redis Stream per Games, trimmed to a short replay buffer."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence

import redis.asyncio as aioredis


def stream_key(event_code: str) -> str:
    return f"omnium:live:{event_code}"


class LivePublisher:
    """XADD with an approximate MAXLEN: the stream is the replay buffer for Last-Event-ID."""

    def __init__(self, redis: aioredis.Redis, *, max_length: int) -> None:
        self.redis = redis
        self.max_length = max_length

    async def publish(
        self,
        event_code: str,
        items: Sequence[Mapping[str, object]],
        traces: Sequence[str | None] = (),
    ) -> list[str]:
        """Add each item (a JSON-able mapping with `kind` and optional `unit`) in order; the
        stream ids it got are the SSE event ids. `traces`: each item's W3C traceparent, kept
        in the entry beside its data (a stream entry has no headers to carry it, and the
        redis instrumentation makes spans but carries no context)."""
        if not items:
            return []
        key = stream_key(event_code)
        async with self.redis.pipeline(transaction=False) as pipe:
            for item, trace in itertools.zip_longest(items, traces[: len(items)]):
                fields = {
                    "kind": str(item.get("kind", "change")),
                    "unit": str(item.get("unit") or ""),
                    "data": json.dumps(item, separators=(",", ":"), default=str),
                }
                if trace:
                    fields["trace"] = trace
                pipe.xadd(
                    key,
                    fields,  # type: ignore[arg-type]
                    maxlen=self.max_length,
                    approximate=True,
                )
            ids = await pipe.execute()
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]
