"""Scout's HTTP API as an aiohttp app, with the faults applied in front of it."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_scout_sim._control import add_control_routes
from omnium_scout_sim._faults import API_PREFIX
from omnium_scout_sim._http import SIMULATOR, error, int_param, json_object, parse_day
from omnium_scout_sim._runs import RUN_STATUSES, RunStatus
from omnium_scout_sim._simulator import Scout
from omnium_scout_sim._units import SimulatorError

_BAD_GATEWAY_PAGE = "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"


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


def make_app(sim: Scout) -> web.Application:
    """Scout's API (/v1) and the control API (/control) over `sim`."""
    app = web.Application(middlewares=[_errors, _faults])
    app[SIMULATOR] = sim
    app.router.add_get("/v1/jobs/{job}/runs", list_runs)
    app.router.add_post("/v1/jobs/{job}/runs", post_run)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_get("/v1/runs/{run_id}/items", get_items)
    add_control_routes(app)
    return app
