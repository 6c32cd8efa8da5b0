"""The console process: pools, gRPC channels, templates, the middlewares and the routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import asyncpg
import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from omnium.command.v1 import command_pb2_grpc
from omnium.delivery.v1 import delivery_pb2_grpc
from omnium.imports.v1 import imports_pb2_grpc
from omnium_accounts import Accounts
from omnium_accounts.web import add_security_headers
from omnium_admin import _auth, _pages, _views
from omnium_admin._present import FILTERS
from omnium_admin._times import ZoneCache
from omnium_db import PoolRoad, create_pool, require_schema
from omnium_grpc import open_channel
from omnium_metrics import http_metrics
from omnium_process import malformed_http_as_info
from omnium_settings import Settings
from omnium_telemetry import access_log, aiohttp_middlewares

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
# A page that came as the port closed, or outlasted the grace, gets this before it is cut; aiohttp
# waits it, cancels the page, and waits it again.
CLOSE_SECONDS = 1.0


@web.middleware
async def in_flight(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Counts the pages and actions being answered, which a stopping console lets finish."""
    if request.path in _auth.PROBES:
        return await handler(request)
    app = _auth.console(request)
    app.pages += 1
    app.idle.clear()
    try:
        return await handler(request)
    finally:
        app.pages -= 1
        if app.pages == 0:
            app.idle.set()


def make_templates() -> jinja2.Environment:
    """The console's templates: autoescaped, and a missing value is an error, not a blank."""
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters.update(FILTERS)
    return templates


class AdminApp:
    """Everything one console process holds. `start()`, then `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.people: asyncpg.Pool | None = None
        self.reader: asyncpg.Pool | None = None
        self.imports_channel = open_channel(settings.imports.address, settings)
        self.command_channel = open_channel(settings.command.address, settings)
        self.imports = imports_pb2_grpc.ImportsServiceStub(self.imports_channel)
        self.command = command_pb2_grpc.CommandServiceStub(self.command_channel)
        self.delivery_channel = open_channel(settings.delivery.address, settings)
        self.delivery = delivery_pb2_grpc.DeliveryServiceStub(self.delivery_channel)
        self.runner: web.AppRunner | None = None
        self._accounts: Accounts | None = None
        self.port = 0
        self.templates = make_templates()
        self.zones = ZoneCache()
        self.stopping = asyncio.Event()
        # Pages and actions being answered (not the probes), and set while there are none.
        self.pages = 0
        self.idle = asyncio.Event()
        self.idle.set()

    @property
    def accounts(self) -> Accounts:
        # One for the process: its password checks and session cache are shared by every page.
        assert self.people is not None
        if self._accounts is None:
            self._accounts = Accounts(self.people, self.settings)
        return self._accounts

    def web_app(self) -> web.Application:
        app = web.Application(
            middlewares=[
                in_flight,
                http_metrics("admin"),
                *aiohttp_middlewares(self.settings),
                *access_log("admin", self.settings),
                _pages.plain_errors,
                _auth.signed_in,
                _pages.event_zone,
                _pages.waiting_count,
            ],
            client_max_size=self.settings.admin.max_form_bytes,
        )
        app[_auth.CONSOLE] = self
        add_security_headers(app, self.settings)
        _auth.add_routes(app)
        _views.add_routes(app)
        app.router.add_static("/static/", HERE / "static")
        return app

    async def start(self, port: int | None = None) -> int:
        settings = self.settings
        # Sign-in and sessions are people's writes; the screens read on the reader road.
        self.people = await create_pool(settings, PoolRoad.PEOPLE, application_name="admin")
        self.reader = await create_pool(settings, PoolRoad.READER, application_name="admin")
        await require_schema(self.reader, "admin", settings.database.schema_ahead_allowed)
        malformed_http_as_info()
        self.runner = web.AppRunner(self.web_app(), access_log=None, shutdown_timeout=CLOSE_SECONDS)
        await self.runner.setup()
        wanted = settings.admin.port if port is None else port
        site = web.TCPSite(self.runner, settings.server.bind_host, wanted)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else wanted
        log.info("admin: the console is on http://%s:%s", settings.server.bind_host, self.port)
        return self.port

    def render(self, name: str, **context: object) -> str:
        return render(self.templates, self.settings, name, **context)

    async def stop(self, grace: float | None = None) -> None:
        """Not ready first (/readyz answers 503, so the balancer sends no one new), then the
        pages and actions in flight finish, within `grace` (OMNIUM_HTTP_GRACE_SECONDS), on a
        port still open; then it closes. The balancer never sends a form twice, so a form in
        flight is given its time rather than cut."""
        self.stopping.set()
        grace = self.settings.server.http_grace_seconds if grace is None else grace
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.idle.wait()
        if self.runner is not None:
            await self.runner.cleanup()
        await self.imports_channel.close()
        await self.command_channel.close()
        await self.delivery_channel.close()
        for pool in (self.people, self.reader):
            if pool is not None:
                await pool.close()


def render(templates: jinja2.Environment, settings: Settings, name: str, **context: object) -> str:
    return templates.get_template(name).render(settings=settings, **context)
