"""Live push: delivery publishes saved changes to Redis; the gateway streams them as SSE."""

from __future__ import annotations

from omnium_live._hub import LiveCounters, LiveHub
from omnium_live._publisher import LivePublisher, stream_key
from omnium_live._routes import (
    LIVE_ROUTES,
    REDIS_ERRORS,
    STREAM_ID_PATTERN,
    Known,
    add_live_routes,
    live_hub,
    live_redis,
)

__all__ = [
    "LIVE_ROUTES",
    "REDIS_ERRORS",
    "STREAM_ID_PATTERN",
    "Known",
    "LiveCounters",
    "LiveHub",
    "LivePublisher",
    "add_live_routes",
    "live_hub",
    "live_redis",
    "stream_key",
]
