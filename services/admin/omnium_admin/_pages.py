"""What every screen shares: a page drawn for the signed-in person, an error said plainly
(never a traceback), and going back to a screen with a message."""

from __future__ import annotations

import logging
from datetime import UTC, tzinfo
from typing import Any
from urllib.parse import urlencode

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler
from grpc import aio

from omnium_admin._auth import PUBLIC, SESSION, plain_page, session_of
from omnium_admin._console import console
from omnium_admin._sql import QUERIES
from omnium_db import DATABASE_ERRORS

log = logging.getLogger(__name__)
ZONE: web.RequestKey[tzinfo] = web.RequestKey("zone")
# The request's count of items in Waiting for you, for the navigation (None: not read).
WAITING: web.RequestKey[int] = web.RequestKey("waiting_count")


@web.middleware
async def plain_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A service that cannot answer is 'failed to read' with Try again, never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.NOT_FOUND:
            status, title, message = 404, "Not found", details
        elif code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
            status, title, message = 400, "Not done", details
        elif code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            # The service would not act for this person (their session, their role).
            status, title, message = 403, "Not allowed", details
        else:
            log.warning("admin: %s %s: %s %s", request.method, request.path, code, details)
            status, title, message = (
                503,
                "Failed to read",
                "The imports, command or delivery service did not answer "
                f"({code.name.lower().replace('_', ' ')}). Nothing was changed.",
            )
        return error_page(request, status, title, message)
    except DATABASE_ERRORS as exc:
        log.warning("admin: %s %s: %s", request.method, request.path, exc)
        return error_page(
            request, 503, "Failed to read", "The database did not answer. Nothing was changed."
        )


@web.middleware
async def event_zone(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The event's time zone, for every time a screen shows (read again every 30 s)."""
    if request.path not in PUBLIC and not request.path.startswith("/static/"):
        app = console(request)
        if not app.zones.fresh() and app.reader is not None:
            try:
                app.zones.keep(await app.reader.fetchval(QUERIES["event_zone"]))
            except DATABASE_ERRORS as exc:
                # Times in UTC rather than no page: the page says what else failed.
                log.warning("admin: the event's time zone: %s", exc)
        request[ZONE] = app.zones.zone
    return await handler(request)


def zone(request: web.Request) -> tzinfo:
    found = request.get(ZONE)
    return found if isinstance(found, tzinfo) else UTC


@web.middleware
async def waiting_count(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A screen's navigation says how many items wait for a person, on every screen: read
    once per page (not for the JSON, the probes or the static files)."""
    reader = console(request).reader
    signed_in = SESSION in request
    if request.method == "GET" and signed_in and reader is not None and _a_screen(request.path):
        try:
            request[WAITING] = await reader.fetchval(QUERIES["waiting_count"])
        except DATABASE_ERRORS as exc:  # the screen still opens; its own reads say why
            log.warning("admin: the waiting count was not read: %s", exc)
    return await handler(request)


def _a_screen(path: str) -> bool:
    return not path.startswith(("/api/", "/static/", "/health", "/readyz", "/metrics"))


def error_page(request: web.Request, status: int, title: str, message: str) -> web.Response:
    if request.path.startswith("/api/"):
        return web.json_response({"error": f"{title}: {message}"}, status=status)
    return plain_page(request, status, title, message, retry=status == 503)


def page(request: web.Request, name: str, **context: Any) -> web.Response:
    session = session_of(request)
    html = console(request).render(
        name,
        session=session,
        may_act=session.account.may("operator"),
        path=request.path_qs,
        said=request.query.get("said", ""),
        zone=zone(request),
        waiting_count=request.get(WAITING),
        **context,
    )
    return web.Response(text=html, content_type="text/html")


def back(to: str, said: str) -> web.HTTPSeeOther:
    joiner = "&" if "?" in to else "?"
    return web.HTTPSeeOther(f"{to}{joiner}{urlencode({'said': said})}")


def deadline(request: web.Request) -> float:
    return console(request).settings.grpc.deadline_seconds


def who(request: web.Request) -> str:
    return session_of(request).account.name
