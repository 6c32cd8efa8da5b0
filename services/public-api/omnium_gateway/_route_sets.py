"""The route sets the gateway serves beside its reads: live push (SSE) and the scorer console."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_accounts import Accounts, AccountsUnavailable
from omnium_db import DATABASE_ERRORS, PoolRoad, create_pool
from omnium_gateway._cors import TOKEN_PARAMETER
from omnium_gateway._gateway import Gateway, RouteSet
from omnium_gateway._openapi import EVENT_PATTERN, UNIT_PATTERN
from omnium_gateway._openapi_push import CHANGE_EVENTS, SSE_EVENT
from omnium_live import LIVE_ROUTES, STREAM_ID_PATTERN, add_live_routes, live_redis
from omnium_scorer_web import add_scorer_routes
from omnium_settings import Settings

log = logging.getLogger("omnium.gateway")

_ERROR = {"$ref": "#/components/schemas/Error"}


def _stream_operation(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "description": (
                "Server-Sent Events: one event per saved change, named by its kind ("
                + ", ".join(f"`{name}`" for name in CHANGE_EVENTS)
                + "), its `data` the change as JSON and its `id` the stream position; a comment "
                "line when quiet. Reconnect with `Last-Event-ID` "
                "(or `?last_event_id=`) to get what was missed from a short replay buffer; a "
                "`gap` event says when some of it is no longer kept or may be lost (Redis "
                "restarted), or that this client fell too far behind and is disconnected "
                "(reconnect with `Last-Event-ID`). An `error` event says live updates paused; "
                "they resume by themselves. Where the operator set a most time for a stream, "
                "it then ends with a `retry:` hint: reconnect with `Last-Event-ID`."
            ),
            "parameters": [
                *parameters,
                TOKEN_PARAMETER,
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "pattern": STREAM_ID_PATTERN},
                },
            ],
            "responses": {
                "200": {
                    "description": "The stream of changes; the schema is that of one event.",
                    "content": {"text/event-stream": {"schema": SSE_EVENT}},
                },
                "400": {
                    "description": "A bad Games or unit code, or a Last-Event-ID never sent.",
                    "content": {"application/json": {"schema": _ERROR}},
                },
                "401": {
                    "description": "No API key, or an unknown one.",
                    "content": {"application/json": {"schema": _ERROR}},
                },
                "404": {
                    "description": "There is no such Games, or no such unit in it.",
                    "content": {"application/json": {"schema": _ERROR}},
                },
                "429": {
                    "description": (
                        "Over this key's rate limit (without a key, this address's), or this "
                        "client already holds its most live streams on this copy; see "
                        "Retry-After."
                    ),
                    "content": {"application/json": {"schema": _ERROR}},
                },
                "503": {
                    "description": (
                        "This copy carries its most live streams or reads its most Games at "
                        "once, or the database cannot say whether the Games exists; try again "
                        "after Retry-After."
                    ),
                    "content": {"application/json": {"schema": _ERROR}},
                },
            },
        }
    }


# The same patterns as the reads' parameters: the routes answer 400 to anything else.
_EVENT_PARAMETER = {
    "name": "event",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": EVENT_PATTERN},
}
_UNIT_PARAMETER = {
    "name": "unit_code",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": UNIT_PATTERN},
}


class LiveRoutes:
    """What delivery publishes to Redis, streamed to clients behind the same keys and limits."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def add_routes(self, app: web.Application, gateway: Gateway) -> None:
        if not self.settings.server.redis_url:
            log.warning("no OMNIUM_REDIS_URL: the live routes are off")
            return
        # Its own client: a stream reader blocks a connection, which the cache must not wait on.
        redis = live_redis(
            self.settings.server.redis_url,
            heartbeat_seconds=self.settings.live.heartbeat_seconds,
            grace_seconds=self.settings.live.read_grace_seconds,
            max_connections=self.settings.live.redis_connections,
        )
        gateway.admitting.update(LIVE_ROUTES)
        add_live_routes(
            app,
            redis,
            heartbeat_seconds=self.settings.live.heartbeat_seconds,
            retry_seconds=self.settings.live.retry_seconds,
            admit=gateway.admit,
            known=gateway.live_subject,
            max_streams=self.settings.live.max_streams,
            listener_queue=self.settings.live.listener_queue,
            counters=gateway.metrics,
            max_seconds=self.settings.live.stream_max_seconds,
            owner=gateway.stream_owner,
            max_per_client=self.settings.live.max_streams_per_client,
            client_retry_after_seconds=self.settings.live.client_retry_after_seconds,
        )

        async def close(app: web.Application) -> None:
            await redis.aclose()

        app.on_cleanup.append(close)

    def openapi(self) -> dict[str, Any]:
        return {
            "paths": {
                "/v1/events/{event}/live": _stream_operation(
                    "Every change to a Games, as it is saved", [_EVENT_PARAMETER]
                ),
                "/v1/events/{event}/units/{unit_code}/live": _stream_operation(
                    "Every change to one unit, as it is saved", [_EVENT_PARAMETER, _UNIT_PARAMETER]
                ),
            }
        }


_SCORER_PATHS = ("/score", "/v1/providers/")


class ScorerRoutes:
    """The scorer console (/score/) and provider pushes, signed in with the shared accounts."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def add_routes(self, app: web.Application, gateway: Gateway) -> None:
        settings = self.settings
        accounts = Accounts(
            None, settings, cache_seconds=settings.scoring.scorer_session_cache_seconds
        )
        add_scorer_routes(app, settings, accounts, redis=gateway.redis)

        async def connect(app: web.Application) -> None:
            # Sign-in writes sessions: the people's road, not the readers'. No connection is
            # made until one is needed, so a database that is down does not stop the gateway.
            pool = await create_pool(
                settings,
                PoolRoad.PEOPLE,
                application_name="gateway-scorers",
                size=settings.gateway.scorer_pool_size,
                min_size=0,
            )
            accounts.attach(pool)

        async def close(app: web.Application) -> None:
            try:
                pool = accounts.pool
            except AccountsUnavailable:
                return
            await pool.close()

        app.on_startup.append(connect)
        app.on_cleanup.append(close)
        app.middlewares.append(_database_down)

    def openapi(self) -> dict[str, Any]:
        # The console is pages and their own JSON, not part of the public read API.
        return {"paths": {}}


_SIGN_IN_DOWN: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, AccountsUnavailable)


@web.middleware
async def _database_down(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A scorer whose sign-in cannot be read gets a plain 503, never a 500."""
    if not request.path.startswith(_SCORER_PATHS):
        return await handler(request)
    try:
        return await handler(request)
    except _SIGN_IN_DOWN:
        return web.json_response(
            {
                "error": "the database is not answering; actions stay queued on this device "
                "and are sent when it is back"
            },
            status=503,
            headers={"Retry-After": "5"},
        )


def default_route_sets(settings: Settings) -> list[RouteSet]:
    """What `python -m omnium_gateway` serves beside the public reads."""
    return [LiveRoutes(settings), ScorerRoutes(settings)]
