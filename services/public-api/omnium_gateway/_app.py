"""The gateway's aiohttp application: the core routes (reads, the document, the probes) and
the route sets, each answer counted and guarded, built by make_app."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST

from omnium_db import UNIT_STATUSES
from omnium_gateway import _reads
from omnium_gateway._cors import TOKEN_PATH
from omnium_gateway._docs_page import DocsPage
from omnium_gateway._gateway import (
    JSON_TYPE,
    LIMITED,
    Gateway,
    RouteSet,
    error_answer,
    no_event,
)
from omnium_gateway._limits import quota_headers
from omnium_gateway._metrics import Metrics
from omnium_gateway._openapi import (
    DISCIPLINE_PATTERN,
    EVENT_PATTERN,
    MAX_TOP,
    UNIT_PATTERN,
)
from omnium_settings import Settings
from omnium_telemetry import access_log, aiohttp_middlewares

log = logging.getLogger(__name__)

_EVENT = re.compile(EVENT_PATTERN)
_UNIT = re.compile(UNIT_PATTERN)
_DISCIPLINE = re.compile(DISCIPLINE_PATTERN)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TOP = re.compile(r"^\d{1,9}$")
_STATUSES = frozenset(UNIT_STATUSES)
_CORE_PATHS = (
    re.compile(r"^/v1/events$"),
    re.compile(r"^/v1/events/[^/]+/(schedule|medals|disciplines)$"),
    re.compile(r"^/v1/events/[^/]+/units/[^/]+$"),
    re.compile(r"^/(v1/openapi\.json|v1/docs|healthz|readyz|metrics|favicon\.ico)?$"),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadParameter(Exception):
    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


# -- the routes -------------------------------------------------------------------------------


def _query(request: web.Request, name: str) -> str | None:
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise BadParameter(name, f"Send {name} once.")
    return values[0] if values else None


def _event(request: web.Request) -> str | None:
    event = request.match_info["event"]
    return event if _EVENT.match(event) else None


def _guard(route: str, handler: Handler, metrics: Metrics) -> Handler:
    """Count each answer; a bug answers a plain 500, never a traceback."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        try:
            answer = await handler(request)
        except BadParameter as bad:
            answer = error_answer(400, str(bad), parameter=bad.parameter)
        except Exception:
            log.exception("unexpected error on %s %s", request.method, request.path)
            answer = error_answer(500, "Something went wrong on our side; it has been logged.")
        metrics.request(route, answer.status, time.perf_counter() - start)
        return answer

    return guarded


def _admitted(gateway: Gateway, handler: Handler) -> Handler:
    """The handler, once the request's API key (or address) is admitted under its limits."""

    async def admitted(request: web.Request) -> web.StreamResponse:
        refused = await gateway.admit(request)
        if refused is not None:
            return refused
        return await handler(request)

    return admitted


def _limits(gateway: Gateway) -> Middleware:
    """Every request is counted against a bucket before its handler runs: the reads and live
    streams admit themselves (by API key, or by address); the scorer console and provider
    pushes count against their address's console bucket; everything else (the probes, the
    document, unknown paths) against its address's bucket for those."""

    @web.middleware
    async def limited(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical in gateway.admitting:
            return await handler(request)
        path = request.path
        console = path == "/score" or path.startswith(("/score/", "/v1/providers/"))
        buckets = gateway.console if console else gateway.other
        refused = await gateway.admit_address(request, buckets)
        if refused is not None:
            gateway.metrics.request(buckets.prefix, refused.status, 0.0)
            return refused
        return await handler(request)

    return limited


def _metrics_page(gateway: Gateway) -> Handler:
    """Prometheus text: every worker's counts summed (multiprocess files), this one's gauges.
    Off the public port unless OMNIUM_GATEWAY_PUBLIC_METRICS: the counters (pools, routes,
    Redis) are for operators, and each answer reads every worker's files."""

    async def not_here(request: web.Request) -> web.StreamResponse:
        del request
        port = gateway.settings.gateway.metrics_port
        return error_answer(
            404,
            f"Metrics are not served on the public port; read them on the gateway's metrics "
            f"port ({port}, OMNIUM_GATEWAY_METRICS_PORT).",
        )

    if not gateway.settings.gateway.public_metrics:
        return not_here

    async def metrics(request: web.Request) -> web.StreamResponse:
        del request
        gateway.sample_gauges()
        gateway.metrics.flush()
        # Rendered off the loop: with several workers it reads every worker's files.
        body = await asyncio.to_thread(gateway.metrics.render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics


def _live_token(gateway: Gateway) -> Handler:
    """POST /v1/live/tokens: a short-lived token for a page's EventSource, given for a key."""

    async def live_token(request: web.Request) -> web.StreamResponse:
        refused = await gateway.admit(request)
        if refused is not None:
            return refused
        client = request[LIMITED]
        if not client.bucket.startswith("key:"):
            return error_answer(401, "Send your API key in the X-API-Key header: tokens are keys'.")
        if not gateway.tokens.secrets:
            return error_answer(
                404,
                "This server gives no stream tokens (its operator has not set "
                "OMNIUM_GATEWAY_STREAM_TOKEN_SECRETS); send X-API-Key with the stream instead.",
            )
        token, expires = gateway.tokens.make(client.name)
        body = {
            "token": token,
            "expires_at": dt.datetime.fromtimestamp(expires, dt.UTC).isoformat(),
            "expires_in": gateway.tokens.seconds,
        }
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    return live_token


def _reads_routes(gateway: Gateway) -> list[tuple[str, str, Handler, bool]]:
    """The core routes: the reads (behind API keys and limits), the document and the probes;
    each with whether its handler admits the request itself (else the middleware limits it)."""

    async def events(request: web.Request) -> web.StreamResponse:
        return await gateway.cached(request, "events", "events", _reads.read_events)

    async def disciplines(request: web.Request) -> web.StreamResponse:
        event = _event(request)
        if event is None:
            return no_event(request.match_info["event"])
        name = "disciplines:" + event
        return await gateway.cached(request, name, name, _reads.read_disciplines, event)

    async def schedule(request: web.Request) -> web.StreamResponse:
        event = _event(request)
        date_text = _query(request, "date")
        day = None
        if date_text is not None:
            try:
                if not _DATE.match(date_text):
                    raise ValueError(date_text)
                day = dt.date.fromisoformat(date_text)
            except ValueError:
                raise BadParameter("date", "date must be a day like 2026-09-20.") from None
        discipline = _query(request, "discipline")
        if discipline is not None and not _DISCIPLINE.match(discipline):
            raise BadParameter("discipline", "discipline must be a 3-letter code like ATH.")
        status = _query(request, "status")
        if status is not None and status not in _STATUSES:
            raise BadParameter("status", "status must be one of " + ", ".join(_STATUSES) + ".")
        if event is None:
            return no_event(request.match_info["event"])
        return await gateway.cached(
            request,
            f"schedule:{event}:{date_text or ''}:{discipline or ''}:{status or ''}",
            "schedule:" + event,
            _reads.read_schedule,
            event,
            day,
            discipline,
            status,
            gateway.held,
        )

    async def unit(request: web.Request) -> web.StreamResponse:
        event = _event(request)
        if event is None:
            return no_event(request.match_info["event"])
        code = request.match_info["unit_code"]
        if not _UNIT.match(code):
            return error_answer(404, f"There is no unit with that code in event {event}.")
        name = "unit:" + event + ":" + code
        return await gateway.cached(
            request, name, name, _reads.read_unit, event, code, gateway.held
        )

    async def medals(request: web.Request) -> web.StreamResponse:
        event = _event(request)
        top_text = _query(request, "top")
        top = None
        if top_text is not None:
            if not _TOP.match(top_text) or not 1 <= int(top_text) <= MAX_TOP:
                raise BadParameter("top", f"top must be a whole number from 1 to {MAX_TOP}.")
            top = int(top_text)
        if event is None:
            return no_event(request.match_info["event"])
        return await gateway.cached(
            request,
            f"medals:{event}:{top or ''}",
            "medals:" + event,
            _reads.read_medals,
            event,
            top,
            gateway.held,
        )

    async def openapi(request: web.Request) -> web.StreamResponse:
        del request
        return web.Response(body=gateway.openapi_body, headers={"Content-Type": JSON_TYPE})

    async def healthz(request: web.Request) -> web.StreamResponse:
        del request
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.StreamResponse:
        del request
        ready, body = await gateway.ready()
        return web.json_response(body, status=200 if ready else 503)

    # The router tries routes in order: the busiest first.
    return [
        ("unit", "/v1/events/{event}/units/{unit_code}", _admitted(gateway, unit), True),
        ("schedule", "/v1/events/{event}/schedule", _admitted(gateway, schedule), True),
        ("medals", "/v1/events/{event}/medals", _admitted(gateway, medals), True),
        ("events", "/v1/events", _admitted(gateway, events), True),
        ("disciplines", "/v1/events/{event}/disciplines", _admitted(gateway, disciplines), True),
        ("live_token", TOKEN_PATH, _live_token(gateway), True),
        ("openapi", "/v1/openapi.json", openapi, False),
        ("healthz", "/healthz", healthz, False),
        ("readyz", "/readyz", readyz, False),
        ("metrics", "/metrics", _metrics_page(gateway), False),
    ]


GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)


def make_app(
    settings: Settings,
    *,
    route_sets: Sequence[RouteSet] = (),
    metrics: Metrics | None = None,
) -> web.Application:
    """The whole gateway app. A new set of routes (live SSE, the scorer console) is one more
    entry in `route_sets`: it adds its routes and its part of the OpenAPI document."""
    metrics = metrics or Metrics()
    gateway = Gateway(settings, metrics, route_sets)
    # Tracing off (the default) adds no middleware of its own; the limits' one is the only
    # one before the route sets' (a read pays its route's lookup in a set, no Redis call).
    app = web.Application(
        client_max_size=64 * 1024,
        middlewares=[
            *aiohttp_middlewares(settings),
            *access_log("gateway", settings),
            _limits(gateway),
        ],
    )
    app[GATEWAY] = gateway
    for route, path, handler, admits in _reads_routes(gateway):
        if admits:
            gateway.admitting.add(path)
        add = app.router.add_post if path == TOKEN_PATH else app.router.add_get
        add(path, _guard(route, handler, metrics))
    for route, path, handler in DocsPage().routes():
        app.router.add_get(path, _guard(route, handler, metrics))
    for route_set in gateway.route_sets:
        route_set.add_routes(app, gateway)

    async def fallback(request: web.Request) -> web.StreamResponse:
        if any(p.match(request.path) for p in _CORE_PATHS):
            answer = error_answer(405, f"{request.method} is not allowed here; use GET.")
            answer.headers["Allow"] = "GET, HEAD"
            return answer
        return error_answer(404, "There is nothing at this address. See /v1/openapi.json.")

    async def preflight(request: web.Request) -> web.StreamResponse:
        answer = gateway.cors.preflight(request) if gateway.cors.covers(request.path) else None
        return answer if answer is not None else await fallback(request)

    app.router.add_route("OPTIONS", "/v1/{tail:.*}", _guard("preflight", preflight, metrics))
    app.router.add_route("*", "/{tail:.*}", _guard("unknown", fallback, metrics))

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await gateway.start()
        yield
        await gateway.stop()

    async def not_ready(app: web.Application) -> None:
        gateway.stopping = True

    cors = gateway.cors

    async def fields(request: web.Request, answer: web.StreamResponse) -> None:
        client = request.get(LIMITED)
        if client is not None:
            answer.headers.update(quota_headers(client, *gateway.limiter.quota(client)))
        if cors.on and cors.covers(request.path):
            keyed = client is not None and client.bucket.startswith("key:")
            cors.answer(request, answer, keyed)

    app.on_response_prepare.append(fields)
    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(not_ready)
    return app
