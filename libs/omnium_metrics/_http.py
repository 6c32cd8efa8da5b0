"""RED metrics per route for an aiohttp server: requests by route, method and status; seconds."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "omnium_http_requests",
    "HTTP requests answered, by service, route (its pattern), method and status.",
    ["service", "route", "method", "code"],
)
SECONDS = Histogram(
    "omnium_http_request_duration_seconds",
    "Seconds to answer an HTTP request, by service and route.",
    ["service", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def _route(request: web.Request) -> str:
    # The route's pattern, never the path: a label per unit code would grow without end.
    info = request.match_info
    route = info.route if info is not None else None
    resource = route.resource if route is not None else None
    return resource.canonical if resource is not None else "unmatched"


def http_metrics(service: str) -> Middleware:
    """A middleware counting every answer (errors raised as HTTPException too)."""

    @web.middleware
    async def counted(request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        code = 500
        try:
            answer = await handler(request)
            code = answer.status
            return answer
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            route = _route(request)
            REQUESTS.labels(service, route, request.method, str(code)).inc()
            SECONDS.labels(service, route).observe(time.perf_counter() - start)

    return counted
