"""The scorer console and provider push endpoint, as a route set the gateway mounts."""

from __future__ import annotations

from omnium_scorer_web._routes import SCREEN, ScorerConsole, add_scorer_routes

__all__ = ["SCREEN", "ScorerConsole", "add_scorer_routes"]
