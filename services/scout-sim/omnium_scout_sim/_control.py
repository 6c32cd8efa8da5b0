"""The control API under /control: drive the simulated site, switch faults on, look inside."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from omnium_scout_sim._http import SIMULATOR, json_object, parse_day
from omnium_scout_sim._simulator import Scout
from omnium_scout_sim._units import Row, SimulatorError


class _Conflict(SimulatorError):
    status = 409


def _local_time(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise SimulatorError(
            f"{name} must look like '2026-09-21T09:30:00', not {value!r}"
        ) from None
    if moment.tzinfo is not None:
        raise SimulatorError(
            f"{name} is local wall-clock time in Asia/Tokyo: give it without an offset"
        )
    return moment


def _utc_time(value: Any, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise SimulatorError(
            f"{name} must look like '2026-09-21T00:30:00Z', not {value!r}"
        ) from None
    if moment.tzinfo is None:
        raise SimulatorError(f"{name} needs its offset, like '2026-09-21T00:30:00Z'")
    return moment


def _text(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise SimulatorError(f"{name} must be a string")
    return value


def _count(value: object, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimulatorError(f"{name} must be a whole number")
    return value


def _unit_answer(sim: Scout, row: Row) -> web.Response:
    unit = sim.games.unit(row["externalId"])
    return web.json_response({"unit": row, "listed": unit.listed})


async def state(request: web.Request) -> web.Response:
    return web.json_response(request.app[SIMULATOR].state())


async def reference(request: web.Request) -> web.Response:
    return web.json_response(request.app[SIMULATOR].reference())


async def reset(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    await sim.reset()
    return web.json_response({"reset": True, "seed": sim.config.seed})


async def make_run(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(
        request, {"job", "build", "day", "keys", "fail_checks", "finished_at", "wait_doorbell"}
    )
    job = _text(body.get("job"), "job") or sim.config.schedule_job
    wait = body.get("wait_doorbell", False)
    if not isinstance(wait, bool):
        raise SimulatorError("wait_doorbell must be true or false")
    run = await sim.make_run(
        job,
        build=_text(body.get("build"), "build") or "all",
        day=parse_day(body.get("day")),
        keys=body.get("keys"),
        fail_checks=_text(body.get("fail_checks"), "fail_checks"),
        finished_at=_utc_time(body.get("finished_at"), "finished_at"),
        wait_doorbell=wait,
    )
    delivery = next((d for d in reversed(sim.deliveries) if d.run_id == run.id), None)
    return web.json_response(
        {"run": run.to_json(), "doorbell": delivery.to_json() if delivery else None}
    )


async def get_unit(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    return _unit_answer(sim, sim.unit(request.match_info["unit"]))


async def post_result(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"status", "competitors"})
    competitors = body.get("competitors")
    if competitors is not None and (
        not isinstance(competitors, list) or not all(isinstance(c, dict) for c in competitors)
    ):
        raise SimulatorError("competitors must be a list of {externalId, result, rank} objects")
    row = sim.post_result(
        request.match_info["unit"],
        status=_text(body.get("status"), "status") or "RUNNING",
        competitors=competitors,
    )
    return _unit_answer(sim, row)


async def official(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"competitors"})
    competitors = body.get("competitors")
    if competitors is not None and not isinstance(competitors, list):
        raise SimulatorError("competitors must be a list of {externalId, result, rank} objects")
    return _unit_answer(sim, sim.mark_official(request.match_info["unit"], competitors))


async def reschedule(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"start_local", "venue"})
    row = sim.reschedule(
        request.match_info["unit"],
        start_local=_local_time(body.get("start_local"), "start_local"),
        venue=_text(body.get("venue"), "venue"),
    )
    return _unit_answer(sim, row)


def _simple(
    action: Callable[[Scout, str], Row],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        sim = request.app[SIMULATOR]
        await json_object(request, set())
        return _unit_answer(sim, action(sim, request.match_info["unit"]))

    return handler


async def swap_competitor(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"order", "externalId", "name", "noc"})
    competitor_id = _text(body.get("externalId"), "externalId")
    if not competitor_id:
        raise SimulatorError("give the externalId of the competitor to put in")
    row = sim.swap_competitor(
        request.match_info["unit"],
        order=_count(body.get("order"), "order", 0),
        competitor_id=competitor_id,
        name=_text(body.get("name"), "name"),
        noc=_text(body.get("noc"), "noc"),
    )
    return _unit_answer(sim, row)


async def disqualify(request: web.Request) -> web.Response:
    """A protest upheld after the fact: one competitor's medal taken back. A NOC whose only
    medal it was drops out of the medal table (a withdrawn medal row)."""
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"externalId"})
    competitor_id = _text(body.get("externalId"), "externalId")
    if not competitor_id:
        raise SimulatorError("give the externalId of the competitor whose medal is withdrawn")
    return _unit_answer(sim, sim.disqualify(request.match_info["unit"], competitor_id))


async def copy_unit(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"start_local", "venue", "unit_name"})
    row = sim.copy_unit(
        request.match_info["unit"],
        start_local=_local_time(body.get("start_local"), "start_local"),
        venue=_text(body.get("venue"), "venue"),
        unit_name=_text(body.get("unit_name"), "unit_name"),
    )
    return _unit_answer(sim, row)


async def medals(request: web.Request) -> web.Response:
    return web.json_response({"medals": request.app[SIMULATOR].medal_table()})


async def set_fault(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    kind = request.match_info["kind"]
    if kind == "errors":
        body = await json_object(request, {"count", "path_prefix", "status"})
        sim.fail_next(
            _count(body.get("count"), "count", 1),
            path_prefix=_text(body.get("path_prefix"), "path_prefix"),
            status=_count(body.get("status"), "status", 500),
        )
    elif kind == "slow":
        body = await json_object(request, {"count", "seconds", "path_prefix"})
        seconds = body.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise SimulatorError("seconds must be a number")
        sim.slow_next(
            _count(body.get("count"), "count", 1),
            seconds,
            path_prefix=_text(body.get("path_prefix"), "path_prefix"),
        )
    elif kind == "malformed-page":
        body = await json_object(request, {"kind", "count"})
        sim.malform_next_page(
            _text(body.get("kind"), "kind") or "not_json", _count(body.get("count"), "count", 1)
        )
    elif kind == "overclaim":
        body = await json_object(request, {"extra"})
        sim.overclaim_next_run(_count(body.get("extra"), "extra", 1))
    elif kind == "short-run":
        body = await json_object(request, {"rows"})
        sim.shorten_next_run(_count(body.get("rows"), "rows", 0))
    elif kind == "zero-medals":
        await json_object(request, set())
        sim.zero_next_medal_table()
    else:
        raise web.HTTPNotFound()
    return web.json_response({"faults": sim.faults.to_json()})


async def clear_faults(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    sim.clear_faults()
    return web.json_response({"faults": sim.faults.to_json()})


async def doorbell(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"muted", "bad_signatures"})
    muted = body.get("muted")
    if muted is not None:
        if not isinstance(muted, bool):
            raise SimulatorError("muted must be true or false")
        sim.mute_doorbell(muted)
    if body.get("bad_signatures") is not None:
        sim.sign_next_doorbells_wrongly(_count(body["bad_signatures"], "bad_signatures", 1))
    return web.json_response({"faults": sim.faults.to_json()})


async def ring(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"run_id"})
    run_id = _text(body.get("run_id"), "run_id")
    if not run_id:
        raise SimulatorError("give the run_id to ring the doorbell for")
    delivery = await sim.ring(run_id)
    return web.json_response({"doorbell": delivery.to_json()})


async def replay(request: web.Request) -> web.Response:
    sim = request.app[SIMULATOR]
    body = await json_object(request, {"paused"})
    if sim.replay is None:
        raise _Conflict("this simulator was started without a replay (--replay)")
    paused = body.get("paused")
    if paused is not None:
        if not isinstance(paused, bool):
            raise SimulatorError("paused must be true or false")
        sim.replay.paused = paused
    return web.json_response({"replay": sim.replay.to_json()})


def add_control_routes(app: web.Application) -> None:
    add = app.router
    add.add_get("/control/state", state)
    add.add_get("/control/reference", reference)
    add.add_post("/control/reset", reset)
    add.add_post("/control/runs", make_run)
    add.add_get("/control/medals", medals)
    add.add_get("/control/units/{unit}", get_unit)
    add.add_post("/control/units/{unit}/result", post_result)
    add.add_post("/control/units/{unit}/official", official)
    add.add_post("/control/units/{unit}/reschedule", reschedule)
    add.add_post("/control/units/{unit}/cancel", _simple(Scout.cancel))
    add.add_post("/control/units/{unit}/drop", _simple(Scout.drop))
    add.add_post("/control/units/{unit}/restore", _simple(Scout.restore))
    add.add_post("/control/units/{unit}/competitor", swap_competitor)
    add.add_post("/control/units/{unit}/copy", copy_unit)
    add.add_post("/control/units/{unit}/disqualify", disqualify)
    add.add_post("/control/faults/{kind}", set_fault)
    add.add_delete("/control/faults", clear_faults)
    add.add_post("/control/doorbell", doorbell)
    add.add_post("/control/doorbell/ring", ring)
    add.add_post("/control/replay", replay)
