"""Reading a Server-Sent Events stream the way a fan's browser does, for the live tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from omnium_live import LiveHub
from tests.support.waiting import eventually


async def read_events(
    url: str, n: int, headers: dict[str, str] | None = None, within: float = 10
) -> list[dict[str, Any]]:
    """The first `n` SSE events (comments and retry lines skipped), parsed."""
    events: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        current: dict[str, Any] = {}
        async with asyncio.timeout(within):
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if not line:
                    if "data" in current:
                        events.append(current)
                        if len(events) == n:
                            return events
                    current = {}
                    continue
                field, _, value = line.partition(": ")
                if field in ("id", "event"):
                    current[field] = value
                elif field == "data":
                    current["data"] = json.loads(value)
    return events


async def reading(hub: LiveHub, event: str, listeners: int | None = None) -> None:
    """Until the hub's reader of `event` knows where its stream is (and, if given, that many
    listeners are in). A new stream starts "from now", which is that first look, so only a
    change published after it reaches every listener."""

    async def knows() -> bool:
        reader = hub.readers.get(event)
        joined = listeners is None or hub.count == listeners
        return joined and reader is not None and reader.cursor is not None

    await eventually(knows, what=f"the reader of {event} to know where its stream is")
