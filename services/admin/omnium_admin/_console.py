"""What one console process holds (pools, gRPC stubs, settings, accounts, templates), which
every view reaches through its request. It imports no view, so nothing circles back to it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import jinja2
from aiohttp import web

from omnium.command.v1 import command_pb2_grpc
from omnium.delivery.v1 import delivery_pb2_grpc
from omnium.imports.v1 import imports_pb2_grpc
from omnium_accounts import Accounts
from omnium_admin._present import FILTERS
from omnium_admin._times import ZoneCache
from omnium_db import PoolRoad, create_pool, require_schema
from omnium_grpc import open_channel
from omnium_settings import Settings

HERE = Path(__file__).parent


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


def render(templates: jinja2.Environment, settings: Settings, name: str, **context: object) -> str:
    return templates.get_template(name).render(settings=settings, **context)


class Console:
    """The resources of one console process: `open()` makes the pools, `close()` lets go of
    everything. The channels are made here already; gRPC connects them on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.people: asyncpg.Pool | None = None
        self.reader: asyncpg.Pool | None = None
        self.imports_channel = open_channel(settings.imports.address, settings)
        self.command_channel = open_channel(settings.command.address, settings)
        self.delivery_channel = open_channel(settings.delivery.address, settings)
        self.imports = imports_pb2_grpc.ImportsServiceStub(self.imports_channel)
        self.command = command_pb2_grpc.CommandServiceStub(self.command_channel)
        self.delivery = delivery_pb2_grpc.DeliveryServiceStub(self.delivery_channel)
        self._accounts: Accounts | None = None
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

    async def open(self) -> None:
        # Sign-in and sessions are people's writes; the screens read on the reader road.
        settings = self.settings
        self.people = await create_pool(settings, PoolRoad.PEOPLE, application_name="admin")
        self.reader = await create_pool(settings, PoolRoad.READER, application_name="admin")
        await require_schema(self.reader, "admin", settings.database.schema_ahead_allowed)

    def render(self, name: str, **context: object) -> str:
        return render(self.templates, self.settings, name, **context)

    async def close(self) -> None:
        await self.imports_channel.close()
        await self.command_channel.close()
        await self.delivery_channel.close()
        for pool in (self.people, self.reader):
            if pool is not None:
                await pool.close()


CONSOLE: web.AppKey[Console] = web.AppKey("console")


def console(request: web.Request) -> Console:
    return request.app[CONSOLE]
