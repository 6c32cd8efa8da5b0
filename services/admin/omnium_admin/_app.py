"""The console's composition root: builds the aiohttp application from the middlewares and
every screen's routes, and starts and stops it. Only `__main__`, the package and tests import
it; the screens reach the process's resources through `Console`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from omnium_accounts.web import add_security_headers
from omnium_admin import _admins, _auth, _pages, _views
from omnium_admin._console import CONSOLE, Console, console
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
    held = console(request)
    held.pages += 1
    held.idle.clear()
    try:
        return await handler(request)
    finally:
        held.pages -= 1
        if held.pages == 0:
            held.idle.set()


class AdminApp:
    """One console process: its `Console` and the web application over it. `start()`, then
    `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.console = Console(settings)
        self.runner: web.AppRunner | None = None
        self.port = 0

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
        app[CONSOLE] = self.console
        add_security_headers(app, self.settings)
        _auth.add_routes(app)
        _views.add_routes(app)
        _admins.add_routes(app)
        app.router.add_static("/static/", HERE / "static")
        return app

    async def start(self, port: int | None = None) -> int:
        settings = self.settings
        await self.console.open()
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

    async def stop(self, grace: float | None = None) -> None:
        """Not ready first (/readyz answers 503, so the balancer sends no one new), then the
        pages and actions in flight finish, within `grace` (OMNIUM_HTTP_GRACE_SECONDS), on a
        port still open; then it closes. The balancer never sends a form twice, so a form in
        flight is given its time rather than cut."""
        self.console.stopping.set()
        grace = self.settings.server.http_grace_seconds if grace is None else grace
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.console.idle.wait()
        if self.runner is not None:
            await self.runner.cleanup()
        await self.console.close()
