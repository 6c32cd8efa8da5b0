"""What the simulator's HTTP handlers share: the simulated Scout they serve, and reading a
request's JSON and numbers with an answer a person can act on."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from aiohttp import web

from omnium_scout_sim._simulator import Scout
from omnium_scout_sim._units import SimulatorError

SIMULATOR = web.AppKey("simulator", Scout)


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def int_param(request: web.Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SimulatorError(f"{name} must be a whole number, not {raw!r}") from None
    if value < low or (high is not None and value > high):
        most = f" and at most {high}" if high is not None else ""
        raise SimulatorError(f"{name} must be at least {low}{most}; it was {value}")
    return value


async def json_object(request: web.Request, allowed: set[str]) -> dict[str, Any]:
    """The request's JSON object (empty when there is no body); unknown fields are refused."""
    if not request.body_exists:
        return {}
    try:
        body = json.loads(await request.read())
    except ValueError:
        raise SimulatorError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise SimulatorError("the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise SimulatorError(f"unknown field(s) {', '.join(unknown)}; known: {known}")
    return body


def parse_day(value: Any) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        raise SimulatorError(f"day must look like '2026-09-21', not {value!r}") from None
