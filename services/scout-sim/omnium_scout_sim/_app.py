"""Scout's HTTP API (DESIGN §6) as an aiohttp app, with the faults applied in front of it."""

from __future__ import annotations

import asyncio
import json
from datetime import date
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_scout_sim._faults import API_PREFIX
from omnium_scout_sim._runs import RUN_STATUSES, RunStatus
from omnium_scout_sim._simulator import ScoutSimulator
from omnium_scout_sim._units import SimulatorError

SIMULATOR = web.AppKey("simulator", ScoutSimulator)
_BAD_GATEWAY_PAGE = "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"


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


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except SimulatorError as exc:
        return error(exc.status, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, f"{exc.reason}: {request.method} {request.path}")


@web.middleware
async def _faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    path = request.path
    if path.startswith(API_PREFIX):
        faults = request.app[SIMULATOR].faults
        delay = faults.take_delay(path)
        if delay:
            await asyncio.sleep(delay)
        status = faults.take_error(path)
        if status is not None:
            return error(status, "Scout had an internal error (a fault set with the control API)")
    return await handler(request)


async def list_runs(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    status = request.query.get("status")
    if status is not None and status not in RUN_STATUSES:
        raise SimulatorError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
    limit = int_param(request, "limit", sim.limits.runs_listed, 1, sim.limits.runs_listed_max)
    runs = sim.runs.newest(request.match_info["job"], status=_status(status), limit=limit)
    return web.json_response({"runs": [run.to_json() for run in runs]})


def _status(value: str | None) -> RunStatus | None:
    return "passed" if value == "passed" else "failed" if value == "failed" else None


async def get_run(request: web.Request) -> web.Response:
    run = request.app[SIMULATOR].runs.get(request.match_info["run_id"])
    return web.json_response(run.to_json())


async def get_items(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    run = sim.runs.get(request.match_info["run_id"])
    offset = int_param(request, "offset", 0, 0, None)
    limit = int_param(request, "limit", sim.limits.page_rows, 1, sim.limits.page_rows)
    rows = list(run.rows[offset : offset + limit])
    fault = sim.faults.take_malformed_page()
    if fault == "not_json":
        return web.Response(text=_BAD_GATEWAY_PAGE, content_type="text/html")
    if fault == "no_items":
        return web.json_response({"rows": rows})
    if fault == "not_objects":
        # Rows encoded twice, a bug scrapers really have: each item is a string of JSON.
        return web.json_response({"items": [json.dumps(row) for row in rows] or ["", None]})
    return web.json_response({"items": rows})


async def post_run(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    job = request.match_info["job"]
    sim.runs.check_job(job)
    body = await json_object(request, {"build", "keys", "day"})
    run = await sim.make_run(
        job,
        build=body.get("build", "page"),
        keys=body.get("keys"),
        day=parse_day(body.get("day")),
    )
    return web.json_response({"id": run.id})


def make_app(sim: ScoutSimulator) -> web.Application:
    from omnium_scout_sim._control import add_control_routes

    app = web.Application(middlewares=[_errors, _faults])
    app[SIMULATOR] = sim
    app.router.add_get("/v1/jobs/{job}/runs", list_runs)
    app.router.add_post("/v1/jobs/{job}/runs", post_run)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_get("/v1/runs/{run_id}/items", get_items)
    add_control_routes(app)
    return app
