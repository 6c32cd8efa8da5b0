"""The public API gateway: cached reads of schedules, units and medal tables."""

from __future__ import annotations

from omnium_gateway._app import GATEWAY, make_app
from omnium_gateway._cache import Cache, CacheKey, Entry
from omnium_gateway._gateway import Gateway, RouteSet
from omnium_gateway._metrics import Metrics
from omnium_gateway._route_sets import LiveRoutes, ScorerRoutes, default_route_sets
from omnium_gateway._server import CLOSE_SECONDS, serve

__all__ = [
    "CLOSE_SECONDS",
    "GATEWAY",
    "Cache",
    "CacheKey",
    "Entry",
    "Gateway",
    "LiveRoutes",
    "Metrics",
    "RouteSet",
    "ScorerRoutes",
    "default_route_sets",
    "make_app",
    "serve",
]
